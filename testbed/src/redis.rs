//! One independent `redis-server`, no persistence unless asked for
//! ([`Redis::set_persistence`]).

use crate::kind::{ServerKind, Servers, StackConfig};
use crate::process::{ServerDir, ServerProcess, find_binary, tcp_exchange, with_port_retry};
use crate::{READY_TIMEOUT, Result};

/// Redis as a [`crate::Stack`] starts it: independent servers (`redis-1`, ...),
/// `REDIS_URLS`.
pub static KIND: ServerKind = ServerKind {
    name: "redis",
    variable: "REDIS_URLS",
    package: "redis-server",
    default_nodes: 5,
    behind_lab_proxies: true,
    behind_a_distance: true,
    start: |nodes, _| {
        let servers = (1..=nodes)
            .map(|i| Redis::start(&format!("redis-{i}")))
            .collect::<Result<Vec<_>>>()?;
        Ok(Box::new(servers))
    },
};

impl Servers for Vec<Redis> {
    fn addresses(&self, _: &StackConfig) -> Vec<String> {
        self.iter().map(Redis::url).collect()
    }

    fn pids(&self) -> Vec<(String, u32)> {
        self.iter()
            .enumerate()
            .map(|(i, r)| (format!("redis-{}", i + 1), r.pid()))
            .collect()
    }
}

/// A private Redis: `--save '' --appendonly no` (nothing on disk, so a restart comes
/// back empty, which the chaos tests rely on), in the foreground on a free port.
pub struct Redis {
    process: ServerProcess,
    port: u16,
    _dir: ServerDir,
    /// The file the clock shim reads its offset from, once the clock is movable.
    clock_file: Option<std::path::PathBuf>,
}

impl Redis {
    /// Starts a server named `name` (used in errors and logs) on a free port.
    pub fn start(name: &str) -> Result<Redis> {
        Self::start_preferring(name, None).map(|(redis, _)| redis)
    }

    /// Starts a server, trying `port` first; returns it and how many ports were tried.
    pub fn start_preferring(name: &str, port: Option<u16>) -> Result<(Redis, usize)> {
        Self::start_with(name, port, &[])
    }

    /// Starts a server with more command-line options (e.g. `--replicaof HOST PORT`).
    pub fn start_with(name: &str, port: Option<u16>, extra: &[String]) -> Result<(Redis, usize)> {
        let binary = find_binary("redis-server", "redis-server")?;
        let dir = ServerDir::new(name)?;
        let ((process, port), attempts) = with_port_retry(port, |port| {
            let args = vec![
                "--port".into(),
                port.to_string(),
                "--bind".into(),
                "127.0.0.1".into(),
                "--save".into(),
                String::new(),
                "--appendonly".into(),
                "no".into(),
                "--dir".into(),
                dir.path().display().to_string(),
            ];
            let args = [args, extra.to_vec()].concat();
            let mut process =
                ServerProcess::spawn(name, &binary, &args, dir.path().join("redis.log"))?;
            process.wait_ready(port, READY_TIMEOUT, || ping(port))?;
            Ok((process, port))
        })?;
        Ok((
            Redis {
                process,
                port,
                _dir: dir,
                clock_file: None,
            },
            attempts,
        ))
    }

    /// Starts a replica of the server on `primary_port` (a proxy's port will do) and
    /// waits until its first sync is done (`master_link_status:up`).
    pub fn start_replica_of(name: &str, primary_port: u16) -> Result<Redis> {
        let replicaof = [
            "--replicaof".to_string(),
            "127.0.0.1".into(),
            primary_port.to_string(),
        ];
        let (replica, _) = Self::start_with(name, None, &replicaof)?;
        crate::process::wait_until(READY_TIMEOUT, "the replica's first sync", || {
            info(replica.port, "replication").contains("master_link_status:up")
        })?;
        Ok(replica)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub fn process(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    /// The process handle, for pause / resume (which need no `&mut`).
    pub fn process_ref(&self) -> &ServerProcess {
        &self.process
    }

    /// Switches persistence now (`CONFIG SET`) and for every later restart (the
    /// command line). With an append-only file it waits until the file holds the
    /// whole dataset (the background rewrite `appendonly yes` starts is done), so a
    /// kill -9 from then on loses at most what the fsync policy allows.
    pub fn set_persistence(&mut self, persistence: Persistence) -> Result<()> {
        let (appendonly, fsync) = match persistence {
            Persistence::None => ("no", "everysec"),
            Persistence::AofEverySec => ("yes", "everysec"),
            Persistence::AofAlways => ("yes", "always"),
        };
        let port = self.port;
        for (name, value) in [("appendfsync", fsync), ("appendonly", appendonly)] {
            let command = format!("CONFIG SET {name} {value}\r\n");
            let answer = tcp_exchange(port, command.as_bytes(), b"\r\n").unwrap_or_default();
            if !answer.starts_with(b"+OK") {
                return Err(crate::Error::Command {
                    what: format!("redis CONFIG SET {name} {value}"),
                    output: String::from_utf8_lossy(&answer).into_owned(),
                });
            }
        }
        let mut args: Vec<String> = self.process.args().to_vec();
        for (flag, value) in [("--appendonly", appendonly), ("--appendfsync", fsync)] {
            match flag_value_at(&args, flag) {
                Some(i) => args[i] = value.to_string(),
                None => args.extend([flag.to_string(), value.to_string()]),
            }
        }
        self.process.set_args(args);
        if persistence != Persistence::None {
            let deadline = std::time::Instant::now() + READY_TIMEOUT;
            loop {
                let info = tcp_exchange(port, b"INFO persistence\r\n", b"aof_last_cow_size")
                    .map(|a| String::from_utf8_lossy(&a).into_owned())
                    .unwrap_or_default();
                let done = info.contains("aof_enabled:1")
                    && info.contains("aof_rewrite_in_progress:0")
                    && info.contains("aof_rewrite_scheduled:0");
                if done {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    return Err(crate::Error::Command {
                        what: "redis BGREWRITEAOF after CONFIG SET appendonly yes".into(),
                        output: info,
                    });
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// Kills the server (SIGKILL) and starts it again on the same port. Without
    /// persistence (the default) it comes back **empty**: every key, lock and counter
    /// is gone; with an append-only file it loads what the file holds.
    pub fn restart(&mut self) -> Result<()> {
        self.process.respawn()?;
        let port = self.port;
        self.process.wait_ready(port, READY_TIMEOUT, || ping(port))
    }

    /// Restarts the server (empty) with a wall clock the test can move
    /// ([`Redis::set_clock_offset`]): an `LD_PRELOAD` shim, `clockjump.c`, built here
    /// with `cc` on first use, shifts what `gettimeofday` and `clock_gettime(REALTIME)`
    /// return by the offset in a file. Key expiry, `TIME`, everything that reads the
    /// wall clock follows it; monotonic clocks do not (as with a real clock step).
    /// (Debian's libfaketime cannot do this: it deadlocks with redis-server's jemalloc.)
    pub fn with_movable_clock(&mut self) -> Result<()> {
        let shim = clockjump_library()?;
        let file = self._dir.path().join("clock-offset-ms");
        std::fs::write(&file, "0").map_err(crate::Error::io("writing the clock offset"))?;
        self.clock_file = Some(file.clone());
        self.process.set_env(vec![
            ("LD_PRELOAD".into(), shim.display().to_string()),
            ("CLOCKJUMP_FILE".into(), file.display().to_string()),
        ]);
        self.restart()
    }

    /// Moves the server's wall clock `ms` milliseconds from the real one (negative:
    /// back); takes effect within 50 ms. Needs [`Redis::with_movable_clock`] first.
    pub fn set_clock_offset(&self, ms: i64) -> Result<()> {
        let file = self
            .clock_file
            .as_ref()
            .ok_or_else(|| crate::Error::Command {
                what: "set_clock_offset".into(),
                output: "the server was not started with_movable_clock".into(),
            })?;
        std::fs::write(file, ms.to_string())
            .map_err(crate::Error::io("writing the clock offset"))?;
        // The shim re-reads the file at most every 50 ms.
        std::thread::sleep(std::time::Duration::from_millis(60));
        Ok(())
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// `libclockjump.so`, compiled once per process from `clockjump.c` with `cc`.
fn clockjump_library() -> Result<std::path::PathBuf> {
    // The directory lives as long as the process (a later run sweeps it away).
    static BUILT: std::sync::OnceLock<
        std::result::Result<(ServerDir, std::path::PathBuf), String>,
    > = std::sync::OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let holder = ServerDir::new("clockjump").map_err(|e| e.to_string())?;
        let dir = holder.path().to_path_buf();
        let source = dir.join("clockjump.c");
        let library = dir.join("libclockjump.so");
        std::fs::write(&source, include_str!("clockjump.c")).map_err(|e| e.to_string())?;
        let output = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&library)
            .arg(&source)
            .output()
            .map_err(|e| format!("running cc: {e}"))?;
        if !output.status.success() {
            return Err(String::from_utf8_lossy(&output.stderr).into_owned());
        }
        Ok((holder, library))
    });
    match built {
        Ok((_, library)) => Ok(library.clone()),
        Err(output) => Err(crate::Error::Command {
            what: "cc -shared clockjump.c".into(),
            output: output.clone(),
        }),
    }
}

/// What a Redis keeps on disk, and so what a kill -9 can lose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// Nothing: a restart comes back empty (the testbed's default).
    None,
    /// An append-only file, fsynced once a second: up to about a second of
    /// acknowledged writes can be lost.
    AofEverySec,
    /// An append-only file, fsynced before every reply: nothing acknowledged is lost.
    AofAlways,
}

/// Where the value of `flag` is on a command line: after its last occurrence, the one
/// Redis takes (`--appendonly no --appendonly yes` means yes).
pub(crate) fn flag_value_at(args: &[String], flag: &str) -> Option<usize> {
    let at = args.iter().rposition(|a| a == flag)? + 1;
    (at < args.len()).then_some(at)
}

/// `INFO section` of the server on `port` (empty when it does not answer).
pub(crate) fn info(port: u16, section: &str) -> String {
    let request = format!("INFO {section}\r\n");
    tcp_exchange(port, request.as_bytes(), b"\r\n\r\n")
        .map(|a| String::from_utf8_lossy(&a).into_owned())
        .unwrap_or_default()
}

pub(crate) fn ping(port: u16) -> bool {
    tcp_exchange(port, b"PING\r\n", b"\r\n").is_some_and(|a| a.starts_with(b"+PONG"))
}
