//! The set of servers one test run, benchmark or demo shares, optionally at a
//! distance: every server behind a [`Proxy`] with a latency (a production network
//! instead of loopback), and its round trips counted per kind of server.

use crate::proxy::{Latency, Proxy};
use crate::{Error, Etcd, MariaDb, Redis, Result, ZooKeeper};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
    /// Put every server behind a proxy with this latency (changeable later with
    /// [`Stack::set_latency`]); the environment then names the proxies. `None`: the
    /// servers' own ports, no proxy.
    pub network: Option<Latency>,
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
            network: None,
        }
    }
}

/// The kinds of server, as the round-trip counts and latencies name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServerKind {
    Database,
    Redis,
    ZooKeeper,
    Etcd,
}

impl ServerKind {
    pub const ALL: [ServerKind; 4] = [
        ServerKind::Database,
        ServerKind::Redis,
        ServerKind::ZooKeeper,
        ServerKind::Etcd,
    ];

    /// `database`, `redis`, `zookeeper`, `etcd`.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Database => "database",
            ServerKind::Redis => "redis",
            ServerKind::ZooKeeper => "zookeeper",
            ServerKind::Etcd => "etcd",
        }
    }
}

/// Reads the stack's round-trip counters without holding the stack (cheap to clone).
#[derive(Clone, Default)]
pub struct RoundTrips {
    counters: Vec<(ServerKind, Arc<AtomicU64>)>,
}

impl RoundTrips {
    /// Round trips so far by kind of server (only the kinds behind a proxy).
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        let mut totals = BTreeMap::new();
        for (kind, counter) in &self.counters {
            *totals.entry(kind.name()).or_insert(0) += counter.load(Ordering::Relaxed);
        }
        totals
    }

    /// Whether anything is counted (the stack runs behind proxies).
    pub fn is_counting(&self) -> bool {
        !self.counters.is_empty()
    }
}

/// Running servers; dropping the stack stops them all.
pub struct Stack {
    pub mariadb: Option<MariaDb>,
    pub redis: Vec<Redis>,
    pub zookeeper: Option<ZooKeeper>,
    pub etcd: Option<Etcd>,
    database: String,
    /// The proxies clients go through when the stack runs at a distance.
    network: Option<Distance>,
}

/// A proxy in front of every server of a stack, with one latency (changeable), and the
/// environment that names the proxies: clients started with [`Distance::env`] see the
/// stack at that distance. A stack can have several (e.g. loopback and 2 ms side by
/// side, for two sets of instances); each counts its own round trips.
pub struct Distance {
    links: Vec<(ServerKind, Proxy)>,
    env: Vec<(&'static str, String)>,
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
        let mut stack = Stack {
            mariadb,
            redis,
            zookeeper,
            etcd,
            database: config.database.clone(),
            network: None,
        };
        if let Some(latency) = config.network {
            stack.network = Some(stack.distance(latency)?);
        }
        Ok(stack)
    }

    /// A new set of proxies in front of every server, at `latency`.
    pub fn distance(&self, latency: Latency) -> Result<Distance> {
        Distance::in_front_of(&self.direct_env(), latency)
    }

    /// Whether the servers are behind proxies ([`StackConfig::network`]).
    pub fn at_a_distance(&self) -> bool {
        self.network.is_some()
    }

    /// The proxies of [`StackConfig::network`], if the stack runs at a distance.
    pub fn network(&self) -> Option<&Distance> {
        self.network.as_ref()
    }

    /// The environment variables every stock-locks program reads (one of
    /// [`SERVER_VARIABLES`] each): `DATABASE_URL`, `REDIS_URLS` (comma-separated),
    /// `ZK_CONNECT` and `ETCD_ENDPOINTS` (comma-separated), for the servers that run;
    /// through the proxies when the stack runs at a distance.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        match &self.network {
            Some(distance) => distance.env(),
            None => self.direct_env(),
        }
    }

    /// [`Stack::env`] with the servers' own addresses, whatever the network.
    pub fn direct_env(&self) -> Vec<(&'static str, String)> {
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

impl Distance {
    /// Proxies in front of every server the variables name (any of
    /// [`SERVER_VARIABLES`]: comma-separated addresses whose port follows the last
    /// `:` of the host part), at `latency`; [`Distance::env`] names the proxies
    /// instead. Servers of a stack, or servers given to `testbed run`.
    pub fn in_front_of(vars: &[(&'static str, String)], latency: Latency) -> Result<Distance> {
        let mut links = Vec::new();
        let mut env = Vec::new();
        for (name, value) in vars {
            let kind = match *name {
                "DATABASE_URL" => ServerKind::Database,
                "REDIS_URLS" => ServerKind::Redis,
                "ZK_CONNECT" => ServerKind::ZooKeeper,
                "ETCD_ENDPOINTS" => ServerKind::Etcd,
                _ => continue,
            };
            let mut proxied = Vec::new();
            for address in value.split(',') {
                let (before, port, after) = split_port(address).ok_or_else(|| Error::Io {
                    context: format!("{name}: no port in {address:?}"),
                    source: std::io::ErrorKind::InvalidInput.into(),
                })?;
                let proxy = Proxy::start(port)?;
                proxy.set_latency(latency);
                proxied.push(format!("{before}{}{after}", proxy.port()));
                links.push((kind, proxy));
            }
            env.push((*name, proxied.join(",")));
        }
        Ok(Distance { links, env })
    }

    /// [`Stack::env`] naming this set's proxies.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        self.env.clone()
    }

    /// Sets the latency to every server of `kind` (`None`: every kind).
    pub fn set_latency(&self, kind: Option<ServerKind>, latency: Latency) {
        for (k, proxy) in &self.links {
            if kind.is_none_or(|kind| kind == *k) {
                proxy.set_latency(latency);
            }
        }
    }

    /// The latency to the first server (they all have the same unless
    /// [`Distance::set_latency`] was given a kind).
    pub fn latency(&self) -> Latency {
        self.links
            .first()
            .map(|(_, p)| p.latency())
            .unwrap_or_default()
    }

    /// This set's round-trip counters.
    pub fn round_trips(&self) -> RoundTrips {
        RoundTrips {
            counters: (self.links.iter())
                .map(|(kind, proxy)| (*kind, proxy.round_trip_counter()))
                .collect(),
        }
    }
}

/// `mysql://root@127.0.0.1:3306/db` → (`mysql://root@127.0.0.1:`, 3306, `/db`): the
/// port is the digits after the last `:` before the path.
fn split_port(address: &str) -> Option<(&str, u16, &str)> {
    let rest_at = address.find("://").map_or(0, |i| i + 3);
    let path_at = address[rest_at..]
        .find('/')
        .map_or(address.len(), |i| rest_at + i);
    let colon = address[..path_at].rfind(':')?;
    let port = address[colon + 1..path_at].parse().ok()?;
    Some((&address[..=colon], port, &address[path_at..]))
}

#[cfg(test)]
mod tests {
    use super::split_port;

    #[test]
    fn ports_are_found_in_every_variable_s_form() {
        assert_eq!(
            split_port("mysql://root@127.0.0.1:3306/stocklocks"),
            Some(("mysql://root@127.0.0.1:", 3306, "/stocklocks"))
        );
        assert_eq!(
            split_port("redis://127.0.0.1:6379"),
            Some(("redis://127.0.0.1:", 6379, ""))
        );
        assert_eq!(split_port("127.0.0.1:2181"), Some(("127.0.0.1:", 2181, "")));
        assert_eq!(
            split_port("http://127.0.0.1:2379"),
            Some(("http://127.0.0.1:", 2379, ""))
        );
        assert_eq!(split_port("redis://127.0.0.1"), None);
    }

    #[test]
    fn round_trip_times_are_read_as_the_command_lines_give_them() {
        use crate::Latency;
        assert_eq!(Latency::parse_ms("0.5"), Ok(0.5));
        assert_eq!(Latency::parse_ms("2"), Ok(2.0));
        for bad in ["-1", "NaN", "inf", "two", "10001"] {
            assert!(Latency::parse_ms(bad).is_err(), "{bad}");
        }
        let latency = Latency::round_trip(std::time::Duration::from_millis(2));
        assert_eq!(latency.one_way, std::time::Duration::from_millis(1));
    }
}
