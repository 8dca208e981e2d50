//! `atomic-sql`: let the database check and decrement in one statement.
//!
//! # Algorithm
//! 1. BEGIN.
//! 2. For each item, in product_id order:
//!    `UPDATE stock SET quantity = quantity - :q, version = version + 1
//!     WHERE product_id = :id AND quantity >= :q`.
//!    One row changed: deducted. None: the product is missing (404) or has too few
//!    units (409); ROLLBACK undoes the items already deducted.
//! 3. Read back what is left (our own write, visible in our transaction) for the
//!    response and the ledger's epoch. The `after_read` hook and any hold come after
//!    the last UPDATE: the row locks are held through them, as a business step taken
//!    between "decide" and "commit" would hold them.
//! 4. Ledger rows, the orders row, COMMIT (the shared path in [`super::deduct`]).
//!
//! # Why it cannot oversell
//! An UPDATE reads the **latest committed** row, not a snapshot, and holds an
//! exclusive row lock until COMMIT. Two deductions of the same product therefore run
//! one after the other, and the second evaluates `quantity >= :q` on the first one's
//! result. The check and the write are one statement: there is no window between them
//! for another request. The `CHECK (quantity >= 0)` on the table is a second net.
//!
//! # Costs and limits
//! - One hot row is a queue: throughput on a single product is bounded by how fast
//!   InnoDB passes the row lock from one transaction to the next (~2000 tx/s here).
//! - Items are taken in product_id order, so two multi-item orders over the same
//!   products never lock in opposite orders (no deadlock between them).
//! - It only works when the whole decision is expressible in SQL. A check that needs
//!   another service (a coupon, a fraud score) between read and write needs a lock.
//!
//! # When to use it
//! Almost always, for a counter like stock. It is the baseline the lock strategies are
//! measured against in the report.

use super::{Applied, Cx, Held, Strategy, StrategyInfo, TxError, check_enough};
use crate::error::AppError;
use crate::order::Order;
use crate::stock;
use async_trait::async_trait;
use sqlx::MySqlConnection;

/// The conditional-UPDATE strategy. Stateless.
pub struct AtomicSql;

static INFO: StrategyInfo = StrategyInfo {
    name: "atomic-sql",
    description: "One conditional UPDATE per item: quantity = quantity - q WHERE quantity >= q; the row lock serializes buyers.",
    backend: "database",
    safe_across_instances: true,
    fencing: "not needed",
};

#[async_trait]
impl Strategy for AtomicSql {
    fn info(&self) -> &StrategyInfo {
        &INFO
    }

    async fn apply(
        &self,
        cx: &Cx<'_>,
        tx: &mut MySqlConnection,
        order: &Order,
        _held: &Held,
    ) -> Result<Vec<Applied>, TxError> {
        let mut applied = Vec::with_capacity(order.items.len());
        for item in order.by_product() {
            let deducted = stock::decrement_if_enough(tx, item).await?;
            let level = stock::read_level(tx, item.product_id).await?;
            let Some(level) = level else {
                return Err(AppError::UnknownProduct(item.product_id).into());
            };
            if !deducted {
                check_enough(item, level.quantity)?;
            }
            applied.push(Applied {
                item,
                remaining: level.quantity,
                epoch: level.epoch,
            });
        }
        cx.hooks.after_read(order).await;
        Ok(applied)
    }
}
