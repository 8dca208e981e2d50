//! A request id deducts at most once, and a retry gets the first answer.
//!
//! Three parts, cheapest first:
//! - **The `orders` primary key** is the guard, across instances: every deduction
//!   inserts its `orders` row inside its own transaction ([`super::txn::record`]), so
//!   a twin that commits second fails with 1062, rolls back, and is answered here with
//!   the first one's stored response. Nothing is read before a deduction: a request
//!   that never ran before (nearly all of them) pays nothing for idempotency.
//! - **A refusal asks once.** A retry of a request that succeeded may meet a refusal
//!   its first try did not: the stock ran out since (409), the lock is busy (503). So a
//!   refusal, and only a refusal, reads `orders` once: the stored answer if this id
//!   already succeeded (422 if it was for something else), the refusal otherwise. The
//!   same read says what is left of the product when the strategy's statement could
//!   not (a conditional UPDATE that matched nothing), or that it does not exist (404).
//! - **In-flight twins wait** (the edge's `InFlight`): inside one process, a duplicate
//!   waits for its twin to finish and then goes, instead of racing it for locks and
//!   rows only to roll back.

use super::contract::{Deducted, Deduction};
use crate::domain::error::DeductError;

/// Runs one deduction (`run`) for `d`'s request id, and answers a refusal or a
/// duplicate key from `orders` ([`after_refusal`]).
pub async fn once(
    d: &Deduction<'_>,
    run: impl Future<Output = Result<Deducted, DeductError>>,
) -> Result<Deducted, DeductError> {
    match run.await {
        Err(refusal) if refusal.is_refusal() => after_refusal(d.pool, d, refusal).await,
        done => done,
    }
}

/// One read after a refusal, on `pool` (the sold-out fast path has its own): this
/// request id's stored answer, if it succeeded before (marked `duplicate`; 422 when it
/// was for another request), and what is left of the product, unless the refusal says.
pub async fn after_refusal(
    pool: &sqlx::MySqlPool,
    d: &Deduction<'_>,
    refusal: DeductError,
) -> Result<Deducted, DeductError> {
    // What is left is read only when the refusal did not say (0: no row, NULL).
    let product_id = refusal.stock_unsaid().unwrap_or(0);
    // `ascii_bin` columns and MariaDB's JSON come back flagged as binary, which sqlx
    // will not decode into a String: CAST(... AS CHAR) makes them text again.
    let (available, request_hash, response): (Option<i32>, Option<String>, Option<String>) =
        sqlx::query_as(
            r#"
            SELECT (SELECT quantity FROM stock WHERE product_id = ?),
                   (SELECT CAST(request_hash AS CHAR) FROM orders WHERE request_id = ?),
                   (SELECT CAST(response AS CHAR) FROM orders WHERE request_id = ?)
            "#,
        )
        .bind(product_id)
        .bind(&d.order.request_id)
        .bind(&d.order.request_id)
        .fetch_one(pool)
        .await?;
    if let (Some(request_hash), Some(response)) = (request_hash, response) {
        if request_hash != d.fingerprint {
            return Err(DeductError::RequestIdReused(d.order.request_id.clone()));
        }
        let mut stored: Deducted = serde_json::from_str(&response).map_err(|e| {
            DeductError::Unexpected(anyhow::Error::new(e).context("stored response unreadable"))
        })?;
        stored.duplicate = true;
        return Ok(stored);
    }
    Err(match refusal {
        DeductError::AlreadyDone(_) => DeductError::Unexpected(anyhow::anyhow!(
            "orders row vanished after a duplicate-key error"
        )),
        DeductError::InsufficientStock {
            product_id,
            requested,
            available: None,
        } => match available {
            None => DeductError::UnknownProduct(product_id),
            Some(left) => DeductError::InsufficientStock {
                product_id,
                requested,
                available: Some(left.into()),
            },
        },
        other => other,
    })
}
