//! `local-mutex`: a per-product mutex inside one process (`synchronized` / `ReentrantLock`
//! in the Java write-ups).
//!
//! # Algorithm
//! 1. Take the mutex of every product in the order, in product_id order (two orders
//!    over the same products can then never wait on each other in a cycle).
//! 2. `unsafe`'s plain read, check, BEGIN, write the computed value, orders and
//!    ledger rows, COMMIT ([`read_check_write`]): the mutex is trusted, the database
//!    is asked to lock nothing.
//! 3. Release the mutexes (dropping the guards), last taken first.
//!
//! The mutex map is built once per process, outside the HTTP server's per-worker
//! factory ([`super::all`]): built inside it, each worker thread would get its own map
//! and two requests on two workers would not exclude each other even in one process.
//! The mutexes are tokio's: a waiting request yields its worker thread instead of
//! blocking it, and the guard may be held across `.await` (std's may not). The map
//! itself is behind a std mutex, held only to look up an entry, never across an
//! `.await`.
//!
//! # Why the mutex is taken before BEGIN and released after COMMIT
//! Taking it inside the transaction is wrong even with one instance, in two ways:
//! - The usual shape (Spring's `@Transactional` around a `synchronized` block) also
//!   *releases* it inside the transaction: the method returns, the mutex is free, and
//!   only then does the transaction commit. The next holder reads the row in that gap,
//!   before our write is committed, and both sell the same unit.
//! - Under REPEATABLE READ a transaction's snapshot is taken at its first read. If it
//!   read anything before waiting for the mutex, it keeps reading that snapshot, from
//!   before the previous holder's commit: a stale quantity, under the mutex.
//!
//! # How it fails
//! With two service instances, each has its own map: request A on instance 1 and
//! request B on instance 2 both get "their" mutex at once and interleave exactly like
//! `unsafe`. A mutex only excludes what runs in the same process; behind a load
//! balancer that is not enough. The tests show both: one instance does not oversell
//! (the second request waits), two instances do.
//!
//! # Other limits
//! The map keeps one entry per product ever deducted (a few dozen bytes each). There
//! is no wait bound: requests queue on the mutex in arrival order.

use super::contract::{Deducted, Deduction, Strategy};
use super::plain::read_check_write;
use crate::domain::error::DeductError;
use crate::domain::probe::Failpoint;
use crate::domain::probe::Phase;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Mutex as AsyncMutex;

/// How the service registers it: its card for the catalogue
/// (`local_mutex/served.rs`; a copy leaves it out).
#[cfg(feature = "service")]
mod served;

const NAME: &str = "local-mutex";

/// Where this strategy is written, from the repository's root (its card's `source`).
pub const SOURCE: &str = file!();

/// One async mutex per product, shared by every worker of this process.
#[derive(Default)]
pub struct LocalMutex {
    mutexes: Mutex<HashMap<i64, Arc<AsyncMutex<()>>>>,
}

impl LocalMutex {
    fn mutex(&self, product_id: i64) -> Arc<AsyncMutex<()>> {
        let mut map = self.mutexes.lock().expect("mutex map poisoned");
        map.entry(product_id).or_default().clone()
    }
}

impl<S> super::contract::Declare<S> for LocalMutex {
    type Settings = super::contract::NoSettings;

    fn build(
        _: &super::contract::NoSettings,
        _: &super::contract::Context<'_, S>,
    ) -> std::sync::Arc<dyn Strategy> {
        std::sync::Arc::new(LocalMutex::default())
    }
}

#[async_trait(?Send)]
impl Strategy for LocalMutex {
    fn name(&self) -> &'static str {
        NAME
    }

    // ANCHOR: deduct
    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        let mut held = Vec::with_capacity(d.order.items.len());
        d.probe.at(Failpoint::BeforeLock).await;
        for item in d.order.by_product() {
            let mutex = self.mutex(item.product_id);
            held.push(d.probe.time(Phase::Lock, mutex.lock_owned()).await);
        }
        d.probe.at(Failpoint::AfterLock).await;
        let done = d.probe.time(Phase::Transaction, read_check_write(d)).await;
        // Released after COMMIT (or ROLLBACK), last taken first.
        while let Some(guard) = held.pop() {
            drop(guard);
        }
        done
    }
    // ANCHOR_END: deduct
}
