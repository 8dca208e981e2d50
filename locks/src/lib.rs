//! Distributed locks for stock deduction, one self-contained file per backend.
//!
//! Every backend implements [`LockBackend`]: a handful of primitive operations (one
//! acquisition attempt, renew, unlock, and how to wait for a release). [`Locker`] turns
//! any backend into a full lock: acquisition with a wait bound, a [`LockGuard`] with a
//! fencing token and a lost-lock signal, and **one watchdog** shared by every backend
//! that renews the lease every lease/3 while the guard lives.
//!
//! # Layout
//! - this file: the API ([`Locker`], [`LockGuard`], [`LockBackend`], [`LockOptions`],
//!   [`HolderId`], [`LockError`], [`LostReason`]) and the watchdog;
//! - [`mysql`]: the lock table `distributed_lock` (seed 000, done right);
//! - [`redis`]: the Redisson-style reentrant hash lock in Lua, with pub/sub wake-up,
//!   and the minimal `SET NX PX` lock it grows from;
//! - [`redlock`]: RedLock over N independent Redis masters (5 by default);
//! - [`zookeeper`]: ephemeral sequential nodes, each waiter watching only its
//!   predecessor, named like Apache Curator's `InterProcessMutex`;
//! - [`noop`]: a lock that always grants, **broken on purpose**, to prove that the test
//!   suite catches a broken lock;
//! - `lua/`: the Redis scripts, loaded with `include_str!`.
//!
//! Each backend is a Cargo feature of the same name (`mysql`, `redis`, `redlock`,
//! `zookeeper`; all on by default): with `default-features = false, features =
//! ["redis"]` the crate builds without sqlx and zookeeper-client.
//!
//! # Backends and what they guarantee
//!
//! | backend | file | expiry | reentrant | fencing token | waiting |
//! |---|---|---|---|---|---|
//! | MySQL lock table | [`mysql`] | lease (database clock), renewed | yes | row counter, survives release | jittered backoff |
//! | Redis hash lock | [`redis::RedisLock`] | lease (`PEXPIRE`), renewed | yes | `INCR` per key (lost if Redis loses it) | pub/sub, one subscription per process |
//! | Redis `SET NX PX` | [`redis::SimpleRedisLock`] | lease, renewed | no | none | backoff |
//! | RedLock, 5 Redis | [`redlock`] | lease − drift, majority-renewed | no | none (owner tag) | random backoff |
//! | ZooKeeper | [`zookeeper`] | session (ephemeral node) | yes | czxid of the node | watch the predecessor, FIFO |
//! | no-op (tests only) | [`noop`] | none | claims to | claims to | never waits |
//!
//!
//! # What a lease lock cannot promise
//! A holder that pauses longer than its lease (GC, SIGSTOP, swap, a long network
//! stall) wakes up believing it still holds the lock while another holder has it.
//! The watchdog cannot help: it is paused too. The [lost-lock signal](LockGuard::is_lost)
//! tells the holder as soon as it runs again, but a write already on its way is not
//! stopped. Only the resource can refuse it: pass the [fencing token](LockGuard::token)
//! with every write and let the resource reject tokens older than the newest it has
//! seen (the service's `stock_fence` table does this).
//!
//! # Example
//! ```no_run
//! # async fn example() -> Result<(), locks::LockError> {
//! use locks::{HolderId, LockOptions, Locker};
//! use std::time::Duration;
//!
//! let backend = locks::redis::RedisLock::connect("redis://127.0.0.1:6379").await?;
//! let locker = Locker::new(backend);
//! let holder = HolderId::random();
//! let guard = locker
//!     .acquire("stock:42", &holder, &LockOptions::default(), Duration::from_secs(5))
//!     .await?;
//! // ... read, decide, write with guard.token() as the fencing token ...
//! if guard.is_lost() {
//!     // the lease ran out or someone took the lock: do not trust what you read
//! }
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "mysql")]
pub mod mysql;
pub mod noop;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "redlock")]
pub mod redlock;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

use async_trait::async_trait;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Everything that can go wrong with a lock.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another holder kept the lock for the whole wait.
    #[error("lock `{key}` not acquired within {waited:?}")]
    TimedOut { key: String, waited: Duration },
    /// The lock was held and is not any more (see [`LostReason`]).
    #[error("lock `{key}` lost: {reason}")]
    Lost { key: String, reason: LostReason },
    /// An unlock or renewal by someone who does not hold the lock.
    #[error("`{holder}` does not hold lock `{key}`")]
    NotHolder { key: String, holder: String },
    /// A bad argument (an empty key, a holder id the backend cannot store, ...).
    #[error("invalid lock argument: {0}")]
    Invalid(String),
    /// The backend failed or could not be reached.
    #[error("lock backend: {0}")]
    Backend(String),
}

/// Why a held lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostReason {
    /// A renewal found another holder, or no lock at all: it expired and was taken,
    /// or it was removed from outside (a deleted key, a cleared row, a Redis restart).
    NotHolder,
    /// The lease ran out before a renewal got through (backend slow or unreachable,
    /// or renewal turned off).
    Expired,
    /// The maximum hold time ended the lease: the watchdog stopped renewing.
    MaxHold,
}

impl LockError {
    /// `holder` does not hold `key`.
    pub fn not_holder(key: &str, holder: &HolderId) -> LockError {
        LockError::NotHolder {
            key: key.to_string(),
            holder: holder.to_string(),
        }
    }
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::NotHolder => "another holder has it, or it was removed",
            LostReason::Expired => "the lease ran out before it could be renewed",
            LostReason::MaxHold => "the maximum hold time ended the lease",
        })
    }
}

/// Who holds a lock. Async Rust has no thread id to play Redisson's `uuid:threadId`,
/// so the caller names the holder explicitly: one id per logical owner (a request, a
/// job). Reentrancy is counted per holder, and only the holder may release.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HolderId(String);

impl HolderId {
    /// 1 to 128 printable ASCII characters, not starting with `#` (reserved by the
    /// Redis lock for its token field).
    pub fn new(id: impl Into<String>) -> Result<HolderId, LockError> {
        let id = id.into();
        let ok = (1..=128).contains(&id.len())
            && id.bytes().all(|b| b.is_ascii_graphic())
            && !id.starts_with('#');
        if ok {
            Ok(HolderId(id))
        } else {
            Err(LockError::Invalid(format!(
                "holder id `{id}`: 1-128 printable ASCII characters, not starting with #"
            )))
        }
    }

    /// A new random holder (a UUID).
    pub fn random() -> HolderId {
        HolderId(uuid::Uuid::new_v4().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HolderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a lock is held.
#[derive(Debug, Clone)]
pub struct LockOptions {
    /// How long the backend keeps the lock without a renewal. The holder's own
    /// deadline is counted from *before* the acquire request was sent, so it always
    /// ends before the backend's.
    pub lease: Duration,
    /// Renew every lease/3 while the guard lives (Redisson's watchdog). Off: the lock
    /// simply expires after `lease`.
    pub renew: bool,
    /// Stop renewing this long after the acquisition started: a hung task must not
    /// hold a lock forever. The last renewal is cut so the lease ends exactly then.
    pub max_hold: Option<Duration>,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            lease: Duration::from_secs(10),
            renew: true,
            max_hold: Some(Duration::from_secs(60)),
        }
    }
}

/// How a backend expires a holder that went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// A lease with a deadline, renewed by the watchdog.
    Lease,
    /// A session (ZooKeeper): the lock lives as long as the client's session.
    Session,
}

/// Whether a backend gives each acquisition a token that only ever grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fencing {
    /// Strictly increasing per key: usable as a fencing token.
    Monotonic,
    /// No token (RedLock, the minimal Redis lock).
    None,
}

/// What a backend promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub expiry: Expiry,
    pub fencing: Fencing,
    pub reentrant: bool,
}

/// The result of one acquisition attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// Acquired (or re-entered: a reentrant acquisition returns the same token).
    Acquired { token: Option<u64> },
    /// Someone else holds it; `retry_after` is what is left of their lease, if known.
    Busy { retry_after: Option<Duration> },
}

/// A registration for "the lock was released", made *before* an attempt so that a
/// release between a failed attempt and the wait is not missed. Backends without
/// notifications return [`Waiter::backoff`].
pub struct Waiter(Option<Pin<Box<dyn Future<Output = ()> + Send>>>);

impl Waiter {
    /// No notification: the wait is a plain sleep.
    pub fn backoff() -> Waiter {
        Waiter(None)
    }

    /// Wakes when `released` completes.
    pub fn on(released: impl Future<Output = ()> + Send + 'static) -> Waiter {
        Waiter(Some(Box::pin(released)))
    }

    /// Waits for the notification, or at most `max`.
    pub async fn wait(self, max: Duration) {
        match self.0 {
            Some(released) => {
                let _ = tokio::time::timeout(max, released).await;
            }
            None => tokio::time::sleep(max).await,
        }
    }
}

/// The primitive operations of one lock backend. Implement these and [`Locker`] gives
/// you waiting, guards, renewal and the lost-lock signal.
#[async_trait]
pub trait LockBackend: Send + Sync + 'static {
    /// Short name, used in logs and as the fencing table's `backend` column.
    fn name(&self) -> &'static str;

    fn capabilities(&self) -> Capabilities;

    /// One attempt to take (or re-enter) `key` for `holder` with a lease of `lease`.
    async fn try_lock(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
    ) -> Result<Attempt, LockError>;

    /// Extends the lease to `lease` from now if `holder` still holds `key`; `false` if
    /// it does not (expired and taken, or removed).
    async fn renew(&self, key: &str, holder: &HolderId, lease: Duration)
    -> Result<bool, LockError>;

    /// Releases one level of `holder`'s hold on `key` (the lock is free when the count
    /// reaches 0). [`LockError::NotHolder`] when `holder` does not hold it.
    async fn unlock(&self, key: &str, holder: &HolderId) -> Result<(), LockError>;

    /// How much of a lease the holder must not count on, for clock drift between the
    /// holder and the servers (RedLock: 1% of the lease + 2 ms). The holder's local
    /// deadline is `sent + lease - drift`.
    fn drift(&self, _lease: Duration) -> Duration {
        Duration::ZERO
    }

    /// Backends that queue waiters themselves (ZooKeeper: a sequential node per waiter,
    /// each watching its predecessor) do the whole wait here and return `Some`; the
    /// default `None` lets [`Locker`] run its own attempt / wait loop.
    async fn acquire_waiting(
        &self,
        _key: &str,
        _holder: &HolderId,
        _lease: Duration,
        _wait: Duration,
    ) -> Option<Result<Attempt, LockError>> {
        None
    }

    /// Registers for a release notification of `key` (see [`Waiter`]).
    fn waiter(&self, _key: &str) -> Waiter {
        Waiter::backoff()
    }

    /// How long to wait after a busy attempt when no notification comes: jittered,
    /// never longer than the holder's remaining lease.
    fn retry_pause(&self, retry_after: Option<Duration>) -> Duration {
        let jitter = Duration::from_micros(rand::random_range(1_000..=20_000));
        retry_after.map_or(jitter, |left| left.clamp(Duration::from_millis(1), jitter))
    }
}

/// A lock backend made into a full lock: waiting, guards, watchdog, lost signal.
#[derive(Clone)]
pub struct Locker {
    backend: Arc<dyn LockBackend>,
}

impl Locker {
    pub fn new(backend: impl LockBackend) -> Locker {
        Locker {
            backend: Arc::new(backend),
        }
    }

    pub fn from_arc(backend: Arc<dyn LockBackend>) -> Locker {
        Locker { backend }
    }

    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.backend
    }

    pub fn name(&self) -> &'static str {
        self.backend.name()
    }

    pub fn capabilities(&self) -> Capabilities {
        self.backend.capabilities()
    }

    /// One attempt: `Ok(None)` when someone else holds the lock.
    pub async fn try_acquire(
        &self,
        key: &str,
        holder: &HolderId,
        options: &LockOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        validate_key(key)?;
        let sent = Instant::now();
        let lease = first_lease(options);
        match self.backend.try_lock(key, holder, lease).await? {
            Attempt::Acquired { token } => Ok(Some(self.guard(key, holder, token, options, sent))),
            Attempt::Busy { .. } => Ok(None),
        }
    }

    /// Waits up to `wait` for the lock. Between attempts it waits for the backend's
    /// release notification (Redis pub/sub) or a jittered pause, never busy-polling.
    pub async fn acquire(
        &self,
        key: &str,
        holder: &HolderId,
        options: &LockOptions,
        wait: Duration,
    ) -> Result<LockGuard, LockError> {
        validate_key(key)?;
        let started = Instant::now();
        let deadline = started + wait;
        let lease = first_lease(options);
        if let Some(queued) = self.backend.acquire_waiting(key, holder, lease, wait).await {
            return match queued? {
                // A queued lock (a session, not a lease) is ours from the moment the
                // backend confirmed it, not from the start of the wait: the holder's
                // safety margin counts from there.
                Attempt::Acquired { token } => {
                    Ok(self.guard(key, holder, token, options, Instant::now()))
                }
                Attempt::Busy { .. } => Err(LockError::TimedOut {
                    key: key.to_string(),
                    waited: started.elapsed(),
                }),
            };
        }
        loop {
            // Registered before the attempt: a release right after it still wakes us.
            let waiter = self.backend.waiter(key);
            let sent = Instant::now();
            match self
                .backend
                .try_lock(key, holder, first_lease(options))
                .await?
            {
                Attempt::Acquired { token } => {
                    return Ok(self.guard(key, holder, token, options, sent));
                }
                Attempt::Busy { retry_after } => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(LockError::TimedOut {
                            key: key.to_string(),
                            waited: now - started,
                        });
                    }
                    let pause = self.backend.retry_pause(retry_after).min(deadline - now);
                    waiter.wait(pause).await;
                }
            }
        }
    }

    fn guard(
        &self,
        key: &str,
        holder: &HolderId,
        token: Option<u64>,
        options: &LockOptions,
        sent: Instant,
    ) -> LockGuard {
        let (lost_tx, lost_rx) = watch::channel(None);
        let watchdog = tokio::spawn(watchdog(
            self.backend.clone(),
            key.to_string(),
            holder.clone(),
            options.clone(),
            sent,
            lost_tx,
        ));
        LockGuard {
            key: key.to_string(),
            holder: holder.clone(),
            token,
            backend: self.backend.clone(),
            lost: lost_rx,
            watchdog: Some(watchdog),
        }
    }
}

fn validate_key(key: &str) -> Result<(), LockError> {
    if key.is_empty()
        || key.len() > 255
        || !key.bytes().all(|b| b.is_ascii_graphic())
        || key.starts_with('/')
    {
        return Err(LockError::Invalid(format!(
            "lock key `{key}`: 1-255 printable ASCII characters"
        )));
    }
    Ok(())
}

/// The lease of the first acquisition: never longer than the maximum hold time.
fn first_lease(options: &LockOptions) -> Duration {
    options
        .max_hold
        .map_or(options.lease, |max| options.lease.min(max))
}

/// A held lock. Release it with [`LockGuard::release`]; a guard dropped without
/// release stops its watchdog and unlocks in the background (on the current tokio
/// runtime, if there is one; otherwise the lease simply runs out).
pub struct LockGuard {
    key: String,
    holder: HolderId,
    token: Option<u64>,
    backend: Arc<dyn LockBackend>,
    lost: watch::Receiver<Option<LostReason>>,
    watchdog: Option<JoinHandle<()>>,
}

impl LockGuard {
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn holder(&self) -> &HolderId {
        &self.holder
    }

    /// The fencing token of this acquisition (`None` if the backend has none). A
    /// reentrant acquisition has the token of the first one.
    pub fn token(&self) -> Option<u64> {
        self.token
    }

    /// Whether the lock is known to be lost (poll).
    pub fn is_lost(&self) -> bool {
        self.lost.borrow().is_some()
    }

    /// Why the lock was lost, if it was.
    pub fn lost_reason(&self) -> Option<LostReason> {
        *self.lost.borrow()
    }

    /// Completes when the lock is lost (await).
    pub async fn lost(&self) -> LostReason {
        let mut lost = self.lost.clone();
        loop {
            if let Some(reason) = *lost.borrow_and_update() {
                return reason;
            }
            if lost.changed().await.is_err() {
                // The watchdog ended without a verdict (the guard is being released).
                std::future::pending::<()>().await;
            }
        }
    }

    /// A receiver of the lost-lock signal, to hand to another task.
    pub fn lost_signal(&self) -> watch::Receiver<Option<LostReason>> {
        self.lost.clone()
    }

    /// Stops renewing and releases one level of the lock. Fails with
    /// [`LockError::NotHolder`] if the lock had already been lost to someone else.
    pub async fn release(mut self) -> Result<(), LockError> {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
        self.backend.unlock(&self.key, &self.holder).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(watchdog) = self.watchdog.take() else {
            return; // released explicitly
        };
        watchdog.abort();
        // No blocking in Drop: the unlock runs as a task of its own.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (backend, key, holder) =
                (self.backend.clone(), self.key.clone(), self.holder.clone());
            runtime.spawn(async move {
                if let Err(e) = backend.unlock(&key, &holder).await {
                    tracing::debug!(%key, error = %e, "background unlock of a dropped guard failed");
                }
            });
        }
    }
}

/// The one watchdog every backend shares.
///
/// - Every lease/3 it renews the lease; each renewal's deadline is counted from
///   before its request was sent.
/// - A renewal that finds another holder ends the hold: [`LostReason::NotHolder`].
/// - A renewal that fails (backend down, timeout) is retried on the next tick; if
///   none succeeds before the current lease ends: [`LostReason::Expired`].
/// - At `max_hold` it stops renewing (the last renewal is cut to end exactly there)
///   and signals [`LostReason::MaxHold`] when the lease runs out.
async fn watchdog(
    backend: Arc<dyn LockBackend>,
    key: String,
    holder: HolderId,
    options: LockOptions,
    acquired_sent: Instant,
    lost: watch::Sender<Option<LostReason>>,
) {
    let max_hold_end = options.max_hold.map(|max| acquired_sent + max);
    let first = first_lease(&options);
    let mut valid_until = acquired_sent + first.saturating_sub(backend.drift(first));
    let period = (options.lease / 3).max(Duration::from_millis(1));
    let mut next_renewal = acquired_sent + period;
    // Whether the current lease ends where it does because of the maximum hold time
    // (the first lease or the last renewal was cut to end there).
    let mut cut_by_max_hold = options.max_hold.is_some_and(|max| max <= options.lease);
    // The lease ran out: because of the maximum hold time, or because no renewal
    // got through in time.
    let ran_out = |cut: bool| {
        if cut {
            LostReason::MaxHold
        } else {
            LostReason::Expired
        }
    };
    let reason = loop {
        let renewing = options.renew && max_hold_end.is_none_or(|end| Instant::now() < end);
        if !renewing {
            tokio::time::sleep_until(valid_until).await;
            break if options.renew {
                LostReason::MaxHold
            } else {
                LostReason::Expired
            };
        }
        tokio::time::sleep_until(next_renewal.min(valid_until)).await;
        let sent = Instant::now();
        if sent >= valid_until {
            break ran_out(cut_by_max_hold);
        }
        let lease = match max_hold_end {
            Some(end) if end <= sent => continue,
            Some(end) => options.lease.min(end - sent),
            None => options.lease,
        };
        let cut = lease < options.lease;
        next_renewal = sent + period;
        match tokio::time::timeout_at(valid_until, backend.renew(&key, &holder, lease)).await {
            Ok(Ok(true)) => {
                valid_until = sent + lease.saturating_sub(backend.drift(lease));
                cut_by_max_hold = cut;
            }
            Ok(Ok(false)) => break LostReason::NotHolder,
            Ok(Err(e)) => {
                tracing::warn!(%key, error = %e, "lock renewal failed; retrying until the lease ends")
            }
            Err(_) => break ran_out(cut_by_max_hold),
        }
    };
    tracing::info!(%key, %holder, %reason, "lock lost");
    let _ = lost.send(Some(reason));
}
