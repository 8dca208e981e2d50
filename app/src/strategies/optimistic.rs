//! `optimistic`: read a version, write only if it is unchanged (compare-and-set).
//!
//! # Copying this file
//! A copy takes this file, the domain, the contract and the helpers it calls, under the
//! same module paths, with the schema: `copies.toml` lists them under
//! `[strategy.optimistic]`, with the crates they need. `./scripts/copy-check optimistic
//! DIR` builds such a copy and sells from it on a real server.
//!
//! # Algorithm
//! 1. For each item, in product_id order: plain read of `(quantity, version)`; check
//!    (409 here opens no transaction: the read needs none, the compare-and-set
//!    below is what protects).
//! 2. BEGIN (a **new** transaction every attempt: under REPEATABLE READ, a retry in
//!    the same transaction would read the same old snapshot and fail forever).
//! 3. For each item: `UPDATE stock SET quantity = <read − requested>,
//!    version = version + 1 WHERE product_id = ? AND version = <read version>`.
//!    No row matched: someone wrote the row since our read. ROLLBACK, jittered
//!    backoff, start again from 1, at most `--optimistic-max-attempts` times
//!    ([`retry::with_retries`]); then 503 `busy`. The response's `attempts` says how
//!    many it took.
//! 4. Orders and ledger rows ([`txn::record`]), COMMIT.
//!
//! Six statements for a sale on the first try (SELECT, BEGIN, UPDATE, two INSERTs,
//! COMMIT), four more per failed try (SELECT, BEGIN, UPDATE, ROLLBACK); two for a
//! refusal (the SELECT, and the read every refusal makes).
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
//! - Behind read/write splitting (the read from a replica, `--read-replica-url`), a
//!   lagging replica returns an old version: the compare-and-set refuses it, every
//!   try, until the replica catches up. Safe, and unavailable meanwhile (chaos
//!   scenario `replica-lag`: no sale for the whole 3 s lag, nothing lost). This is
//!   what "optimistic locking is unreliable with read/write splitting" means.
//!
//! # When to use it
//! When conflicts are rare (many products, few buyers each) and holding locks while
//! the application thinks is costly. For one hot product, use `atomic-sql`.

use super::contract::{Deducted, Deduction, Strategy};
use super::retry::{self, TxError, retry_on_lock_conflict};
use super::txn::{self, Sold, check_enough};
use crate::domain::error::DeductError;
use async_trait::async_trait;

/// How the service registers it: its card for the catalogue and its flags
/// (`optimistic/served.rs`; a copy leaves it out).
#[cfg(feature = "service")]
mod served;

/// Where this strategy is written, from the repository's root (its card's `source`).
pub const SOURCE: &str = file!();

/// How many transactions one request may run.
#[derive(Debug, Clone)]
pub struct OptimisticSettings {
    /// Transactions it may run for one request (retries after a failed compare-and-set)
    /// before it answers 503 busy.
    pub max_attempts: u32,
}

impl Default for OptimisticSettings {
    fn default() -> Self {
        OptimisticSettings { max_attempts: 10 }
    }
}

/// Version compare-and-set with bounded retries.
pub struct Optimistic {
    pub max_attempts: u32,
}

impl<S> super::contract::Declare<S> for Optimistic {
    type Settings = OptimisticSettings;

    fn build(
        settings: &OptimisticSettings,
        _: &super::contract::Context<'_, S>,
    ) -> std::sync::Arc<dyn Strategy> {
        std::sync::Arc::new(Optimistic {
            max_attempts: settings.max_attempts,
        })
    }
}

const NAME: &str = "optimistic";

#[async_trait(?Send)]
impl Strategy for Optimistic {
    fn name(&self) -> &'static str {
        NAME
    }

    // ANCHOR: deduct
    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        retry::with_retries(self.max_attempts, async |attempt| {
            let mut reads = Vec::with_capacity(d.order.items.len());
            for item in d.order.by_product() {
                let (quantity, version): (i32, i64) =
                    sqlx::query_as("SELECT quantity, version FROM stock WHERE product_id = ?")
                        .bind(item.product_id)
                        .fetch_optional(d.reads)
                        .await?
                        .ok_or(DeductError::UnknownProduct(item.product_id))?;
                check_enough(item, quantity)?;
                let sold = Sold {
                    item,
                    remaining: quantity - item.quantity,
                };
                reads.push((sold, version));
            }
            d.probe.after_read(d.knobs).await;
            let mut tx = d.begin().await?;
            for (sold, version) in &reads {
                let written = sqlx::query(
                    r#"
                    UPDATE stock SET quantity = ?, version = version + 1
                    WHERE product_id = ? AND version = ?
                    "#,
                )
                .bind(sold.remaining)
                .bind(sold.item.product_id)
                .bind(version)
                .execute(&mut *tx)
                .await;
                let lost = match written {
                    Ok(done) if done.rows_affected() == 1 => continue,
                    Ok(_) => TxError::Retry(format!(
                        "product {} changed since it was read (version {version})",
                        sold.item.product_id
                    )),
                    Err(e) => retry_on_lock_conflict(e),
                };
                tx.rollback().await?;
                return Err(lost);
            }
            let sold: Vec<Sold> = reads.iter().map(|(sold, _)| *sold).collect();
            let done = txn::record(&mut tx, d, &sold, attempt, None).await?;
            txn::commit(tx, d.probe).await?;
            Ok(done)
        })
        .await
    }
    // ANCHOR_END: deduct
}
