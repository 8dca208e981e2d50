//! Redis with high availability: a primary, one replica, and three Sentinels that
//! promote the replica when the primary dies ([`RedisHa`]).
//!
//! The replica reaches the primary **through a [`Proxy`]**, so a test can hold
//! replication back deterministically: blackhole [`RedisHa::replication`] and every
//! write the primary acknowledges from then on stays on the primary only (the replica
//! sees a quiet link, not a broken one, and stays eligible for promotion). Kill the
//! primary then, and Sentinel promotes a replica that never saw those writes: the
//! failover the write-ups warn about.
//!
//! Sentinels run as `redis-server <conf> --sentinel` (the `redis-server` package; no
//! `redis-sentinel` needed) with `down-after-milliseconds 500`: a dead primary is
//! replaced in about 1-2 s. Two of Sentinel's safety delays are shortened, because a
//! busy test machine trips them and either one outlasts a test's wait:
//!
//! - **TILT.** A Sentinel whose timer ran more than 2 s late (a process not scheduled,
//!   or stuck in the fsync of its config file) distrusts what it measured and acts on
//!   nothing for 30 s. Here it waits [`TILT_PERIOD_MS`], time for two rounds of pings
//!   (every 500 ms) to bring fresh measurements. It must be short for a second
//!   reason: a Sentinel promotes no replica whose link to the primary has been down
//!   longer than ten times `down-after-milliseconds` (5 s here) plus the time since
//!   the Sentinel itself saw the primary down. A primary that died during the stall
//!   and is seen down only after a 30 s TILT leaves a replica down "too long"
//!   forever, and no failover ever comes.
//! - **A failed attempt.** Sentinels that split their votes, or a leader that finds
//!   no replica to promote, try again only after twice `failover-timeout`. That
//!   setting starts at [`FAILOVER_TIMEOUT_MS`], because it also delays Sentinel
//!   "fixing" the replica's address (it points at the proxy, not at the primary):
//!   the fix comes only once the replica has been known that long, so a test that
//!   kills the primary within a minute of [`RedisHa::start`] keeps its proxy in the
//!   path. [`RedisHa::wait_for_failover`] shortens it to
//!   [`FAILOVER_TIMEOUT_ONCE_DOWN_MS`] on each Sentinel once that Sentinel has seen
//!   the primary down (from then on it fixes no replica), so a failed attempt is
//!   retried within seconds. The same setting bounds the election and the promotion
//!   of one attempt: one that overruns it is simply tried again. It is not put back:
//!   the replica address it guarded was the dead primary's.
//!
//! ```no_run
//! let mut ha = testbed::RedisHa::start("ha").unwrap();
//! ha.replication.set(testbed::proxy::ProxyMode::Blackhole);
//! // ... write to the primary (ha.primary.url()) ...
//! ha.primary.process().kill();
//! let new_primary = ha.wait_for_failover(std::time::Duration::from_secs(10)).unwrap();
//! assert_eq!(new_primary, ha.replica.port());
//! ```

use crate::process::{
    ServerDir, ServerProcess, find_binary, tcp_exchange, wait_until, with_port_retry,
};
use crate::proxy::Proxy;
use crate::redis::{info, ping};
use crate::{Error, READY_TIMEOUT, Redis, Result};
use std::time::{Duration, Instant};

/// The name Sentinel monitors the primary under.
pub const MASTER_NAME: &str = "stock-locks";

/// How long a Sentinel in TILT waits before it acts again (Sentinel's default: 30 s).
pub const TILT_PERIOD_MS: u64 = 1_000;

/// `failover-timeout` until a Sentinel has seen the primary down.
pub const FAILOVER_TIMEOUT_MS: u64 = 60_000;

/// `failover-timeout` once a Sentinel has seen the primary down: a failed attempt is
/// retried after twice this.
pub const FAILOVER_TIMEOUT_ONCE_DOWN_MS: u64 = 3_000;

/// A primary, a replica behind a proxy, and three Sentinels; dropping it stops all.
pub struct RedisHa {
    pub primary: Redis,
    pub replica: Redis,
    /// The replica's link to the primary: blackhole it to hold replication back.
    pub replication: Proxy,
    sentinels: Vec<Sentinel>,
}

struct Sentinel {
    process: ServerProcess,
    port: u16,
    _dir: ServerDir,
}

impl RedisHa {
    /// Starts the primary, the replica (replicating through the proxy, in sync before
    /// this returns), and three Sentinels that agree on the primary and know the
    /// replica and each other.
    pub fn start(name: &str) -> Result<RedisHa> {
        let (primary, _) = Redis::start_with(&format!("{name}-primary"), None, &[])?;
        let replication = Proxy::start(primary.port())?;
        let replica = Redis::start_replica_of(&format!("{name}-replica"), replication.port())?;
        let binary = find_binary("redis-server", "redis-server")?;
        let mut sentinels = Vec::new();
        for i in 1..=3 {
            sentinels.push(Sentinel::start(
                &binary,
                &format!("{name}-sentinel-{i}"),
                primary.port(),
            )?);
        }
        let ha = RedisHa {
            primary,
            replica,
            replication,
            sentinels,
        };
        // Ready when every Sentinel knows the replica and the two other Sentinels (it
        // can then vote in, and win, a failover).
        let met = wait_until(READY_TIMEOUT, "the Sentinels to find each other", || {
            ha.sentinels.iter().all(|s| {
                let master = s.master();
                field(&master, "num-slaves") == Some("1")
                    && field(&master, "num-other-sentinels") == Some("2")
            })
        });
        met.map_err(|error| ha.with_sentinel_logs(error))?;
        Ok(ha)
    }

    /// `host:port` of each Sentinel, for `REDIS_SENTINELS`.
    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect()
    }

    /// The three Sentinels' processes (to pause them, or read their logs).
    pub fn sentinel_processes(&self) -> impl Iterator<Item = &ServerProcess> {
        self.sentinels.iter().map(|s| &s.process)
    }

    /// The primary's port as the first Sentinel that answers names it.
    pub fn current_primary_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(Sentinel::primary_port)
    }

    /// After the primary was killed: waits until every Sentinel names another primary
    /// than the one started with, and that server answers as a primary; returns its
    /// port.
    ///
    /// It first shortens each Sentinel's `failover-timeout`, once that Sentinel has
    /// seen the primary down, so that an attempt that fails is retried within seconds
    /// (see the module's text).
    pub fn wait_for_failover(&self, timeout: Duration) -> Result<u16> {
        let deadline = Instant::now() + timeout;
        let old = self.primary.port();
        for sentinel in &self.sentinels {
            let shortened = sentinel.retry_failed_attempts_soon(old, deadline);
            shortened.map_err(|error| self.with_sentinel_logs(error))?;
        }
        let mut new = None;
        let left = deadline.saturating_duration_since(Instant::now());
        let waited = wait_until(left, "Sentinel to promote the replica", || {
            let ports: Vec<Option<u16>> =
                self.sentinels.iter().map(Sentinel::primary_port).collect();
            let agreed = ports[0].filter(|p| *p != old && ports.iter().all(|q| *q == Some(*p)));
            new = agreed.filter(|p| info(*p, "replication").contains("role:master"));
            new.is_some()
        });
        waited.map_err(|error| self.with_sentinel_logs(error))?;
        Ok(new.expect("set when the wait succeeded"))
    }

    /// Adds what each Sentinel says of the primary (`SENTINEL MASTER`: its flags, when
    /// it last answered) and its last log lines to a failed wait: the events (`+tilt`,
    /// `+sdown`, `+odown`, `+vote-for-leader`, `-failover-abort-*`) say where a
    /// failover stopped.
    fn with_sentinel_logs(&self, error: Error) -> Error {
        let Error::Command { what, mut output } = error else {
            return error;
        };
        for sentinel in &self.sentinels {
            let name = sentinel.process.name();
            let master = sentinel.master();
            output.push_str(&format!(
                "\n--- {name} (port {}): {master:?}\n{}",
                sentinel.port,
                sentinel.process.log_tail(30)
            ));
        }
        Error::Command { what, output }
    }

    /// After a failover: restarts the old primary (it comes back empty, as a primary)
    /// and waits until Sentinel has turned it into a replica of the new primary and it
    /// is in sync (Sentinel notices on its next look at it: up to ~10 s).
    pub fn rejoin_old_primary(&mut self, timeout: Duration) -> Result<()> {
        self.primary.restart()?;
        let port = self.primary.port();
        let rejoined = wait_until(timeout, "the old primary to rejoin as a replica", || {
            let replication = info(port, "replication");
            replication.contains("role:slave") && replication.contains("master_link_status:up")
        });
        rejoined.map_err(|error| self.with_sentinel_logs(error))
    }
}

impl Sentinel {
    /// What this Sentinel knows of the primary (`SENTINEL MASTER`): field, value, ...
    fn master(&self) -> Vec<String> {
        sentinel_command(self.port, &["SENTINEL", "MASTER", MASTER_NAME])
    }

    /// The primary's port as this Sentinel names it.
    fn primary_port(&self) -> Option<u16> {
        let answer = sentinel_command(
            self.port,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME],
        );
        answer.get(1).and_then(|p| p.parse().ok())
    }

    fn start(binary: &std::path::Path, name: &str, primary_port: u16) -> Result<Sentinel> {
        let dir = ServerDir::new(name)?;
        let ((process, port), _) = with_port_retry(None, |port| {
            // Sentinel rewrites its configuration file, so it gets one of its own.
            let conf = dir.path().join("sentinel.conf");
            let text = format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 500\n\
                 sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n\
                 sentinel parallel-syncs {MASTER_NAME} 1\n",
                dir = dir.path().display()
            );
            std::fs::write(&conf, text)
                .map_err(Error::io(format!("{name}: writing its config")))?;
            let args = vec![conf.display().to_string(), "--sentinel".into()];
            let mut process =
                ServerProcess::spawn(name, binary, &args, dir.path().join("sentinel.log"))?;
            process.wait_ready(port, READY_TIMEOUT, || ping(port))?;
            Ok((process, port))
        })?;
        let sentinel = Sentinel {
            process,
            port,
            _dir: dir,
        };
        let tilt_period = TILT_PERIOD_MS.to_string();
        sentinel.command_ok(
            &["SENTINEL", "DEBUG", "tilt-period", &tilt_period],
            READY_TIMEOUT,
        )?;
        Ok(sentinel)
    }

    /// Once this Sentinel has seen the primary (`old`) down, or already names another
    /// one, shortens its `failover-timeout` to [`FAILOVER_TIMEOUT_ONCE_DOWN_MS`].
    fn retry_failed_attempts_soon(&self, old: u16, deadline: Instant) -> Result<()> {
        let name = self.process.name();
        let time_left = || deadline.saturating_duration_since(Instant::now());
        wait_until(
            time_left(),
            &format!("{name} to see the primary down"),
            || {
                let master = self.master();
                let down =
                    field(&master, "flags").is_some_and(|f| f.split(',').any(|f| f == "s_down"));
                let port = field(&master, "port").and_then(|p| p.parse::<u16>().ok());
                let moved_on = port.is_some_and(|p| p != old);
                down || moved_on
            },
        )?;
        let timeout = FAILOVER_TIMEOUT_ONCE_DOWN_MS.to_string();
        self.command_ok(
            &["SENTINEL", "SET", MASTER_NAME, "failover-timeout", &timeout],
            time_left(),
        )
    }

    /// Sends a command answered `+OK` (`args` start with `SENTINEL`), again while the
    /// Sentinel gives no answer (it fsyncs its config file before it answers a change,
    /// which a busy disk makes slow), for at most `within`.
    fn command_ok(&self, args: &[&str], within: Duration) -> Result<()> {
        let what = format!("{}: {}", self.process.name(), args.join(" "));
        let mut answer = Vec::new();
        wait_until(within, &format!("an answer to {what}"), || {
            answer = tcp_exchange(self.port, &resp(args), b"\r\n").unwrap_or_default();
            !answer.is_empty()
        })?;
        if answer.starts_with(b"+OK") {
            return Ok(());
        }
        Err(Error::Command {
            what,
            output: String::from_utf8_lossy(&answer).into_owned(),
        })
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.process.kill();
    }
}

/// A Sentinel command's answer, flattened to its bulk strings (`SENTINEL MASTER`
/// answers field, value, field, value, ...).
fn sentinel_command(port: u16, args: &[&str]) -> Vec<String> {
    let answer = tcp_exchange(port, &resp(args), b"\r\n")
        .map(|a| String::from_utf8_lossy(&a).into_owned())
        .unwrap_or_default();
    // Every bulk string is "$<len>" then the value on the next line.
    let lines: Vec<&str> = answer.split("\r\n").collect();
    lines
        .windows(2)
        .filter(|w| w[0].starts_with('$') && w[0] != "$-1")
        .map(|w| w[1].to_string())
        .collect()
}

/// A command in Redis' protocol: an array of bulk strings.
fn resp(args: &[&str]) -> Vec<u8> {
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    request.into_bytes()
}

/// The value after `name` in a field, value, ... list.
fn field<'a>(pairs: &'a [String], name: &str) -> Option<&'a str> {
    pairs
        .chunks(2)
        .find(|pair| pair[0] == name)
        .and_then(|pair| pair.get(1))
        .map(String::as_str)
}
