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

    /// Redis servers, comma-separated. The first serves `redis-lock`; all of them (5)
    /// form the RedLock. Reported by /ready; never waited on at start.
    #[arg(long, env = "REDIS_URLS", value_delimiter = ',')]
    pub redis_urls: Vec<String>,

    /// A read replica of the database (`mysql://...`). When set, the plain reads a
    /// strategy makes outside a transaction go there, as read/write splitting would
    /// send them: `optimistic`'s read of the version, and the read under the lock of
    /// `unsafe`, `local-mutex` and the lock strategies. Writes, reads inside a
    /// transaction and the refusal's read stay on the primary. Never waited on at start.
    #[arg(long, env = "READ_REPLICA_URL")]
    pub read_replica_url: Option<String>,

    /// Redis Sentinels, comma-separated host:port. When set, `redis-lock` and
    /// `redis-stock` use the primary they name for `--redis-master-name` (instead of
    /// the first of `REDIS_URLS`) and follow a failover without a restart. RedLock
    /// keeps using `REDIS_URLS`: its nodes are independent on purpose.
    #[arg(long, env = "REDIS_SENTINELS", value_delimiter = ',')]
    pub redis_sentinels: Vec<String>,

    /// The name the Sentinels monitor the primary under.
    #[arg(long, env = "REDIS_MASTER_NAME", default_value = "mymaster")]
    pub redis_master_name: String,

    /// `redis-lock` grants a lock only once this many replicas acknowledged it (`WAIT`
    /// after the lock script; 0: never wait). The mitigation for a failover that loses
    /// the lock; it costs a round trip per acquisition, and with fewer replicas
    /// reachable no lock is granted (503 backend_unavailable).
    #[arg(long, env = "REDIS_LOCK_MIN_REPLICAS", default_value_t = 0)]
    pub redis_lock_min_replicas: u32,

    /// How long `redis-lock` waits for those replicas, in milliseconds.
    #[arg(long, env = "REDIS_LOCK_REPLICA_TIMEOUT_MS", default_value_t = 500)]
    pub redis_lock_replica_timeout_ms: u64,

    /// ZooKeeper connect string, e.g. 127.0.0.1:2181,127.0.0.1:2182. Reported by
    /// /ready; never waited on at start.
    #[arg(long, env = "ZK_CONNECT")]
    pub zk_connect: Option<String>,

    /// Bearer token for the admin routes (PUT /stock). Unset: they answer 403.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// HTTP worker threads (default: one per CPU core).
    #[arg(long, env = "WORKERS")]
    pub workers: Option<usize>,

    /// InnoDB lock wait timeout for the service's connections, in seconds: how long a
    /// `SELECT ... FOR UPDATE` or UPDATE waits for a row lock before error 1205
    /// (MariaDB's default is 50 s; tests use 2 s).
    #[arg(long, env = "LOCK_WAIT_TIMEOUT_SECS", default_value_t = 5)]
    pub lock_wait_timeout_secs: u32,

    /// Transactions `pessimistic` may run for one request (retries after a deadlock or a
    /// lock wait timeout).
    #[arg(long, env = "PESSIMISTIC_MAX_ATTEMPTS", default_value_t = 5)]
    pub pessimistic_max_attempts: u32,

    /// Transactions `optimistic` may run for one request (retries after a failed
    /// compare-and-set) before it answers 503 busy.
    #[arg(long, env = "OPTIMISTIC_MAX_ATTEMPTS", default_value_t = 10)]
    pub optimistic_max_attempts: u32,

    /// `batched`: how long a product's batch task waits for more buyers before it
    /// takes its queue, in microseconds. 0: it takes what is there at once (under load
    /// a batch is then whatever arrived while the previous one ran).
    #[arg(long, env = "BATCH_WINDOW_US", default_value_t = 0)]
    pub batch_window_us: u64,

    /// `batched`: the most requests one transaction carries.
    #[arg(long, env = "BATCH_MAX", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch_max: u32,

    /// `redis-stock`: where its keys live in Redis (`<prefix>p:<id>` counters,
    /// `<prefix>sales` the stream, ...). Instances that share a database share it.
    #[arg(long, env = "REDIS_STOCK_PREFIX", default_value = "stock-locks:rs:")]
    pub redis_stock_prefix: String,

    /// `redis-stock`: how long Redis remembers a sold request id (a retry within it is
    /// answered from Redis; later, the persister finds it in `orders`), in seconds.
    #[arg(long, env = "REDIS_STOCK_ID_TTL_SECS", default_value_t = 86_400)]
    pub redis_stock_id_ttl_secs: u64,

    /// `redis-stock`: the most stream entries one persister transaction carries.
    #[arg(long, env = "REDIS_STOCK_BATCH", default_value_t = 500)]
    pub redis_stock_batch: usize,

    /// `redis-stock`: how long an entry may sit unacknowledged with one persister
    /// (it may have crashed) before another claims it, in milliseconds.
    #[arg(long, env = "REDIS_STOCK_CLAIM_MS", default_value_t = 5_000)]
    pub redis_stock_claim_ms: u64,

    /// Hold every deduction this many milliseconds between its read and its write (a
    /// slow business step). Not a test hook: works without --enable-test-hooks; the
    /// demo uses it to make the controls fail visibly.
    #[arg(long, env = "HOLD_MS", default_value_t = 0)]
    pub hold_ms: u64,

    /// Lease of the distributed locks (mysql-lock, redis-lock), in milliseconds. The
    /// watchdog renews it every third of that while the request runs.
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

    /// Fenced writes for the lock strategies (claim the product with the lock's token,
    /// write only while it is the newest). `--fencing false` trusts the lock alone, as
    /// the seeds' code does: the experiment that shows why fencing exists.
    #[arg(long, env = "FENCING", default_value_t = true, action = clap::ArgAction::Set)]
    pub fencing: bool,

    /// ZooKeeper session timeout for the zookeeper strategy, in milliseconds. The
    /// holder counts its lock as lost after two thirds of it without reaching the
    /// ensemble, before the server would expire the session.
    #[arg(long, env = "ZK_SESSION_TIMEOUT_MS", default_value_t = 6_000)]
    pub zk_session_timeout_ms: u64,

    /// The ZooKeeper path under which lock nodes live (`<root>/stock/<product_id>`).
    #[arg(long, env = "ZK_ROOT", default_value = "/stock-locks")]
    pub zk_root: String,

    /// How long RedLock waits for one Redis node before counting it out, in
    /// milliseconds (much smaller than the lease).
    #[arg(long, env = "REDLOCK_NODE_TIMEOUT_MS", default_value_t = 100)]
    pub redlock_node_timeout_ms: u64,

    /// Connections the mysql-lock strategy uses for acquisition attempts (it has its own
    /// pools, apart from the stock transactions').
    #[arg(long, env = "MYSQL_LOCK_POOL_SIZE", default_value_t = 16)]
    pub mysql_lock_pool_size: u32,

    /// Turn on the test hooks: the /hooks endpoint (failpoints) and the hook fields of
    /// a deduct body (hold_ms, unsorted, barrier). Never in production.
    #[arg(long, env = "ENABLE_TEST_HOOKS")]
    pub enable_test_hooks: bool,
}

impl Settings {
    /// The Redis of `redis-lock` and `redis-stock`: the primary `REDIS_SENTINELS` name,
    /// else the first of `REDIS_URLS`.
    pub fn redis_endpoint(&self) -> Option<locks::redis::Endpoint> {
        if self.redis_sentinels.is_empty() {
            self.redis_urls
                .first()
                .cloned()
                .map(locks::redis::Endpoint::Url)
        } else {
            Some(locks::redis::Endpoint::Sentinel {
                sentinels: self.redis_sentinels.clone(),
                master: self.redis_master_name.clone(),
            })
        }
    }

    /// `redis-stock`'s settings: its Redis, its keys, its persister.
    pub fn redis_stock(&self) -> crate::strategies::redis_stock::RedisStockSettings {
        crate::strategies::redis_stock::RedisStockSettings {
            endpoint: self.redis_endpoint(),
            keys: crate::strategies::redis_stock::Keys::new(&self.redis_stock_prefix),
            id_ttl_secs: self.redis_stock_id_ttl_secs,
            batch: self.redis_stock_batch.max(1),
            claim_after: std::time::Duration::from_millis(self.redis_stock_claim_ms),
        }
    }

    /// Settings for a service on `database_url`, listening on a free loopback port,
    /// everything else at its default (environment variables are not read).
    pub fn for_database(database_url: &str) -> Settings {
        Settings {
            bind: "127.0.0.1:0".into(),
            database_url: database_url.into(),
            db_pool_size: 32,
            db_acquire_timeout_ms: 10_000,
            redis_urls: Vec::new(),
            read_replica_url: None,
            redis_sentinels: Vec::new(),
            redis_master_name: "mymaster".into(),
            redis_lock_min_replicas: 0,
            redis_lock_replica_timeout_ms: 500,
            zk_connect: None,
            admin_token: None,
            workers: None,
            lock_wait_timeout_secs: 5,
            pessimistic_max_attempts: 5,
            optimistic_max_attempts: 10,
            batch_window_us: 0,
            batch_max: 256,
            redis_stock_prefix: "stock-locks:rs:".into(),
            redis_stock_id_ttl_secs: 86_400,
            redis_stock_batch: 500,
            redis_stock_claim_ms: 5_000,
            hold_ms: 0,
            lock_lease_ms: 10_000,
            lock_wait_ms: 5_000,
            lock_max_hold_ms: 30_000,
            fencing: true,
            mysql_lock_pool_size: 16,
            redlock_node_timeout_ms: 100,
            zk_session_timeout_ms: 6_000,
            zk_root: "/stock-locks".into(),
            enable_test_hooks: false,
        }
    }
}
