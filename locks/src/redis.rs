//! The Redisson-style reentrant Redis lock ([`RedisLock`]): a hash in Lua, a fencing
//! token per key, pub/sub wake-up. It grows from the minimal `SET NX PX` lock
//! (`redis_simple.rs`), which is not reentrant, has no token and can only poll.
//!
//! # Copying this file
//! Take `src/lock.rs` (the core), this file and `lua/lock.lua`, `lua/unlock.lua`,
//! `lua/renew.lua` into your crate, with `mod lock; mod redis;` at its root. Crates:
//! `redis` (features `tokio-comp`, `script`, `connection-manager`), `futures`, `tokio`
//! (features `rt`, `sync`, `time`), `async-trait`, `thiserror`, `tracing`, `uuid`
//! (features `v4`). `./scripts/copy-check redis DIR` builds such a copy and runs it on
//! a real server. Example: `cargo run -p locks --example redis`.
//!
//! # Algorithm
//! The lock is a hash `{holder: count, "#token": token}` with a TTL; three Lua scripts
//! (`lua/`), each loaded once (`LazyLock<Script>`, EVALSHA with reload on NOSCRIPT):
//! 1. `lock.lua`: no hash → create it with count 1, `PEXPIRE`, take the next token
//!    (`max(last token + 1, TIME in µs)`, see below) and store it: acquired. Our holder in the hash → count + 1,
//!    `PEXPIRE`, return the **stored** token: re-entered. Someone else → return its
//!    `PTTL`.
//! 2. `unlock.lua`: not our holder → refuse. Count − 1; at 0, `DEL` and `PUBLISH` on
//!    the key's channel.
//! 3. `renew.lua`: `PEXPIRE` only if our holder is still in the hash.
//!
//! Renewal every lease/3 is the shared watchdog in [`crate::lock::Locker`] (Redisson's
//! "watchdog"). Waiting ([`RedisLock::acquire`]) is pub/sub: each process keeps **one** pattern subscription
//! to every lock's release channel, made when the lock connects. A waiter registers
//! for its key *before* its attempt; a release wakes one local waiter, which tries
//! again. If the notification never comes (subscription down, a holder that expired
//! instead of releasing), the waiter wakes after the holder's `PTTL`. No busy polling.
//!
//! # Guarantees
//! Mutual exclusion while Redis keeps its data and the holder runs within its lease;
//! reentrancy per holder; only the holder releases; a token that grows with every
//! new acquisition of a key, also across Redis losing its data (unless its clock went
//! back meanwhile).
//!
//! # How it fails
//! - **Pause past the lease** (GC, SIGSTOP): the key expires, another holder takes it;
//!   the paused one wakes and writes. Fence writes with the token.
//! - **Redis restart without persistence, or failover to a replica that missed the
//!   write** (replication is asynchronous): the lock is gone while its holder still
//!   works, and a second holder acquires. Fence the writes with the token.
//! - The unlock is one script because a client-side `GET`, compare, `DEL` deletes the
//!   next holder's lock when the lease ends between the two (the `get-then-del`
//!   mistake in `app/src/strategies/distributed/mistakes.rs`, runnable).
//!
//! # Tokens that survive Redis losing them
//! A plain `INCR` counter goes back with the data: after a restart it starts at 1 again,
//! every new holder's token is one the resource's fence has already outgrown, and every
//! holder is refused until the counter climbs back (with tokens in the millions:
//! forever). So a token is `max(last + 1, the Redis server's clock in µs)` (`TIME`
//! inside the script): one per acquisition and increasing like a counter while Redis
//! keeps its data; after a loss, the clock is already past every token handed out
//! before (a lost increment is at most the clock at that moment). No extra round trip,
//! nothing outside Redis. The clock only decides *liveness*: a server clock set back
//! across a data loss makes the fence refuse holders until it has caught up again
//! (safe); it can never let a stale holder through, because the resource compares
//! tokens, not Redis. (ZooKeeper's zxid does the same with an election epoch in its
//! high 32 bits.)
//! - **Clocks**: Redis expires keys by its own clock; a jump of the server's clock
//!   ends leases early. The holder's deadline runs on its monotonic clock from before
//!   the request, so the holder gives up first.
//! - `./scripts/chaos` runs this lock in the service under load (holder frozen past its
//!   lease, holder killed, Redis restarted empty, holder partitioned from Redis, an
//!   ambiguous COMMIT, a Sentinel failover); the README's "Faults and fencing" has what
//!   one run showed.
//!
//! # Sentinel
//! [`RedisLock::connect`] talks to one server. `redis_sentinel.rs` (optional: take it
//! too, and the `redis` crate's `sentinel` feature) follows the primary that
//! Sentinel names across failovers, and says what that does not fix;
//! [`RedisLock::with_min_replicas`] is the usual mitigation.

use crate::lock::{Acquired, HolderId, LockBackend, LockError};
use async_trait::async_trait;
use futures::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, RedisError, Script, ScriptInvocation};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

static LOCK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/lock.lua")));
static UNLOCK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/unlock.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/renew.lua")));

/// Every lock's release channel starts with this; the process subscribes to the pattern.
const CHANNEL_PREFIX: &str = "lock-released:";

fn channel(key: &str) -> String {
    format!("{CHANNEL_PREFIX}{key}")
}

/// The key's last token. (In Redis Cluster, wrap the lock key in a hash tag,
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
    primary: Arc<dyn Connection>,
    wakeups: Arc<Wakeups>,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    loop {
        // The primary of now: after a failover, the new one.
        let client = primary.client();
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

/// Where the lock's commands go: one server ([`Single`], what [`RedisLock::connect`]
/// uses), or the primary Sentinel names, followed across failovers (`redis_sentinel.rs`).
#[async_trait]
pub trait Connection: Send + Sync + 'static {
    /// The connection now, and its generation (pass it to [`Connection::follow`]).
    fn conn(&self) -> (ConnectionManager, u64);
    /// A client for the server of now (the release subscription opens its own).
    fn client(&self) -> redis::Client;
    /// After `error` on the connection of `generation`: `true` when the connection
    /// moved to another server (retry there, once). One server never moves.
    async fn follow(&self, _error: &RedisError, _generation: u64) -> bool {
        false
    }
}

/// One server.
pub struct Single {
    client: redis::Client,
    conn: ConnectionManager,
}

impl Single {
    pub async fn connect(url: &str) -> Result<Single, RedisError> {
        let client = redis::Client::open(url)?;
        let conn = open(&client).await?;
        Ok(Single { client, conn })
    }
}

impl Connection for Single {
    fn conn(&self) -> (ConnectionManager, u64) {
        (self.conn.clone(), 0)
    }

    fn client(&self) -> redis::Client {
        self.client.clone()
    }
}

/// A connection that gives up after 2 s (connect, answer) and retries twice.
pub async fn open(client: &redis::Client) -> Result<ConnectionManager, RedisError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)))
        .set_number_of_retries(2);
    ConnectionManager::new_with_config(client.clone(), config).await
}

/// The Redisson-style reentrant lock with fencing tokens and pub/sub wake-up.
pub struct RedisLock {
    primary: Arc<dyn Connection>,
    wakeups: Arc<Wakeups>,
    subscription: JoinHandle<()>,
    /// `WAIT` for this many replicas, this long, after each acquisition.
    min_replicas: Option<(u32, Duration)>,
}

impl RedisLock {
    /// Connects to one server; see [`RedisLock::on`].
    pub async fn connect(url: &str) -> Result<RedisLock, LockError> {
        let single = Single::connect(url).await.map_err(backend)?;
        Ok(Self::on(Arc::new(single)).await)
    }

    /// The lock on `primary`, with the process's release subscription open (waiting
    /// up to 2 s for it to be confirmed, so that no release after this returns is
    /// missed).
    pub async fn on(primary: Arc<dyn Connection>) -> RedisLock {
        let wakeups = Arc::new(Wakeups::default());
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let subscription = tokio::spawn(subscribe(primary.clone(), wakeups.clone(), ready_tx));
        if tokio::time::timeout(Duration::from_secs(2), ready_rx)
            .await
            .is_err()
        {
            tracing::warn!(
                "redis lock: release subscription not confirmed yet; waiters use PTTL until it is"
            );
        }
        RedisLock {
            primary,
            wakeups,
            subscription,
            min_replicas: None,
        }
    }

    /// Grants a lock only once `replicas` replicas acknowledged it (`WAIT replicas
    /// timeout` after the lock script); otherwise gives it back and fails with
    /// [`LockError::Backend`]. See "Sentinel, and what it does not fix" in
    /// `redis_sentinel.rs`.
    pub fn with_min_replicas(mut self, replicas: u32, timeout: Duration) -> RedisLock {
        self.min_replicas = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// Runs a script on the primary; after a failover, once more on the new one.
    /// Returns the answer and the connection that gave it (a `WAIT` must follow on it).
    async fn run<T: FromRedisValue>(
        &self,
        invocation: ScriptInvocation<'_>,
    ) -> Result<(T, ConnectionManager), LockError> {
        let (mut conn, generation) = self.primary.conn();
        match invocation.invoke_async(&mut conn).await {
            Ok(answer) => Ok((answer, conn)),
            Err(e) if self.primary.follow(&e, generation).await => {
                let (mut conn, _) = self.primary.conn();
                let answer = invocation.invoke_async(&mut conn).await.map_err(backend)?;
                Ok((answer, conn))
            }
            Err(e) => Err(backend(e)),
        }
    }
}

impl Drop for RedisLock {
    fn drop(&mut self) {
        self.subscription.abort();
    }
}

/// One attempt's outcome: the token, or busy with the holder's remaining lease.
enum Attempt {
    Acquired(u64),
    Busy(Option<Duration>),
}

impl RedisLock {
    /// One attempt (`lock.lua`): the token, or the holder's remaining lease.
    async fn attempt(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
    ) -> Result<Attempt, LockError> {
        let mut invocation = LOCK.prepare_invoke();
        invocation
            .key(key)
            .key(token_key(key))
            .arg(holder.as_str())
            .arg(lease_ms(lease));
        let ((acquired, value), mut conn): ((i64, i64), _) = self.run(invocation).await?;
        if acquired == 1
            && let Some((replicas, timeout)) = self.min_replicas
        {
            // On the connection that took the lock: WAIT counts the replicas that
            // acknowledged this connection's writes.
            let acked: i64 = redis::cmd("WAIT")
                .arg(replicas)
                .arg(timeout.as_millis() as u64)
                .query_async(&mut conn)
                .await
                .map_err(backend)?;
            if acked < i64::from(replicas) {
                let _ = self.unlock(key, holder).await;
                return Err(LockError::Backend(format!(
                    "redis: the lock was acknowledged by {acked} of the {replicas} replica(s) required within {timeout:?}; given back"
                )));
            }
        }
        Ok(match acquired {
            1 => Attempt::Acquired(value as u64),
            // PTTL: -1 no expiry (not ours to judge), -2 gone since (retry soon).
            _ => Attempt::Busy((value >= 0).then(|| Duration::from_millis(value as u64))),
        })
    }
}

#[async_trait]
impl LockBackend for RedisLock {
    fn name(&self) -> &'static str {
        "redis"
    }

    /// Attempts, and between attempts sleeps until a release of `key` is announced
    /// (pub/sub) or, if none comes, until the holder's lease (its `PTTL`) ends.
    ///
    /// # Errors
    /// [`LockError::Backend`]: Redis failed or did not answer within 2 s.
    ///
    /// # Cancellation safety
    /// Dropped while `lock.lua` is in flight, the lock may have been taken (or
    /// re-entered: one more level on the holder's count) with nobody to release it:
    /// it stays until its lease ends. Dropped while waiting, nothing is left.
    async fn acquire(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
        wait: Duration,
    ) -> Result<Option<Acquired>, LockError> {
        let deadline = Instant::now() + wait;
        loop {
            // Registered before the attempt: a release right after it still wakes us.
            let mut released = std::pin::pin!(self.wakeups.register(key).notified_owned());
            released.as_mut().enable();
            let since = Instant::now();
            let pttl = match self.attempt(key, holder, lease).await? {
                Attempt::Acquired(token) => {
                    return Ok(Some(Acquired {
                        token: Some(token),
                        since,
                    }));
                }
                Attempt::Busy(pttl) => pttl,
            };
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            // A release wakes us earlier; the PTTL is the fallback when none comes.
            let fallback = pttl
                .unwrap_or(Duration::from_millis(50))
                .max(Duration::from_millis(1));
            let _ = tokio::time::timeout(fallback.min(deadline - now), released).await;
        }
    }

    async fn renew(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
    ) -> Result<Option<Instant>, LockError> {
        let since = Instant::now();
        let mut invocation = RENEW.prepare_invoke();
        invocation
            .key(key)
            .arg(holder.as_str())
            .arg(lease_ms(lease));
        let (renewed, _): (i64, _) = self.run(invocation).await?;
        Ok((renewed == 1).then_some(since))
    }

    /// # Errors
    /// [`LockError::NotHolder`] when `holder` does not hold it; [`LockError::Backend`]
    /// when Redis failed (the lease then ends the lock).
    async fn unlock(&self, key: &str, holder: &HolderId) -> Result<(), LockError> {
        let mut invocation = UNLOCK.prepare_invoke();
        invocation.key(key).arg(holder.as_str()).arg(channel(key));
        let (left, _): (i64, _) = self.run(invocation).await?;
        if left < 0 {
            return Err(LockError::not_holder(key, holder));
        }
        Ok(())
    }
}
