//! How close are the locks to the floor, and to the libraries people would otherwise
//! use? `cargo bench -p locks` starts its own MariaDB, five Redis, a ZooKeeper and an etcd
//! (testbed, from the Debian packages) and measures, in one run:
//!
//! - **uncontended acquire + release** (criterion, one client, group `uncontended`):
//!   - floors, what any lock on that server costs at least: Redis `PING` and `EVALSHA`
//!     of a no-op script; ZooKeeper create + delete of an ephemeral node; etcd `put` +
//!     `delete` of one key; a MariaDB single-row autocommit `UPDATE` (and, for scale, a
//!     `SELECT ... FOR UPDATE` transaction: what `pessimistic` pays per row);
//!   - ours, through the public API (`Locker::acquire` + `LockGuard::release`, the
//!     watchdog included): `mysql-lock`, `redis-lock`, `redlock` on 5 nodes,
//!     `zookeeper`, `etcd`; and `redis-lock` on a primary with one replica, without and
//!     with `WAIT` for the replica (`with_min_replicas(1, ..)`: what the failover
//!     mitigation costs per acquisition);
//!   - peers: the `rslock` crate (RedLock) on the same 5 Redis and on 1,
//!     `zookeeper-client`'s own `Client::lock` (Curator-style prefix), `etcd-client`'s
//!     lease + Lock RPC as its example uses them, and Apache Curator's
//!     `InterProcessMutex` (Java, `benches/CuratorBench.java`, compiled and run here
//!     against the same ZooKeeper; timed by the harness itself, not criterion);
//! - **contended**: 16 tasks on one key for 5 s, empty critical section: acquisitions
//!   per second, and fairness: acquisitions per task (min–max), Jain's index (1 = every
//!   task got the same share, 1/16 = one task got everything), FIFO overtakes (how
//!   often a task that asked later got the lock earlier, per acquisition; 0 = FIFO) and
//!   the longest wait; overtakes and acquisitions/s also per fifth of the window (their
//!   median and range: the spread a claim is judged with);
//! - **steadiness**: 1 to 256 tasks, each on a key of its own (no waiting for each
//!   other: what grows is the servers' and the clients' load), for the lock services
//!   (Redis, alone and as a cluster, ZooKeeper, etcd, MariaDB, RedLock): acquire +
//!   release latency p50 and p99, their ratio (1 = every acquisition as fast as the
//!   median) and acquisitions per second, each per fifth of the window, as median and
//!   range: the source articles' "ZooKeeper's response times are steadier, Redis suits
//!   high concurrency" measured;
//! - a summary: the medians as ratios against the goals, and a markdown copy
//!   in `target/criterion/locks-summary.md` (the README's table).
//!
//! A positional argument filters rows by substring, as criterion does
//! (`cargo bench -p locks -- zookeeper`); `--test` (what `cargo test --benches` passes)
//! runs everything once, briefly.

use criterion::{Criterion, SamplingMode};
use locks::etcd::EtcdLock;
use locks::mysql::MysqlLock;
use locks::redis::RedisLock;
use locks::redlock::RedLock;
use locks::zookeeper::ZooKeeperLock;
use locks::{HolderId, LockOptions, Locker};
use sqlx::MySqlPool;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};
use testbed::{Stack, StackConfig};
use zookeeper_client as zk;

/// Every row, floors first. The names are criterion's benchmark ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Row {
    RedisPing,
    RedisNoopScript,
    ZkCreateDelete,
    EtcdPutDelete,
    MariadbUpdate,
    MariadbForUpdateTx,
    MysqlLock,
    RedisLock,
    RedisLockReplica,
    RedisLockWait,
    RedisLockCluster,
    RedisLockClusterWait,
    Redlock5,
    ZooKeeper,
    Etcd,
    Rslock5,
    Rslock1,
    ZkClientLock,
    EtcdClientLock,
    Curator,
}

use Row::*;

impl Row {
    const UNCONTENDED: [Row; 19] = [
        RedisPing,
        RedisNoopScript,
        ZkCreateDelete,
        EtcdPutDelete,
        MariadbUpdate,
        MariadbForUpdateTx,
        MysqlLock,
        RedisLock,
        RedisLockReplica,
        RedisLockWait,
        RedisLockCluster,
        RedisLockClusterWait,
        Redlock5,
        ZooKeeper,
        Etcd,
        Rslock5,
        Rslock1,
        ZkClientLock,
        EtcdClientLock,
    ];
    /// The locks (ours and the peers): the contended rows, in the order they run.
    /// Each of ours runs right next to the peer it is compared with (Curator runs just
    /// before these, from its harness): the servers warm up and drift over a run
    /// (ZooKeeper's JVM above all), and rows far apart compared ±8% apart that were
    /// level when run side by side.
    const LOCKS: [Row; 13] = [
        Curator,
        ZooKeeper,
        ZkClientLock,
        Etcd,
        EtcdClientLock,
        Redlock5,
        Rslock5,
        RedisLock,
        Rslock1,
        RedisLockReplica,
        RedisLockWait,
        RedisLockCluster,
        MysqlLock,
    ];
    /// The lock services whose latency is swept over concurrency (steadiness).
    const STEADINESS: [Row; 6] = [
        RedisLock,
        RedisLockCluster,
        ZooKeeper,
        Etcd,
        MysqlLock,
        Redlock5,
    ];

    fn name(self) -> &'static str {
        match self {
            RedisPing => "floor: redis PING",
            RedisNoopScript => "floor: redis EVALSHA no-op",
            ZkCreateDelete => "floor: zk create+delete ephemeral",
            EtcdPutDelete => "floor: etcd put+delete",
            MariadbUpdate => "floor: mariadb autocommit UPDATE",
            MariadbForUpdateTx => "mariadb FOR UPDATE transaction",
            MysqlLock => "ours: mysql-lock",
            RedisLock => "ours: redis-lock",
            RedisLockReplica => "ours: redis-lock (1 replica)",
            RedisLockWait => "ours: redis-lock with WAIT (1 replica)",
            RedisLockCluster => "ours: redis-lock (cluster)",
            RedisLockClusterWait => "ours: redis-lock (cluster) with WAIT (1 replica)",
            Redlock5 => "ours: redlock (5 nodes)",
            ZooKeeper => "ours: zookeeper",
            Etcd => "ours: etcd",
            Rslock5 => "peer: rslock (5 nodes)",
            Rslock1 => "peer: rslock (1 node)",
            ZkClientLock => "peer: zookeeper-client Client::lock",
            EtcdClientLock => "peer: etcd-client lease + lock",
            Curator => "peer: Curator InterProcessMutex",
        }
    }

    /// The server one of our locks runs on, as the summary's data names it (the book
    /// judges the source articles' Redis-vs-ZooKeeper claims by it).
    fn server(self) -> Option<&'static str> {
        Some(match self {
            MysqlLock => "MariaDB",
            RedisLock => "Redis",
            RedisLockCluster => "Redis Cluster",
            Redlock5 => "5 Redis",
            ZooKeeper => "ZooKeeper",
            Etcd => "etcd",
            _ => return None,
        })
    }

    /// criterion's id (and directory) for the row.
    fn id(self) -> String {
        self.name()
            .replace(": ", "-")
            .replace([' ', '+', ':'], "-")
            .replace(['(', ')'], "")
    }
}

/// A Lua script that does nothing: the cost of one `EVALSHA` round trip, the floor of
/// any Lua lock (which needs one to lock and one to unlock).
static NOOP: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new("return 1"));

/// Connections to the servers, and every lock under test.
struct Subjects {
    db: MySqlPool,
    redis: redis::aio::MultiplexedConnection,
    zk: zk::Client,
    zk_connect: String,
    mysql_lock: Locker,
    redis_lock: Locker,
    redis_lock_replica: Locker,
    redis_lock_wait: Locker,
    redis_lock_cluster: Locker,
    redis_lock_cluster_wait: Locker,
    redlock: Locker,
    zookeeper: Locker,
    etcd: Locker,
    etcd_client: etcd_client::Client,
    rslock5: rslock::LockManager,
    rslock1: rslock::LockManager,
    options: LockOptions,
}

const ZK_ROOT: &str = "/bench";
const LEASE: Duration = Duration::from_secs(10);

impl Subjects {
    /// `primary` has a replica in sync (the WAIT rows); `cluster`, a Redis Cluster.
    async fn connect(
        stack: &Stack,
        primary: &testbed::Redis,
        cluster: &testbed::RedisCluster,
    ) -> Subjects {
        let env: BTreeMap<&str, String> = stack.env().into_iter().collect();
        let db_url = &env["DATABASE_URL"];
        let redis_urls: Vec<String> = env["REDIS_URLS"].split(',').map(String::from).collect();
        let zk_connect = env["ZK_CONNECT"].clone();
        let etcd_endpoints: Vec<String> =
            env["ETCD_ENDPOINTS"].split(',').map(String::from).collect();

        let db = MySqlPool::connect(db_url).await.expect("MariaDB");
        sqlx::migrate!("../migrations")
            .run(&db)
            .await
            .expect("migrations");
        sqlx::query(
            "INSERT INTO stock (product_id, quantity, initial_quantity) VALUES (1, 1000, 1000)",
        )
        .execute(&db)
        .await
        .unwrap();
        let redis = redis::Client::open(redis_urls[0].as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("Redis");
        let zk = zk::Client::connect(&zk_connect).await.expect("ZooKeeper");
        zk.mkdir(
            &format!("{ZK_ROOT}/floor"),
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();

        Subjects {
            mysql_lock: Locker::new(MysqlLock::connect(db_url, 16).await.unwrap()),
            redis_lock: Locker::new(RedisLock::connect(&redis_urls[0]).await.unwrap()),
            redis_lock_replica: Locker::new(RedisLock::connect(&primary.url()).await.unwrap()),
            redis_lock_wait: Locker::new(
                RedisLock::connect(&primary.url())
                    .await
                    .unwrap()
                    .with_min_replicas(1, Duration::from_secs(1)),
            ),
            redis_lock_cluster: Locker::new(
                RedisLock::connect_cluster(&cluster.urls()).await.unwrap(),
            ),
            redis_lock_cluster_wait: Locker::new(
                RedisLock::connect_cluster(&cluster.urls())
                    .await
                    .unwrap()
                    .with_min_replicas(1, Duration::from_secs(1)),
            ),
            redlock: Locker::new(RedLock::new(&redis_urls).unwrap()),
            zookeeper: Locker::new(
                ZooKeeperLock::connect(&zk_connect, ZK_ROOT, Duration::from_secs(6))
                    .await
                    .unwrap(),
            ),
            etcd: Locker::new(
                EtcdLock::connect(&etcd_endpoints, "/bench/ours/")
                    .await
                    .unwrap(),
            ),
            etcd_client: etcd_client::Client::connect(&etcd_endpoints, None)
                .await
                .expect("etcd"),
            rslock5: rslock::LockManager::new(redis_urls.clone()),
            rslock1: rslock::LockManager::new(vec![redis_urls[0].clone()]),
            options: LockOptions {
                lease: LEASE,
                ..LockOptions::default()
            },
            db,
            redis,
            zk,
            zk_connect,
        }
    }

    /// One acquire + release of `row` on `key` by `holder` (floors: one operation).
    /// Returns when the lock was acquired (for the FIFO count), or an error.
    async fn cycle(&self, row: Row, key: &str, holder: &HolderId) -> Result<Instant, String> {
        let wait = Duration::from_secs(30);
        let ours = |locker: &Locker| {
            let locker = locker.clone();
            async move {
                let guard = locker
                    .acquire(key, holder, &self.options, wait)
                    .await
                    .map_err(|e| e.to_string())?;
                let acquired = Instant::now();
                guard.release().await.map_err(|e| e.to_string())?;
                Ok(acquired)
            }
        };
        let rslock = |manager: &rslock::LockManager| {
            let manager = manager.clone();
            async move {
                // `lock` tries 3 times with a random pause of up to 200 ms (the crate's
                // defaults), then gives up; a waiting caller tries again.
                let lock = loop {
                    match manager.lock(key.as_bytes(), LEASE).await {
                        Ok(lock) => break lock,
                        Err(rslock::LockError::Unavailable) => continue,
                        Err(e) => return Err(e.to_string()),
                    }
                };
                let acquired = Instant::now();
                manager.unlock(&lock).await;
                Ok(acquired)
            }
        };
        match row {
            RedisPing | RedisNoopScript | ZkCreateDelete | EtcdPutDelete | MariadbUpdate
            | MariadbForUpdateTx => self.floor(row, key).await,
            MysqlLock => ours(&self.mysql_lock).await,
            RedisLock => ours(&self.redis_lock).await,
            RedisLockReplica => ours(&self.redis_lock_replica).await,
            RedisLockWait => ours(&self.redis_lock_wait).await,
            RedisLockCluster => ours(&self.redis_lock_cluster).await,
            RedisLockClusterWait => ours(&self.redis_lock_cluster_wait).await,
            Redlock5 => ours(&self.redlock).await,
            ZooKeeper => ours(&self.zookeeper).await,
            Etcd => ours(&self.etcd).await,
            Rslock5 => rslock(&self.rslock5).await,
            Rslock1 => rslock(&self.rslock1).await,
            ZkClientLock => {
                let dir = format!("{ZK_ROOT}/peer/{key}");
                let prefix = zk::LockPrefix::new_curator(&dir, "lock-").unwrap();
                let options = zk::LockOptions::new(zk::Acls::anyone_all())
                    .with_ancestor_options(
                        zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
                    )
                    .unwrap();
                let lock = self
                    .zk
                    .lock(prefix, b"", options)
                    .await
                    .map_err(|e| e.to_string())?;
                let acquired = Instant::now();
                // The crate releases in `Drop`, in the background. Delete in the
                // foreground instead, so the release is inside the measured time, then
                // skip the guard's own (now redundant) background delete.
                self.zk
                    .delete(lock.lock_path(), None)
                    .await
                    .map_err(|e| e.to_string())?;
                std::mem::forget(lock);
                Ok(acquired)
            }
            EtcdClientLock => {
                // As the crate's example does it: a lease, the Lock RPC with it (the
                // server queues the caller and answers once it holds the lock), unlock,
                // and the lease revoked (one lease per acquisition, as ours).
                let mut etcd = self.etcd_client.clone();
                let lease = etcd.lease_grant(LEASE.as_secs() as i64, None).await;
                let lease = lease.map_err(|e| e.to_string())?.id();
                let options = etcd_client::LockOptions::new().with_lease(lease);
                let name = format!("/bench/peer/{key}");
                let lock = etcd.lock(name, Some(options)).await;
                let lock = lock.map_err(|e| e.to_string())?;
                let acquired = Instant::now();
                etcd.unlock(lock.key()).await.map_err(|e| e.to_string())?;
                etcd.lease_revoke(lease).await.map_err(|e| e.to_string())?;
                Ok(acquired)
            }
            Curator => unreachable!("the Curator rows are measured by the Java harness"),
        }
    }

    /// One operation of a floor `row` on `key` (or, for scale, the `FOR UPDATE`
    /// transaction): what any lock on that server costs at least. Returns when it was
    /// done, or an error.
    async fn floor(&self, row: Row, key: &str) -> Result<Instant, String> {
        match row {
            RedisPing => {
                let _: String = redis::cmd("PING")
                    .query_async(&mut self.redis.clone())
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Instant::now())
            }
            RedisNoopScript => {
                let _: i64 = NOOP
                    .key(key)
                    .invoke_async(&mut self.redis.clone())
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Instant::now())
            }
            ZkCreateDelete => {
                let path = format!("{ZK_ROOT}/floor/{key}");
                let mode = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
                self.zk
                    .create(&path, b"", &mode)
                    .await
                    .map_err(|e| e.to_string())?;
                self.zk
                    .delete(&path, None)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Instant::now())
            }
            EtcdPutDelete => {
                let mut etcd = self.etcd_client.clone();
                let key = format!("/bench/floor/{key}");
                etcd.put(key.as_str(), "", None)
                    .await
                    .map_err(|e| e.to_string())?;
                etcd.delete(key, None).await.map_err(|e| e.to_string())?;
                Ok(Instant::now())
            }
            MariadbUpdate => {
                sqlx::query("UPDATE stock SET version = version + 1 WHERE product_id = 1")
                    .execute(&self.db)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Instant::now())
            }
            MariadbForUpdateTx => {
                let mut tx = self.db.begin().await.map_err(|e| e.to_string())?;
                sqlx::query("SELECT quantity FROM stock WHERE product_id = 1 FOR UPDATE")
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(|e| e.to_string())?;
                sqlx::query("UPDATE stock SET version = version + 1 WHERE product_id = 1")
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| e.to_string())?;
                tx.commit().await.map_err(|e| e.to_string())?;
                Ok(Instant::now())
            }
            _ => unreachable!("{} is not a floor", row.name()),
        }
    }
}

/// What the command line asks for: a row filter and criterion's `--test` mode.
struct Args {
    filter: Option<String>,
    test_mode: bool,
}

impl Args {
    fn parse() -> Args {
        // Options of criterion's that take a value: their value is not a filter.
        const VALUED: [&str; 12] = [
            "--save-baseline",
            "--baseline",
            "--baseline-lenient",
            "--load-baseline",
            "--measurement-time",
            "--warm-up-time",
            "--sample-size",
            "--profile-time",
            "--color",
            "--output-format",
            "--plotting-backend",
            "--noise-threshold",
        ];
        let args: Vec<String> = std::env::args().skip(1).collect();
        let filter = args
            .iter()
            .enumerate()
            .find(|(i, a)| {
                !a.starts_with('-') && (*i == 0 || !VALUED.contains(&args[i - 1].as_str()))
            })
            .map(|(_, a)| a.clone());
        Args {
            filter,
            test_mode: args.iter().any(|a| a == "--test"),
        }
    }

    fn wants(&self, what: &str) -> bool {
        self.filter.as_deref().is_none_or(|f| what.contains(f))
    }
}

/// Where criterion writes (and this bench reads back) its estimates.
fn criterion_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join("criterion"),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the workspace")
            .join("target/criterion"),
    }
}

/// The median of criterion's samples for `row`, in µs, from its `estimates.json`.
fn criterion_median_us(dir: &Path, row: Row) -> Option<f64> {
    let path = dir
        .join("uncontended")
        .join(row.id())
        .join("new/estimates.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    Some(json["median"]["point_estimate"].as_f64()? / 1000.0)
}

/// One acquisition in a contended run: which task, when it asked, when it got it.
#[derive(Debug, Clone, Copy)]
struct Sample {
    task: usize,
    requested: Duration,
    acquired: Duration,
}

/// A contended run's figures.
struct Contended {
    per_second: f64,
    per_task: Vec<usize>,
    jain: f64,
    overtakes: f64,
    /// The longest any acquisition waited, in ms.
    longest_wait_ms: f64,
    /// Acquisitions per second and overtakes per acquisition in each fifth of the
    /// window: their median and range.
    per_second_spread: Option<Spread>,
    overtakes_spread: Option<Spread>,
    errors: usize,
    first_error: Option<String>,
}

/// How many parts a window is cut into for a figure's spread.
const PARTS: u32 = 5;

/// A figure measured in each part of a window: the median and the range of the parts.
#[derive(Debug, Clone, Copy, Default)]
struct Spread {
    median: f64,
    low: f64,
    high: f64,
}

impl Spread {
    /// The spread of the parts that have a figure (`None` if none has: no data is not
    /// a zero).
    fn of(mut values: Vec<f64>) -> Option<Spread> {
        values.retain(|v| v.is_finite());
        values.sort_by(f64::total_cmp);
        Some(Spread {
            median: values.get(values.len() / 2).copied()?,
            low: *values.first()?,
            high: *values.last()?,
        })
    }

    fn json(spread: Option<Spread>) -> serde_json::Value {
        spread.map_or(
            serde_json::Value::Null,
            |s| serde_json::json!({ "median": s.median, "low": s.low, "high": s.high }),
        )
    }

    /// `median (low–high)`, with `digits` decimals (`–` without data).
    fn text(spread: Option<Spread>, digits: usize) -> String {
        spread.map_or("–".into(), |s| {
            format!(
                "{:.digits$} ({:.digits$}–{:.digits$})",
                s.median, s.low, s.high
            )
        })
    }
}

/// The samples acquired in each of [`PARTS`] equal parts of `window`.
fn parts(samples: &[Sample], window: Duration) -> Vec<(Duration, Vec<Sample>)> {
    let part = window / PARTS;
    (0..PARTS)
        .map(|i| {
            let (from, to) = (part * i, part * (i + 1));
            let inside = samples
                .iter()
                .copied()
                .filter(|s| s.acquired >= from && s.acquired < to)
                .collect();
            (part, inside)
        })
        .collect()
}

impl Contended {
    fn from_samples(
        samples: &[Sample],
        tasks: usize,
        window: Duration,
        errors: Vec<String>,
    ) -> Contended {
        let counted: Vec<Sample> = samples
            .iter()
            .copied()
            .filter(|s| s.acquired < window)
            .collect();
        let mut per_task = vec![0usize; tasks];
        for s in &counted {
            per_task[s.task] += 1;
        }
        let sum: f64 = per_task.iter().map(|&n| n as f64).sum();
        let squares: f64 = per_task.iter().map(|&n| (n as f64).powi(2)).sum();
        let fifths = parts(&counted, window);
        Contended {
            longest_wait_ms: counted
                .iter()
                .map(|s| (s.acquired - s.requested).as_secs_f64() * 1e3)
                .fold(0.0, f64::max),
            per_second_spread: Spread::of(
                fifths
                    .iter()
                    .map(|(part, s)| s.len() as f64 / part.as_secs_f64())
                    .collect(),
            ),
            overtakes_spread: Spread::of(
                fifths
                    .iter()
                    .map(|(_, s)| overtakes(s) as f64 / s.len().max(1) as f64)
                    .collect(),
            ),
            per_second: counted.len() as f64 / window.as_secs_f64(),
            jain: if squares > 0.0 {
                sum * sum / (tasks as f64 * squares)
            } else {
                0.0
            },
            overtakes: overtakes(&counted) as f64 / counted.len().max(1) as f64,
            per_task,
            errors: errors.len(),
            first_error: errors.into_iter().next(),
        }
    }
}

/// FIFO violations: pairs of acquisitions where the one that asked later got the lock
/// earlier. Counted as inversions (sort by acquisition time, count pairs out of
/// request order) by merge sort, O(n log n).
fn overtakes(samples: &[Sample]) -> u64 {
    let mut by_acquired: Vec<Sample> = samples.to_vec();
    by_acquired.sort_by_key(|s| s.acquired);
    let mut requested: Vec<Duration> = by_acquired.iter().map(|s| s.requested).collect();
    fn sort_count(v: &mut [Duration]) -> u64 {
        let n = v.len();
        if n < 2 {
            return 0;
        }
        let (left, right) = v.split_at_mut(n / 2);
        let mut count = sort_count(left) + sort_count(right);
        let mut merged = Vec::with_capacity(n);
        let (mut i, mut j) = (0, 0);
        while i < left.len() && j < right.len() {
            if right[j] < left[i] {
                // right[j] asked before every remaining left element, yet was served after them.
                count += (left.len() - i) as u64;
                merged.push(right[j]);
                j += 1;
            } else {
                merged.push(left[i]);
                i += 1;
            }
        }
        merged.extend_from_slice(&left[i..]);
        merged.extend_from_slice(&right[j..]);
        v.copy_from_slice(&merged);
        count
    }
    sort_count(&mut requested)
}

/// 16 tasks (each its own holder) acquire and release `row` on one key in a loop for
/// `window`, after a warm-up; the locks are all in this process, sharing its
/// connections, as the service's requests do.
async fn contend(
    subjects: &Arc<Subjects>,
    row: Row,
    tasks: usize,
    warmup: Duration,
    window: Duration,
) -> Contended {
    let key = format!("contended-{}", row.id());
    let start = Instant::now() + warmup;
    let end = start + window;
    let mut handles = Vec::new();
    for task in 0..tasks {
        let subjects = subjects.clone();
        let key = key.clone();
        handles.push(tokio::spawn(async move {
            let holder = HolderId::random();
            let mut samples = Vec::new();
            let mut errors = Vec::new();
            loop {
                let requested = Instant::now();
                if requested >= end {
                    break;
                }
                match subjects.cycle(row, &key, &holder).await {
                    Ok(acquired) if requested >= start => samples.push(Sample {
                        task,
                        requested: requested - start,
                        acquired: acquired - start,
                    }),
                    Ok(_) => {}
                    Err(e) => errors.push(e),
                }
            }
            (samples, errors)
        }));
    }
    let mut samples = Vec::new();
    let mut errors = Vec::new();
    for handle in handles {
        let (s, e) = handle.await.unwrap();
        samples.extend(s);
        errors.extend(e);
    }
    Contended::from_samples(&samples, tasks, window, errors)
}

/// The concurrency levels of the steadiness sweep.
const LEVELS: [usize; 5] = [1, 4, 16, 64, 256];

/// One level of the steadiness sweep: acquire + release latency and throughput, each
/// per part of the window ([`PARTS`]).
struct Steady {
    tasks: usize,
    per_second: Option<Spread>,
    p50_us: Option<Spread>,
    p99_us: Option<Spread>,
    /// p99 / p50 in each part.
    ratio: Option<Spread>,
    errors: usize,
    first_error: Option<String>,
}

/// The `q` quantile of sorted `values` (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n => sorted[((n - 1) as f64 * q).round() as usize],
    }
}

/// `tasks` tasks, each acquiring and releasing a key of its own in a loop for
/// `window` after `warmup`: nobody waits for anybody, so what grows with the tasks is
/// the load on the server and on this process's connections. Each acquisition counts
/// in the part in which it was asked for (one that ends after the window still
/// counts: leaving out the slowest would flatter the last part's p99).
async fn steadiness(
    subjects: &Arc<Subjects>,
    row: Row,
    tasks: usize,
    warmup: Duration,
    window: Duration,
) -> Steady {
    let start = Instant::now() + warmup;
    let end = start + window;
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let subjects = subjects.clone();
            let key = format!("steady-{}-{task}", row.id());
            tokio::spawn(async move {
                let holder = HolderId::random();
                let (mut latencies, mut errors) = (Vec::new(), Vec::new());
                loop {
                    let requested = Instant::now();
                    if requested >= end {
                        break;
                    }
                    match subjects.cycle(row, &key, &holder).await {
                        Ok(_) if requested >= start => {
                            latencies.push((requested - start, requested.elapsed()));
                        }
                        Ok(_) => {}
                        Err(e) => errors.push(e),
                    }
                }
                (latencies, errors)
            })
        })
        .collect();
    let (mut latencies, mut errors) = (Vec::new(), Vec::new());
    for handle in handles {
        let (l, e) = handle.await.unwrap();
        latencies.extend(l);
        errors.extend(e);
    }
    let part = window / PARTS;
    let (mut per_second, mut p50, mut p99, mut ratio) = (vec![], vec![], vec![], vec![]);
    for i in 0..PARTS {
        let mut inside: Vec<f64> = latencies
            .iter()
            .filter(|(at, _)| *at >= part * i && *at < part * (i + 1))
            .map(|(_, d)| d.as_secs_f64() * 1e6)
            .collect();
        inside.sort_by(f64::total_cmp);
        per_second.push(inside.len() as f64 / part.as_secs_f64());
        // A part with no acquisition has no latency (NaN, left out of the spread).
        let (a, b) = (quantile(&inside, 0.5), quantile(&inside, 0.99));
        p50.push(a);
        p99.push(b);
        ratio.push(b / a);
    }
    Steady {
        tasks,
        per_second: Spread::of(per_second),
        p50_us: Spread::of(p50),
        p99_us: Spread::of(p99),
        ratio: Spread::of(ratio),
        errors: errors.len(),
        first_error: errors.into_iter().next(),
    }
}

/// Apache Curator, through `benches/CuratorBench.java`: compiled into the target
/// directory and run with Debian's jars against the same ZooKeeper.
struct CuratorHarness {
    classpath: String,
}

impl CuratorHarness {
    fn build() -> Result<CuratorHarness, String> {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/CuratorBench.java");
        let classes = criterion_dir().join("curator-classes");
        let classpath = testbed::curator::compile(&source, &classes).map_err(|e| e.to_string())?;
        Ok(CuratorHarness { classpath })
    }

    /// Runs `tasks` threads for `window` after `warmup`; returns the samples.
    fn run(
        &self,
        connect: &str,
        path: &str,
        tasks: usize,
        warmup: Duration,
        window: Duration,
    ) -> Result<Vec<(Sample, Duration)>, String> {
        let output = Command::new("java")
            .args([
                "-Xms64m",
                "-Xmx256m",
                "-cp",
                &self.classpath,
                "CuratorBench",
                connect,
                path,
            ])
            .arg(tasks.to_string())
            .arg(warmup.as_millis().to_string())
            .arg(window.as_millis().to_string())
            .output()
            .map_err(|e| format!("java: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "CuratorBench failed: {}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let text = String::from_utf8_lossy(&output.stdout);
        let mut samples = Vec::new();
        for line in text.lines() {
            let f: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
            let sample = Sample {
                task: f[0] as usize,
                requested: Duration::from_nanos(f[1]),
                acquired: Duration::from_nanos(f[2]),
            };
            samples.push((sample, Duration::from_nanos(f[3] - f[1])));
        }
        Ok(samples)
    }
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[values.len() / 2])
}

/// The goals: `row` ≤ `limit` × `base` (medians of one run).
const GOALS: [(Row, Row, f64, &str); 7] = [
    (
        RedisLock,
        RedisNoopScript,
        2.5,
        "two round trips are the floor",
    ),
    (
        Redlock5,
        RedisLock,
        1.8,
        "five nodes, fanned out concurrently",
    ),
    (
        Redlock5,
        Rslock5,
        1.0,
        "not slower than the peer on the same 5",
    ),
    (ZooKeeper, ZkClientLock, 1.1, "the crate's own recipe"),
    (Etcd, EtcdPutDelete, 2.5, "four round trips against two"),
    (Etcd, EtcdClientLock, 1.1, "the crate's own lock + lease"),
    (MysqlLock, MariadbUpdate, 3.5, "a lock is a few statements"),
];

fn main() {
    let args = Args::parse();
    // The servers are children of this thread (they die with it): start them here,
    // on the main thread, which lives until the end.
    let stack =
        Stack::start(&StackConfig::default()).expect("testbed: start MariaDB, 5 Redis, ZooKeeper");
    // A Redis Cluster (three masters, three replicas) for the cluster rows.
    let cluster =
        testbed::RedisCluster::start("bench-cluster", 6).expect("testbed: start a Redis Cluster");
    // A primary with one replica, replicating directly (no proxy), for the WAIT rows.
    let primary = testbed::Redis::start("bench-primary").expect("testbed: start a Redis primary");
    let replica = testbed::Redis::start_replica_of("bench-replica", primary.port())
        .expect("testbed: start a Redis replica");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let subjects = Arc::new(runtime.block_on(Subjects::connect(&stack, &primary, &cluster)));
    let dir = criterion_dir();
    let (warm_up, measure, contended_window, contended_warmup) = if args.test_mode {
        (
            Duration::from_millis(100),
            Duration::from_millis(300),
            Duration::from_millis(300),
            Duration::from_millis(100),
        )
    } else {
        (
            Duration::from_secs(1),
            Duration::from_secs(4),
            Duration::from_secs(5),
            Duration::from_secs(1),
        )
    };

    // 1. Uncontended, one client: criterion.
    let mut criterion = Criterion::default()
        .output_directory(&dir)
        .warm_up_time(warm_up)
        .measurement_time(measure)
        .sample_size(50)
        .configure_from_args();
    let ran = uncontended_rows(&mut criterion, &runtime, &subjects, &args);

    // 2. Curator, uncontended and contended, by its harness in this same run.
    let mut medians: BTreeMap<Row, f64> = ran
        .iter()
        .filter_map(|&row| criterion_median_us(&dir, row).map(|m| (row, m)))
        .collect();
    let mut contended: BTreeMap<Row, Contended> = BTreeMap::new();
    let mut notes = Vec::new();
    if args.wants(&Curator.id()) {
        curator_rows(
            args.test_mode,
            &subjects.zk_connect,
            measure,
            contended_window,
            &mut medians,
            &mut contended,
            &mut notes,
        );
    }

    // 3. Contended: 16 tasks, one key, empty critical section.
    contended.extend(contended_rows(
        &runtime,
        &subjects,
        &args,
        contended_warmup,
        contended_window,
    ));

    // 4. Steadiness: 1 to 256 tasks, a key each.
    let steady_window = contended_window;
    let steady = steadiness_rows(&runtime, &subjects, &args, contended_warmup, steady_window);

    // 5. The summary.
    let summary = summary(&medians, &contended, &steady, &notes, contended_window);
    println!("\n{summary}");
    let path = dir.join("locks-summary.md");
    if std::fs::write(&path, &summary).is_ok() {
        println!("(also in {})", path.display());
    }
    // The same figures as data, for the book (`scripts/book-data` copies it).
    let path = dir.join("locks-summary.json");
    if std::fs::write(
        &path,
        summary_json(
            &medians,
            &contended,
            &steady,
            &notes,
            (contended_window, steady_window),
            &stack.durability(),
        ),
    )
    .is_ok()
    {
        println!("(and as data in {})", path.display());
    }
    criterion.final_summary();
    drop(subjects);
    runtime.shutdown_timeout(Duration::from_secs(2));
    drop((replica, primary, cluster));
    drop(stack);
}

/// The uncontended rows `args` wants, one after the other, each measured by
/// `criterion` (group `uncontended`) on `runtime`. Returns the rows run.
fn uncontended_rows(
    criterion: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    subjects: &Arc<Subjects>,
    args: &Args,
) -> Vec<Row> {
    let mut ran = Vec::new();
    let mut group = criterion.benchmark_group("uncontended");
    // Every iteration takes about as long as the next (a round trip or a few):
    // flat sampling keeps the slow rows (ZooKeeper, ~2 ms) inside the time budget.
    group.sampling_mode(SamplingMode::Flat);
    for row in Row::UNCONTENDED {
        if !args.wants(&row.id()) {
            continue;
        }
        ran.push(row);
        let holder = HolderId::random();
        let key = format!("uncontended-{}", row.id());
        let subjects = subjects.clone();
        group.bench_function(row.id(), |b| {
            b.to_async(runtime).iter(|| async {
                subjects.cycle(row, &key, &holder).await.unwrap();
            })
        });
    }
    group.finish();
    ran
}

/// Apache Curator's rows, by its harness: the uncontended median into `medians`
/// (printed as it comes), the contended run's figures into `contended`, what failed
/// into `notes`.
fn curator_rows(
    test_mode: bool,
    zk_connect: &str,
    measure: Duration,
    contended_window: Duration,
    medians: &mut BTreeMap<Row, f64>,
    contended: &mut BTreeMap<Row, Contended>,
    notes: &mut Vec<String>,
) {
    match CuratorHarness::build() {
        Ok(harness) => {
            let warm = if test_mode {
                Duration::from_millis(200)
            } else {
                Duration::from_secs(2)
            };
            match harness.run(zk_connect, "/bench/curator/uncontended", 1, warm, measure) {
                Ok(samples) => {
                    let us: Vec<f64> = samples.iter().map(|(_, d)| d.as_secs_f64() * 1e6).collect();
                    if let Some(m) = median(us) {
                        println!(
                            "{:<48} median {m:>9.1} µs over {} cycles (Java harness)",
                            Curator.id(),
                            samples.len()
                        );
                        medians.insert(Curator, m);
                    }
                }
                Err(e) => notes.push(format!("Curator uncontended: {e}")),
            }
            match harness.run(
                zk_connect,
                "/bench/curator/contended",
                16,
                warm,
                contended_window,
            ) {
                Ok(samples) => {
                    let samples: Vec<Sample> = samples.into_iter().map(|(s, _)| s).collect();
                    contended.insert(
                        Curator,
                        Contended::from_samples(&samples, 16, contended_window, Vec::new()),
                    );
                }
                Err(e) => notes.push(format!("Curator contended: {e}")),
            }
        }
        Err(e) => notes.push(format!("Curator skipped: {e}")),
    }
}

/// The contended rows `args` wants but Curator's (its harness ran them), each run by
/// [`contend`] with 16 tasks on `runtime`, after `warmup`, for `window`.
fn contended_rows(
    runtime: &tokio::runtime::Runtime,
    subjects: &Arc<Subjects>,
    args: &Args,
    warmup: Duration,
    window: Duration,
) -> BTreeMap<Row, Contended> {
    let mut contended = BTreeMap::new();
    for row in Row::LOCKS {
        if row == Curator || !args.wants(&row.id()) {
            continue;
        }
        let figures = runtime.block_on(contend(subjects, row, 16, warmup, window));
        contended.insert(row, figures);
    }
    contended
}

/// The steadiness sweep of the rows `args` wants: each at every level of [`LEVELS`]
/// tasks, a key each, on `runtime`, after `warmup`, for `window`; each level printed as
/// it comes.
fn steadiness_rows(
    runtime: &tokio::runtime::Runtime,
    subjects: &Arc<Subjects>,
    args: &Args,
    warmup: Duration,
    window: Duration,
) -> BTreeMap<Row, Vec<Steady>> {
    let mut steady: BTreeMap<Row, Vec<Steady>> = BTreeMap::new();
    for row in Row::STEADINESS {
        if !args.wants(&row.id()) {
            continue;
        }
        for tasks in LEVELS {
            let level = runtime.block_on(steadiness(subjects, row, tasks, warmup, window));
            println!(
                "{:<48} {tasks:>3} tasks: p99/p50 {}, {}/s",
                row.id(),
                Spread::text(level.ratio, 2),
                Spread::text(level.per_second, 0)
            );
            steady.entry(row).or_default().push(level);
        }
    }
    steady
}

/// The summary's figures as JSON: each row's uncontended median (µs) and, for the
/// locks, the contended run's figures.
fn summary_json(
    medians: &BTreeMap<Row, f64>,
    contended: &BTreeMap<Row, Contended>,
    steady: &BTreeMap<Row, Vec<Steady>>,
    notes: &[String],
    (window, steady_window): (Duration, Duration),
    durability: &BTreeMap<String, String>,
) -> String {
    let uncontended: Vec<serde_json::Value> = medians
        .iter()
        .map(|(row, m)| serde_json::json!({ "row": row.name(), "median_us": m }))
        .collect();
    let contended: Vec<serde_json::Value> = contended
        .iter()
        .map(|(row, c)| {
            serde_json::json!({
                "row": row.name(),
                "server": row.server(),
                "tasks": c.per_task.len(),
                "per_second": c.per_second,
                "per_task_min": c.per_task.iter().min(),
                "per_task_max": c.per_task.iter().max(),
                "jain": c.jain,
                "overtakes_per_acquisition": c.overtakes,
                "overtakes_spread": Spread::json(c.overtakes_spread),
                "per_second_spread": Spread::json(c.per_second_spread),
                "longest_wait_ms": c.longest_wait_ms,
                "errors": c.errors,
                "first_error": c.first_error,
            })
        })
        .collect();
    let steadiness: Vec<serde_json::Value> = steady
        .iter()
        .map(|(row, levels)| {
            let levels: Vec<serde_json::Value> = levels
                .iter()
                .map(|l| {
                    serde_json::json!({
                        "tasks": l.tasks,
                        "per_second": Spread::json(l.per_second),
                        "p50_us": Spread::json(l.p50_us),
                        "p99_us": Spread::json(l.p99_us),
                        "p99_over_p50": Spread::json(l.ratio),
                        "errors": l.errors,
                        "first_error": l.first_error,
                    })
                })
                .collect();
            serde_json::json!({ "row": row.name(), "server": row.server(), "levels": levels })
        })
        .collect();
    let json = serde_json::json!({
        // The run it is part of (the book's reference run names it), and the setup its
        // comparisons ran on.
        "run": std::env::var("STOCK_LOCKS_RUN").ok().filter(|r| !r.is_empty()),
        "machine": {
            "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
            "durability": durability,
        },
        "uncontended": uncontended,
        "contended_seconds": window.as_secs_f64(),
        "contended": contended,
        "parts": PARTS,
        "steadiness_seconds": steady_window.as_secs_f64(),
        "steadiness": steadiness,
        "notes": notes,
    });
    serde_json::to_string_pretty(&json).expect("plain JSON")
}

fn summary(
    medians: &BTreeMap<Row, f64>,
    contended: &BTreeMap<Row, Contended>,
    steady: &BTreeMap<Row, Vec<Steady>>,
    notes: &[String],
    window: Duration,
) -> String {
    let mut out = String::new();
    uncontended_section(&mut out, medians);
    goals_section(&mut out, medians, contended);
    contended_section(&mut out, contended, window);
    if !steady.is_empty() {
        steadiness_section(&mut out, steady);
    }
    for note in notes {
        let _ = writeln!(out, "\nnote: {note}");
    }
    out
}

/// The summary's uncontended table: each row's median, and its ratio to its server's
/// floor; then what `WAIT` for a replica costs, alone and on the cluster.
fn uncontended_section(out: &mut String, medians: &BTreeMap<Row, f64>) {
    let floor_of = |row: Row| -> Option<(Row, f64)> {
        let base = match row {
            MysqlLock | MariadbForUpdateTx => MariadbUpdate,
            RedisLock | RedisLockReplica | RedisLockWait | RedisLockCluster
            | RedisLockClusterWait | Redlock5 | Rslock5 | Rslock1 => RedisNoopScript,
            ZooKeeper | ZkClientLock | Curator => ZkCreateDelete,
            Etcd | EtcdClientLock => EtcdPutDelete,
            _ => return None,
        };
        Some((base, medians.get(&row)? / medians.get(&base)?))
    };
    let _ = writeln!(
        out,
        "### Uncontended acquire + release (one client, median)\n"
    );
    let _ = writeln!(out, "| row | median µs | × its floor |\n|---|---:|---:|");
    for (row, m) in medians {
        let ratio = floor_of(*row)
            .map(|(base, r)| format!("{r:.2}× {}", short(base)))
            .unwrap_or_default();
        let _ = writeln!(out, "| {} | {m:.0} | {ratio} |", row.name());
    }
    if let (Some(wait), Some(plain)) = (medians.get(&RedisLockWait), medians.get(&RedisLockReplica))
    {
        let _ = writeln!(
            out,
            "\nWAIT for the replica (the failover mitigation): {:.0} µs more per acquire + release, {:.2}× the same lock without it.",
            wait - plain,
            wait / plain
        );
    }
    let cluster = (
        medians.get(&RedisLockClusterWait),
        medians.get(&RedisLockCluster),
    );
    if let (Some(wait), Some(plain)) = cluster {
        let _ = writeln!(
            out,
            "On the Redis Cluster (WAIT sent to the master of the lock's slot): {:.0} µs more, {:.2}× the cluster's lock without it.",
            wait - plain,
            wait / plain
        );
    }
}

/// The summary's goals: the ratios of medians against the limits, and our
/// ZooKeeper lock contended against the peer's `Client::lock`.
fn goals_section(
    out: &mut String,
    medians: &BTreeMap<Row, f64>,
    contended: &BTreeMap<Row, Contended>,
) {
    let _ = writeln!(out, "\n### Goals (ratios of medians from this run)\n");
    let _ = writeln!(out, "| goal | ratio | limit | |\n|---|---:|---:|---|");
    for (row, base, limit, why) in GOALS {
        let (Some(a), Some(b)) = (medians.get(&row), medians.get(&base)) else {
            continue;
        };
        let ratio = a / b;
        let verdict = if ratio <= limit { "met" } else { "**missed**" };
        let _ = writeln!(
            out,
            "| {} / {} ({why}) | {ratio:.2} | {limit} | {verdict} |",
            short(row),
            short(base)
        );
    }
    if let (Some(ours), Some(peer)) = (contended.get(&ZooKeeper), contended.get(&ZkClientLock)) {
        let verdict = if ours.per_second >= peer.per_second && ours.overtakes < 0.05 {
            "met"
        } else {
            "**missed**"
        };
        let _ = writeln!(
            out,
            "| zookeeper contended ≥ Client::lock, FIFO | {:.0}/s vs {:.0}/s, {:.3} overtakes | ≥ 1.0, ~0 | {verdict} |",
            ours.per_second, peer.per_second, ours.overtakes
        );
    }
}

/// The summary's contended table: 16 tasks on one key for `window`, a line per lock.
fn contended_section(out: &mut String, contended: &BTreeMap<Row, Contended>, window: Duration) {
    let _ = writeln!(
        out,
        "\n### Contended: 16 tasks, one key, {} s, empty critical section\n",
        window.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "| lock | acquisitions/s | per task min–max | Jain | FIFO overtakes / acq (per fifth) | longest wait ms | errors |\n|---|---:|---:|---:|---:|---:|---:|"
    );
    for (row, c) in contended {
        let min = c.per_task.iter().min().copied().unwrap_or(0);
        let max = c.per_task.iter().max().copied().unwrap_or(0);
        let errors = match &c.first_error {
            Some(e) => format!("{} ({e})", c.errors),
            None => c.errors.to_string(),
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} | {min}–{max} | {:.2} | {:.2} ({}) | {:.1} | {errors} |",
            row.name(),
            c.per_second,
            c.jain,
            c.overtakes,
            Spread::text(c.overtakes_spread, 2),
            c.longest_wait_ms
        );
    }
}

/// The summary's steadiness tables: p99 / p50 and acquisitions per second, a line per
/// lock service, a column per level of tasks.
fn steadiness_section(out: &mut String, steady: &BTreeMap<Row, Vec<Steady>>) {
    let header: Vec<String> = LEVELS
        .iter()
        .map(|&t| format!("{t} task{}", if t == 1 { "" } else { "s" }))
        .collect();
    for (title, figure) in [
        ("p99 / p50 of acquire + release", 0),
        ("acquisitions per second", 1),
    ] {
        let _ = writeln!(
            out,
            "\n### Steadiness: {title}, a key per task, median (range) of {PARTS} parts\n"
        );
        let _ = writeln!(
            out,
            "| lock | {} |\n|---|{}",
            header.join(" | "),
            "---:|".repeat(LEVELS.len())
        );
        for (row, levels) in steady {
            let cells: Vec<String> = levels
                .iter()
                .map(|l| match figure {
                    0 => Spread::text(l.ratio, 2),
                    _ => Spread::text(l.per_second, 0),
                })
                .collect();
            let _ = writeln!(out, "| {} | {} |", row.name(), cells.join(" | "));
        }
    }
}

/// A row's name without its "ours:/peer:/floor:" prefix.
fn short(row: Row) -> &'static str {
    let name = row.name();
    name.split_once(": ").map_or(name, |(_, rest)| rest)
}
