//! Where a deduction's time goes: the lock, the transaction under it, the release.
//! A strategy tells its probe ([`Probe::spent`]); this request's probe adds the
//! times up, and the service records them in `stock_locks_phase_seconds` and the pool
//! wait in `stock_locks_db_pool_wait_seconds`.

use crate::domain::error::DeductError;
use crate::domain::probe::{Failpoint, Knobs, Passed, Phase, Probe};
use async_trait::async_trait;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Every phase, and its label in `stock_locks_phase_seconds`.
pub const PHASES: [(Phase, &str); 3] = [
    (Phase::Lock, "lock"),
    (Phase::Transaction, "transaction"),
    (Phase::Release, "release"),
];

/// One request's phase times and pool wait.
#[derive(Debug, Default)]
pub struct Phases {
    /// Per [`Phase`], and the wait for a pooled connection (inside the transaction).
    /// A std mutex, held for an addition, never across an `.await`.
    spent: Mutex<([Option<Duration>; 3], Option<Duration>)>,
}

impl Phases {
    /// Runs a strategy's whole deduction. A strategy that reported no phase (one
    /// without a lock: its work is its transaction, retries included) gets the whole
    /// time as `transaction`.
    pub async fn strategy<T>(&self, work: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let result = work.await;
        if PHASES.iter().all(|(p, _)| self.reported(*p).is_none()) {
            self.add(Phase::Transaction, started.elapsed());
        }
        result
    }

    fn add(&self, phase: Phase, took: Duration) {
        let mut spent = self.spent.lock().expect("phases poisoned");
        let cell = &mut spent.0[phase as usize];
        *cell = Some(cell.unwrap_or_default() + took);
    }

    /// What `phase` added up to, if the strategy reported it at all.
    pub fn reported(&self, phase: Phase) -> Option<Duration> {
        self.spent.lock().expect("phases poisoned").0[phase as usize]
    }

    /// The wait for a pooled connection, if there was one.
    pub fn pool_waited(&self) -> Option<Duration> {
        self.spent.lock().expect("phases poisoned").1
    }
}

/// The probe one request is handed: the service's test hooks (or none), and its own
/// times.
pub struct RequestProbe {
    hooks: Arc<dyn Probe>,
    pub phases: Phases,
}

impl RequestProbe {
    pub fn new(hooks: Arc<dyn Probe>) -> RequestProbe {
        RequestProbe {
            hooks,
            phases: Phases::default(),
        }
    }
}

#[async_trait]
impl Probe for RequestProbe {
    fn enabled(&self) -> bool {
        self.hooks.enabled()
    }

    async fn pass(&self, point: Failpoint) -> Passed {
        self.hooks.pass(point).await
    }

    async fn hold(&self, knobs: &Knobs) {
        self.hooks.hold(knobs).await
    }

    async fn barrier(&self, knobs: &Knobs, attempt: u32) -> Result<(), DeductError> {
        self.hooks.barrier(knobs, attempt).await
    }

    fn spent(&self, phase: Phase, took: Duration) {
        self.phases.add(phase, took);
    }

    fn pool_waited(&self, took: Duration) {
        let mut spent = self.phases.spent.lock().expect("phases poisoned");
        spent.1 = Some(spent.1.unwrap_or_default() + took);
    }
}
