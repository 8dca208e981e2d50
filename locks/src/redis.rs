//! Redis locks: the Redisson-style reentrant hash lock ([`RedisLock`]), and the minimal
//! `SET NX PX` lock it grows from ([`SimpleRedisLock`]).
//!
//! # The starting point: `SET key value NX PX lease` ([`SimpleRedisLock`])
//! 1. Acquire: `SET stock:42 <holder> NX PX 10000`. `NX`: only if nobody holds it;
//!    `PX`: expires on its own if the holder dies. One atomic command (a separate
//!    `SETNX` then `EXPIRE` leaks a lock forever if the client dies in between).
//! 2. Release: compare-and-delete in Lua (`lua/simple_unlock.lua`). A plain `DEL`
//!    would delete someone else's lock after ours expired; `GET` then `DEL` from the
//!    client has the same race between the two commands.
//!
//! It is not reentrant (the same holder asking again is refused), has no fencing token,
//! and waiters can only poll.
//!
//! # The reentrant hash lock ([`RedisLock`])
//! The lock is a hash `{holder: count, "#token": token}` with a TTL; three Lua scripts
//! (`lua/`), each loaded once (`LazyLock<Script>`, EVALSHA with reload on NOSCRIPT):
//! 1. `lock.lua`: no hash → create it with count 1, `PEXPIRE`, `INCR` the key's token
//!    counter and store the token: acquired. Our holder in the hash → count + 1,
//!    `PEXPIRE`, return the **stored** token: re-entered. Someone else → return its
//!    `PTTL`.
//! 2. `unlock.lua`: not our holder → refuse. Count − 1; at 0, `DEL` and `PUBLISH` on
//!    the key's channel.
//! 3. `renew.lua`: `PEXPIRE` only if our holder is still in the hash.
//!
//! Renewal every lease/3 is the shared watchdog in [`crate::Locker`] (Redisson's
//! "watchdog"). Waiting is pub/sub: each process keeps **one** pattern subscription
//! to every lock's release channel, made when the lock connects. A waiter registers
//! for its key *before* its attempt; a release wakes one local waiter, which tries
//! again. If the notification never comes (subscription down, a holder that expired
//! instead of releasing), the waiter wakes after the holder's `PTTL`. No busy polling.
//!
//! # Guarantees
//! Mutual exclusion while Redis keeps its data and the holder runs within its lease;
//! reentrancy per holder; only the holder releases; a token that grows with every
//! new acquisition of a key.
//!
//! # How it fails
//! - **Pause past the lease** (GC, SIGSTOP): the key expires, another holder takes it;
//!   the paused one wakes and writes. Fence writes with the token.
//! - **Redis restart without persistence, or failover to a replica that missed the
//!   write** (replication is asynchronous): the lock is gone while its holder still
//!   works, and a second holder acquires. Worse, the **token counter** can go back
//!   too, so the new holder may get a token the resource has already seen: the fence
//!   then refuses the *new* holder (safe, but unavailable until the counter catches
//!   up). Persist with `appendonly yes` + `appendfsync always` if the counter matters,
//!   or take tokens from the resource's database instead.
//! - **Clocks**: Redis expires keys by its own clock; a jump of the server's clock
//!   ends leases early. The holder's deadline runs on its monotonic clock from before
//!   the request, so the holder gives up first.
//!
//! # Under faults
//! `./scripts/chaos` runs this lock in the `stock-app` service under load on two
//! instances, with the ledger as the judge (the figures of one run are in the README,
//! "Faults and fencing"):
//! - **holder frozen (SIGSTOP) past its lease**: fencing off, lost updates; fenced, the
//!   stale write is refused (`lock_lost`), nothing lost; the next holder sells one lease
//!   after the freeze.
//! - **holder killed**: nothing lost; the lock comes back after the key's TTL.
//! - **Redis restarted empty while the holder works**: fencing off, lost updates (the
//!   lock vanished, a second holder sold at once). Fenced, nothing lost, but the
//!   **token counter went back** with the data: the new holders' tokens are older than
//!   the last claim, so requests are refused until the counter catches up. Safe,
//!   briefly unavailable: persist the counter (`appendonly yes`, `appendfsync always`)
//!   or take tokens from the database.
//! - **partitioned from Redis** (its database path up): fencing off, lost updates;
//!   fenced, refused, nothing lost.
//! - **ambiguous COMMIT** (MariaDB killed as COMMIT is sent): no double deduction after
//!   retrying every unknown outcome with its request_id.
//!
//! # When not to use it
//! When a second holder for a few seconds would be a disaster and you cannot fence the
//! resource: no lease lock is enough then. For a single counter in a database, let the
//! database do it (`atomic-sql`).
//!
//! # Example
//! ```no_run
//! # async fn example() -> Result<(), locks::LockError> {
//! use locks::{HolderId, LockOptions, Locker, redis::RedisLock};
//! use std::time::Duration;
//!
//! let locker = Locker::new(RedisLock::connect("redis://127.0.0.1:6379").await?);
//! let holder = HolderId::new("order-17")?;
//! let outer = locker.acquire("stock:42", &holder, &LockOptions::default(), Duration::from_secs(5)).await?;
//! let inner = locker.acquire("stock:42", &holder, &LockOptions::default(), Duration::from_secs(5)).await?;
//! assert_eq!(outer.token(), inner.token()); // re-entered: same token
//! inner.release().await?;
//! outer.release().await?; // count 0: deleted, and the next waiter is woken
//! # Ok(())
//! # }
//! ```

use crate::{Attempt, Capabilities, Expiry, Fencing, HolderId, LockBackend, LockError, Waiter};
use async_trait::async_trait;
use futures::StreamExt;
use redis::Script;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

static LOCK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/lock.lua")));
static UNLOCK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/unlock.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/renew.lua")));
static SIMPLE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/simple_unlock.lua")));
static SIMPLE_RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/simple_renew.lua")));

/// Every lock's release channel starts with this; the process subscribes to the pattern.
const CHANNEL_PREFIX: &str = "lock-released:";

fn channel(key: &str) -> String {
    format!("{CHANNEL_PREFIX}{key}")
}

/// The key's token counter. (In Redis Cluster, wrap the lock key in a hash tag,
/// `{stock:42}`, so the lock and its counter live in the same slot.)
fn token_key(key: &str) -> String {
    format!("{key}:fence")
}

fn backend(e: impl std::fmt::Display) -> LockError {
    LockError::Backend(format!("redis: {e}"))
}

fn lease_ms(lease: Duration) -> u64 {
    (lease.as_millis() as u64).max(1)
}

async fn connection(url: &str) -> Result<(redis::Client, ConnectionManager), LockError> {
    let client = redis::Client::open(url).map_err(backend)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)))
        .set_number_of_retries(2);
    let conn = ConnectionManager::new_with_config(client.clone(), config)
        .await
        .map_err(backend)?;
    Ok((client, conn))
}

/// Local waiters by key. A release announced on Redis wakes one of them.
#[derive(Default)]
struct Wakeups {
    // A std mutex: held only to look up or insert an entry, never across an `.await`.
    by_key: Mutex<HashMap<String, Weak<Notify>>>,
}

impl Wakeups {
    fn register(&self, key: &str) -> Arc<Notify> {
        let mut by_key = self.by_key.lock().expect("wakeups poisoned");
        if let Some(notify) = by_key.get(key).and_then(Weak::upgrade) {
            return notify;
        }
        if by_key.len() > 1024 {
            by_key.retain(|_, w| w.strong_count() > 0);
        }
        let notify = Arc::new(Notify::new());
        by_key.insert(key.to_string(), Arc::downgrade(&notify));
        notify
    }

    fn released(&self, key: &str) {
        let notify = self
            .by_key
            .lock()
            .expect("wakeups poisoned")
            .get(key)
            .and_then(Weak::upgrade);
        if let Some(notify) = notify {
            // One waiter per release: the others stay asleep instead of stampeding.
            notify.notify_one();
        }
    }
}

/// The process's one subscription: a task that keeps a pattern subscription to every
/// release channel and wakes local waiters. It reconnects after a failure; meanwhile
/// waiters fall back to the holder's PTTL.
async fn subscribe(
    client: redis::Client,
    wakeups: Arc<Wakeups>,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    loop {
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.psubscribe(format!("{CHANNEL_PREFIX}*")).await {
                Ok(()) => {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                    let mut messages = pubsub.into_on_message();
                    while let Some(message) = messages.next().await {
                        if let Some(key) = message.get_channel_name().strip_prefix(CHANNEL_PREFIX) {
                            wakeups.released(key);
                        }
                    }
                    tracing::warn!("redis lock: release subscription ended; reconnecting");
                }
                Err(e) => tracing::warn!(error = %e, "redis lock: PSUBSCRIBE failed"),
            },
            Err(e) => {
                tracing::warn!(error = %e, "redis lock: cannot open the release subscription")
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The Redisson-style reentrant lock with fencing tokens and pub/sub wake-up.
pub struct RedisLock {
    conn: ConnectionManager,
    wakeups: Arc<Wakeups>,
    subscription: JoinHandle<()>,
}

impl RedisLock {
    /// Connects, and opens the process's release subscription (waiting up to 2 s for
    /// it to be confirmed, so that no release after `connect` returns is missed).
    pub async fn connect(url: &str) -> Result<RedisLock, LockError> {
        let (client, conn) = connection(url).await?;
        let wakeups = Arc::new(Wakeups::default());
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let subscription = tokio::spawn(subscribe(client, wakeups.clone(), ready_tx));
        if tokio::time::timeout(Duration::from_secs(2), ready_rx)
            .await
            .is_err()
        {
            tracing::warn!(
                "redis lock: release subscription not confirmed yet; waiters use PTTL until it is"
            );
        }
        Ok(RedisLock {
            conn,
            wakeups,
            subscription,
        })
    }
}

impl Drop for RedisLock {
    fn drop(&mut self) {
        self.subscription.abort();
    }
}

#[async_trait]
impl LockBackend for RedisLock {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            expiry: Expiry::Lease,
            fencing: Fencing::Monotonic,
            reentrant: true,
        }
    }

    async fn try_lock(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
    ) -> Result<Attempt, LockError> {
        let (acquired, value): (i64, i64) = LOCK
            .key(key)
            .key(token_key(key))
            .arg(holder.as_str())
            .arg(lease_ms(lease))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(backend)?;
        Ok(if acquired == 1 {
            Attempt::Acquired {
                token: Some(value as u64),
            }
        } else {
            Attempt::Busy {
                // PTTL: -1 no expiry (not ours to judge), -2 gone since (retry soon).
                retry_after: (value >= 0).then(|| Duration::from_millis(value as u64)),
            }
        })
    }

    async fn renew(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
    ) -> Result<bool, LockError> {
        let renewed: i64 = RENEW
            .key(key)
            .arg(holder.as_str())
            .arg(lease_ms(lease))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(backend)?;
        Ok(renewed == 1)
    }

    async fn unlock(&self, key: &str, holder: &HolderId) -> Result<(), LockError> {
        let left: i64 = UNLOCK
            .key(key)
            .arg(holder.as_str())
            .arg(channel(key))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(backend)?;
        if left < 0 {
            return Err(LockError::not_holder(key, holder));
        }
        Ok(())
    }

    fn waiter(&self, key: &str) -> Waiter {
        let mut released = Box::pin(self.wakeups.register(key).notified_owned());
        // Enabled now, before the attempt: a release from here on is kept for us.
        released.as_mut().enable();
        Waiter::on(released)
    }

    fn retry_pause(&self, retry_after: Option<Duration>) -> Duration {
        // A release wakes us earlier; the PTTL is the fallback when none comes.
        retry_after
            .unwrap_or(Duration::from_millis(50))
            .max(Duration::from_millis(1))
    }
}

/// The minimal lock: `SET key holder NX PX lease`, compare-and-delete to release.
/// Not reentrant, no fencing token, waiters poll.
pub struct SimpleRedisLock {
    conn: ConnectionManager,
}

impl SimpleRedisLock {
    pub async fn connect(url: &str) -> Result<SimpleRedisLock, LockError> {
        let (_, conn) = connection(url).await?;
        Ok(SimpleRedisLock { conn })
    }
}

#[async_trait]
impl LockBackend for SimpleRedisLock {
    fn name(&self) -> &'static str {
        "redis-simple"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            expiry: Expiry::Lease,
            fencing: Fencing::None,
            reentrant: false,
        }
    }

    async fn try_lock(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
    ) -> Result<Attempt, LockError> {
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(holder.as_str())
            .arg("NX")
            .arg("PX")
            .arg(lease_ms(lease))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(backend)?;
        Ok(match set {
            Some(_) => Attempt::Acquired { token: None },
            None => Attempt::Busy { retry_after: None },
        })
    }

    async fn renew(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
    ) -> Result<bool, LockError> {
        let renewed: i64 = SIMPLE_RENEW
            .key(key)
            .arg(holder.as_str())
            .arg(lease_ms(lease))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(backend)?;
        Ok(renewed == 1)
    }

    async fn unlock(&self, key: &str, holder: &HolderId) -> Result<(), LockError> {
        let deleted: i64 = SIMPLE_UNLOCK
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
