//! The lock core every backend builds on: errors, holder ids, options, the [`LockGuard`]
//! with its lost-lock signal, and **one watchdog** renewing every lease/3. A backend
//! ([`LockBackend`]) owns its acquisition, waiting included; [`Locker`] makes a guard.

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
    #[error("lock `{key}` not acquired within {waited:?}")]
    TimedOut { key: String, waited: Duration },
    /// An unlock or renewal by someone who does not hold the lock.
    #[error("`{holder}` does not hold lock `{key}`")]
    NotHolder { key: String, holder: String },
    /// A bad argument (an empty key, a holder id the backend cannot store, ...).
    #[error("invalid lock argument: {0}")]
    Invalid(String),
    /// The backend (named) failed, as [`BackendKind`] says, from its `source`.
    #[error("lock backend: {0}: {2}")]
    Backend(&'static str, BackendKind, #[source] Cause),
}

/// How a backend failed: what its caller can act on ([`LockError::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// No answer in time (slow or gone; it may have done it).
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
        let (key, holder) = (key.to_string(), holder.to_string());
        LockError::NotHolder { key, holder }
    }
}

/// Why a held lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LostReason {
    /// A renewal found another holder or no lock (expired and taken, or removed).
    #[error("another holder has it, or it was removed")]
    NotHolder,
    /// The lease ran out before a renewal got through (or renewal is off).
    #[error("the lease ran out before it could be renewed")]
    Expired,
    #[error("the maximum hold time ended the lease")]
    MaxHold,
}

/// Who holds a lock (Redisson's `uuid:threadId`; async Rust has no thread id): one id
/// per logical owner (a request, a job). Reentrancy is per holder; only it releases.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HolderId(String);

impl HolderId {
    /// 1 to 128 printable ASCII characters, not starting with `#` (Redis's token field).
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
    /// How long the backend keeps it unrenewed; the holder counts from *before* its
    /// request was sent, so its deadline ends first.
    pub lease: Duration,
    /// Renew every lease/3 while the guard lives (Redisson's watchdog); off: it expires.
    pub renew: bool,
    /// Stop renewing this long after the lease started (the last renewal cut to end
    /// there): a hung task must not hold a lock forever.
    pub max_hold: Option<Duration>,
    /// Chubby's lock-delay: a vanished holder blocks the next for lease + this (a release
    /// frees it at once). It narrows a stale write's window, never closes it.
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

/// A backend's yes: the fencing token (a re-entry's is the first one's) and when the
/// lease counts from on the holder's clock (before the request, less clock drift).
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

    /// Waits up to `wait` for `key` (1-255 printable ASCII, no leading `/`), as the
    /// backend waits.
    ///
    /// # Errors
    /// [`LockError::TimedOut`]: another holder kept it all the wait; `Invalid`: the key.
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
            let (key, waited) = (key.to_string(), started.elapsed());
            return Err(LockError::TimedOut { key, waited });
        };
        let (lost_tx, lost) = watch::channel(None);
        let (key, holder, backend) = (key.to_string(), holder.clone(), self.backend.clone());
        let held = (backend.clone(), key.clone(), holder.clone());
        let watchdog = watchdog(held, options.clone(), acquired.since, lost_tx);
        let watchdog = Some(tokio::spawn(watchdog));
        Ok(LockGuard {
            key,
            holder,
            token: acquired.token,
            backend,
            lost,
            watchdog,
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

/// A held lock, released by [`LockGuard::release`]; dropped, it unlocks in the
/// background (on the current tokio runtime, if any; otherwise the lease runs out).
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

    /// The fencing token (`None`: the backend has none; a re-entry's is the first one's).
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
    /// [`LockError::NotHolder`]: already lost; [`LockError::Backend`]: not told (the
    /// lease or session ends it).
    ///
    /// # Cancellation safety
    /// The watchdog stops first; dropped before the backend answered, it may or may
    /// not have unlocked, and the lease (or session) ends the rest.
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

/// The one watchdog every backend shares. Every lease/3 it renews the lease (counted
/// from before the request). Another holder found: [`LostReason::NotHolder`]. A failed
/// renewal is retried next tick; none through before the lease ends: `Expired`. At
/// `max_hold` it stops renewing: `MaxHold` when the lease runs out.
async fn watchdog(
    (backend, key, holder): (Arc<dyn LockBackend>, String, HolderId),
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
        let renew = backend.renew(&key, &holder, lease + options.lock_delay);
        match tokio::time::timeout_at(valid_until, renew).await {
            Ok(Ok(Some(since))) => {
                valid_until = since + lease;
                cut_by_max_hold = lease < options.lease;
            }
            Ok(Ok(None)) => break NotHolder,
            Ok(Err(e)) => {
                tracing::warn!(%key, error = %e, "lock renewal failed; retrying until the lease ends")
            }
            Err(_) => break ran_out(cut_by_max_hold),
        }
    };
    tracing::info!(%key, %holder, %reason, "lock lost");
    let _ = lost.send(Some(reason));
}
