//! `pessimistic`: `SELECT ... FOR UPDATE`, the database's row lock held to COMMIT.
//!
//! # Copying this file
//! A copy takes this file, the domain, the contract and the helpers it calls, under the
//! same module paths, with the schema: `copies.toml` lists them under
//! `[strategy.pessimistic]`, with the crates they need. `./scripts/copy-check
//! pessimistic DIR` builds such a copy and sells from it on a real server.
//!
//! # Algorithm
//! 1. BEGIN.
//! 2. For each item, in product_id order: `SELECT quantity ... FOR UPDATE`. This waits
//!    for the row's exclusive lock and reads the **latest committed** row (a locking
//!    read, not the transaction's snapshot).
//! 3. Check; write the computed value (`SET quantity = <read − requested>`): safe,
//!    as nobody can write the row until our COMMIT releases the row locks.
//! 4. Orders and ledger rows ([`txn::record`]), COMMIT.
//! 5. On error 1213 (deadlock: InnoDB chose us as the victim and rolled us back) or
//!    1205 (lock wait timeout: only the *statement* was rolled back, the transaction
//!    still holds its other locks since `innodb_rollback_on_timeout` is off): explicit
//!    ROLLBACK, jittered backoff, run the whole transaction again, at most
//!    `--pessimistic-max-attempts` times, then 503 `busy` ([`retry::with_retries`]).
//!
//! Six statements for a sale (BEGIN, SELECT ... FOR UPDATE, UPDATE, two INSERTs,
//! COMMIT); four for a refusal (BEGIN, the SELECT, ROLLBACK, the refusal's one read).
//!
//! # Guarantees
//! No lost update and no oversell, across any number of instances: the lock lives in
//! the database, next to the data. A holder that dies (crash, kill -9) loses its
//! connection and InnoDB rolls its transaction back and frees the locks: no lease to
//! expire, no fencing needed.
//!
//! # Costs and failure modes
//! - Buyers of one product queue on its row; the queue is as slow as the slowest
//!   transaction in it. A holder that stalls while holding the lock (a slow business
//!   step, a paused process) stalls everyone behind it, up to the lock wait timeout
//!   (`--lock-wait-timeout-secs`), after which they fail with 1205 and retry.
//! - Locking rows in different orders deadlocks: A holds 1 and wants 2, B holds 2 and
//!   wants 1. InnoDB detects it and kills one. Sorting by product_id prevents it;
//!   the `unsorted` test hook turns sorting off to show a real deadlock being retried.
//! - Under REPEATABLE READ a locking read on a **missing** key takes a gap lock, which
//!   blocks inserts into the gap (not an issue here: products exist before they sell).
//!
//! # When to use it
//! When the decision needs more than one statement (read, compute, write) and the
//! contention per row is moderate. For a plain counter, `atomic-sql` does the same
//! in one statement.

use super::contract::{Deducted, Deduction, Strategy};
use super::retry::{self, TxError, retry_on_lock_conflict};
use super::txn::{self, Sold, check_enough};
use crate::domain::error::DeductError;
use crate::domain::order::Item;
use crate::domain::probe::Phase;
use async_trait::async_trait;
use sqlx::MySqlConnection;
use std::cell::Cell;
use std::time::Duration;

/// How the service registers it: its card for the catalogue and its flags
/// (`pessimistic/served.rs`; a copy leaves it out).
#[cfg(feature = "service")]
mod served;

/// Where this strategy is written, from the repository's root (its card's `source`).
pub const SOURCE: &str = file!();

/// How many transactions one request may run.
#[derive(Debug, Clone)]
pub struct PessimisticSettings {
    /// Transactions it may run for one request (retries after a deadlock or a lock wait
    /// timeout).
    pub max_attempts: u32,
}

impl Default for PessimisticSettings {
    fn default() -> Self {
        PessimisticSettings { max_attempts: 5 }
    }
}

/// `SELECT ... FOR UPDATE` with bounded whole-transaction retries.
pub struct Pessimistic {
    pub max_attempts: u32,
}

impl<S> super::contract::Declare<S> for Pessimistic {
    type Settings = PessimisticSettings;

    fn build(
        settings: &PessimisticSettings,
        _: &super::contract::Context<'_, S>,
    ) -> std::sync::Arc<dyn Strategy> {
        std::sync::Arc::new(Pessimistic {
            max_attempts: settings.max_attempts,
        })
    }
}

const NAME: &str = "pessimistic";

#[async_trait(?Send)]
impl Strategy for Pessimistic {
    fn name(&self) -> &'static str {
        NAME
    }

    // ANCHOR: deduct
    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        // The test hook `unsorted` keeps the client's order, to make deadlocks happen.
        let items = if d.knobs.unsorted && d.probe.enabled() {
            d.order.items.clone()
        } else {
            d.order.by_product()
        };
        // An explicit ROLLBACK on every way out (`retry::transaction`): after a lock
        // wait timeout the transaction still holds its other row locks.
        let started = std::time::Instant::now();
        let waited = Cell::new(Duration::ZERO);
        let done = retry::with_retries(self.max_attempts, async |attempt| {
            let try_once = async |tx: &mut MySqlConnection| {
                lock_check_write(tx, d, &items, attempt, &waited).await
            };
            retry::transaction(d, try_once).await
        })
        .await;
        // Where the time went: waiting in FOR UPDATE (the lock), the rest of the
        // transactions (retries included).
        if !waited.get().is_zero() {
            d.probe.spent(Phase::Lock, waited.get());
        }
        let rest = started.elapsed().saturating_sub(waited.get());
        d.probe.spent(Phase::Transaction, rest);
        done
    }
    // ANCHOR_END: deduct
}

/// Steps 2-4 up to COMMIT, inside `tx`: lock and read each row, check, write, record.
async fn lock_check_write(
    tx: &mut MySqlConnection,
    d: &Deduction<'_>,
    items: &[Item],
    attempt: u32,
    waited: &Cell<Duration>,
) -> Result<Deducted, TxError> {
    let mut sold = Vec::with_capacity(items.len());
    for (i, &item) in items.iter().enumerate() {
        let locked =
            sqlx::query_scalar("SELECT quantity FROM stock WHERE product_id = ? FOR UPDATE")
                .bind(item.product_id)
                .fetch_optional(&mut *tx);
        let started = std::time::Instant::now();
        let locked = locked.await;
        waited.set(waited.get() + started.elapsed());
        let quantity: i32 = locked
            .map_err(retry_on_lock_conflict)?
            .ok_or(DeductError::UnknownProduct(item.product_id))?;
        if i == 0 {
            // Test hook: wait here, holding the first row, for the other parties.
            d.probe.barrier(d.knobs, attempt).await?;
        }
        check_enough(item, quantity)?;
        sold.push(Sold {
            item,
            remaining: quantity - item.quantity,
        });
    }
    d.probe.after_read(d.knobs).await;
    for s in &sold {
        // Safe to write the computed value: nobody can write the row until COMMIT.
        sqlx::query("UPDATE stock SET quantity = ?, version = version + 1 WHERE product_id = ?")
            .bind(s.remaining)
            .bind(s.item.product_id)
            .execute(&mut *tx)
            .await
            .map_err(retry_on_lock_conflict)?;
    }
    Ok(txn::record(tx, d, &sold, attempt, None).await?)
}
