//! What several strategies share, declared once: the servers besides the database
//! (Redis, ZooKeeper) and the options of every distributed lock. Each strategy's own
//! flags live beside it (`pessimistic/served.rs`, `RedisStockSettings`, ...),
//! except `redis-lock`'s wait for replicas: the service's Redis connection applies it
//! (with Sentinel), so a copy on one server has neither.

use crate::strategies::card::Reached;
use locks::LockOptions;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The shared settings (flags and environment variables, like every setting).
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct Shared {
    /// Redis servers, comma-separated. The first serves the single-Redis strategies;
    /// all of them (5) form the RedLock. Reported by /ready; never waited on at start.
    #[arg(long, env = "REDIS_URLS", value_delimiter = ',')]
    pub redis_urls: Vec<String>,

    /// Redis Sentinels, comma-separated host:port.
    ///
    /// When set, the single-Redis strategies use the primary the Sentinels name for
    /// `--redis-master-name`, instead of the first of `REDIS_URLS`. They follow a
    /// failover without a restart.
    ///
    /// RedLock keeps using `REDIS_URLS`: its nodes are independent on purpose.
    #[arg(long, env = "REDIS_SENTINELS", value_delimiter = ',')]
    pub redis_sentinels: Vec<String>,

    /// A Redis Cluster's nodes, comma-separated `redis://host:port/` (any of them will do).
    ///
    /// When set, `redis-lock` and `redis-stock` run on the cluster instead of the
    /// single Redis. Each uses hash tags to keep what one script touches in one slot.
    /// RedLock keeps `REDIS_URLS`.
    ///
    /// Reported by /ready; never waited on at start.
    #[arg(long, env = "REDIS_CLUSTER_URLS", value_delimiter = ',')]
    pub redis_cluster_urls: Vec<String>,

    /// On a Redis Cluster: how many partitions `redis-stock` spreads its keys over
    /// (hash tags in equal parts of the slots, each with its stream and persister).
    #[arg(long, env, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub redis_stock_partitions: u32,

    /// On a Redis Cluster: how many counters `redis-stock` splits each product's stock
    /// into.
    ///
    /// These counters are shards, in partitions spread over the masters. The count
    /// must divide `--redis-stock-partitions`, and every instance must use the same.
    #[arg(long, env, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub redis_stock_shards: u32,

    /// On a Redis Cluster: how many replicas must have a `redis-stock` sale before the
    /// buyer hears of it.
    ///
    /// After the sale script, `redis-stock` runs `WAIT` on the shard's master; 0 never
    /// waits. If fewer replicas have the sale within `--redis-stock-replica-timeout-ms`,
    /// the answer is 503 `outcome_unknown`.
    ///
    /// Such a sale may be lost in a failover; a retry with its request id finds out.
    #[arg(long, env, default_value_t = 0)]
    pub redis_stock_min_replicas: u32,

    /// How long `redis-stock` waits for those replicas, in milliseconds.
    #[arg(long, env, default_value_t = 500)]
    pub redis_stock_replica_timeout_ms: u64,

    /// The name the Sentinels monitor the primary under.
    #[arg(long, env = "REDIS_MASTER_NAME", default_value = "mymaster")]
    pub redis_master_name: String,

    /// `redis-lock` grants a lock only once this many replicas acknowledged it.
    ///
    /// It runs `WAIT` after the lock script; 0 never waits. This mitigates a failover
    /// that loses the lock.
    ///
    /// It costs a round trip per acquisition. With fewer replicas reachable, no lock is
    /// granted (503 backend_unavailable).
    #[arg(long, env, default_value_t = 0)]
    pub redis_lock_min_replicas: u32,

    /// How long `redis-lock` waits for those replicas, in milliseconds.
    #[arg(long, env, default_value_t = 500)]
    pub redis_lock_replica_timeout_ms: u64,

    /// ZooKeeper connect string, e.g. 127.0.0.1:2181,127.0.0.1:2182. Reported by
    /// /ready; never waited on at start.
    #[arg(long, env = "ZK_CONNECT")]
    pub zk_connect: Option<String>,

    /// ZooKeeper session timeout, in milliseconds.
    ///
    /// A holder that cannot reach the ensemble counts its lock as lost after two thirds
    /// of this, or after the lock lease when that is shorter. So it gives up before the
    /// server would expire the session.
    #[arg(long, env = "ZK_SESSION_TIMEOUT_MS", default_value_t = 6_000)]
    pub zk_session_timeout_ms: u64,

    /// The ZooKeeper path under which lock nodes live (`<root>/stock/<product_id>`).
    #[arg(long, env = "ZK_ROOT", default_value = "/stock-locks")]
    pub zk_root: String,

    /// Lease of the distributed locks, in milliseconds. The watchdog renews it every
    /// third of that while the request runs.
    #[arg(long, env = "LOCK_LEASE_MS", default_value_t = 10_000)]
    pub lock_lease_ms: u64,

    /// How long a request waits for its locks (all of an order's products together)
    /// before it is answered 503 busy, in milliseconds.
    #[arg(long, env = "LOCK_WAIT_MS", default_value_t = 5_000)]
    pub lock_wait_ms: u64,

    /// The longest a request may hold a lock, in milliseconds: the watchdog stops
    /// renewing then, so a hung request cannot hold a product forever.
    #[arg(long, env = "LOCK_MAX_HOLD_MS", default_value_t = 30_000)]
    pub lock_max_hold_ms: u64,

    /// Chubby's lock-delay for the lease-based locks, in milliseconds.
    ///
    /// It applies to mysql-lock, redis-lock, redlock and etcd-lock. ZooKeeper has none:
    /// its session is the lease, and when the session expires the holder's node is
    /// deleted and the next waiter goes at once. A lock whose holder vanished without
    /// releasing stays blocked for the lease plus this. A release frees it at once.
    ///
    /// This narrows the window for a paused holder's stale write; only fencing closes
    /// it.
    #[arg(long, env = "LOCK_DELAY_MS", default_value_t = 0)]
    pub lock_delay_ms: u64,

    /// Fenced writes for the lock strategies.
    ///
    /// A write claims the product with the lock's token, and goes through only while
    /// that token is the newest.
    ///
    /// `--fencing false` trusts the lock alone, as the source articles' code does. It
    /// is the experiment that shows why fencing exists.
    #[arg(long, env = "FENCING", default_value_t = true, action = clap::ArgAction::Set)]
    pub fencing: bool,
}

impl Shared {
    /// The single Redis: the primary `REDIS_SENTINELS` name, else the first of
    /// `REDIS_URLS`.
    pub fn redis_endpoint(&self) -> Option<locks::redis_sentinel::Endpoint> {
        if self.redis_sentinels.is_empty() {
            self.redis_urls
                .first()
                .cloned()
                .map(locks::redis_sentinel::Endpoint::Url)
        } else {
            Some(locks::redis_sentinel::Endpoint::Sentinel {
                sentinels: self.redis_sentinels.clone(),
                master: self.redis_master_name.clone(),
            })
        }
    }

    /// Where `redis-lock` runs: the Redis Cluster when one is configured, else the
    /// single Redis ([`Shared::redis_endpoint`]).
    pub fn redis_target(&self) -> Option<RedisTarget> {
        // Empty entries (an empty variable) name no node.
        let nodes: Vec<String> = self
            .redis_cluster_urls
            .iter()
            .filter(|url| !url.is_empty())
            .cloned()
            .collect();
        match nodes.is_empty() {
            false => Some(RedisTarget::Cluster(nodes)),
            true => self.redis_endpoint().map(RedisTarget::One),
        }
    }

    /// The lease, renewal and maximum hold of every lock the service takes.
    pub fn lock_options(&self) -> LockOptions {
        LockOptions {
            lease: Duration::from_millis(self.lock_lease_ms),
            renew: true,
            max_hold: Some(Duration::from_millis(self.lock_max_hold_ms)),
            lock_delay: Duration::from_millis(self.lock_delay_ms),
        }
    }

    /// How long an order may wait for all its locks.
    pub fn lock_wait(&self) -> Duration {
        Duration::from_millis(self.lock_wait_ms)
    }

    /// The ZooKeeper session timeout.
    pub fn zk_session(&self) -> Duration {
        Duration::from_millis(self.zk_session_timeout_ms)
    }

    /// `/ready`'s look at these servers, checked concurrently, each within `limit`:
    /// each one's name and what it answered (or what would configure it).
    pub async fn check(&self, limit: Duration) -> Vec<(String, Reached)> {
        let bounded = async |check: BoxedCheck<'_>| {
            tokio::time::timeout(limit, check)
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {limit:?}")))
        };
        let redis = futures::future::join_all(
            self.redis_urls
                .iter()
                .map(|url| bounded(Box::pin(redis_ping(url)))),
        );
        let zookeeper = async {
            match &self.zk_connect {
                Some(connect) => {
                    Reached::Answered(bounded(Box::pin(zookeeper_srvr(connect))).await)
                }
                None => Reached::NotConfigured("ZK_CONNECT is not set"),
            }
        };
        let cluster = async {
            match self.redis_target() {
                Some(RedisTarget::Cluster(nodes)) => {
                    Some(bounded(Box::pin(cluster_state(&nodes))).await)
                }
                _ => None,
            }
        };
        let (redis, zookeeper, cluster) = tokio::join!(redis, zookeeper, cluster);
        let mut checks = Vec::new();
        if self.redis_urls.is_empty() {
            checks.push((
                "redis".into(),
                Reached::NotConfigured("REDIS_URLS is not set"),
            ));
        }
        for (i, result) in redis.into_iter().enumerate() {
            checks.push((format!("redis-{}", i + 1), Reached::Answered(result)));
        }
        if let Some(cluster) = cluster {
            checks.push(("redis-cluster".into(), Reached::Answered(cluster)));
        }
        checks.push(("zookeeper".into(), zookeeper));
        checks
    }
}

/// One Redis (or Sentinel's primary), or a Redis Cluster's nodes.
#[derive(Debug, Clone)]
pub enum RedisTarget {
    /// One server (`REDIS_URLS`' first), or the primary Sentinel names.
    One(locks::redis_sentinel::Endpoint),
    /// The nodes `REDIS_CLUSTER_URLS` names (any of them lead to the rest).
    Cluster(Vec<String>),
}

type BoxedCheck<'a> = std::pin::Pin<Box<dyn Future<Output = Result<String, String>> + 'a>>;

async fn redis_ping(url: &str) -> Result<String, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let pong: String = redis::cmd("PING")
        .query_async(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    Ok(pong)
}

/// `CLUSTER INFO` from the first node that answers: ready when its state is `ok` (every
/// slot served).
async fn cluster_state(nodes: &[String]) -> Result<String, String> {
    let mut errors = Vec::new();
    for node in nodes {
        let info = async {
            let client = redis::Client::open(node.as_str()).map_err(|e| e.to_string())?;
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| e.to_string())?;
            redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async::<String>(&mut conn)
                .await
                .map_err(|e| e.to_string())
        };
        match info.await {
            Ok(info) if info.contains("cluster_state:ok") => {
                let masters = info
                    .lines()
                    .find_map(|l| l.strip_prefix("cluster_size:"))
                    .unwrap_or("?")
                    .trim()
                    .to_string();
                return Ok(format!("{node}: state ok, {masters} masters"));
            }
            Ok(info) => errors.push(format!(
                "{node}: {}",
                info.lines().next().unwrap_or_default()
            )),
            Err(e) => errors.push(format!("{node}: {e}")),
        }
    }
    Err(errors.join("; "))
}

/// Asks each server of the connect string for `srvr` (the four-letter word allowed by
/// default, also in the official Docker image) and reports the first that serves.
async fn zookeeper_srvr(connect: &str) -> Result<String, String> {
    // A connect string may end with a chroot: host:port,host:port/path.
    let hosts = connect.split('/').next().unwrap_or_default();
    let mut errors = Vec::new();
    for host in hosts.split(',').filter(|h| !h.is_empty()) {
        match srvr(host).await {
            Ok(mode) => return Ok(format!("{host}: {mode}")),
            Err(e) => errors.push(format!("{host}: {e}")),
        }
    }
    Err(errors.join("; "))
}

async fn srvr(host: &str) -> Result<String, String> {
    let mut stream = tokio::net::TcpStream::connect(host)
        .await
        .map_err(|e| e.to_string())?;
    stream.write_all(b"srvr").await.map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    answer
        .lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|mode| format!("mode {}", mode.trim()))
        .ok_or_else(|| format!("not serving: {}", answer.trim()))
}
