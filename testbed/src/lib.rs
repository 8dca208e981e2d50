//! Real servers on demand, for tests, benchmarks and the demo.
//!
//! stock-locks never mocks its backends: every test talks to a real MariaDB, real Redis
//! servers, a real ZooKeeper and a real etcd. This crate starts them from the Debian
//! packages (`mariadb-server`, `redis-server`, `zookeeper`, `etcd-server`;
//! `scripts/install-deps` installs them),
//! each as a **foreground child process** that:
//!
//! - runs in its own temporary directory (data, socket, log), removed when it stops;
//! - listens on a free loopback port, picked at start and retried on a collision
//!   (another process may grab a port between our probe and the server's `bind`);
//! - is readiness-checked with the server's own protocol before `start` returns;
//! - is stopped by PID (SIGKILL, then reaped) when its handle is dropped, and dies with
//!   its parent even when the parent is killed with SIGKILL (`PR_SET_PDEATHSIG`);
//! - is in its own process group, so a Ctrl-C in the terminal reaches the program that
//!   owns it and that program decides when the servers stop.
//!
//! Failures name the server and carry the tail of its log; a missing binary names the
//! package to install.
//!
//! # Layout
//! - [`process`]: spawning a server child, its log, stopping it, the port-retry loop,
//!   and the fault tools on a running server: pause / resume (SIGSTOP / SIGCONT),
//!   kill -9, restart (each server type's `restart`).
//! - [`proxy`]: a TCP proxy in front of a server: a link with latency (and jitter)
//!   whose round trips it counts, and faults (delay, blackhole, reset).
//! - [`kind`]: [`ServerKind`], a kind of server as its file declares it (its `KIND`),
//!   [`Servers`], the running servers of one kind, and [`StackConfig`], what to start.
//! - [`mariadb`]: [`MariaDb`], a fresh datadir per instance.
//! - [`replication`]: [`replication::Replica`], a MariaDB read replica of a primary,
//!   with lag on demand (its SQL thread stopped).
//! - [`redis`]: [`Redis`], one independent `redis-server` (no persistence), with a
//!   wall clock a test can move ([`Redis::with_movable_clock`], an `LD_PRELOAD` shim
//!   built from `clockjump.c`).
//! - [`redis_cluster`]: [`RedisCluster`], three masters and three replicas, with
//!   failover (kill a master) and a slot moved under load.
//! - [`sentinel`]: [`RedisHa`], a primary, a replica behind a proxy, and three
//!   Sentinels: a real failover, with replication held back on purpose.
//! - [`zookeeper`]: [`ZooKeeper`], standalone or a 3-node ensemble (`tickTime=500`).
//! - [`etcd`]: [`Etcd`], one member or a 3-member cluster.
//! - [`stack`]: [`Stack`], the whole set a test run shares, and its environment
//!   variables (`DATABASE_URL`, `REDIS_URLS`, `ZK_CONNECT`, `ETCD_ENDPOINTS`);
//!   optionally every server behind a proxy at a network distance.
//! - [`curator`]: Apache Curator's jars (Java): compile a small program against them.
//! - the `testbed` binary: `testbed run -- CMD` and `testbed up`.
//!
//! # Caution: start servers from a long-lived thread
//! Linux delivers the parent-death signal when the **thread** that forked the child
//! exits, not the process. Start servers from the thread that will own them (a test's
//! thread, `main`, a runtime worker) and never from a short-lived helper thread such as
//! tokio's `spawn_blocking` pool, or they are killed as soon as that thread retires.
//!
//! # Example
//! ```no_run
//! let db = testbed::MariaDb::start().unwrap();
//! let url = db.create_database("example").unwrap();
//! println!("mysql server {} (pid {}): {url}", db.port(), db.pid());
//! // dropping `db` kills the server and removes its datadir
//! ```

pub mod curator;
pub mod durability;
pub mod etcd;
pub mod kind;
pub mod mariadb;
pub mod process;
pub mod proxy;
pub mod redis;
pub mod redis_cluster;
pub mod replication;
pub mod sentinel;
pub mod stack;
pub mod zookeeper;

pub use etcd::Etcd;
pub use kind::{ServerKind, Servers, StackConfig};
pub use mariadb::MariaDb;
pub use process::ServerProcess;
pub use proxy::Latency;
pub use redis::{Persistence, Redis};
pub use redis_cluster::RedisCluster;
pub use sentinel::RedisHa;
pub use stack::{Distance, KINDS, RoundTrips, SERVER_VARIABLES, Stack};
pub use zookeeper::ZooKeeper;

use std::time::Duration;

/// Everything that can go wrong while starting a server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server's executable (or jar) is not installed.
    #[error(
        "{what} not found: install the Debian package `{package}` (./scripts/install-deps does)"
    )]
    MissingBinary { what: String, package: &'static str },
    /// The server exited or never became ready.
    #[error("{server} did not start: {reason}\n--- last lines of {server}'s log ---\n{log_tail}")]
    Start {
        server: String,
        reason: String,
        log_tail: String,
    },
    /// A port picked as free was taken before the server could bind it. Retried.
    #[error("{server}: port {port} already in use")]
    PortInUse { server: String, port: u16 },
    /// A helper command (e.g. `javac`) failed.
    #[error("{what} failed:\n{output}")]
    Command { what: String, output: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How long a server may take to become ready before `start` gives up.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(60);
