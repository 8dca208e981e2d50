//! `redis-lock`: the lock strategy ([`super::algorithm`]) on a Redisson-style hash lock
//! ([`locks::redis`]) on the Redis the shared settings name ([`RedisLockShared`]).
//!
//! # How it fails
//! As `mysql-lock`, with Redis's clock. A Redis restart without persistence, or a
//! failover to a replica that missed the lock, lets a second holder in at once
//! (unfenced: lost updates).
//!
//! With the service's `--redis-lock-min-replicas`, a lock counts only once that many
//! replicas have it: a failover then keeps it, at a round trip per acquisition (each
//! attempt waits for the replicas' acknowledgement).
//!
//! Its tokens come from Redis's clock when the last one is lost, so fenced holders
//! after a restart are not refused by a fence that saw the old tokens.
//!
//! # Copying this file
//! A copy takes this file, the domain, the contract and the helpers it calls, under the
//! same module paths, with the schema: `copies.toml` lists them under
//! `[strategy.redis-lock]`, with the crates they need. Its lock is the `locks` crate's
//! Redis backend, copied as a crate named `locks`. Say what it needs of the shared
//! settings by implementing [`RedisLockShared`] (one server: [`one_server`]; Sentinel
//! is `locks/src/redis_sentinel.rs`, and the replicas' `WAIT` is
//! `RedisLock::with_min_replicas`, as the service's answer uses them).
//! `./scripts/copy-check redis-lock DIR` builds such a copy and sells from it on a real
//! server.

use super::algorithm::{Connect, LockShared, LockStrategy, connector, not_set, unavailable};
#[cfg(feature = "service")]
use super::served::cells::{
    DELAY_LONG, DELAY_SHORT, FROZEN_FENCED, FROZEN_UNFENCED, KILLED, KILLED_UNFENCED,
    PARTITIONED_FENCED, PARTITIONED_UNFENCED,
};
#[cfg(feature = "service")]
use crate::strategies::card::{ChaosCell, Family, Statements, StrategyInfo, Trait};
use crate::strategies::contract::{Context, Declare, NoSettings, Strategy};
use locks::LockBackend;
use std::sync::Arc;

pub struct RedisLock;

/// What `redis-lock` needs of the settings the strategies share: the lock options,
/// and its lock on the Redis.
pub trait RedisLockShared: LockShared {
    /// The lock on the Redis; `None`: no Redis is set. One server: [`one_server`]. The
    /// service's follows the primary Sentinel names and, with
    /// `--redis-lock-min-replicas`, grants a lock only once replicas have it
    /// (`locks::redis::RedisLock::with_min_replicas`).
    fn redis_lock(&self) -> Option<Connect>;
}

/// The lock on one server, `redis://host:port`.
pub fn one_server(url: String) -> Connect {
    connector(url, async |url| {
        let lock = locks::redis::RedisLock::connect(&url)
            .await
            .map_err(unavailable("redis"))?;
        Ok(Box::new(lock) as Box<dyn LockBackend>)
    })
}

const NAME: &str = "redis-lock";

#[cfg(feature = "service")]
static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: file!(),
    description: "Redisson-style reentrant hash lock in Redis (Lua, watchdog, pub/sub wake-up), plain read-check-write; fenced by default.",
    family: Family::DistributedLock,
    when_to_use: "The critical section spans more than the database and the final write can be fenced.",
    explanation: "A Redisson-style hash lock in Lua (reentrant, watchdog, waiters woken by pub/sub), then a plain read-check-write fenced by its token (max(last + 1, Redis clock in µs)). Fast; safe only with the fence.",
    backend: "redis",
    safe_across_instances: true,
    fencing: "token",
    statements: Statements {
        sale: 7,
        refusal: 3,
    },
    traits: &[Trait::LeaseLock],
    chaos: &[
        FROZEN_UNFENCED,
        FROZEN_FENCED,
        DELAY_SHORT,
        DELAY_LONG,
        KILLED,
        KILLED_UNFENCED,
        // Redis forgets the lock and the token counter.
        ChaosCell::new("redis-restart", Some(false), &["erased"]),
        ChaosCell::new("redis-restart", Some(true), &["refused"]),
        PARTITIONED_UNFENCED,
        PARTITIONED_FENCED,
        ChaosCell::new("ambiguous-commit", Some(true), &["safe", "unavailable"]),
        // The classic mistakes the service makes in this strategy (`super::mistakes`),
        // each showing its failure.
        ChaosCell::new("mistake-lock-inside-transaction", None, &["erased"]),
        ChaosCell::new("mistake-release-before-commit", None, &["erased"]),
        ChaosCell::new("mistake-setnx-then-expire", None, &["unavailable"]),
        ChaosCell::new("mistake-get-then-del", None, &["erased"]),
        // A failover loses the lock (two holders); waiting for the replica: no lock
        // only the primary had, and no sale without one.
        ChaosCell::new("redis-failover", Some(false), &["erased"]),
        ChaosCell::new("redis-failover", Some(true), &["refused"]),
        ChaosCell::new("redis-failover-wait", Some(false), &["unavailable"]),
        // The same on a Redis Cluster (a master of three, its replica promoted), and a
        // reshard of the lock's slot under load (a holder whose renewal meets the slot
        // half moved may be told its lock is lost: refused, nothing lost).
        ChaosCell::new("redis-cluster-failover", Some(false), &["erased"]),
        ChaosCell::new("redis-cluster-failover", Some(true), &["refused"]),
        ChaosCell::new("redis-cluster-failover-wait", Some(false), &["unavailable"]),
        ChaosCell::new("redis-cluster-reshard", Some(true), &["safe", "refused"]),
        // Reads from a lagging replica: a lock, fenced or not, writes from them.
        ChaosCell::new("replica-lag", Some(false), &["erased"]),
        ChaosCell::new("replica-lag", Some(true), &["erased"]),
    ],
};

impl<S: RedisLockShared> Declare<S> for RedisLock {
    type Settings = NoSettings;

    fn build(_: &NoSettings, context: &Context<'_, S>) -> Arc<dyn Strategy> {
        let connect = context
            .shared
            .redis_lock()
            .unwrap_or_else(|| connector((), async |()| Err(not_set("redis", "REDIS_URLS"))));
        let strategy = LockStrategy::new(NAME, "redis", "stock:", connect, context.shared);
        #[cfg(feature = "service")]
        let strategy = strategy.with_card(&INFO);
        Arc::new(strategy)
    }
}
