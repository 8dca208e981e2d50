//! Settings, from command-line flags or environment variables (every flag has one).

use clap::Parser;

/// stock-app: stock deduction without overselling, one endpoint per strategy.
#[derive(Parser, Debug, Clone)]
#[command(name = "stock-app", version, about)]
pub struct Settings {
    /// Address to listen on, HOST:PORT. Port 0 picks a free port (printed at start).
    #[arg(long, env = "BIND", default_value = "127.0.0.1:8080")]
    pub bind: String,

    /// MariaDB/MySQL URL, e.g. mysql://root@127.0.0.1:3306/stocklocks. The only
    /// required setting; migrations are applied to it at start.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,

    /// Connections in the service's database pool.
    #[arg(long, env = "DB_POOL_SIZE", default_value_t = 32)]
    pub db_pool_size: u32,

    /// How long a request waits for a free database connection before it is answered
    /// 503 backend_unavailable, in milliseconds.
    #[arg(long, env = "DB_ACQUIRE_TIMEOUT_MS", default_value_t = 10_000)]
    pub db_acquire_timeout_ms: u64,

    /// A read replica of the database (`mysql://...`).
    ///
    /// When set, a strategy's plain reads outside a transaction go to the replica, as
    /// read/write splitting would send them: a compare-and-set's read of the version,
    /// a read under a lock. Each strategy's file says which such reads it makes.
    ///
    /// Writes, reads inside a transaction and the read a refusal makes stay on the
    /// primary. The replica is never waited on at start.
    #[arg(long, env = "READ_REPLICA_URL")]
    pub read_replica_url: Option<String>,

    /// Bearer token for the admin routes (PUT /stock). Unset: they answer 403.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// HTTP worker threads (default: one per CPU core).
    #[arg(long, env = "WORKERS")]
    pub workers: Option<usize>,

    /// Admission limit: the most deductions in flight on this instance.
    ///
    /// Past the limit, a deduction waits in line for a place, up to its reject hold (a
    /// second unless --reject-hold-ms says otherwise). If no place frees, it is
    /// answered 429 `overloaded`. With --reject-hold-ms 0 it is answered at once.
    ///
    /// 0 (the default) means no limit: a flood then queues, so latency grows while
    /// goodput holds. With --adaptive-limit, this is the adaptive limit's ceiling.
    ///
    /// To choose a value, take the smallest count at which the strategy reaches its
    /// capacity (`loadtest sweep`) and leave room for latency to vary. Or use
    /// --adaptive-limit.
    #[arg(long, env = "MAX_IN_FLIGHT", default_value_t = 0)]
    pub max_in_flight: usize,

    /// Adapt the admission limit to latency.
    ///
    /// This is Netflix concurrency-limits' Gradient2: the limit shrinks when latency
    /// climbs above its long average, and grows back when it falls.
    ///
    /// The limit stays between 20 (or --max-in-flight, when lower) and --max-in-flight
    /// (1000 when --max-in-flight is 0).
    #[arg(long, env = "ADAPTIVE_LIMIT", default_value_t = false)]
    pub adaptive_limit: bool,

    /// How long a deduction past the admission limit waits in line before its 429, in
    /// milliseconds.
    ///
    /// A place that frees meanwhile goes to the oldest in line. A client that does
    /// not back off then resends that much later, so a flood of refusals costs a
    /// timer each, not the CPU the admitted deductions need; the 429's Retry-After (a
    /// second) counts the wait.
    ///
    /// The hold is jittered to between half and one and a half of it, and grows, up
    /// to four times it, while so many wait that answering them would pass 500
    /// refusals a second. Refusals of a product known sold out past its at-once pace
    /// are held too: they take no place in the limit, and nothing else paces them.
    ///
    /// Unset: 1000 with a limit (a limit that refuses at once collapses under clients
    /// that resend at once), 0 without one. 0: answered at once.
    #[arg(long, env = "REJECT_HOLD_MS")]
    pub reject_hold_ms: Option<u64>,

    /// The sold-out fast path: how long a sold-out product is refused up front, in
    /// milliseconds.
    ///
    /// Once a strategy finds a product with nothing left, deductions of it are refused
    /// here for this long without running the strategy. Then the strategy looks again.
    ///
    /// A restock is answered only after this long, so no instance refuses a restocked
    /// unit. 0 turns the fast path off.
    #[arg(long, env = "SOLD_OUT_CACHE_MS", default_value_t = 100)]
    pub sold_out_cache_ms: u64,

    /// InnoDB lock wait timeout for the service's connections, in seconds.
    ///
    /// This is how long a `SELECT ... FOR UPDATE` or UPDATE waits for a row lock
    /// before error 1205. MariaDB's default is 50 s; tests use 2 s.
    #[arg(long, env = "LOCK_WAIT_TIMEOUT_SECS", default_value_t = 5)]
    pub lock_wait_timeout_secs: u32,

    /// Hold every deduction this many milliseconds between its read and its write.
    ///
    /// This stands for a slow business step. It is not a test hook: it works without
    /// --enable-test-hooks. The demo uses it to make the controls fail visibly.
    #[arg(long, env = "HOLD_MS", default_value_t = 0)]
    pub hold_ms: u64,

    /// Turn on the test hooks: the /hooks endpoint (failpoints) and the hook fields of
    /// a deduct body (hold_ms, unsorted, barrier). Never in production.
    #[arg(long, env = "ENABLE_TEST_HOOKS")]
    pub enable_test_hooks: bool,

    /// With the test hooks on, append every distributed lock's hold to this file.
    ///
    /// Each event is one JSON line: `acquired` after the acquire returned, `released`
    /// before the release is sent, `lost` when a renewal finds the lock gone. A line
    /// holds the key, the holder, the token and the time on CLOCK_MONOTONIC in
    /// microseconds.
    ///
    /// The load tester uses it to lay two holders of one key side by side. Ignored
    /// without the test hooks.
    #[arg(long, env = "LOCK_LOG")]
    pub lock_log: Option<std::path::PathBuf>,

    /// What several strategies share: Redis, ZooKeeper, the locks' lease and wait.
    #[command(flatten)]
    pub shared: crate::strategies::shared::Shared,

    /// Each strategy's own settings, declared in its own file (the registry lists them).
    #[command(flatten)]
    pub strategies: crate::strategies::Settings,
}

/// The reject hold with an admission limit and no `--reject-hold-ms`.
pub const DEFAULT_REJECT_HOLD_MS: u64 = 1000;

impl Settings {
    /// The reject hold in force: `--reject-hold-ms` when given, else
    /// [`DEFAULT_REJECT_HOLD_MS`] with an admission limit and none without.
    pub fn reject_hold(&self) -> std::time::Duration {
        let limited = self.max_in_flight > 0 || self.adaptive_limit;
        let default = if limited { DEFAULT_REJECT_HOLD_MS } else { 0 };
        let ms = self.reject_hold_ms.unwrap_or(default);
        std::time::Duration::from_millis(ms)
    }

    /// These settings, changed by `change` (for a nested setting in an expression:
    /// `Settings { .. }.with(|s| s.shared.lock_lease_ms = 500)`).
    pub fn with(mut self, change: impl FnOnce(&mut Settings)) -> Settings {
        change(&mut self);
        self
    }

    /// Settings for a service on `database_url`, listening on a free loopback port,
    /// everything else at its default: the defaults the flags declare (environment
    /// variables are not read).
    pub fn for_database(database_url: &str) -> Settings {
        Settings::for_database_reading(database_url, |_| false)
    }

    /// [`Settings::for_database`], except that the flags whose environment variable
    /// `reads` accepts read it (the tests read the servers' addresses so).
    pub fn for_database_reading(database_url: &str, reads: impl Fn(&str) -> bool) -> Settings {
        use clap::{CommandFactory, FromArgMatches};
        let command = Settings::command().mut_args(|arg| {
            let read = arg
                .get_env()
                .and_then(|var| var.to_str())
                .is_some_and(&reads);
            if read { arg } else { arg.env(None::<&str>) }
        });
        let matches = command
            .try_get_matches_from([
                "stock-app",
                "--database-url",
                database_url,
                "--bind",
                "127.0.0.1:0",
            ])
            .expect("the defaults parse");
        Settings::from_arg_matches(&matches).expect("the defaults parse")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A limit brings a hold unless one is given: a limit that refuses at once
    /// collapses under clients that resend at once. No limit, no hold.
    #[test]
    fn a_limit_brings_a_reject_hold_unless_told_otherwise() {
        let plain = Settings::for_database("mysql://unused");
        assert_eq!(plain.reject_hold_ms, None);
        assert_eq!(plain.reject_hold(), Duration::ZERO);
        let second = Duration::from_millis(DEFAULT_REJECT_HOLD_MS);
        let fixed = plain.clone().with(|s| s.max_in_flight = 32);
        assert_eq!(fixed.reject_hold(), second);
        let adaptive = plain.clone().with(|s| s.adaptive_limit = true);
        assert_eq!(adaptive.reject_hold(), second);
        let at_once = fixed.clone().with(|s| s.reject_hold_ms = Some(0));
        assert_eq!(at_once.reject_hold(), Duration::ZERO);
        let paced_alone = plain.with(|s| s.reject_hold_ms = Some(250));
        assert_eq!(paced_alone.reject_hold(), Duration::from_millis(250));
    }
}
