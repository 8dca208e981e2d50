//! What a strategy is handed to tell what it does: the named failpoints it passes
//! (where tests make races happen on purpose), the time each phase took, and the
//! per-request test knobs. In production the probe does nothing
//! ([`NoProbe`], or the service's test hooks switched off); the service's test hooks
//! (`http::hooks`) implement it. A copied strategy takes this file as it is and hands
//! its strategy [`NoProbe`]: every failpoint passed, every knob off.
//!
//! # Failpoints
//! In the order a request passes them:
//! - `before_lock` (a strategy with a lock of its own: a mutex, a distributed lock):
//!   about to take the lock;
//! - `after_lock` (the same, and a fence's claim): the lock is held, the transaction
//!   has not begun;
//! - `after_read` (every strategy): the stock has been read (or conditionally
//!   updated), the write has not happened;
//! - `before_commit` (where a transaction commits): everything is written, COMMIT has
//!   not been sent.
//!
//! The classic mistakes pass `before_lock` too (one has begun its transaction and
//! read, and is about to lock), and one more: `before_release` (an unlock has
//! compared, not deleted).

use super::error::DeductError;
use async_trait::async_trait;
use std::time::{Duration, Instant};

/// A named place in the deduction path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Failpoint {
    AfterLock,
    AfterRead,
    BeforeCommit,
    BeforeLock,
    BeforeRelease,
}

impl Failpoint {
    pub fn name(self) -> &'static str {
        match self {
            Failpoint::AfterLock => "after_lock",
            Failpoint::AfterRead => "after_read",
            Failpoint::BeforeCommit => "before_commit",
            Failpoint::BeforeLock => "before_lock",
            Failpoint::BeforeRelease => "before_release",
        }
    }
}

/// Per-request test knobs, read from the deduct body next to (not inside) the order:
/// they steer an experiment, they are not what the client buys. All default (off)
/// unless the service runs its test hooks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Knobs {
    /// Sleep this long between read and write (a slow business step).
    pub hold_ms: Option<u64>,
    /// Lock rows in the order the items are listed, not product order (to make
    /// deadlocks, where a strategy honours it).
    pub unsorted: bool,
    /// `(name, parties)`: wait after the first row lock until that many requests
    /// reached the barrier of that name.
    pub barrier: Option<(String, usize)>,
    /// Overrides the server's `--fencing` for this request (lock strategies).
    pub fencing: Option<bool>,
    /// A classic mistake to make instead of the strategy's algorithm (its name, one
    /// the strategy lists in `Strategy::mistakes`).
    pub mistake: Option<String>,
}

/// A part of a deduction's time, as a strategy reports it ([`Probe::spent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for and taking the lock.
    Lock,
    /// The database work under it.
    Transaction,
    /// Giving the lock back.
    Release,
}

/// What [`Probe::pass`] found at a failpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passed {
    /// Go on (after a sleep or a pause, if one was set).
    On,
    /// Stop here as if the process had died (honoured by `at_or_crash` on a `dyn Probe`).
    Crash,
}

/// The places a strategy tells about; every method does nothing by default.
#[async_trait]
pub trait Probe: Send + Sync {
    /// Whether the per-request knobs are honoured (test hooks on).
    fn enabled(&self) -> bool {
        false
    }

    /// Passes failpoint `point`: may sleep or pause there.
    async fn pass(&self, _point: Failpoint) -> Passed {
        Passed::On
    }

    /// The hold between a deduction's read and its write (a slow business step).
    async fn hold(&self, _knobs: &Knobs) {}

    /// The request's barrier (`knobs.barrier`) on its first attempt.
    async fn barrier(&self, _knobs: &Knobs, _attempt: u32) -> Result<(), DeductError> {
        Ok(())
    }

    /// `took` went to `phase` (a retried transaction adds up).
    fn spent(&self, _phase: Phase, _took: Duration) {}

    /// `took` went to waiting for a pooled database connection.
    fn pool_waited(&self, _took: Duration) {}

    /// A distributed lock's hold changed (the service's lock log, `--lock-log`).
    fn lock_held(&self, _hold: &LockHold<'_>) {}
}

/// One event of a distributed lock's hold, as its holder saw it.
#[derive(Debug, Clone, Copy)]
pub struct LockHold<'a> {
    pub key: &'a str,
    /// `<instance>:<request_id>`.
    pub holder: &'a str,
    pub token: Option<u64>,
    /// `acquired` (the acquire returned), `released` (before the release is sent),
    /// `lost` (a renewal found the lock gone).
    pub event: &'static str,
}

impl dyn Probe + '_ {
    /// Passes failpoint `point` (a `crash` there counts as going on).
    pub async fn at(&self, point: Failpoint) {
        self.pass(point).await;
    }

    /// Passes failpoint `point` where a crash is the point: `Err` when it is set, and
    /// the caller returns at once, leaving behind whatever it holds.
    pub async fn at_or_crash(&self, point: Failpoint) -> Result<(), DeductError> {
        match self.pass(point).await {
            Passed::On => Ok(()),
            Passed::Crash => Err(DeductError::Unexpected(anyhow::anyhow!(
                "crashed at failpoint {} (test hook)",
                point.name()
            ))),
        }
    }

    /// Runs `work`, telling the time it took as `phase`.
    pub async fn time<T>(&self, phase: Phase, work: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let result = work.await;
        self.spent(phase, started.elapsed());
        result
    }

    /// Between a deduction's read and its write: `after_read`, then the hold.
    pub async fn after_read(&self, knobs: &Knobs) {
        self.at(Failpoint::AfterRead).await;
        self.hold(knobs).await;
    }
}

/// The probe of a service without test hooks, and of a copied strategy.
pub struct NoProbe;

impl Probe for NoProbe {}
