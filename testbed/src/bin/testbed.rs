//! `testbed`: real servers for a whole test run.
//!
//! - `testbed run -- CMD ARGS...` starts the stack, runs CMD with every server's
//!   variable set (`DATABASE_URL`, `REDIS_URLS`, ...: `testbed::SERVER_VARIABLES`),
//!   stops the stack and exits with CMD's code. A variable that is already set means
//!   "use that server": it is not started.
//! - `testbed up` starts the stack, prints the `export` lines and the server PIDs, and
//!   runs until Ctrl-C (or SIGTERM).
//! - `--redis-cluster` (both) also starts a Redis Cluster (`REDIS_CLUSTER_URLS`).
//! - `--rtt-ms X` (both) puts every server behind a proxy that adds a round trip of X
//!   ms (`--jitter-ms` on each hop): the exported addresses are the proxies', so every
//!   client sees a production network's distance instead of loopback's.

use clap::{Parser, Subcommand};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};
use testbed::{Stack, StackConfig};

#[derive(Parser)]
#[command(
    version,
    about = "Real MariaDB, Redis, ZooKeeper and etcd servers on free loopback ports"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(clap::Args)]
struct StackArgs {
    /// How many independent Redis servers to start.
    #[arg(long, default_value_t = 5)]
    redis: usize,
    /// Also a Redis Cluster (three masters, three replicas), exported as
    /// `REDIS_CLUSTER_URLS`.
    #[arg(long)]
    redis_cluster: bool,
    /// ZooKeeper servers: 1 (standalone) or 3 (an ensemble); 0 for none.
    #[arg(long, default_value_t = 1)]
    zookeeper_nodes: usize,
    /// etcd members: 1, or 3 (a cluster); 0 for none.
    #[arg(long, default_value_t = 1)]
    etcd_nodes: usize,
    /// The database created in MariaDB.
    #[arg(long, default_value = "stocklocks")]
    database: String,
    /// Put every server behind a proxy that adds this round-trip time, in milliseconds.
    ///
    /// For example 0.5 inside a data centre, 2 across zones. The exported addresses
    /// are the proxies'. Without it, clients reach the servers directly.
    #[arg(long, value_parser = testbed::Latency::parse_ms)]
    rtt_ms: Option<f64>,
    /// With --rtt-ms: each hop's delay varies by up to this much (uniform), in ms.
    #[arg(long, value_parser = testbed::Latency::parse_ms, default_value_t = 0.0, requires = "rtt_ms")]
    jitter_ms: f64,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the stack, run a command against it, stop the stack.
    Run {
        #[command(flatten)]
        stack: StackArgs,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Start the stack and print its environment; stop it on Ctrl-C.
    Up {
        #[command(flatten)]
        stack: StackArgs,
    },
}

static CHILD: AtomicI32 = AtomicI32::new(0);
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(signal: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    // A Ctrl-C reaches the child through the terminal's process group already; a
    // SIGTERM sent to us alone is passed on so the child can end and we can clean up.
    let child = CHILD.load(Ordering::SeqCst);
    if signal == libc::SIGTERM && child > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(child, libc::SIGTERM) };
    }
}

fn install_signal_handlers() {
    // SAFETY: the handler only touches atomics and calls kill (async-signal-safe).
    // A handler (unlike SIG_IGN) is reset to the default on exec, so the command we
    // run still reacts to Ctrl-C normally.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

fn config(args: &StackArgs, respect_env: bool) -> StackConfig {
    let given = |var: &str| respect_env && std::env::var_os(var).is_some_and(|v| !v.is_empty());
    let mut config = StackConfig {
        database: args.database.clone(),
        network: args.rtt_ms.map(|rtt| {
            testbed::Latency::round_trip(Duration::from_secs_f64(rtt / 1000.0))
                .with_jitter(Duration::from_secs_f64(args.jitter_ms / 1000.0))
        }),
        ..StackConfig::default()
    }
    .with_nodes(&testbed::redis::KIND, args.redis)
    .with_nodes(
        &testbed::redis_cluster::KIND,
        if args.redis_cluster { 6 } else { 0 },
    )
    .with_nodes(&testbed::zookeeper::KIND, args.zookeeper_nodes)
    .with_nodes(&testbed::etcd::KIND, args.etcd_nodes);
    // Every kind whose variable is given is not started.
    for kind in testbed::KINDS {
        if given(kind.variable) {
            config = config.with_nodes(kind, 0);
        }
    }
    config
}

fn start(config: &StackConfig) -> Result<Stack, ExitCode> {
    let started = Instant::now();
    match Stack::start(config) {
        Ok(stack) => {
            eprintln!(
                "testbed: {} server(s) ready in {:.2} s{}",
                stack.pids().len(),
                started.elapsed().as_secs_f64(),
                match config.network {
                    Some(l) => format!(
                        ", behind proxies: {:.2} ms round trip (± {:.2} ms per hop)",
                        l.one_way.as_secs_f64() * 2000.0,
                        l.jitter.as_secs_f64() * 1000.0
                    ),
                    None => String::new(),
                }
            );
            Ok(stack)
        }
        Err(e) => {
            eprintln!("testbed: {e}");
            Err(ExitCode::from(2))
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    install_signal_handlers();
    match cli.command {
        Cmd::Run { stack, command } => {
            let stack = match start(&config(&stack, true)) {
                Ok(stack) => stack,
                Err(code) => return code,
            };
            let mut cmd = Command::new(&command[0]);
            cmd.args(&command[1..]).envs(stack.env());
            let status = match cmd.spawn() {
                Ok(mut child) => {
                    CHILD.store(child.id() as i32, Ordering::SeqCst);
                    child.wait()
                }
                Err(e) => {
                    eprintln!("testbed: cannot run `{}`: {e}", command[0]);
                    return ExitCode::from(127);
                }
            };
            drop(stack);
            match status {
                Ok(status) => {
                    use std::os::unix::process::ExitStatusExt;
                    let code = status
                        .code()
                        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
                    ExitCode::from(code.clamp(0, 255) as u8)
                }
                Err(e) => {
                    eprintln!("testbed: waiting for `{}`: {e}", command[0]);
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Up { stack } => {
            let stack = match start(&config(&stack, false)) {
                Ok(stack) => stack,
                Err(code) => return code,
            };
            for (name, value) in stack.env() {
                println!("export {name}='{value}'");
            }
            let pids: Vec<String> = stack
                .pids()
                .iter()
                .map(|(n, p)| format!("{n}={p}"))
                .collect();
            println!("# pids: {}", pids.join(" "));
            println!("# Ctrl-C stops every server");
            while !STOP.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(100));
            }
            drop(stack);
            eprintln!("testbed: stopped");
            ExitCode::SUCCESS
        }
    }
}
