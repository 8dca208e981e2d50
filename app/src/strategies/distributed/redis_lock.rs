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

/// How the service registers it: its card for the catalogue and its flags
/// (`redis_lock/served.rs`; a copy leaves it out).
#[cfg(feature = "service")]
mod served;

/// Where this strategy is written, from the repository's root (its card's `source`).
pub const SOURCE: &str = file!();

impl<S: RedisLockShared> Declare<S> for RedisLock {
    type Settings = NoSettings;

    fn build(_: &NoSettings, context: &Context<'_, S>) -> Arc<dyn Strategy> {
        let connect = context
            .shared
            .redis_lock()
            .unwrap_or_else(|| connector((), async |()| Err(not_set("redis", "REDIS_URLS"))));
        let strategy = LockStrategy::new(NAME, "redis", "stock:", connect, context.shared);
        Arc::new(strategy)
    }
}
