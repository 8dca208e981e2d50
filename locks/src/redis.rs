//! The Redisson-style reentrant Redis lock ([`RedisLock`]): a hash in Lua, a fencing
//! token per key, pub/sub wake-up. It grows from the minimal `SET NX PX` lock
//! (`redis_simple.rs`), which is not reentrant, has no token and can only poll.
//!
//! # Copying this file
//! Take `src/lock.rs` (the core), this file and its scripts (`lua/lock.lua`,
//! `lua/unlock.lua`, `lua/renew.lua`) into your crate, with `mod lock; mod redis;` at
//! its root, and the crates `copies.toml` lists under `[backend.redis]`.
//! `./scripts/copy-check redis DIR` builds such a copy and runs it on a real server.
//! Example: `cargo run -p locks --example redis`.
//!
//! # Algorithm
//! The lock is a hash `{holder: count, "#token": token}` with a TTL; three Lua scripts
//! (`lua/`), each loaded once (`LazyLock<Script>`, EVALSHA with reload on NOSCRIPT):
//! 1. `lock.lua`: no hash → create it with count 1, `PEXPIRE`, store the next token
//!    (below): acquired. Our holder in the hash → count + 1, `PEXPIRE`, return the
//!    **stored** token: re-entered. Someone else → return its `PTTL`.
//! 2. `unlock.lua`: not our holder → refuse. Count − 1; at 0, `DEL` and `PUBLISH` on
//!    the key's channel.
//! 3. `renew.lua`: `PEXPIRE` only if our holder is still in the hash.
//!
//! Renewal every lease/3 is the shared watchdog ([`crate::lock::Locker`], Redisson's
//! "watchdog"). Waiting ([`RedisLock::acquire`]) is pub/sub: each process keeps
//! **one** pattern subscription to every lock's release channel. A waiter registers
//! for its key *before* its attempt; a release wakes one local waiter, which tries
//! again; without a notification (subscription down, a holder that expired instead of
//! releasing) it wakes after the holder's `PTTL`. No busy polling.
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
//!   write** (replication is asynchronous): the lock is gone while its holder works,
//!   and a second holder acquires. Fence the writes with the token.
//! - **Clocks**: Redis expires keys by its own clock; a jump ends leases early. The
//!   holder's deadline runs on its monotonic clock from before the request, so the
//!   holder gives up first.
//! - The unlock is one script because a client-side `GET`, compare, `DEL` deletes the
//!   next holder's lock when the lease ends between the two (the `get-then-del`
//!   mistake in `app/src/strategies/distributed/mistakes.rs`, runnable).
//! - `./scripts/chaos` shows each of these in the service under load.
//!
//! # Tokens that survive Redis losing them
//! A plain `INCR` counter goes back with the data: after a restart every new token is
//! one the resource's fence has already outgrown, and every holder is refused until
//! the counter climbs back. So a token is `max(last + 1, the server's clock in µs)`
//! (`TIME` inside the script): increasing like a counter while Redis keeps its data;
//! after a loss, the clock is already past every token handed out before. No extra
//! round trip. The clock only decides *liveness*: a clock set back across a data loss
//! makes the fence refuse holders until it catches up (safe); it never lets a stale
//! holder through, because the resource compares tokens. (ZooKeeper's zxid does the
//! same with an election epoch in its high 32 bits.)
//!
//! # Sentinel, Cluster
//! [`RedisLock::connect`] talks to one server. `redis_sentinel.rs` (optional) follows
//! the primary Sentinel names, and says what that does not fix; `redis_cluster.rs`
//! (optional) puts the lock on a Redis Cluster.

use crate::lock::{Acquired, BackendKind, HolderId, LockBackend, LockError};
use async_trait::async_trait;
use futures::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{
    ErrorKind, FromRedisValue, RedisError, Script, ScriptInvocation, ServerErrorKind, Value,
};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{Notify, OnceCell, oneshot::Sender};
use tokio::task::JoinHandle;
use tokio::time::Instant;

static LOCK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/lock.lua")));
static UNLOCK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/unlock.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/renew.lua")));

/// Every lock's release channel starts with this; the process subscribes to the pattern.
const CHANNEL_PREFIX: &str = "lock-released:";

// ANCHOR: tagged
/// `key` with a hash tag: its token and channel are then in its slot (Redis Cluster).
fn tagged(key: &str) -> String {
    let brace = |b: &'static str| if key.contains('{') { "" } else { b };
    format!("{}{key}{}", brace("{"), brace("}"))
}
// ANCHOR_END: tagged

pub(crate) fn backend(e: RedisError) -> LockError {
    let kind = if e.is_timeout() {
        BackendKind::Timeout
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        BackendKind::Unreachable
    } else {
        BackendKind::Failed
    };
    LockError::Backend("redis", kind, e.into())
}

/// Local waiters by channel. A release announced on Redis wakes one of them.
#[derive(Default)]
pub struct Wakeups {
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

    /// A release on `channel` wakes one waiter: the others stay asleep, no stampede.
    pub fn released(&self, channel: &str) {
        let by_key = self.by_key.lock().expect("wakeups poisoned");
        if let Some(notify) = by_key.get(channel).and_then(Weak::upgrade) {
            notify.notify_one();
        }
    }
}

/// The process's one subscription: a task that keeps a pattern subscription to every
/// release channel and wakes local waiters. It reconnects after a failure; meanwhile
/// waiters fall back to the holder's PTTL.
pub async fn subscribe(
    client: impl Fn() -> redis::Client,
    wakeups: Arc<Wakeups>,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    loop {
        // The primary of now: after a failover, the new one.
        let client = client();
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.psubscribe(format!("{CHANNEL_PREFIX}*")).await {
                Ok(()) => {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                    let mut messages = pubsub.into_on_message();
                    while let Some(message) = messages.next().await {
                        wakeups.released(message.get_channel_name());
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

/// Where the lock's commands go: one server ([`Single`]), the primary Sentinel names
/// (`redis_sentinel.rs`), or the master of the key's slot (`redis_cluster.rs`).
#[async_trait]
pub trait Connection: Send + Sync + 'static {
    /// Runs a lock script (EVALSHA, loading it on NOSCRIPT) where `key` lives.
    async fn run(&self, key: &str, script: &ScriptInvocation<'_>) -> Result<Value, RedisError>;
    /// Runs a lock script where `key` lives and `then` (`WAIT`) right after it, in one
    /// pipeline: on the same connection, so that a reconnection, a failover followed
    /// or a redirection moves the two together. On a connection of their own: a
    /// `WAIT` holds up every command behind it on its connection, and renewals and
    /// releases must not queue behind an attempt's.
    async fn run_then(
        &self,
        key: &str,
        script: &ScriptInvocation<'_>,
        then: &redis::Cmd,
    ) -> Result<(Value, Value), RedisError>;
    /// The release subscription ([`subscribe`]), for the process's lifetime.
    async fn subscribe(self: Arc<Self>, wakeups: Arc<Wakeups>, ready: Sender<()>);
    /// Before waiting on `channel`: `true` when it had to start listening (try again).
    async fn watch(&self, _channel: &str) -> bool {
        false
    }
    /// How `unlock.lua` announces a release: `publish`, or a cluster's `spublish`.
    fn publish(&self) -> &'static str {
        "publish"
    }
}

/// One server.
pub struct Single {
    client: redis::Client,
    conn: ConnectionManager,
    /// The attempts that wait for replicas (opened on the first): see
    /// [`Connection::run_then`].
    waits: OnceCell<ConnectionManager>,
}

#[async_trait]
impl Connection for Single {
    async fn run(&self, _key: &str, script: &ScriptInvocation<'_>) -> Result<Value, RedisError> {
        script.invoke_async(&mut self.conn.clone()).await
    }

    async fn run_then(
        &self,
        _key: &str,
        script: &ScriptInvocation<'_>,
        then: &redis::Cmd,
    ) -> Result<(Value, Value), RedisError> {
        let waits = self.waits.get_or_try_init(|| open(&self.client)).await?;
        pipelined(&mut waits.clone(), script, then).await
    }

    async fn subscribe(self: Arc<Self>, wakeups: Arc<Wakeups>, ready: Sender<()>) {
        subscribe(|| self.client.clone(), wakeups, ready).await
    }
}

/// `script`, then `then`, in one pipeline on `conn`; on NOSCRIPT the script is loaded
/// and the two are sent again.
pub(crate) async fn pipelined(
    conn: &mut impl redis::aio::ConnectionLike,
    script: &ScriptInvocation<'_>,
    then: &redis::Cmd,
) -> Result<(Value, Value), RedisError> {
    let mut pipeline = redis::pipe();
    pipeline.invoke_script(script).add_command(then.clone());
    match pipeline.query_async(conn).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.load_async(conn).await?;
            pipeline.query_async(conn).await
        }
        answer => answer,
    }
}

/// A connection that gives up after 2 s (connect, answer) and retries twice.
///
/// A renewal that waits longer than this is retried on the watchdog's next tick
/// anyway, well inside the lease.
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
    /// [`RedisLock::with_min_replicas`]: how many replicas, and how long to wait.
    min_replicas: Option<(u32, Duration)>,
}

impl RedisLock {
    /// Connects to one server; see [`RedisLock::on`].
    pub async fn connect(url: &str) -> Result<RedisLock, LockError> {
        let client = redis::Client::open(url).map_err(backend)?;
        let conn = open(&client).await.map_err(backend)?;
        let waits = OnceCell::new();
        Ok(Self::on(Arc::new(Single {
            client,
            conn,
            waits,
        }))
        .await)
    }

    /// The lock on `primary`, with the process's release subscription open.
    ///
    /// It waits up to 2 s for the subscription to be confirmed, so that no release
    /// after this returns is missed. On a Redis Cluster the channels are subscribed
    /// one by one later, as waiters ask for them (`redis_cluster.rs`).
    pub async fn on(primary: Arc<dyn Connection>) -> RedisLock {
        let wakeups = Arc::new(Wakeups::default());
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let subscription = tokio::spawn(primary.clone().subscribe(wakeups.clone(), ready_tx));
        let confirmed = tokio::time::timeout(Duration::from_secs(2), ready_rx).await;
        if confirmed.is_err() {
            tracing::warn!(
                "redis lock: release subscription unconfirmed; waiters use PTTL meanwhile"
            );
        }
        RedisLock {
            primary,
            wakeups,
            subscription,
            min_replicas: None,
        }
    }

    /// Grants a lock only once `replicas` replicas acknowledged it.
    ///
    /// Each attempt goes with `WAIT replicas timeout`, in one pipeline on a connection
    /// of its own ([`Connection::run_then`]). A lock taken but acknowledged by fewer
    /// replicas in time is given back, and the attempt fails with
    /// [`LockError::Backend`]; a failover to a replica that acknowledged keeps it.
    ///
    /// It narrows the failover window and no more: renewals are not waited for, a
    /// replica that had not acknowledged may still be promoted, a replica restarted
    /// empty forgets, so fence the writes. While no replica answers, nobody gets the
    /// lock. Keep `timeout` under the connection's 2 s answer timeout: past it, an
    /// unacknowledged attempt ends in a timeout and leaves its lock for its lease.
    pub fn with_min_replicas(mut self, replicas: u32, timeout: Duration) -> RedisLock {
        self.min_replicas = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// One `lock.lua`: `(1, token)` acquired, `(0, PTTL)` held by another. With
    /// [`RedisLock::with_min_replicas`], sent with its `WAIT`: `WAIT` counts the
    /// replicas that have every write of its own connection, so sent on its own it
    /// could run on another connection (reconnected, or another node's) and vouch
    /// for writes that are not this lock.
    async fn attempt(
        &self,
        key: &str,
        holder: &HolderId,
        invocation: ScriptInvocation<'_>,
    ) -> Result<(i64, i64), LockError> {
        let Some((replicas, timeout)) = self.min_replicas else {
            return self.run(key, invocation).await;
        };
        let mut wait = redis::cmd("WAIT");
        // At least 1 ms: `WAIT n 0` would wait for ever.
        wait.arg(replicas).arg(timeout.as_millis().max(1) as u64);
        // Unanswered, the script may or may not have run: the lock may then stay until
        // its lease ends (a release now could take a level this holder held before).
        let answer = self.primary.run_then(key, &invocation, &wait).await;
        let (attempt, acked) = answer.map_err(backend)?;
        let ((acquired, value), acked): ((i64, i64), i64) = (parse(attempt)?, parse(acked)?);
        if acquired == 1 && acked < i64::from(replicas) {
            let _ = self.unlock(key, holder).await;
            let why = format!(
                "the lock was acknowledged by {acked} of the {replicas} replica(s) required within {timeout:?}; given back"
            );
            return Err(LockError::Backend("redis", BackendKind::Failed, why.into()));
        }
        Ok((acquired, value))
    }

    /// Runs a script where `key` lives.
    async fn run<T: FromRedisValue>(
        &self,
        key: &str,
        s: ScriptInvocation<'_>,
    ) -> Result<T, LockError> {
        parse(self.primary.run(key, &s).await.map_err(backend)?)
    }
}

/// A script's answer as `T`; one of another shape is a backend error.
fn parse<T: FromRedisValue>(value: Value) -> Result<T, LockError> {
    redis::from_redis_value(value).map_err(|e| backend(e.into()))
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

    // ANCHOR: acquire
    /// Attempts, and between attempts sleeps until a release of `key` is announced
    /// (pub/sub) or, if none comes, until the holder's lease (its `PTTL`) ends.
    ///
    /// # Errors
    /// [`LockError::Backend`]: Redis failed or did not answer within 2 s (the lock
    /// may then have been taken, and stays until its lease ends); with
    /// [`RedisLock::with_min_replicas`], also a lock fewer replicas acknowledged in
    /// time (given back).
    ///
    /// # Cancellation safety
    /// Dropped while `lock.lua` (and its `WAIT`) is in flight, the lock may have been
    /// taken (or re-entered: one more level on the holder's count) with nobody to
    /// release it: it stays until its lease ends. The same when the client resends an
    /// attempt whose answer it lost: a second level. Dropped while waiting, nothing is
    /// left.
    async fn acquire(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
        wait: Duration,
    ) -> Result<Option<Acquired>, LockError> {
        let deadline = Instant::now() + wait;
        let channel = format!("{CHANNEL_PREFIX}{}", tagged(key));
        loop {
            // Registered before the attempt: a release right after it still wakes us.
            let mut released = std::pin::pin!(self.wakeups.register(&channel).notified_owned());
            released.as_mut().enable();
            let since = Instant::now();
            // One attempt (`lock.lua`): the token, or the holder's remaining lease.
            let mut invocation = LOCK.prepare_invoke();
            invocation
                .key(key)
                .key(format!("{}:fence", tagged(key)))
                .arg(holder.as_str())
                .arg(lease.as_millis().max(1) as u64);
            let (acquired, value) = self.attempt(key, holder, invocation).await?;
            if acquired == 1 {
                let token = Some(value as u64);
                return Ok(Some(Acquired { token, since }));
            }
            // PTTL: -1 no expiry (not ours to judge), -2 gone since (retry soon).
            let pttl = (value >= 0).then(|| Duration::from_millis(value as u64));
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            } else if self.primary.watch(&channel).await {
                continue;
            }
            // A release wakes us earlier; the PTTL is the fallback when none comes.
            let fallback = pttl
                .unwrap_or(Duration::from_millis(50))
                .max(Duration::from_millis(1));
            let _ = tokio::time::timeout(fallback.min(deadline - now), released).await;
        }
    }
    // ANCHOR_END: acquire

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
            .arg(lease.as_millis().max(1) as u64);
        let renewed: i64 = self.run(key, invocation).await?;
        Ok((renewed == 1).then_some(since))
    }

    /// # Errors
    /// [`LockError::NotHolder`] when `holder` does not hold it; [`LockError::Backend`]
    /// when Redis failed (the lease then ends the lock).
    async fn unlock(&self, key: &str, holder: &HolderId) -> Result<(), LockError> {
        let mut invocation = UNLOCK.prepare_invoke();
        invocation
            .key(key)
            .arg(holder.as_str())
            .arg(format!("{CHANNEL_PREFIX}{}", tagged(key)))
            .arg(self.primary.publish());
        let left: i64 = self.run(key, invocation).await?;
        if left < 0 {
            return Err(LockError::not_holder(key, holder));
        }
        Ok(())
    }
}
