//! `loadtest`: the command line. Each subcommand lives in its own module ([`cli`]).

use anyhow::bail;
use clap::{Parser, Subcommand};
use cli::book::BookArgs;
use cli::{chaos::ChaosArgs, check::CheckArgs, run::RunArgs};
use loadtest::demo::DemoArgs;
use loadtest::sweep::run::SweepArgs;

mod cli;

#[derive(Parser)]
#[command(
    version,
    about = "Concurrent deductions against stock-app, verified from the database"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load running stock-app instances, strategy by strategy, and verify from the database.
    Run(RunArgs),
    /// Start everything, run each strategy on one hot product, print the comparison.
    Demo(DemoArgs),
    /// Inject faults under load and judge every cell from the ledger.
    ///
    /// Starts private servers and two instances, then freezes and kills lock holders,
    /// restarts Redis, pauses RedLock nodes, kills a ZooKeeper or etcd leader,
    /// partitions, fails over, and makes a commit's answer ambiguous.
    Chaos(ChaosArgs),
    /// Run every strategy across concurrencies and product layouts, drawn as lines.
    ///
    /// Starts everything, then runs every strategy at concurrency 1, 4, 16, 64 and 256
    /// on one hot product and on 100 products; throughput and p99 are drawn as lines
    /// in the report.
    Sweep(SweepArgs),
    /// Render the book's generated pages and the README's strategy map.
    ///
    /// The figures come from book/data, the reference from the code. With `--check`
    /// it compares instead of writing.
    Book(BookArgs),
    /// Judge recorded histories against the model of a stock counter.
    ///
    /// Each history (JSON lines) is linearizable, or the answer names which products
    /// no order of the operations explains.
    Check(CheckArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Run(args) => cli::run::run(args).await,
        Command::Chaos(args) => {
            tokio::select! {
                result = cli::chaos::chaos(args) => result,
                _ = tokio::signal::ctrl_c() => bail!("interrupted; everything started was stopped"),
            }
        }
        Command::Sweep(args) => {
            tokio::select! {
                result = cli::sweep::sweep(args) => result,
                _ = tokio::signal::ctrl_c() => bail!("interrupted; everything started was stopped"),
            }
        }
        Command::Book(args) => cli::book::book(args).await,
        Command::Check(args) => cli::check::check(args),
        Command::Demo(args) => {
            // Everything started is owned by `demo` and stopped when it returns,
            // including on Ctrl-C (the servers are in their own process groups, so
            // the terminal's SIGINT reaches only us).
            tokio::select! {
                result = cli::demo::demo(args) => result,
                _ = tokio::signal::ctrl_c() => bail!("interrupted; everything started was stopped"),
            }
        }
    }
}
