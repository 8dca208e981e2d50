//! The small helpers a strategy calls for its transaction: the check, the orders +
//! ledger rows of one sale, the COMMIT. None of them calls a strategy back.

use super::contract::{Deducted, Deduction, ItemResult};
use crate::domain::error::{DeductError, is_connection_error, mysql_error_number};
use crate::domain::order::Item;
use crate::domain::probe::{Failpoint, Probe};
use sqlx::{MySql, MySqlConnection, QueryBuilder, Transaction};
use std::sync::Arc;

/// One item a deduction sold, and what it left.
#[derive(Debug, Clone, Copy)]
pub struct Sold {
    pub item: Item,
    /// Units left after this deduction.
    pub remaining: i32,
}

/// 409 when fewer than the requested units are left.
pub fn check_enough(item: Item, available: i32) -> Result<(), DeductError> {
    if available < item.quantity {
        return Err(DeductError::InsufficientStock {
            product_id: item.product_id,
            requested: item.quantity.into(),
            available: Some(available.into()),
        });
    }
    Ok(())
}

/// Writes what a deduction sold into its transaction: the `orders` row (the stored
/// answer, under the request id) and one ledger row per item. Returns the answer.
///
/// Two statements. The `orders` insert comes first: its primary key finds a twin that
/// committed meanwhile (1062) before anything else fails; the transaction then rolls
/// back and the idempotency layer answers. Each ledger row takes its epoch from the
/// stock row this transaction has just written.
pub async fn record(
    tx: &mut MySqlConnection,
    d: &Deduction<'_>,
    sold: &[Sold],
    attempts: u32,
    fence_token: Option<u64>,
) -> Result<Deducted, DeductError> {
    let order = d.order;
    let items = order
        .items
        .iter()
        .map(|item| {
            let sold = sold
                .iter()
                .find(|s| s.item.product_id == item.product_id)
                .expect("every item was sold");
            ItemResult {
                product_id: item.product_id,
                quantity: item.quantity,
                remaining: sold.remaining,
            }
        })
        .collect();
    let answer = Deducted {
        deducted: true,
        request_id: order.request_id.clone(),
        strategy: d.strategy.to_string(),
        items,
        attempts,
        fence_token,
        lock_lost_after_commit: false,
        batch_size: None,
        stream_entry: None,
        duplicate: false,
    };
    let body = serde_json::to_string(&answer).map_err(anyhow::Error::new)?;
    let stored = sqlx::query(
        "INSERT INTO orders (request_id, request_hash, strategy, response) VALUES (?, ?, ?, ?)",
    )
    .bind(&order.request_id)
    .bind(&d.fingerprint)
    .bind(d.strategy)
    .bind(&body)
    .execute(&mut *tx)
    .await;
    if let Err(e) = stored {
        return Err(match mysql_error_number(&e) {
            Some(1062) => DeductError::AlreadyDone(order.request_id.clone()),
            _ => e.into(),
        });
    }
    let mut ledger: QueryBuilder<MySql> = QueryBuilder::new(
        "INSERT INTO ledger (request_id, product_id, quantity, epoch, strategy, fence_token) ",
    );
    ledger.push_values(sold, |mut row, s| {
        row.push_bind(&order.request_id)
            .push_bind(s.item.product_id)
            .push_bind(s.item.quantity)
            .push("(SELECT epoch FROM stock WHERE product_id = ")
            .push_bind_unseparated(s.item.product_id)
            .push_unseparated(")")
            .push_bind(d.strategy)
            .push_bind(fence_token);
    });
    ledger.build().execute(&mut *tx).await?;
    Ok(answer)
}

/// The `before_commit` failpoint, then COMMIT. A connection that breaks during the
/// COMMIT leaves its outcome unknown: 503 `outcome_unknown`, and a retry with the same
/// request id finds out (the `orders` row makes it a no-op if the COMMIT landed).
pub async fn commit(tx: Transaction<'_, MySql>, probe: &Arc<dyn Probe>) -> Result<(), DeductError> {
    probe.at(Failpoint::BeforeCommit).await;
    tx.commit().await.map_err(|e| {
        if is_connection_error(&e) {
            DeductError::OutcomeUnknown(format!(
                "the database connection broke during COMMIT ({e}); retry with the same request_id"
            ))
        } else {
            e.into()
        }
    })
}
