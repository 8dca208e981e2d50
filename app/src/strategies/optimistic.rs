//! `optimistic`: read a version, write only if it is unchanged (compare-and-set).
//!
//! # Algorithm
//! 1. BEGIN (a **new** transaction every attempt: under REPEATABLE READ, a retry in
//!    the same transaction would read the same old snapshot and fail forever).
//! 2. For each item, in product_id order: plain read of `(quantity, version)`; check.
//! 3. For each item: `UPDATE stock SET quantity = <read − requested>,
//!    version = version + 1 WHERE product_id = ? AND version = <read version>`.
//!    No row matched: someone wrote the row since our read. ROLLBACK, jittered
//!    backoff, start again from 1, at most `--optimistic-max-attempts` transactions;
//!    then 503 `busy`. The response's `attempts` says how many it took.
//! 4. Ledger, orders, COMMIT.
//!
//! # Guarantees
//! No lost update, across instances: the WHERE clause is evaluated on the latest
//! committed row under its row lock, so of two writers that read the same version
//! exactly one matches. The version only grows (every writer of `stock` bumps it), so
//! there is no ABA problem: a row that went 5 → 4 → 5 units still has a new version.
//! Nothing is held between the read and the write: a slow business step blocks no one.
//!
//! # Costs and failure modes
//! - Under contention most attempts fail: with N concurrent buyers of one product,
//!   one CAS per round wins and the others retry, so the work grows with N² and
//!   requests run out of budget (503 `busy`) although stock is left. The load test
//!   shows attempts per success rising with concurrency.
//! - Mixed with a writer that does not bump the version, it would silently lose
//!   updates; every write in this service bumps it.
//!
//! # When to use it
//! When conflicts are rare (many products, few buyers each) and holding locks while
//! the application thinks is costly. For one hot product, use `atomic-sql`.

use super::{
    Applied, Cx, Held, Strategy, StrategyInfo, TxError, check_enough, retry_on_lock_conflict,
};
use crate::error::AppError;
use crate::order::Order;
use crate::stock;
use async_trait::async_trait;
use sqlx::MySqlConnection;

/// Version compare-and-set with bounded retries.
pub struct Optimistic {
    pub max_attempts: u32,
}

static INFO: StrategyInfo = StrategyInfo {
    name: "optimistic",
    description: "Read quantity and version, UPDATE ... WHERE version = read; a new transaction per retry, bounded, then busy.",
    backend: "database",
    safe_across_instances: true,
    fencing: "not needed",
};

#[async_trait]
impl Strategy for Optimistic {
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
        let mut reads = Vec::with_capacity(order.items.len());
        for item in order.by_product() {
            let level = stock::read_level(tx, item.product_id)
                .await?
                .ok_or(AppError::UnknownProduct(item.product_id))?;
            check_enough(item, level.quantity)?;
            reads.push((item, level));
        }
        cx.hooks.after_read(order).await;
        let mut applied = Vec::with_capacity(reads.len());
        for (item, level) in reads {
            let remaining = level.quantity - item.quantity;
            let written =
                stock::write_quantity_if_version(tx, item.product_id, remaining, level.version)
                    .await
                    .map_err(retry_on_lock_conflict)?;
            if !written {
                return Err(TxError::Retry(format!(
                    "product {} changed since it was read (version {})",
                    item.product_id, level.version
                )));
            }
            applied.push(Applied {
                item,
                remaining,
                epoch: level.epoch,
            });
        }
        Ok(applied)
    }
}
