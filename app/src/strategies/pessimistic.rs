//! `pessimistic`: `SELECT ... FOR UPDATE`, the database's row lock held to COMMIT.
//!
//! # Algorithm
//! 1. BEGIN.
//! 2. For each item, in product_id order: `SELECT quantity ... FOR UPDATE`. This waits
//!    for the row's exclusive lock and reads the **latest committed** row (a locking
//!    read, not the transaction's snapshot).
//! 3. Check; write the computed value (`SET quantity = <read − requested>`): safe
//!    here, because nobody can write the row until we COMMIT.
//! 4. Ledger, orders, COMMIT (releases the row locks).
//! 5. On error 1213 (deadlock: InnoDB chose us as the victim and rolled us back) or
//!    1205 (lock wait timeout: only the *statement* was rolled back, the transaction
//!    still holds its other locks since `innodb_rollback_on_timeout` is off): explicit
//!    ROLLBACK, jittered backoff, run the whole transaction again, at most
//!    `--pessimistic-max-attempts` times, then 503 `busy`.
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

use super::{
    Applied, Cx, Held, Strategy, StrategyInfo, TxError, check_enough, retry_on_lock_conflict,
};
use crate::error::AppError;
use crate::order::Order;
use crate::stock;
use async_trait::async_trait;
use sqlx::MySqlConnection;

/// `SELECT ... FOR UPDATE` with bounded whole-transaction retries.
pub struct Pessimistic {
    pub max_attempts: u32,
}

static INFO: StrategyInfo = StrategyInfo {
    name: "pessimistic",
    description: "SELECT ... FOR UPDATE in product order, check, write, COMMIT; retried on deadlock or lock wait timeout.",
    backend: "database",
    safe_across_instances: true,
    fencing: "not needed",
};

#[async_trait]
impl Strategy for Pessimistic {
    fn info(&self) -> &StrategyInfo {
        &INFO
    }

    fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    async fn apply(
        &self,
        cx: &Cx<'_>,
        tx: &mut MySqlConnection,
        order: &Order,
        _held: &Held,
    ) -> Result<Vec<Applied>, TxError> {
        // The test hook `unsorted` keeps the client's order, to make deadlocks happen.
        let items = if order.hooks.unsorted && cx.hooks.enabled() {
            order.items.clone()
        } else {
            order.by_product()
        };
        let mut applied = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let level = stock::read_level_for_update(tx, item.product_id)
                .await
                .map_err(retry_on_lock_conflict)?
                .ok_or(AppError::UnknownProduct(item.product_id))?;
            if i == 0 {
                // Test hook: wait here, holding the first row, for the other parties.
                cx.hooks.barrier(order, cx.attempt).await?;
            }
            check_enough(item, level.quantity)?;
            applied.push(Applied {
                item,
                remaining: level.quantity - item.quantity,
                epoch: level.epoch,
            });
        }
        cx.hooks.after_read(order).await;
        for a in &applied {
            stock::write_quantity(tx, a.item.product_id, a.remaining)
                .await
                .map_err(retry_on_lock_conflict)?;
        }
        Ok(applied)
    }
}
