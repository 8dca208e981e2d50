//! The lock core every backend file builds on.
//!
//! It holds the errors, the holder id, the options, the [`LockGuard`] with its
//! lost-lock signal, and **one watchdog** that renews every lease/3 for every backend.
//!
//! A backend ([`LockBackend`]) owns its whole acquisition, waiting included: a MySQL
//! row retried with jitter, a Redis pub/sub wake-up, a ZooKeeper queue. [`Locker`]
//! turns its answer (a token and the instant the lease counts from) into a guard.

use async_trait::async_trait;
use std::error::Error;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A backend's own error, or a message saying what happened.
pub type Cause = Box<dyn Error + Send + Sync>;

/// Everything that can go wrong with a lock.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another holder kept the lock for the whole wait.
    #[error("lock `{key}` not acquired within {waited:?}")]
    TimedOut { key: String, waited: Duration },
    /// An unlock or renewal by someone who does not hold the lock.
    #[error("`{holder}` does not hold lock `{key}`")]
    NotHolder { key: String, holder: String },
    /// A bad argument (an empty key, a holder id the backend cannot store, ...).
    #[error("invalid lock argument: {0}")]
    Invalid(String),
    /// The backend failed or could not be reached: its name, how it failed (what a
    /// caller can act on), and its client's own error as the source.
    #[error("lock backend: {0}: {2}")]
    Backend(&'static str, BackendKind, #[source] Cause),
}

/// How a backend failed: what its caller can act on ([`LockError::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// No answer in time: the backend is slow or gone, and it may have done what it
    /// was asked.
    Timeout,
    /// Not reachable (or too few nodes answered), or the connection broke.
    Unreachable,
    /// It answered with a failure (an error reply, a vanished key, too few replicas).
    Failed,
}

impl LockError {
    /// How the backend failed (`None`: not a backend failure).
    pub fn kind(&self) -> Option<BackendKind> {
        match self {
            LockError::Backend(_, kind, _) => Some(*kind),
            _ => None,
        }
    }

    /// `holder` does not hold `key`.
    pub fn not_holder(key: &str, holder: &HolderId) -> LockError {
        LockError::NotHolder {
            key: key.to_string(),
            holder: holder.to_string(),
        }
    }
}

/// Why a held lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LostReason {
    /// A renewal found another holder, or no lock at all: it expired and was taken,
    /// or it was removed from outside (a deleted key, a cleared row, a Redis restart).
    #[error("another holder has it, or it was removed")]
    NotHolder,
    /// The lease ran out before a renewal got through: the backend was slow or
    /// unreachable, or renewal was turned off.
    #[error("the lease ran out before it could be renewed")]
    Expired,
    /// The maximum hold time ended the lease: the watchdog stopped renewing.
    #[error("the maximum hold time ended the lease")]
    MaxHold,
}

/// Who holds a lock: one id per logical owner (a request, a job).
///
/// Redisson names a holder `uuid:threadId`; async Rust has no thread id, so the caller
/// says who it is. Reentrancy is per holder, and only the holder releases.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HolderId(String);

impl HolderId {
    /// A holder id: 1 to 128 printable ASCII characters, not starting with `#` (the
    /// Redis lock keeps its token in a field of that name).
    ///
    /// # Errors
    /// [`LockError::Invalid`], naming what is wrong with the id.
    pub fn new(id: impl Into<String>) -> Result<HolderId, LockError> {
        let id = id.into();
        let printable = id.bytes().all(|b| b.is_ascii_graphic());
        if (1..=128).contains(&id.len()) && printable && !id.starts_with('#') {
            return Ok(HolderId(id));
        }
        Err(LockError::Invalid(format!(
            "holder id `{id}`: 1-128 printable ASCII characters, not starting with #"
        )))
    }

    /// A new random holder (a UUID).
    pub fn random() -> HolderId {
        HolderId(uuid::Uuid::new_v4().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for HolderId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a lock is held.
#[derive(Debug, Clone)]
pub struct LockOptions {
    /// How long the backend keeps the lock without a renewal.
    ///
    /// The holder counts it from *before* its request was sent, so its own deadline
    /// ends before the backend's.
    pub lease: Duration,
    /// Renew every lease/3 while the guard lives (Redisson's watchdog). Off: the lock
    /// simply expires after `lease`.
    pub renew: bool,
    /// Stop renewing this long after the lease started: a hung task must not hold a
    /// lock forever. The last renewal is cut so the lease ends exactly then.
    pub max_hold: Option<Duration>,
    /// Chubby's lock-delay: the backend keeps the lock this much longer than the
    /// holder counts on.
    ///
    /// A holder that vanished without releasing blocks the next one for lease + delay;
    /// a release frees the lock at once. It narrows a stale write's window, never
    /// closes it (only a fencing token does).
    pub lock_delay: Duration,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            lease: Duration::from_secs(10),
            renew: true,
            max_hold: Some(Duration::from_secs(60)),
            lock_delay: Duration::ZERO,
        }
    }
}

/// A backend's yes.
///
/// `token` is the fencing token: `None` if the backend has none, and a reentrant
/// acquisition returns the first one's. `since` is the instant the lease counts from,
/// on the holder's clock: before the request was sent, less any allowance for clock
/// drift.
#[derive(Debug, Clone, Copy)]
pub struct Acquired {
    pub token: Option<u64>,
    pub since: Instant,
}

/// What a backend does. Each method is the backend's whole algorithm for that step;
/// [`Locker`] adds the guard, the watchdog and key validation around it.
#[async_trait]
pub trait LockBackend: Send + Sync + 'static {
    /// Short name, used in logs and as the fencing table's `backend` column.
    fn name(&self) -> &'static str;

    /// Takes (or re-enters) `key` for `holder` with a lease of `lease`, waiting up to
    /// `wait` for another holder to let go (`Duration::ZERO`: one attempt). `Ok(None)`:
    /// still held by someone else when the wait ended.
    async fn acquire(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
        wait: Duration,
    ) -> Result<Option<Acquired>, LockError>;

    /// Extends the lease to `lease` if `holder` still holds `key`: `Some(since)`, the
    /// instant the new lease counts from; `None` if it does not hold it any more.
    async fn renew(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
    ) -> Result<Option<Instant>, LockError>;

    /// Releases one level of `holder`'s hold on `key` (free when the count reaches 0).
    /// [`LockError::NotHolder`] when `holder` does not hold it.
    async fn unlock(&self, key: &str, holder: &HolderId) -> Result<(), LockError>;
}

/// A lock backend made into a full lock: guards, the watchdog, the lost signal.
#[derive(Clone)]
pub struct Locker {
    /// The backend itself, for what a guard does not do (a stranger's unlock, a test).
    pub backend: Arc<dyn LockBackend>,
}

impl Locker {
    pub fn new(backend: impl LockBackend) -> Locker {
        let backend = Arc::new(backend);
        Locker { backend }
    }

    pub fn name(&self) -> &'static str {
        self.backend.name()
    }

    /// Takes `key` for `holder`, waiting up to `wait` while another holder has it.
    ///
    /// The backend decides how it waits (see its file). The key is 1 to 255 printable
    /// ASCII characters and does not start with `/`.
    ///
    /// # Errors
    /// [`LockError::TimedOut`] when another holder kept the lock for the whole wait;
    /// [`LockError::Invalid`] for a bad key; [`LockError::Backend`] when the backend
    /// failed.
    ///
    /// # Cancellation safety
    /// Dropped while the backend's request is in flight, the lock may be taken with no
    /// guard to release it, until its lease (or session) ends.
    pub async fn acquire(
        &self,
        key: &str,
        holder: &HolderId,
        options: &LockOptions,
        wait: Duration,
    ) -> Result<LockGuard, LockError> {
        let valid = (1..=255).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic());
        if !valid || key.starts_with('/') {
            let problem = format!("lock key `{key}`: 1-255 printable ASCII characters");
            return Err(LockError::Invalid(problem));
        }
        let started = Instant::now();
        let lease = first_lease(options) + options.lock_delay;
        let Some(acquired) = self.backend.acquire(key, holder, lease, wait).await? else {
            return Err(LockError::TimedOut {
                key: key.to_string(),
                waited: started.elapsed(),
            });
        };
        let held = Held {
            backend: self.backend.clone(),
            key: key.to_string(),
            holder: holder.clone(),
        };
        let (lost_tx, lost) = watch::channel(None);
        let watchdog = watchdog(held.clone(), options.clone(), acquired.since, lost_tx);
        Ok(LockGuard {
            held,
            token: acquired.token,
            lost,
            watchdog: Some(tokio::spawn(watchdog)),
        })
    }

    /// One attempt: `Ok(None)` when someone else holds the lock. Errors and
    /// cancellation as for [`Locker::acquire`].
    pub async fn try_acquire(
        &self,
        key: &str,
        holder: &HolderId,
        options: &LockOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        match self.acquire(key, holder, options, Duration::ZERO).await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::TimedOut { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The lease of the first acquisition: never longer than the maximum hold time.
fn first_lease(options: &LockOptions) -> Duration {
    options.lease.min(options.max_hold.unwrap_or(Duration::MAX))
}

/// A held lock.
///
/// Release it with [`LockGuard::release`]. A guard dropped without a release stops its
/// watchdog and unlocks in the background, on the current tokio runtime if there is
/// one; otherwise the lease simply runs out.
pub struct LockGuard {
    held: Held,
    token: Option<u64>,
    lost: watch::Receiver<Option<LostReason>>,
    watchdog: Option<JoinHandle<()>>,
}

impl LockGuard {
    pub fn key(&self) -> &str {
        &self.held.key
    }

    pub fn holder(&self) -> &HolderId {
        &self.held.holder
    }

    /// The fencing token of this acquisition (`None` if the backend has none).
    ///
    /// A reentrant acquisition has the token of the first one.
    pub fn token(&self) -> Option<u64> {
        self.token
    }

    /// Whether the lock is known to be lost (poll).
    pub fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// Why the lock was lost, once it is known to be.
    pub fn lost_reason(&self) -> Option<LostReason> {
        *self.lost.borrow()
    }

    /// Completes when the lock is lost (await).
    pub async fn lost(&self) -> LostReason {
        let mut lost = self.lost.clone();
        match lost.wait_for(Option::is_some).await {
            Ok(reason) => reason.expect("waited for Some"),
            // The watchdog ended without a verdict (the guard is being released).
            Err(_) => std::future::pending().await,
        }
    }

    /// Stops renewing and releases one level of the lock.
    ///
    /// # Errors
    /// [`LockError::NotHolder`] if the lock had already been lost (taken by someone
    /// else, expired or removed);
    /// [`LockError::Backend`] if the backend could not be told (the lock then ends
    /// with its lease or session).
    ///
    /// # Cancellation safety
    /// The watchdog stops first. A release dropped before the backend answered may or
    /// may not have unlocked, and the lease (or session) ends the rest.
    pub async fn release(mut self) -> Result<(), LockError> {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
        self.held.unlock().await
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
            let held = self.held.clone();
            runtime.spawn(async move {
                if let Err(e) = held.unlock().await {
                    tracing::debug!(key = %held.key, error = %e, "background unlock of a dropped guard failed");
                }
            });
        }
    }
}

/// One held lock as its backend knows it: what a renewal or an unlock names.
#[derive(Clone)]
struct Held {
    backend: Arc<dyn LockBackend>,
    key: String,
    holder: HolderId,
}

impl Held {
    /// Extends the lease; `Ok(None)` when the holder no longer holds the lock.
    async fn renew(&self, lease: Duration) -> Result<Option<Instant>, LockError> {
        self.backend.renew(&self.key, &self.holder, lease).await
    }

    async fn unlock(&self) -> Result<(), LockError> {
        self.backend.unlock(&self.key, &self.holder).await
    }
}

/// The one watchdog every backend shares.
///
/// - Every lease/3 it renews the lease, counted from before the request was sent.
/// - A renewal that finds another holder ends the hold: [`LostReason::NotHolder`].
/// - A renewal that fails (backend down, timeout) is retried on the next tick; if
///   none succeeds before the current lease ends: [`LostReason::Expired`].
/// - At `max_hold` it stops renewing (the last renewal is cut to end exactly there)
///   and signals [`LostReason::MaxHold`] when the lease runs out.
async fn watchdog(
    held: Held,
    options: LockOptions,
    since: Instant,
    lost: watch::Sender<Option<LostReason>>,
) {
    let max_hold_end = options.max_hold.map(|max| since + max);
    let mut valid_until = since + first_lease(&options);
    let period = (options.lease / 3).max(Duration::from_millis(1));
    let mut next_renewal = since + period;
    // Whether the current lease ends where it does because of the maximum hold time.
    let mut cut_by_max_hold = options.max_hold.is_some_and(|max| max <= options.lease);
    use LostReason::{Expired, MaxHold, NotHolder};
    let ran_out = |cut: bool| if cut { MaxHold } else { Expired };
    let reason = loop {
        let renewing = options.renew && max_hold_end.is_none_or(|end| Instant::now() < end);
        if !renewing {
            tokio::time::sleep_until(valid_until).await;
            break ran_out(options.renew);
        }
        tokio::time::sleep_until(next_renewal.min(valid_until)).await;
        let now = Instant::now();
        if now >= valid_until {
            break ran_out(cut_by_max_hold);
        }
        let lease = match max_hold_end {
            Some(end) if end <= now => continue,
            Some(end) => options.lease.min(end - now),
            None => options.lease,
        };
        next_renewal = now + period;
        let renew = held.renew(lease + options.lock_delay);
        match tokio::time::timeout_at(valid_until, renew).await {
            Ok(Ok(Some(since))) => {
                valid_until = since + lease;
                cut_by_max_hold = lease < options.lease;
            }
            Ok(Ok(None)) => break NotHolder,
            Ok(Err(e)) => {
                tracing::warn!(key = %held.key, error = %e, "lock renewal failed; retrying until the lease ends");
            }
            Err(_) => break ran_out(cut_by_max_hold),
        }
    };
    tracing::info!(key = %held.key, holder = %held.holder, %reason, "lock lost");
    let _ = lost.send(Some(reason));
}
