//! Retrying a transaction: the loop with jittered backoff, what asks for a retry
//! (a deadlock, a lock wait timeout, a failed compare-and-set), and a transaction
//! that rolls back on every failure.

use super::contract::Deduction;
use super::txn::commit;
use crate::domain::error::{DeductError, mysql_error_number};
use sqlx::MySqlConnection;
use std::time::Duration;

/// Why one try did not produce a deduction.
#[derive(Debug)]
pub enum TxError {
    /// Try again (deadlock, lock wait timeout, failed compare-and-set); the text says
    /// why, for the final `busy` answer.
    Retry(String),
    /// Give up with this answer.
    Fail(DeductError),
}

impl<E: Into<DeductError>> From<E> for TxError {
    fn from(e: E) -> Self {
        TxError::Fail(e.into())
    }
}

/// Runs `attempt(1)`, `attempt(2)`, ... while it asks for a retry, at most
/// `max_attempts` times, with jittered backoff between tries; then 503 `busy`. Each
/// try opens (and ends) its own transaction: under REPEATABLE READ a retry inside the
/// same transaction would read the same old snapshot and fail forever.
pub async fn with_retries<T>(
    max_attempts: u32,
    mut attempt: impl AsyncFnMut(u32) -> Result<T, TxError>,
) -> Result<T, DeductError> {
    let mut tries = 0;
    loop {
        tries += 1;
        match attempt(tries).await {
            Ok(done) => return Ok(done),
            Err(TxError::Fail(e)) => return Err(e),
            Err(TxError::Retry(reason)) if tries >= max_attempts.max(1) => {
                return Err(DeductError::Busy(format!(
                    "gave up after {tries} attempts: {reason}"
                )));
            }
            Err(TxError::Retry(reason)) => {
                tracing::debug!(tries, %reason, "retrying the transaction");
                tokio::time::sleep(backoff(tries)).await;
            }
        }
    }
}

/// Full-jitter exponential backoff: a random wait in [0, min(100 ms, 2 ms × 2^n)], so
/// that retrying transactions spread out instead of colliding again in step.
pub fn backoff(attempt: u32) -> Duration {
    use rand::Rng;
    let cap_ms = (2u64 << attempt.min(6)).min(100);
    Duration::from_micros(rand::rng().random_range(0..=cap_ms * 1000))
}

/// Turns the errors that mean "another transaction holds what we need" into a retry:
/// 1213 (deadlock: InnoDB rolled our transaction back) and 1205 (lock wait timeout:
/// only the statement was rolled back; the transaction keeps its other locks until its
/// ROLLBACK, since `innodb_rollback_on_timeout` is off).
pub fn retry_on_lock_conflict(e: sqlx::Error) -> TxError {
    match mysql_error_number(&e) {
        Some(1213) => TxError::Retry("deadlock (1213)".into()),
        Some(1205) => TxError::Retry("lock wait timeout (1205)".into()),
        _ => TxError::Fail(e.into()),
    }
}

/// Runs `body` in a new transaction: COMMIT ([`commit`]) when it succeeds, an explicit
/// ROLLBACK on every failure (after a lock wait timeout the transaction still holds its
/// other row locks until then: `innodb_rollback_on_timeout` is off).
pub async fn transaction<T>(
    d: &Deduction<'_>,
    body: impl AsyncFnOnce(&mut MySqlConnection) -> Result<T, TxError>,
) -> Result<T, TxError> {
    let mut tx = d.begin().await?;
    match body(&mut tx).await {
        Ok(done) => {
            commit(tx, d.probe).await?;
            Ok(done)
        }
        Err(e) => {
            tx.rollback().await?;
            Err(e)
        }
    }
}
