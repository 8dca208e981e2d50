//! `mysql-lock`, `redis-lock`, `redlock`, `zookeeper` and `etcd-lock`: a distributed
//! lock around `unsafe`'s plain read-check-write, with fenced writes. They differ only
//! in the lock (each wired in its own file of [`super`], with how it fails). Uses the
//! contract, `fencing`, `plain`, the transaction helpers and the `locks` core.
//!
//! # Algorithm
//! 1. For each product of the order, in product_id order: acquire the lock
//!    `stock:{product_id}` (RedLock `redlock:stock:..`, ZooKeeper a node under
//!    `/stock-locks/stock/..`), all under one wait bound (`--lock-wait-ms`; 503 `busy`,
//!    releasing what was taken). The watchdog renews the lease every lease/3.
//! 2. **Fencing on** (the default): claim the product with the lock's token, as its own
//!    committed statement ([`fencing::claim`]; RedLock, which has no token, with its
//!    owner tag). Refused: a newer holder exists → 503 `lock_lost`.
//! 3. Plain read, check: the lock is trusted, the database is asked to lock nothing.
//! 4. BEGIN; write the computed quantity: fenced, only while the claim is still the
//!    newest (else ROLLBACK → `lock_lost`); unfenced, unconditionally. Orders and
//!    ledger rows (with the token). Fenced: a lock known to be lost by now → ROLLBACK,
//!    `lock_lost`. COMMIT.
//! 5. Release the locks, last first. A loss noticed only after COMMIT is reported as
//!    `lock_lost_after_commit: true`.
//!
//! A lock is only as good as the read under it: from a lagging replica every fenced
//! holder writes old data (chaos `replica-lag`: the fence orders holders, not reads).
//! Lock before BEGIN, release after COMMIT: the two orders people get wrong are the
//! service's mistakes `lock-inside-transaction` and `release-before-commit`.
//!
//! Steps 2-4 are [`fencing::read_check_write`], shared with `fence-only`. Statements
//! sent to MariaDB, fenced: seven for a sale (claim, SELECT, BEGIN, guarded UPDATE, two
//! INSERTs, COMMIT), three for a 409 (claim, SELECT, the refusal's read); `mysql-lock`
//! adds its lock's own two (take and release).
//!
//! # What fencing buys
//! A lease lock alone cannot stop a holder that pauses past its lease: it wakes after
//! another holder wrote and overwrites that write from its stale read. Unfenced
//! (`--fencing false`) the service trusts the lock as the source articles' code does
//! (`locks::*_unfenced_loses_an_update`); fenced, the stale token is refused ([`fencing`]).
//!
//! # When to use it
//! When the critical section spans more than the database (a call to another service
//! between read and write) and you can fence the final write. For stock in one
//! database, `atomic-sql` is simpler and faster; the report shows by how much.

use crate::domain::error::DeductError;
use crate::domain::probe::Failpoint;
use crate::domain::probe::Phase;
use crate::strategies::contract::{Deducted, Deduction, Strategy};
use crate::strategies::fencing::{self, Claim, Fence};
use async_trait::async_trait;
use futures::future::BoxFuture;
use locks::{HolderId, LockBackend, LockError, LockGuard, LockOptions, Locker};
use std::sync::OnceLock;
use std::time::Duration;
use tokio::sync::OnceCell;

/// What a lock strategy needs of the settings the strategies share (the service's
/// `shared::Shared`; a copy says it its own way). A backend's file asks for more
/// (where its servers are) with a trait of its own over this one.
pub trait LockShared {
    /// The lease, renewal and maximum hold of every lock.
    fn lock_options(&self) -> LockOptions;
    /// How long an order may wait for all its locks.
    fn lock_wait(&self) -> Duration;
    /// Fenced writes unless a request says otherwise (the default: on).
    fn fencing(&self) -> bool;
}

/// Connects a lock backend (on first use: startup never waits on Redis).
pub type Connect =
    Box<dyn Fn() -> BoxFuture<'static, Result<Box<dyn LockBackend>, DeductError>> + Send + Sync>;

/// A [`Connect`] that runs `connect` on its own copy of `config` at each call.
pub fn connector<C, F, Fut>(config: C, connect: F) -> Connect
where
    C: Clone + Send + Sync + 'static,
    F: Fn(C) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Box<dyn LockBackend>, DeductError>> + Send + 'static,
{
    Box::new(move || Box::pin(connect(config.clone())))
}

/// A backend's error as the answer: 503 `backend_unavailable`.
pub fn unavailable(backend: &'static str) -> impl Fn(LockError) -> DeductError {
    move |e| DeductError::unavailable(backend, e.to_string()).caused_by(e)
}

/// A backend with no servers configured.
pub fn not_set(backend: &str, variable: &str) -> DeductError {
    DeductError::unavailable(backend, format!("{variable} is not set"))
}

/// What watches a lock strategy's locks from outside its algorithm: in the service,
/// the lock counters and the lock log (`counters.rs`). A copy has none.
pub trait LockWatch: Send + Sync {
    /// The backend as it connected, wrapped so that its answers are seen.
    fn backend(&self, backend: Box<dyn LockBackend>) -> Box<dyn LockBackend>;

    /// A guard about to be released, lost or not.
    fn releasing(&self, guard: &LockGuard);
}

/// A strategy that trusts one distributed lock backend.
pub struct LockStrategy {
    /// The strategy's name.
    pub name: &'static str,
    /// The backend's name in metrics and errors (`mysql`, `redis`, ...).
    pub backend: &'static str,
    /// Lock keys are `<prefix><product_id>`.
    pub key_prefix: &'static str,
    pub connect: Connect,
    pub locker: OnceCell<Locker>,
    pub options: LockOptions,
    /// How long an order may wait for all its locks.
    pub wait: Duration,
    /// Fenced writes (`--fencing`; a request's `fencing` test hook overrides it).
    pub fencing: bool,
    /// Names this process in holder ids (`<instance>:<request_id>`).
    pub instance: String,
    /// What watches its locks, if anything: set once, before the first deduction.
    pub watch: OnceLock<Box<dyn LockWatch>>,
    /// `Some` when its servers are a flag of its own, which `/ready` then checks by
    /// connecting; `Err(what would set them)` when not set.
    pub own_servers: Option<Result<(), &'static str>>,
}

impl LockStrategy {
    pub fn new(
        name: &'static str,
        backend: &'static str,
        key_prefix: &'static str,
        connect: Connect,
        shared: &impl LockShared,
    ) -> LockStrategy {
        LockStrategy {
            name,
            backend,
            key_prefix,
            connect,
            locker: OnceCell::new(),
            options: shared.lock_options(),
            wait: shared.lock_wait(),
            fencing: shared.fencing(),
            instance: uuid::Uuid::new_v4().simple().to_string(),
            watch: OnceLock::new(),
            own_servers: None,
        }
    }
}

/// The locks an order holds, by product.
type Held = Vec<(i64, LockGuard)>;

#[async_trait(?Send)]
impl Strategy for LockStrategy {
    fn name(&self) -> &'static str {
        self.name
    }

    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        let locker = self.locker.get_or_try_init(|| self.connect()).await?;
        let mut held = Held::new();
        let done = self.under_locks(d, locker, &mut held).await;
        // 5. Release, last taken first, whatever happened.
        let lost_after_commit = held.iter().any(|(_, guard)| guard.is_lost());
        let release = async {
            while let Some((_, guard)) = held.pop() {
                if let Some(watch) = self.watch.get() {
                    watch.releasing(&guard);
                }
                let key = guard.key().to_string();
                if let Err(e) = guard.release().await {
                    // Lost before the release (expired and taken): nothing left to free.
                    tracing::warn!(%key, error = %e, "lock release failed");
                }
            }
        };
        d.probe.time(Phase::Release, release).await;
        done.map(|done| Deducted {
            lock_lost_after_commit: lost_after_commit,
            ..done
        })
    }
}

impl LockStrategy {
    /// Connects the backend, watched if something watches this strategy's locks.
    async fn connect(&self) -> Result<Locker, DeductError> {
        let mut backend = (self.connect)().await?;
        if let Some(watch) = self.watch.get() {
            backend = watch.backend(backend);
        }
        Ok(Locker {
            backend: backend.into(),
        })
    }

    // ANCHOR: under_locks
    /// Steps 1-4; the locks taken are left in `held` for the caller to release.
    async fn under_locks(
        &self,
        d: &Deduction<'_>,
        locker: &Locker,
        held: &mut Held,
    ) -> Result<Deducted, DeductError> {
        let backend = locker.name();
        let fenced = d.knobs.fencing.unwrap_or(self.fencing);
        let holder = HolderId::new(format!("{}:{}", self.instance, d.order.request_id))
            .map_err(|e| DeductError::Unexpected(e.into()))?;
        let deadline = tokio::time::Instant::now() + self.wait;
        d.probe.at(Failpoint::BeforeLock).await;
        for item in d.order.by_product() {
            // 1. Lock.
            let key = format!("{}{}", self.key_prefix, item.product_id);
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let guard = d
                .probe
                .time(
                    Phase::Lock,
                    locker.acquire(&key, &holder, &self.options, left),
                )
                .await
                .map_err(|e| not_acquired(backend, &key, e))?;
            // Held before it is claimed, so a refused claim still releases it.
            held.push((item.product_id, guard));
            // 2. Claim.
            if fenced {
                let (_, guard) = held.last().expect("just pushed");
                let claim = fencing::claim(d.pool, backend, item.product_id, fence(guard));
                d.probe.time(Phase::Transaction, claim).await?;
            }
        }
        d.probe.at(Failpoint::AfterLock).await;
        // 3 and 4.
        let claims: Vec<Claim> = held
            .iter()
            .map(|(product_id, guard)| Claim {
                product_id: *product_id,
                fence: fence(guard),
            })
            .collect();
        let token = held.iter().filter_map(|(_, g)| g.token()).max();
        let still_held = || !fenced || held.iter().all(|(_, guard)| !guard.is_lost());
        let claims = fenced.then_some(claims.as_slice());
        let work = fencing::read_check_write(d, backend, claims, token, still_held);
        d.probe.time(Phase::Transaction, work).await
    }
    // ANCHOR_END: under_locks
}

/// A lock that could not be taken, as an answer: 503 `busy` when the wait ran out,
/// 503 `backend_unavailable` when the backend failed.
pub(super) fn not_acquired(backend: &str, key: &str, e: LockError) -> DeductError {
    match e {
        LockError::TimedOut { waited, .. } => {
            DeductError::Busy(format!("lock {key} not acquired within {waited:?}"))
        }
        LockError::Backend(name, _, ref source) => {
            let detail = format!("{name}: {source}");
            DeductError::unavailable(backend, detail).caused_by(e)
        }
        other => DeductError::Unexpected(other.into()),
    }
}

/// What a guard fences with: its token, or (RedLock) its holder id as an owner tag.
fn fence(guard: &LockGuard) -> Fence<'_> {
    match guard.token() {
        Some(token) => Fence::Token(token),
        None => Fence::Owner(guard.holder().as_str()),
    }
}
