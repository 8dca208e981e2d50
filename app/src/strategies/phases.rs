//! Where a deduction's time goes: the lock, the transaction under it, the release.
//! A strategy reports its phases here ([`Phases::time`], [`Phases::add`]); the edge
//! records them in `stock_locks_phase_seconds` and the pool wait in
//! `stock_locks_db_pool_wait_seconds`.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// A part of a deduction's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Lock,
    Transaction,
    Release,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Phase::Lock, Phase::Transaction, Phase::Release];

    pub fn label(self) -> &'static str {
        match self {
            Phase::Lock => "lock",
            Phase::Transaction => "transaction",
            Phase::Release => "release",
        }
    }
}

/// One request's phase times, filled by its strategy ([`Phases::time`]) and recorded
/// by the handler. A `Cell` per phase: a request runs on one thread.
#[derive(Debug, Default)]
pub struct Phases {
    spent: [Cell<Option<Duration>>; 3],
    /// Waiting for a database connection from the pool (inside the transaction phase).
    pool_wait: Cell<Option<Duration>>,
}

impl Phases {
    /// Runs a strategy's whole deduction. A strategy that reported no phase (one
    /// without a lock: its work is its transaction, retries included) gets the whole
    /// time as `transaction`.
    pub async fn strategy<T>(&self, work: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let result = work.await;
        if self.spent.iter().all(|cell| cell.get().is_none()) {
            self.add(Phase::Transaction, started.elapsed());
        }
        result
    }

    /// Waits for a pooled connection, adding the wait to the request's pool wait.
    pub async fn pool_wait<T>(&self, acquire: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let result = acquire.await;
        add_to(&self.pool_wait, started.elapsed());
        result
    }

    /// Adds `spent` to `phase` (a retried transaction adds up).
    pub fn add(&self, phase: Phase, spent: Duration) {
        add_to(&self.spent[phase as usize], spent);
    }

    /// What `phase` has added up to so far.
    pub fn spent(&self, phase: Phase) -> Duration {
        self.spent[phase as usize].get().unwrap_or_default()
    }

    /// What `phase` added up to, if the strategy reported it at all.
    pub fn reported(&self, phase: Phase) -> Option<Duration> {
        self.spent[phase as usize].get()
    }

    /// The wait for a pooled connection, if there was one.
    pub fn pool_waited(&self) -> Option<Duration> {
        self.pool_wait.get()
    }

    /// Runs `work`, adding its time to `phase`.
    pub async fn time<T>(&self, phase: Phase, work: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let result = work.await;
        self.add(phase, started.elapsed());
        result
    }
}

/// Adds `spent` to what `cell` holds (none yet: zero).
fn add_to(cell: &Cell<Option<Duration>>, spent: Duration) {
    cell.set(Some(cell.get().unwrap_or_default() + spent));
}
