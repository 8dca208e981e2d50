//! The set of servers one test run, benchmark or demo shares.

use crate::{Etcd, MariaDb, Redis, Result, ZooKeeper};

/// What to start. The default is what stock-locks needs: MariaDB with a `stocklocks`
/// database, five independent Redis (the first also serves the single-Redis lock, all
/// five form the RedLock), a standalone ZooKeeper and a single etcd.
#[derive(Debug, Clone)]
pub struct StackConfig {
    /// Start MariaDB and create [`StackConfig::database`] in it.
    pub mariadb: bool,
    pub database: String,
    /// Start MariaDB as a replication primary (a binary log), so that a
    /// [`crate::replication::Replica`] can follow it later.
    pub mariadb_primary: bool,
    /// How many independent Redis servers (0 for none).
    pub redis: usize,
    /// ZooKeeper servers: 0 for none, 1 standalone, 3 for an ensemble.
    pub zookeeper_nodes: usize,
    /// etcd members: 0 for none, 1, or 3 for a cluster.
    pub etcd_nodes: usize,
}

impl Default for StackConfig {
    fn default() -> Self {
        StackConfig {
            mariadb: true,
            database: "stocklocks".into(),
            mariadb_primary: false,
            redis: 5,
            zookeeper_nodes: 1,
            etcd_nodes: 1,
        }
    }
}

/// Running servers; dropping the stack stops them all.
pub struct Stack {
    pub mariadb: Option<MariaDb>,
    pub redis: Vec<Redis>,
    pub zookeeper: Option<ZooKeeper>,
    pub etcd: Option<Etcd>,
    database: String,
}

/// Every variable [`Stack::env`] may export: the servers' addresses, read by the
/// service's flags of the same names.
pub const SERVER_VARIABLES: [&str; 4] =
    ["DATABASE_URL", "REDIS_URLS", "ZK_CONNECT", "ETCD_ENDPOINTS"];

impl Stack {
    /// Starts what `config` asks for. On any failure the servers already started are
    /// stopped (dropped) before the error is returned.
    pub fn start(config: &StackConfig) -> Result<Stack> {
        let mariadb = if config.mariadb {
            let role = if config.mariadb_primary {
                crate::mariadb::Role::Primary
            } else {
                crate::mariadb::Role::Alone
            };
            let (db, _) = MariaDb::start_as(None, role)?;
            db.create_database(&config.database)?;
            Some(db)
        } else {
            None
        };
        let redis = (1..=config.redis)
            .map(|i| Redis::start(&format!("redis-{i}")))
            .collect::<Result<Vec<_>>>()?;
        let zookeeper = match config.zookeeper_nodes {
            0 => None,
            n => Some(ZooKeeper::start_ensemble(n)?),
        };
        let etcd = match config.etcd_nodes {
            0 => None,
            n => Some(Etcd::start_cluster(n)?),
        };
        Ok(Stack {
            mariadb,
            redis,
            zookeeper,
            etcd,
            database: config.database.clone(),
        })
    }

    /// The environment variables every stock-locks program reads (one of
    /// [`SERVER_VARIABLES`] each): `DATABASE_URL`, `REDIS_URLS` (comma-separated),
    /// `ZK_CONNECT` and `ETCD_ENDPOINTS` (comma-separated), for the servers that run.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut vars = Vec::new();
        if let Some(db) = &self.mariadb {
            vars.push(("DATABASE_URL", db.url(&self.database)));
        }
        if !self.redis.is_empty() {
            let urls: Vec<String> = self.redis.iter().map(Redis::url).collect();
            vars.push(("REDIS_URLS", urls.join(",")));
        }
        if let Some(zk) = &self.zookeeper {
            vars.push(("ZK_CONNECT", zk.connect_string()));
        }
        if let Some(etcd) = &self.etcd {
            vars.push(("ETCD_ENDPOINTS", etcd.endpoints()));
        }
        vars
    }

    /// Every server's name and process id.
    pub fn pids(&self) -> Vec<(String, u32)> {
        let mut pids = Vec::new();
        if let Some(db) = &self.mariadb {
            pids.push(("mariadb".to_string(), db.pid()));
        }
        for (i, r) in self.redis.iter().enumerate() {
            pids.push((format!("redis-{}", i + 1), r.pid()));
        }
        if let Some(zk) = &self.zookeeper {
            for (i, node) in zk.nodes().iter().enumerate() {
                pids.push((format!("zookeeper-{}", i + 1), node.pid()));
            }
        }
        if let Some(etcd) = &self.etcd {
            for (i, node) in etcd.nodes().iter().enumerate() {
                pids.push((format!("etcd-{}", i + 1), node.pid()));
            }
        }
        pids
    }
}
