//! MariaDB with a fresh datadir per instance.

use crate::kind::{ServerKind, Servers, StackConfig};
use crate::process::{
    ServerDir, ServerProcess, find_binary, run_to_end, tcp_exchange, with_port_retry,
};
use crate::{READY_TIMEOUT, Result};
use std::path::PathBuf;

/// MariaDB as a [`crate::Stack`] starts it: one server with the stack's database in
/// it, `DATABASE_URL`.
pub static KIND: ServerKind = ServerKind {
    name: "database",
    variable: "DATABASE_URL",
    package: "mariadb-server",
    default_nodes: 1,
    behind_lab_proxies: false,
    behind_a_distance: true,
    start: |_, config| {
        let role = if config.mariadb_primary {
            Role::Primary
        } else {
            Role::Alone
        };
        let (db, _) = MariaDb::start_as(None, role)?;
        db.create_database(&config.database)?;
        Ok(Box::new(db))
    },
};

impl Servers for MariaDb {
    fn addresses(&self, config: &StackConfig) -> Vec<String> {
        vec![self.url(&config.database)]
    }

    fn pids(&self) -> Vec<(String, u32)> {
        vec![("mariadb".to_string(), self.pid())]
    }
}

/// A private MariaDB server: `mariadb-install-db` into a fresh datadir, then `mariadbd`
/// in the foreground on a free loopback port. User `root`, no password.
///
/// Settings chosen for tests and benchmarks on a small machine, each explained:
/// - `--no-defaults` first (server and clients), so `/etc/mysql` never leaks in;
/// - utf8mb4 (without the Debian config the server default is latin1);
/// - `--innodb-log-file-size=8M`: a 10 MB datadir instead of 126 MB;
/// - `--innodb-flush-log-at-trx-commit=1` (MariaDB's own default, said out loud):
///   COMMIT fsyncs the redo log before it answers, as ZooKeeper and etcd fsync their
///   logs before they answer a write, so the database and the lock services a
///   comparison puts side by side keep what they acknowledged alike. (`=2` writes it to the OS at COMMIT and fsyncs once a second:
///   a killed process loses nothing, an OS crash up to a second; `loadtest demo
///   --durability-cost` measures what the difference costs each strategy);
/// - `--skip-log-bin`, `--max-connections=500` (several services × pool size).
pub struct MariaDb {
    process: ServerProcess,
    port: u16,
    // Declared after `process`: fields drop in order, so the server is dead before
    // its datadir is removed.
    dir: ServerDir,
}

impl MariaDb {
    /// Starts a server on a free port.
    pub fn start() -> Result<MariaDb> {
        Self::start_preferring(None).map(|(db, _)| db)
    }

    /// Starts a server, trying `port` first; returns it and how many ports were tried.
    pub fn start_preferring(port: Option<u16>) -> Result<(MariaDb, usize)> {
        Self::start_as(port, Role::Alone)
    }

    /// Starts a server in a replication role: a primary writes a binary log (server
    /// id 1, row format, GTIDs); a replica has server id 2 and is read-only for
    /// everyone without SUPER. [`crate::replication::MariaDbReplicas`] connects them.
    pub fn start_as(port: Option<u16>, role: Role) -> Result<(MariaDb, usize)> {
        let install_db = find_binary("mariadb-install-db", "mariadb-server")?;
        let mariadbd = find_binary("mariadbd", "mariadb-server")?;
        let dir = ServerDir::new("mariadb")?;
        let datadir = dir.path().join("data");
        // A private tmpdir: bootstraps running side by side in the shared /tmp have been
        // seen failing on each other's temporary tables ("Error on delete of
        // '/tmp/#sql-temptable-...'").
        let tmpdir = dir.path().join("tmp");
        std::fs::create_dir_all(&tmpdir)
            .map_err(crate::Error::io("mariadb: creating its tmpdir"))?;
        run_to_end(
            "mariadb",
            &install_db,
            &[
                "--no-defaults".into(),
                "--user=root".into(),
                format!("--datadir={}", datadir.display()),
                "--auth-root-authentication-method=normal".into(),
                "--skip-test-db".into(),
                format!("--tmpdir={}", tmpdir.display()),
                "--innodb-log-file-size=8M".into(),
            ],
        )?;
        let ((process, port), attempts) = with_port_retry(port, |port| {
            let d = dir.path();
            let args = vec![
                "--no-defaults".into(),
                "--user=root".into(),
                format!("--datadir={}", datadir.display()),
                format!("--socket={}", d.join("m.sock").display()),
                format!("--pid-file={}", d.join("m.pid").display()),
                format!("--port={port}"),
                "--bind-address=127.0.0.1".into(),
                format!("--log-error={}", d.join("mariadb.log").display()),
                format!("--tmpdir={}", tmpdir.display()),
                "--character-set-server=utf8mb4".into(),
                "--collation-server=utf8mb4_unicode_ci".into(),
                "--innodb-log-file-size=8M".into(),
                "--innodb-buffer-pool-size=64M".into(),
                "--innodb-flush-log-at-trx-commit=1".into(),
                "--max-connections=500".into(),
                // Every pooled connection keeps its prepared statements (sqlx caches
                // up to 100 each): ten demo instances of 32 + 16 connections and their
                // strategies' statements passed MariaDB's default of 16,382 for the
                // whole server (error 1461). A production fleet meets the same sum.
                "--max-prepared-stmt-count=1048576".into(),
            ];
            let args = [args, role.args(d)].concat();
            let mut process =
                ServerProcess::spawn("mariadb", &mariadbd, &args, d.join("mariadb.log"))?;
            // Ready when it sends its handshake: protocol version 10 in byte 4.
            process.wait_ready(port, READY_TIMEOUT, || handshake(port))?;
            Ok((process, port))
        })?;
        Ok((MariaDb { process, port, dir }, attempts))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The process handle: kill it, read its log.
    pub fn process(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    /// The server's data directory.
    pub fn datadir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Kills the server (SIGKILL: a crash) and starts it again on the same datadir and
    /// port; InnoDB recovers committed transactions from its redo log.
    pub fn restart(&mut self) -> Result<()> {
        self.process.respawn()?;
        let port = self.port;
        self.process
            .wait_ready(port, READY_TIMEOUT, || handshake(port))
    }

    /// `mysql://root@127.0.0.1:PORT/<database>`.
    pub fn url(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.port)
    }

    /// Runs SQL through the `mariadb` command-line client.
    pub fn execute(&self, sql: &str) -> Result<String> {
        let client = find_binary("mariadb", "mariadb-client")?;
        run_to_end(
            "mariadb",
            &client,
            &[
                "--no-defaults".into(),
                "-uroot".into(),
                "-h127.0.0.1".into(),
                format!("-P{}", self.port),
                "--batch".into(),
                "-e".into(),
                sql.into(),
            ],
        )
    }

    /// Creates a database (if missing) and returns its URL.
    pub fn create_database(&self, name: &str) -> Result<String> {
        self.execute(&format!(
            "CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
        ))?;
        Ok(self.url(name))
    }
}

/// What a server does in replication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// No binary log (the default: nothing replicates).
    Alone,
    Primary,
    Replica,
}

impl Role {
    fn args(self, dir: &std::path::Path) -> Vec<String> {
        match self {
            Role::Alone => vec!["--skip-log-bin".into()],
            Role::Primary => vec![
                "--server-id=1".into(),
                format!("--log-bin={}", dir.join("binlog").display()),
                "--binlog-format=ROW".into(),
            ],
            Role::Replica => vec![
                "--server-id=2".into(),
                "--skip-log-bin".into(),
                "--read-only=1".into(),
            ],
        }
    }
}

/// Ready when it sends its handshake: protocol version 10 in byte 4.
fn handshake(port: u16) -> bool {
    tcp_exchange(port, b"", b"").is_some_and(|hello| hello.len() > 4 && hello[4] == 10)
}
