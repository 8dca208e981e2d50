//! `bucketed`: split the hot row. A product's stock lives in K rows, so K buyers can
//! each hold a row lock at once where `atomic-sql` lets one through.
//!
//! # Algorithm
//! A restock with `{"quantity": N, "buckets": K}` puts the N units into K rows of
//! `stock_bucket` (sizes differ by at most one); the product's `stock` row keeps 0.
//! To sell `q` units of one product:
//! 1. **One bucket, chosen at random**, with `atomic-sql`'s statement on that row:
//!    ```sql
//!    BEGIN;
//!    UPDATE stock_bucket SET quantity = LAST_INSERT_ID(quantity - :q)
//!     WHERE product_id = :id AND bucket = :b AND quantity >= :q;
//!    ```
//!    One row changed: the orders row and the ledger row, COMMIT. Five statements, as
//!    `atomic-sql`, but buyers of the same product now wait only for the buyers that
//!    drew the same bucket.
//! 2. **The bucket was short.** ROLLBACK (in REPEATABLE READ the failed UPDATE still
//!    locks its row; holding it while trying others could deadlock with a buyer doing
//!    the same the other way round), then read every bucket (a plain read, no lock):
//!    - fewer than `q` units in all the buckets together: sold out, 409. A plain
//!      read is a committed state at one instant, and stock only grows by a restock,
//!      so the refusal is exact: "sold out only when every bucket is";
//!    - a bucket with at least `q`: step 1 on the fullest one (a few times; another
//!      buyer may drain it first);
//!    - no single bucket holds `q`, yet together they do (a multi-unit request near
//!      the end): step 3.
//! 3. **Gather**, the exact slow path: BEGIN; lock all of the product's buckets in
//!    bucket order (`SELECT ... ORDER BY bucket FOR UPDATE`); take the units from the
//!    fullest buckets first; one UPDATE per bucket touched; orders, ledger, COMMIT.
//!
//! The instance remembers each product's K (learned from the read in step 2), so
//! step 1 needs no read. A stale K only costs a trip through step 2: the database
//! decides every sale.
//!
//! # Why it cannot oversell
//! Every unit is taken by a conditional UPDATE (step 1) or under the row locks of
//! every bucket (step 3): the same argument as `atomic-sql`, per bucket. The CHECK on
//! `stock_bucket.quantity` is the second net. Units of a split product are only in
//! its buckets, which no other strategy touches, so they cannot be sold twice by two
//! strategies either.
//!
//! # Costs and limits
//! - K row locks instead of one: the lock hand-overs stop being the ceiling, and the
//!   database's CPU becomes it (five statements per sale, as `atomic-sql`).
//! - Near the end of the stock, buyers draw empty buckets and take step 2: more
//!   statements per sale, and step 3 serializes on all K rows again (briefly).
//! - Buckets drain unevenly: a buyer may be refused by one bucket while another still
//!   has stock; step 2 finds it, so nobody is told "sold out" while units remain.
//! - Ordering is per bucket, not global: a later buyer may get a unit while an earlier
//!   one is still retrying (first-come-first-served is approximate, and measured).
//!
//! # Orders with several items
//! Supported, all or nothing: such an order takes step 3 for each product, in
//! product order, in one transaction. Step 1 holds one bucket row and waits for no
//! other, so it never waits in a cycle with a gather.
//!
//! # A product that is not split
//! Has one bucket: its own `stock` row. `bucketed` is then `atomic-sql` (steps 1 and
//! 3 on the `stock` row), so it can sell any product.
//!
//! # When to use it
//! A hot product whose buyers each take a few units, with stock large enough that
//! most buckets are far from empty, when every sale must be in the database when it
//! is confirmed. Choose K around the number of buyers that should proceed at once
//! (more buckets than database connections buys nothing).

use super::contract::{Deducted, Deduction, Strategy};
use super::retry::{self, TxError, retry_on_lock_conflict};
use super::txn::{self, Sold};
use crate::domain::error::DeductError;
use crate::domain::order::Item;
use async_trait::async_trait;
use rand::Rng;
use sqlx::MySqlConnection;
use std::collections::HashMap;
use std::sync::Mutex;

/// How the service registers it: its card for the catalogue and its flags
/// (`bucketed/served.rs`; a copy leaves it out).
#[cfg(feature = "service")]
mod served;

const NAME: &str = "bucketed";

/// Where this strategy is written, from the repository's root (its card's `source`).
pub const SOURCE: &str = file!();

/// How many transactions a multi-unit request may run.
#[derive(Debug, Clone)]
pub struct BucketedSettings {
    /// Transactions it may run to gather a multi-unit request (retries after a deadlock
    /// or a lock wait timeout).
    pub max_attempts: u32,
}

impl Default for BucketedSettings {
    fn default() -> Self {
        BucketedSettings { max_attempts: 5 }
    }
}

/// Targeted tries (step 2 to step 1) before a single-item request gathers.
const TARGETED_TRIES: u32 = 3;

/// The split-row strategy.
pub struct Bucketed {
    /// Transactions step 3 may run (retries after a lock wait timeout or deadlock).
    pub max_attempts: u32,
    /// Each product's number of buckets, as last read (0: not split). A std mutex: it
    /// is held for one map lookup or insert, never across an `.await`.
    known: Mutex<HashMap<i64, u16>>,
}

impl<S> super::contract::Declare<S> for Bucketed {
    type Settings = BucketedSettings;

    fn build(
        settings: &BucketedSettings,
        _: &super::contract::Context<'_, S>,
    ) -> std::sync::Arc<dyn Strategy> {
        std::sync::Arc::new(Bucketed::new(settings.max_attempts))
    }
}

impl Bucketed {
    pub fn new(max_attempts: u32) -> Bucketed {
        Bucketed {
            max_attempts,
            known: Mutex::default(),
        }
    }

    fn known(&self, product_id: i64) -> Option<u16> {
        self.known
            .lock()
            .expect("bucket map poisoned")
            .get(&product_id)
            .copied()
    }

    fn learn(&self, product_id: i64, buckets: u16) {
        self.known
            .lock()
            .expect("bucket map poisoned")
            .insert(product_id, buckets);
    }
}

/// Where a product's units are: its own row, or bucket `b` of `stock_bucket`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Bucket {
    Row,
    Split(i16),
}

#[async_trait(?Send)]
impl Strategy for Bucketed {
    fn name(&self) -> &'static str {
        NAME
    }

    // ANCHOR: deduct
    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        // Answers name what is left in the bucket that sold (the product's total is
        // not read on the fast path; GET /stock sums the buckets).
        if let [item] = d.order.items[..] {
            // Step 1 on a random bucket, when we know how many there are.
            let mut next = self.known(item.product_id).map(|k| match k {
                0 => Bucket::Row,
                k => Bucket::Split(rand::rng().random_range(0..k as i16)),
            });
            let mut tries = 0;
            while tries <= TARGETED_TRIES {
                if let Some(bucket) = next {
                    tries += 1;
                    if let Some(done) = take_from(d, item, bucket, tries).await? {
                        return Ok(done);
                    }
                }
                // Step 2: read every bucket.
                let buckets = read_buckets(d, item.product_id).await?;
                self.learn(item.product_id, buckets.len() as u16);
                if buckets.is_empty() {
                    if next == Some(Bucket::Row) {
                        // Not split, and its row refused: sold out (the refusal's
                        // read says how many are left, or that it does not exist).
                        return Err(short(item, None));
                    }
                    next = Some(Bucket::Row);
                    continue;
                }
                let total: i32 = buckets.iter().map(|b| b.1).sum();
                if total < item.quantity {
                    return Err(short(item, Some(total)));
                }
                let fullest = buckets.iter().max_by_key(|b| b.1).expect("not empty");
                if fullest.1 < item.quantity {
                    break; // only together: gather
                }
                next = Some(Bucket::Split(fullest.0));
            }
        }
        // Step 3: several items, or a request no single bucket could serve.
        retry::with_retries(self.max_attempts, async |attempt| {
            retry::transaction(d, async |tx| gather(tx, d, attempt).await).await
        })
        .await
    }
    // ANCHOR_END: deduct
}

fn short(item: Item, available: Option<i32>) -> DeductError {
    DeductError::InsufficientStock {
        product_id: item.product_id,
        requested: item.quantity.into(),
        available: available.map(Into::into),
    }
}

/// Step 1: one transaction selling `item` from `bucket` alone. `None` when the bucket
/// was short (rolled back: nothing written, no lock kept).
async fn take_from(
    d: &Deduction<'_>,
    item: Item,
    bucket: Bucket,
    attempt: u32,
) -> Result<Option<Deducted>, DeductError> {
    let mut tx = d.begin().await?;
    let taken = match bucket {
        Bucket::Split(b) => sqlx::query(
            r#"
            UPDATE stock_bucket SET quantity = LAST_INSERT_ID(quantity - ?)
            WHERE product_id = ? AND bucket = ? AND quantity >= ?
            "#,
        )
        .bind(item.quantity)
        .bind(item.product_id)
        .bind(b)
        .bind(item.quantity),
        Bucket::Row => sqlx::query(
            r#"
            UPDATE stock SET quantity = LAST_INSERT_ID(quantity - ?), version = version + 1
            WHERE product_id = ? AND quantity >= ?
            "#,
        )
        .bind(item.quantity)
        .bind(item.product_id)
        .bind(item.quantity),
    }
    .execute(&mut *tx)
    .await?;
    if taken.rows_affected() == 0 {
        tx.rollback().await?;
        return Ok(None);
    }
    d.probe.after_read(d.knobs).await;
    let sold = [Sold {
        item,
        remaining: taken.last_insert_id() as i32,
    }];
    let done = txn::record(&mut tx, d, &sold, attempt, None).await?;
    txn::commit(tx, d.probe).await?;
    Ok(Some(done))
}

/// Step 2's read: every bucket of the product and what it holds, no lock.
async fn read_buckets(d: &Deduction<'_>, product_id: i64) -> Result<Vec<(i16, i32)>, DeductError> {
    Ok(sqlx::query_as(
        "SELECT bucket, quantity FROM stock_bucket WHERE product_id = ? ORDER BY bucket",
    )
    .bind(product_id)
    .fetch_all(d.pool)
    .await?)
}

/// Step 3 inside `tx`: for each item in product order, lock every bucket of the
/// product (or its row, when it is not split), take the units from the fullest
/// buckets first, write; then the orders and ledger rows.
async fn gather(
    tx: &mut MySqlConnection,
    d: &Deduction<'_>,
    attempt: u32,
) -> Result<Deducted, TxError> {
    let mut sold = Vec::with_capacity(d.order.items.len());
    for item in d.order.by_product() {
        let mut buckets: Vec<(i16, i32)> = sqlx::query_as(
            "SELECT bucket, quantity FROM stock_bucket WHERE product_id = ? ORDER BY bucket FOR UPDATE",
        )
        .bind(item.product_id)
        .fetch_all(&mut *tx)
        .await
        .map_err(retry_on_lock_conflict)?;
        if buckets.is_empty() {
            // Not split: its own row is its one bucket.
            let quantity: i32 =
                sqlx::query_scalar("SELECT quantity FROM stock WHERE product_id = ? FOR UPDATE")
                    .bind(item.product_id)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(retry_on_lock_conflict)?
                    .ok_or(DeductError::UnknownProduct(item.product_id))?;
            txn::check_enough(item, quantity)?;
            sqlx::query(
                "UPDATE stock SET quantity = ?, version = version + 1 WHERE product_id = ?",
            )
            .bind(quantity - item.quantity)
            .bind(item.product_id)
            .execute(&mut *tx)
            .await
            .map_err(retry_on_lock_conflict)?;
            sold.push(Sold {
                item,
                remaining: quantity - item.quantity,
            });
            continue;
        }
        let total: i32 = buckets.iter().map(|b| b.1).sum();
        txn::check_enough(item, total)?;
        // Fullest first: the fewest rows to touch.
        buckets.sort_by_key(|b| std::cmp::Reverse(b.1));
        let mut wanted = item.quantity;
        for (bucket, quantity) in buckets {
            if wanted == 0 {
                break;
            }
            let take = wanted.min(quantity);
            wanted -= take;
            sqlx::query("UPDATE stock_bucket SET quantity = ? WHERE product_id = ? AND bucket = ?")
                .bind(quantity - take)
                .bind(item.product_id)
                .bind(bucket)
                .execute(&mut *tx)
                .await
                .map_err(retry_on_lock_conflict)?;
        }
        sold.push(Sold {
            item,
            remaining: total - item.quantity,
        });
    }
    d.probe.after_read(d.knobs).await;
    Ok(txn::record(tx, d, &sold, attempt, None).await?)
}
