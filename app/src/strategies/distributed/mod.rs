//! The wiring of the four lock strategies: which backend, which key, how it connects.
//! The algorithm they share is [`algorithm`]; the locks themselves are the
//! `locks` crate's files, each with its algorithm and failure scenarios.
//!
//! # Layout
//! - this file: each lock strategy's card, flags and connection;
//! - [`algorithm`]: lock, claim, read-check-write, release (one for all four), and
//!   the lock counters each registers;
//! - [`mistakes`]: the classic lock mistakes, made on purpose (test knob only).
//!
//! It may touch the strategies' contract, the fence (`fencing`), the transaction
//! helpers, `shared` (the Redis, ZooKeeper and lock settings several strategies
//! share) and the `locks` crate; nothing of the service around it.
//!
//! # How each one fails (what the chaos runner shows; README "Faults and fencing")
//! - **`mysql-lock`** ([`locks::mysql`]): the lease is judged by the database's clock.
//!   A holder paused past it loses the lock to the next attempt (a steal); unfenced,
//!   its late write is a lost update; fenced, it is refused. A killed holder's lock
//!   comes back after the lease. Every attempt is a write on the primary: waiters cost
//!   database capacity, and a hot key is the slowest of the four.
//! - **`redis-lock`** ([`locks::redis`]): as above with Redis's clock. A Redis restart
//!   without persistence, or a failover to a replica that missed the lock, lets a
//!   second holder in at once (unfenced: lost updates). Its tokens come from Redis's
//!   clock when the last one is lost, so fenced holders after the restart are not
//!   refused by a fence that saw the old tokens.
//! - **`redlock`** ([`locks::redlock`]): a majority of five must agree, so two nodes
//!   may die; three frozen nodes make it unavailable. It has no token: it fences with
//!   an owner tag, so a stale holder that claims late wins over a live one. A node
//!   restarted empty, or a clock jump on a majority, lets two holders in.
//! - **`zookeeper`** ([`locks::zookeeper`]): a FIFO queue of ephemeral nodes under
//!   consensus. A holder paused past its session loses its node; unfenced, its late
//!   write is a lost update; fenced by czxid, it is refused. A killed holder's lock
//!   comes back after the session timeout.

pub mod algorithm;
pub mod mistakes;

use crate::domain::error::DeductError;
use crate::strategies::contract::{
    ChaosCell, Context, Declare, Family, NoSettings, Statements, Strategy, StrategyInfo, Trait,
};
use crate::strategies::shared::Shared;
use algorithm::{Connect, LockStrategy};
use locks::{LockBackend, LockError};
use mistakes::WithMistakes;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;

// The fault cells every lock goes through. Frozen past the lease: unfenced it loses
// updates, fenced it refuses the stale write. Killed: a dead holder never writes,
// fenced or not; the wait for the lock to come back is measured. Partitioned from
// the lock service (not from the database): as frozen.
const FROZEN_UNFENCED: ChaosCell = ChaosCell::new("pause-past-lease", Some(false), &["lost"]);
const FROZEN_FENCED: ChaosCell = ChaosCell::new("pause-past-lease", Some(true), &["refused"]);
const KILLED: ChaosCell = ChaosCell::new("holder-killed", Some(true), ChaosCell::NO_LOSS);
const KILLED_UNFENCED: ChaosCell =
    ChaosCell::new("holder-killed", Some(false), ChaosCell::NO_LOSS).extra();
const PARTITIONED_UNFENCED: ChaosCell = ChaosCell::new("lock-partition", Some(false), &["lost"]);
const PARTITIONED_FENCED: ChaosCell = ChaosCell::new("lock-partition", Some(true), &["refused"]);
/// An ambiguous COMMIT under a lock that may also be lost meanwhile.
const MAYBE_REFUSED: &[&str] = &["safe", "unavailable", "refused"];

/// The four lock strategies, as the registry names them.
pub struct MysqlLock;
pub struct RedisLock;
pub struct RedLock;
pub struct ZooKeeper;

fn strategy(
    info: StrategyInfo,
    backend: &'static str,
    key_prefix: &'static str,
    connect: Connect,
    shared: &Shared,
) -> LockStrategy {
    LockStrategy {
        info,
        backend,
        key_prefix,
        connect,
        locker: OnceCell::new(),
        options: shared.lock_options(),
        wait: shared.lock_wait(),
        fencing: shared.fencing,
        instance: uuid::Uuid::new_v4().simple().to_string(),
        counters: std::sync::OnceLock::new(),
    }
}

/// A [`Connect`] that runs `connect` on its own copy of `config` at each call.
fn connector<C, F, Fut>(config: C, connect: F) -> Connect
where
    C: Clone + Send + Sync + 'static,
    F: Fn(C) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Box<dyn LockBackend>, DeductError>> + Send + 'static,
{
    Box::new(move || Box::pin(connect(config.clone())))
}

fn unavailable(backend: &'static str) -> impl Fn(LockError) -> DeductError {
    move |e| DeductError::BackendUnavailable {
        backend: backend.into(),
        detail: e.to_string(),
    }
}

fn not_set(backend: &str, variable: &str) -> DeductError {
    DeductError::BackendUnavailable {
        backend: backend.into(),
        detail: format!("{variable} is not set"),
    }
}

/// `mysql-lock`'s flags.
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct MysqlLockSettings {
    /// Connections the mysql-lock strategy uses for acquisition attempts (it has its
    /// own pools, apart from the stock transactions').
    #[arg(
        id = "mysql_lock_pool_size",
        value_name = "MYSQL_LOCK_POOL_SIZE",
        long = "mysql-lock-pool-size",
        env = "MYSQL_LOCK_POOL_SIZE",
        default_value_t = 16
    )]
    pub pool_size: u32,
}

impl Declare<Shared> for MysqlLock {
    type Settings = MysqlLockSettings;

    fn build(settings: &MysqlLockSettings, context: &Context<'_, Shared>) -> Arc<dyn Strategy> {
        Arc::new(mysql(settings, context))
    }
}

/// `mysql-lock`: the lock table, on pools of its own in the service's database.
fn mysql(settings: &MysqlLockSettings, context: &Context<'_, Shared>) -> LockStrategy {
    let config = (context.database_url.to_string(), settings.pool_size);
    let connect = connector(config, async |(url, size)| {
        let backend = locks::mysql::MysqlLock::connect(&url, size)
            .await
            .map_err(unavailable("database"))?;
        Ok(Box::new(backend) as Box<dyn LockBackend>)
    });
    let info = StrategyInfo {
        name: "mysql-lock",
        source: file!(),
        description: "Lock table in the database (reentrant, leased by the database clock, watchdog), plain read-check-write; fenced by default.",
        family: Family::DistributedLock,
        when_to_use: "A lock is needed, only the database is there, and the load is light.",
        explanation: "A lock row in the database (reentrant, leased by the database clock, renewed by a watchdog), then a plain read-check-write, fenced by the row's token. Slow: every attempt is a write transaction.",
        backend: "database (lock table)",
        safe_across_instances: true,
        fencing: "token",
        // Its lock's own two (take and release) besides the fenced path's seven.
        statements: Statements {
            sale: 9,
            refusal: 5,
        },
        traits: &[Trait::LeaseLock],
        chaos: const {
            &[
                FROZEN_UNFENCED,
                FROZEN_FENCED,
                KILLED,
                KILLED_UNFENCED,
                ChaosCell::new("ambiguous-commit", Some(true), MAYBE_REFUSED).extra(),
            ]
        },
    };
    strategy(info, "mysql", "stock:", connect, context.shared)
}

/// `redis-lock`'s flags.
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct RedisLockSettings {
    /// `redis-lock` grants a lock only once this many replicas acknowledged it (`WAIT`
    /// after the lock script; 0: never wait). The mitigation for a failover that loses
    /// the lock; it costs a round trip per acquisition, and with fewer replicas
    /// reachable no lock is granted (503 backend_unavailable).
    #[arg(
        id = "redis_lock_min_replicas",
        value_name = "REDIS_LOCK_MIN_REPLICAS",
        long = "redis-lock-min-replicas",
        env = "REDIS_LOCK_MIN_REPLICAS",
        default_value_t = 0
    )]
    pub min_replicas: u32,

    /// How long `redis-lock` waits for those replicas, in milliseconds.
    #[arg(
        id = "redis_lock_replica_timeout_ms",
        value_name = "REDIS_LOCK_REPLICA_TIMEOUT_MS",
        long = "redis-lock-replica-timeout-ms",
        env = "REDIS_LOCK_REPLICA_TIMEOUT_MS",
        default_value_t = 500
    )]
    pub replica_timeout_ms: u64,
}

impl Declare<Shared> for RedisLock {
    type Settings = RedisLockSettings;

    fn build(settings: &RedisLockSettings, context: &Context<'_, Shared>) -> Arc<dyn Strategy> {
        let strategy = redis(settings, context.shared);
        Arc::new(WithMistakes::new(
            strategy,
            context.shared,
            &mistakes::MADE_IN_REDIS_LOCK,
        ))
    }
}

/// `redis-lock`: the primary `REDIS_SENTINELS` name, else the first of `REDIS_URLS`;
/// with `--redis-lock-min-replicas`, a lock counts once that many replicas have it.
fn redis(settings: &RedisLockSettings, shared: &Shared) -> LockStrategy {
    let endpoint = shared.redis_endpoint();
    let replicas = (
        settings.min_replicas,
        Duration::from_millis(settings.replica_timeout_ms),
    );
    let connect = connector((endpoint, replicas), async |(endpoint, (n, timeout))| {
        let endpoint = endpoint.ok_or_else(|| not_set("redis", "REDIS_URLS"))?;
        let backend = locks::redis::RedisLock::connect_to(&endpoint)
            .await
            .map_err(unavailable("redis"))?
            .with_min_replicas(n, timeout);
        Ok(Box::new(backend) as Box<dyn LockBackend>)
    });
    let info = StrategyInfo {
        name: "redis-lock",
        source: file!(),
        description: "Redisson-style reentrant hash lock in Redis (Lua, watchdog, pub/sub wake-up), plain read-check-write; fenced by default.",
        family: Family::DistributedLock,
        when_to_use: "The critical section spans more than the database and the final write can be fenced.",
        explanation: "A Redisson-style hash lock in Lua (reentrant, watchdog, waiters woken by pub/sub), then a plain read-check-write fenced by an INCR token. Fast; safe only with the fence.",
        backend: "redis",
        safe_across_instances: true,
        fencing: "token",
        statements: Statements {
            sale: 7,
            refusal: 3,
        },
        traits: &[Trait::LeaseLock],
        chaos: const {
            &[
                FROZEN_UNFENCED,
                FROZEN_FENCED,
                KILLED,
                KILLED_UNFENCED,
                // Redis forgets the lock and the token counter.
                ChaosCell::new("redis-restart", Some(false), &["lost"]),
                ChaosCell::new("redis-restart", Some(true), &["refused"]),
                PARTITIONED_UNFENCED,
                PARTITIONED_FENCED,
                ChaosCell::new("ambiguous-commit", Some(true), &["safe", "unavailable"]),
                // The classic mistakes, each made in this strategy, each showing its failure.
                ChaosCell::new("mistake-lock-inside-transaction", None, &["lost"]),
                ChaosCell::new("mistake-release-before-commit", None, &["lost"]),
                ChaosCell::new("mistake-setnx-then-expire", None, &["unavailable"]),
                ChaosCell::new("mistake-get-then-del", None, &["lost"]),
                // A failover loses the lock (two holders); waiting for the replica: no lock
                // only the primary had, and no sale without one.
                ChaosCell::new("redis-failover", Some(false), &["lost"]),
                ChaosCell::new("redis-failover", Some(true), &["refused"]),
                ChaosCell::new("redis-failover-wait", Some(false), &["unavailable"]),
                // Reads from a lagging replica: a lock, fenced or not, writes from them.
                ChaosCell::new("replica-lag", Some(false), &["lost"]),
                ChaosCell::new("replica-lag", Some(true), &["lost"]),
            ]
        },
    };
    strategy(info, "redis", "stock:", connect, shared)
}

/// `redlock`'s flags.
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct RedLockSettings {
    /// How long RedLock waits for one Redis node before counting it out, in
    /// milliseconds (much smaller than the lease).
    #[arg(
        id = "redlock_node_timeout_ms",
        value_name = "REDLOCK_NODE_TIMEOUT_MS",
        long = "redlock-node-timeout-ms",
        env = "REDLOCK_NODE_TIMEOUT_MS",
        default_value_t = 100
    )]
    pub node_timeout_ms: u64,
}

impl Declare<Shared> for RedLock {
    type Settings = RedLockSettings;

    fn build(settings: &RedLockSettings, context: &Context<'_, Shared>) -> Arc<dyn Strategy> {
        Arc::new(redlock(settings, context.shared))
    }
}

/// `redlock`: every one of `REDIS_URLS` (at least 3; 5 in the testbed and compose).
fn redlock(settings: &RedLockSettings, shared: &Shared) -> LockStrategy {
    let node_timeout = Duration::from_millis(settings.node_timeout_ms);
    let config = (shared.redis_urls.clone(), node_timeout);
    let connect = connector(config, async |(urls, node_timeout)| {
        let backend = locks::redlock::RedLock::new(&urls)
            .map_err(|e| DeductError::BackendUnavailable {
                backend: "redlock".into(),
                detail: format!("{e} (REDIS_URLS)"),
            })?
            .with_node_timeout(node_timeout);
        Ok(Box::new(backend) as Box<dyn LockBackend>)
    });
    let info = StrategyInfo {
        name: "redlock",
        source: file!(),
        description: "RedLock over the Redis nodes (majority, validity = lease - elapsed - drift), plain read-check-write; fenced by owner tag by default.",
        family: Family::DistributedLock,
        when_to_use: "Rarely: it survives dead Redis nodes but gives no fencing token (see Kleppmann's critique).",
        explanation: "The lock on a majority of 5 independent Redis within the lease minus drift. No monotonic token: fenced by its random owner tag. Costs 5 round trips in parallel; a restarted node without persistence can admit a second holder.",
        backend: "redis x5 (RedLock)",
        safe_across_instances: true,
        fencing: "owner tag",
        statements: Statements {
            sale: 7,
            refusal: 3,
        },
        traits: &[Trait::LeaseLock],
        chaos: const {
            &[
                FROZEN_UNFENCED,
                FROZEN_FENCED,
                KILLED,
                KILLED_UNFENCED,
                // The quorum: two of five frozen still lock; three do not.
                ChaosCell::new("redlock-2-of-5-paused", Some(true), &["safe", "refused"]),
                ChaosCell::new("redlock-3-of-5-paused", Some(true), &["unavailable"]),
                PARTITIONED_UNFENCED,
                PARTITIONED_FENCED,
                // Kleppmann's clock jump: a second majority.
                ChaosCell::new("redlock-clock-jump", Some(false), &["lost"]),
                ChaosCell::new("redlock-clock-jump", Some(true), &["refused"]),
            ]
        },
    };
    strategy(info, "redlock", "redlock:stock:", connect, shared)
}

impl Declare<Shared> for ZooKeeper {
    type Settings = NoSettings;

    fn build(_: &NoSettings, context: &Context<'_, Shared>) -> Arc<dyn Strategy> {
        let strategy = zookeeper(context.shared);
        Arc::new(WithMistakes::new(
            strategy,
            context.shared,
            &mistakes::MADE_IN_ZOOKEEPER,
        ))
    }
}

/// `zookeeper`: the ensemble of `ZK_CONNECT`, nodes under `<zk-root>/stock/<id>`
/// (the path a Curator `InterProcessMutex` would use).
fn zookeeper(shared: &Shared) -> LockStrategy {
    let session = shared.zk_session();
    let config = (shared.zk_connect.clone(), shared.zk_root.clone(), session);
    let connect = connector(config, async |(connect_string, root, session)| {
        let connect_string = connect_string.ok_or_else(|| not_set("zookeeper", "ZK_CONNECT"))?;
        let backend = locks::zookeeper::ZooKeeperLock::connect(&connect_string, &root, session)
            .await
            .map_err(unavailable("zookeeper"))?;
        Ok(Box::new(backend) as Box<dyn LockBackend>)
    });
    let info = StrategyInfo {
        name: "zookeeper",
        source: file!(),
        description: "Ephemeral sequential node per request, each waiter watching its predecessor (Curator-compatible), plain read-check-write; fenced by czxid by default.",
        family: Family::DistributedLock,
        when_to_use: "A consensus-backed lock with fair (FIFO) waiting, where ZooKeeper already runs.",
        explanation: "An ephemeral sequential node per request; each waiter watches only its predecessor (FIFO, no herd); the node's czxid is the fencing token. Consensus-backed, slower per acquisition than Redis.",
        backend: "zookeeper",
        safe_across_instances: true,
        fencing: "token (czxid)",
        statements: Statements {
            sale: 7,
            refusal: 3,
        },
        traits: &[Trait::SessionLock],
        chaos: const {
            &[
                FROZEN_UNFENCED,
                FROZEN_FENCED,
                KILLED,
                KILLED_UNFENCED,
                // Consensus survives its leader.
                ChaosCell::new("zk-leader-killed", Some(true), ChaosCell::NO_LOSS),
                PARTITIONED_UNFENCED,
                PARTITIONED_FENCED,
                ChaosCell::new("ambiguous-commit", Some(true), MAYBE_REFUSED).extra(),
                ChaosCell::new("mistake-persistent-node", None, &["unavailable"]),
            ]
        },
    };
    let mut strategy = strategy(info, "zookeeper", "stock/", connect, shared);
    // The "lease" of a session lock is the holder's safety margin: give up after
    // two thirds of the session timeout without reaching the ensemble.
    strategy.options.lease = strategy.options.lease.min(session * 2 / 3);
    strategy
}
