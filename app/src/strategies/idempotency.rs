//! A request id deducts at most once, and a retry gets the first answer.
//!
//! - **The `orders` primary key** is the guard, across instances: each deduction inserts
//!   its `orders` row in its transaction ([`super::txn::record`]); a twin committing
//!   second fails with 1062, rolls back, and is answered with the first one's response.
//! - **A refusal asks once.** A retry of a success may meet a refusal its first try did
//!   not (sold out since: 409; lock busy: 503), so a refusal reads `orders` once: the
//!   stored answer if this id succeeded (422 if for something else), else the refusal,
//!   with what is left when the strategy could not say, or 404 when there is no product.
//! - **In-flight twins wait** (the service's twin layer, `service/in_flight.rs`) instead
//!   of racing for locks and rows.

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

/// One read after a refusal, on `pool`: this id's stored answer, and what is left of
/// the product unless the refusal says ([`answer`]).
pub async fn after_refusal(
    pool: &sqlx::MySqlPool,
    d: &Deduction<'_>,
    refusal: DeductError,
) -> Result<Deducted, DeductError> {
    // What is left is read only when the refusal did not say (0: no row, NULL).
    let product_id = refusal.stock_unsaid().unwrap_or(0);
    // CAST: `ascii_bin` and JSON columns come back as binary, not text, to sqlx.
    let (available, request_hash, response): (Option<i32>, Option<String>, Option<String>) =
        sqlx::query_as(
            r#"SELECT (SELECT quantity FROM stock WHERE product_id = ?),
                      (SELECT CAST(request_hash AS CHAR) FROM orders WHERE request_id = ?),
                      (SELECT CAST(response AS CHAR) FROM orders WHERE request_id = ?)"#,
        )
        .bind(product_id)
        .bind(&d.order.request_id)
        .bind(&d.order.request_id)
        .fetch_one(pool)
        .await?;
    answer(d, refusal, available, request_hash.zip(response))
}

/// A refusal's answer from what was read after it: `stored` (request hash, response) if
/// this id succeeded before (then marked `duplicate`), else the refusal with `available`.
pub fn answer(
    d: &Deduction<'_>,
    refusal: DeductError,
    available: Option<i32>,
    stored: Option<(String, String)>,
) -> Result<Deducted, DeductError> {
    if let Some((request_hash, response)) = stored {
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
