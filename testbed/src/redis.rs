//! One independent `redis-server`, no persistence.

use crate::process::{ServerDir, ServerProcess, find_binary, tcp_exchange, with_port_retry};
use crate::{READY_TIMEOUT, Result};

/// A private Redis: `--save '' --appendonly no` (nothing on disk, so a restart comes
/// back empty, which the chaos tests rely on), in the foreground on a free port.
pub struct Redis {
    process: ServerProcess,
    port: u16,
    _dir: ServerDir,
}

impl Redis {
    /// Starts a server named `name` (used in errors and logs) on a free port.
    pub fn start(name: &str) -> Result<Redis> {
        Self::start_preferring(name, None).map(|(redis, _)| redis)
    }

    /// Starts a server, trying `port` first; returns it and how many ports were tried.
    pub fn start_preferring(name: &str, port: Option<u16>) -> Result<(Redis, usize)> {
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
            },
            attempts,
        ))
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

    /// Kills the server (SIGKILL) and starts it again on the same port. Nothing is
    /// persisted, so it comes back **empty**: every key, lock and counter is gone.
    pub fn restart(&mut self) -> Result<()> {
        self.process.respawn()?;
        let port = self.port;
        self.process.wait_ready(port, READY_TIMEOUT, || ping(port))
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

fn ping(port: u16) -> bool {
    tcp_exchange(port, b"PING\r\n", b"\r\n").is_some_and(|a| a.starts_with(b"+PONG"))
}
