//! `atomic-sql`: let the database check and decrement in one statement.
//!
//! # Copying this file
//! A copy takes this file, the domain, the contract and the helpers it calls, under the
//! same module paths, with the schema: `copies.toml` lists them under
//! `[strategy.atomic-sql]`, with the crates they need. `./scripts/copy-check atomic-sql
//! DIR` builds such a copy and sells from it on a real server.
//!
//! # Algorithm
//! 1. BEGIN.
//! 2. For each item, in product_id order:
//!    `UPDATE stock SET quantity = quantity - :q, version = version + 1
//!     WHERE product_id = :id AND quantity >= :q`.
//!    One row changed: deducted. None: too few units, or no such product; ROLLBACK
//!    undoes the items already deducted, and the refusal's one read
//!    ([`super::idempotency`]) says which (409 or 404).
//! 3. The `after_read` hook and any hold come after the last UPDATE: the row locks are
//!    held through them, as a business step between "decide" and "commit" would.
//! 4. The orders row and the ledger rows ([`txn::record`]), COMMIT.
//!
//! Five statements for a sale: BEGIN, UPDATE, two INSERTs, COMMIT. What is left comes
//! back with the UPDATE itself: `quantity = LAST_INSERT_ID(quantity - :q)` puts the
//! new value in the reply's last-insert-id field (MySQL's sequence idiom), so nothing
//! is read back. A refusal: BEGIN, UPDATE, ROLLBACK, and the one read every refusal
//! makes (four).
//!
//! # Why it cannot oversell
//! An UPDATE reads the **latest committed** row, not a snapshot, and holds an
//! exclusive row lock until COMMIT. Two deductions of the same product therefore run
//! one after the other, and the second evaluates `quantity >= :q` on the first one's
//! result. The check and the write are one statement: there is no window between them
//! for another request. The `CHECK (quantity >= 0)` on the table is a second net:
//! without the `quantity >= ?` guard (the `no-guard` mistake, `no_guard` below) the
//! last unit still sells once, and the next buyer gets the constraint's error (4025)
//! instead of a clean refusal.
//!
//! # Costs and limits
//! - One hot row is a queue: throughput on a single product is bounded by how fast
//!   InnoDB passes the row lock from one transaction to the next (the book has the
//!   figures).
//! - Items are taken in product_id order, so two multi-item orders over the same
//!   products never lock in opposite orders (no deadlock between them).
//! - It only works when the whole decision is expressible in SQL. A check that needs
//!   another service (a coupon, a fraud score) between read and write needs a lock.
//!
//! # When to use it
//! Almost always, for a counter like stock. It is the baseline the lock strategies are
//! measured against in the report.

use super::contract::{Deducted, Deduction, Strategy};
use super::txn::{self, Sold};
use crate::domain::error::{DeductError, mysql_error_number};
use async_trait::async_trait;

/// How the service registers it: its card for the catalogue
/// (`atomic_sql/served.rs`; a copy leaves it out).
#[cfg(feature = "service")]
mod served;

/// Where this strategy is written, from the repository's root (its card's `source`).
pub const SOURCE: &str = file!();

/// The conditional-UPDATE strategy. Stateless.
pub struct AtomicSql;

const NAME: &str = "atomic-sql";

impl<S> super::contract::Declare<S> for AtomicSql {
    type Settings = super::contract::NoSettings;

    fn build(
        _: &super::contract::NoSettings,
        _: &super::contract::Context<'_, S>,
    ) -> std::sync::Arc<dyn Strategy> {
        std::sync::Arc::new(AtomicSql)
    }
}

#[async_trait(?Send)]
impl Strategy for AtomicSql {
    fn name(&self) -> &'static str {
        NAME
    }

    // ANCHOR: deduct
    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        let mut tx = d.begin().await?;
        let mut sold = Vec::with_capacity(d.order.items.len());
        for item in d.order.by_product() {
            let done = sqlx::query(
                r#"
                UPDATE stock SET quantity = LAST_INSERT_ID(quantity - ?), version = version + 1
                WHERE product_id = ? AND quantity >= ?
                "#,
            )
            .bind(item.quantity)
            .bind(item.product_id)
            .bind(item.quantity)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 0 {
                tx.rollback().await?;
                return Err(DeductError::InsufficientStock {
                    product_id: item.product_id,
                    requested: item.quantity.into(),
                    available: None,
                });
            }
            sold.push(Sold {
                item,
                remaining: done.last_insert_id() as i32,
            });
        }
        d.probe.after_read(d.knobs).await;
        let done = txn::record(&mut tx, d, &sold, 1, None).await?;
        txn::commit(tx, d.probe).await?;
        Ok(done)
    }
    // ANCHOR_END: deduct

    fn mistakes(&self) -> &'static [&'static str] {
        &["no-guard"]
    }

    async fn deduct_mistaken(
        &self,
        _no_guard: &str,
        d: &Deduction<'_>,
    ) -> Result<Deducted, DeductError> {
        no_guard(d).await
    }
}

/// The mistake `no-guard` (test hooks only), the classic next to the algorithm it
/// breaks: `UPDATE stock SET quantity = quantity - ?` with no `quantity >= ?`: the CHECK
/// constraint refuses what would go below zero, with an error instead of 0 rows.
async fn no_guard(d: &Deduction<'_>) -> Result<Deducted, DeductError> {
    let mut tx = d.begin().await?;
    let mut sold = Vec::new();
    for item in d.order.by_product() {
        // The mistake: no `AND quantity >= ?`.
        let updated = sqlx::query(
            "UPDATE stock SET quantity = quantity - ?, version = version + 1 WHERE product_id = ?",
        )
        .bind(item.quantity)
        .bind(item.product_id)
        .execute(&mut *tx)
        .await;
        let done = match updated {
            Err(e) if mysql_error_number(&e) == Some(4025) => {
                tx.rollback().await?;
                return Err(DeductError::StockConstraint(format!(
                    "product {}: {} requested; the UPDATE had no `quantity >= ?` guard, so \
                     the CHECK constraint stock_quantity_not_negative refused it (MariaDB \
                     error 4025): the constraint is the last net",
                    item.product_id, item.quantity
                )));
            }
            other => other?,
        };
        if done.rows_affected() == 0 {
            tx.rollback().await?;
            return Err(DeductError::UnknownProduct(item.product_id));
        }
        let remaining = sqlx::query_scalar("SELECT quantity FROM stock WHERE product_id = ?")
            .bind(item.product_id)
            .fetch_one(&mut *tx)
            .await?;
        sold.push(Sold { item, remaining });
    }
    d.probe.after_read(d.knobs).await;
    let done = txn::record(&mut tx, d, &sold, 1, None).await?;
    txn::commit(tx, d.probe).await?;
    Ok(done)
}
