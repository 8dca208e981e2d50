//! The `baseline` row: the reference's transaction (the conditional UPDATE) driven
//! directly over sqlx, with no HTTP and no service in between, on as many database
//! connections as the service's instances have together, at the same concurrency, for
//! the same time. It does less than the service (no idempotency read, no `orders` row),
//! so it bounds the reference from above: the gap is what the service itself costs
//! (HTTP, JSON, the idempotency check, the orders row).

use crate::engine::{Answer, Fired, Outcome};
use futures::StreamExt;
use sqlx::MySqlPool;
use std::time::Instant;

/// One deduction: conditional decrement and its ledger row, in one transaction.
async fn deduct(db: &MySqlPool, product_id: i64, request_id: &str) -> sqlx::Result<bool> {
    let mut tx = db.begin().await?;
    let done = sqlx::query(
        "UPDATE stock SET quantity = quantity - 1, version = version + 1 WHERE product_id = ? AND quantity >= 1",
    )
    .bind(product_id)
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        tx.rollback().await?;
        return Ok(false);
    }
    sqlx::query(
        "INSERT INTO ledger (request_id, product_id, quantity, epoch, strategy) \
         SELECT ?, product_id, 1, epoch, 'baseline' FROM stock WHERE product_id = ?",
    )
    .bind(request_id)
    .bind(product_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// Single-unit deductions of `product_id`, `concurrency` at once (on the pool's
/// connections), for `duration`.
pub async fn fire(
    db: &MySqlPool,
    product_id: i64,
    duration: std::time::Duration,
    concurrency: usize,
    id_prefix: &str,
) -> Fired {
    let started = Instant::now();
    let answers: Vec<Answer> = futures::stream::iter(0..)
        .take_while(|_| std::future::ready(started.elapsed() < duration))
        .map(|i| async move {
            let request_id = format!("{id_prefix}-{i}");
            let sent = Instant::now();
            let (outcome, attempts) = match deduct(db, product_id, &request_id).await {
                Ok(true) => (Outcome::Sold, 1),
                Ok(false) => (Outcome::SoldOut, 0),
                Err(_) => (Outcome::ServerError, 0),
            };
            Answer {
                outcome,
                request_id,
                items: vec![(product_id, 1)],
                duplicate: false,
                attempts,
                micros: sent.elapsed().as_micros() as u64,
                instance: 0,
                sent_us: sent.duration_since(started).as_micros() as u64,
                batch_size: None,
                retries: 0,
                done_us: started.elapsed().as_micros() as u64,
                error: None,
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    Fired::from_answers(answers, started.elapsed(), concurrency)
}
