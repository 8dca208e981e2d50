//! The minimal Redis lock: `SET key value NX PX lease`, and compare-and-delete to
//! release. Where the reentrant hash lock (`redis.rs`) starts from.
//!
//! # Copying this file
//! Take `src/lock.rs` (the core), this file and its scripts (`lua/simple_unlock.lua`,
//! `lua/simple_renew.lua`) into your crate, with `mod lock; mod redis_simple;` at its
//! root, and the crates `copies.toml` lists under `[backend.redis-simple]`.
//! `./scripts/copy-check redis-simple DIR` builds such a copy and runs it on a real
//! server.
//!
//! # Algorithm
//! 1. Acquire: `SET stock:42 <holder> NX PX 10000`. `NX`: only if nobody holds it;
//!    `PX`: expires on its own if the holder dies. One atomic command (a separate
//!    `SETNX` then `EXPIRE` leaks a lock forever if the client dies in between).
//! 2. Release: compare-and-delete in Lua (`lua/simple_unlock.lua`). A plain `DEL`
//!    would delete someone else's lock after ours expired; `GET` then `DEL` from the
//!    client has the same race between the two commands.
//! 3. Renew (the core's watchdog): compare-and-`PEXPIRE` (`lua/simple_renew.lua`).
//!
//! It is not reentrant (the same holder asking again is refused), has no fencing
//! token, and waiters can only poll (a jittered 1-20 ms pause between attempts).
//!
//! The two mistakes of steps 1 and 2 are runnable in the service (test hooks),
//! `app/src/strategies/distributed/mistakes.rs`: `setnx-then-expire` (a holder crashed between
//! the two leaves a lock nobody ever gets again) and `get-then-del` (a holder whose
//! lease ran out between the two deletes the next holder's lock; a third walks in).

use crate::lock::{Acquired, BackendKind, HolderId, LockBackend, LockError};
use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisError, Script};
use std::sync::LazyLock;
use std::time::Duration;
use tokio::time::Instant;

/// The compare-and-delete unlock (`lua/simple_unlock.lua`): deletes the key only if it
/// still holds the caller's value. Exported for whoever runs it elsewhere (the
/// service's lock mistakes run it as the correct unlock next to the wrong ones).
pub const SIMPLE_UNLOCK_LUA: &str = include_str!("../lua/simple_unlock.lua");
/// The compare-and-extend renewal (`lua/simple_renew.lua`).
pub const SIMPLE_RENEW_LUA: &str = include_str!("../lua/simple_renew.lua");

static UNLOCK: LazyLock<Script> = LazyLock::new(|| Script::new(SIMPLE_UNLOCK_LUA));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(SIMPLE_RENEW_LUA));

fn backend(e: RedisError) -> LockError {
    let kind = if e.is_timeout() {
        BackendKind::Timeout
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        BackendKind::Unreachable
    } else {
        BackendKind::Failed
    };
    LockError::Backend("redis", kind, e.into())
}

fn lease_ms(lease: Duration) -> u64 {
    (lease.as_millis() as u64).max(1)
}

/// The minimal lock: `SET key holder NX PX lease`, compare-and-delete to release.
pub struct SimpleRedisLock {
    conn: ConnectionManager,
}

impl SimpleRedisLock {
    pub async fn connect(url: &str) -> Result<SimpleRedisLock, LockError> {
        let client = redis::Client::open(url).map_err(backend)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(2);
        let conn = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(backend)?;
        Ok(SimpleRedisLock { conn })
    }
}

#[async_trait]
impl LockBackend for SimpleRedisLock {
    fn name(&self) -> &'static str {
        "redis-simple"
    }

    /// `SET NX PX` until it succeeds or `wait` is over, a jittered 1-20 ms apart.
    ///
    /// # Errors
    /// [`LockError::Backend`]: Redis failed or did not answer within 2 s.
    ///
    /// # Cancellation safety
    /// Dropped while a `SET` is in flight, the key may be set with nobody to release
    /// it: it stays until its lease ends. Dropped during a pause, nothing is left.
    async fn acquire(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
        wait: Duration,
    ) -> Result<Option<Acquired>, LockError> {
        let deadline = Instant::now() + wait;
        loop {
            let since = Instant::now();
            let set: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(holder.as_str())
                .arg("NX")
                .arg("PX")
                .arg(lease_ms(lease))
                .query_async(&mut self.conn.clone())
                .await
                .map_err(backend)?;
            if set.is_some() {
                return Ok(Some(Acquired { token: None, since }));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let pause = Duration::from_micros(rand::random_range(1_000..=20_000));
            tokio::time::sleep(pause.min(deadline - now)).await;
        }
    }

    async fn renew(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
    ) -> Result<Option<Instant>, LockError> {
        let since = Instant::now();
        let renewed: i64 = RENEW
            .key(key)
            .arg(holder.as_str())
            .arg(lease_ms(lease))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(backend)?;
        Ok((renewed == 1).then_some(since))
    }

    /// # Errors
    /// [`LockError::NotHolder`] when `holder` does not hold it; [`LockError::Backend`]
    /// when Redis failed (the lease then ends the lock).
    async fn unlock(&self, key: &str, holder: &HolderId) -> Result<(), LockError> {
        let deleted: i64 = UNLOCK
            .key(key)
            .arg(holder.as_str())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(backend)?;
        if deleted == 1 {
            Ok(())
        } else {
            Err(LockError::not_holder(key, holder))
        }
    }
}
