//! `loadtest`: the command line. Each subcommand lives in its own module ([`cli`]).

use anyhow::bail;
use clap::{Parser, Subcommand};
use cli::book::BookArgs;
use cli::{chaos::ChaosArgs, check::CheckArgs, demo::DemoArgs, run::RunArgs, sweep::SweepArgs};

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
    /// Start private servers and two instances, inject faults under load (frozen and
    /// killed holders, restarted Redis, paused RedLock nodes, a killed ZooKeeper
    /// leader, a partition, an ambiguous commit) and judge every cell from the ledger.
    Chaos(ChaosArgs),
    /// Start everything, run every strategy at concurrency 1, 4, 16, 64, 256 on one
    /// hot product and on 100 products; throughput and p99 as lines in the report.
    Sweep(SweepArgs),
    /// Render the book's generated pages (its figures from book/data, its reference
    /// from the code) and the README's strategy map; `--check` compares instead.
    Book(BookArgs),
    /// Judge recorded histories (JSON lines) against the model of a stock counter:
    /// linearizable, or which products no order of the operations explains.
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
