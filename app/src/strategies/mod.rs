//! The strategies, and the one path every deduction takes through them.
//!
//! A strategy says how to *lock* (optionally, before the transaction) and how to
//! *apply* an order inside the transaction. Everything else is written once, here, in
//! [`deduct`]:
//!
//! 1. wait for an in-flight twin with the same `request_id` in this process;
//! 2. answer from `orders` if this request id already succeeded (same fingerprint:
//!    the stored response with `duplicate: true`; different: 422);
//! 3. **lock** (the strategy's; none for the database strategies);
//! 4. BEGIN; **apply** (check and write stock for every item, in product order);
//!    ledger rows; the `orders` row; COMMIT. A strategy may ask for the whole
//!    transaction to be retried (deadlock, failed compare-and-set): ROLLBACK, jittered
//!    backoff, again, up to its budget, then 503 `busy`;
//! 5. **release** the lock, after COMMIT: releasing before it would let the next holder
//!    read the stock we are about to change.
//!
//! The lock is taken before BEGIN on purpose: under REPEATABLE READ a transaction
//! that starts first and locks second may read a snapshot older than the previous
//! holder's commit, and sell stock that is gone.
//!
//! # Layout
//! - [`unsafe_control`]: `unsafe`, plain read, check, write; no lock. Must oversell.
//! - [`local_mutex`]: `local-mutex`, a per-product mutex inside one process.
//! - [`atomic_sql`]: `atomic-sql`, `UPDATE ... SET quantity = quantity - ? WHERE ... AND quantity >= ?`.
//! - [`pessimistic`]: `pessimistic`, `SELECT ... FOR UPDATE`, retried on deadlock.
//! - [`optimistic`]: `optimistic`, compare-and-set on a version column, retried.
//! - [`fence_only`]: `fence-only`, a ticket, a claim and a guarded write with no lock:
//!   the fence alone (safe; overtaken requests are refused).
//! - [`distributed`]: `mysql-lock`, `redis-lock`, `redlock`, `zookeeper`: a distributed lock from the
//!   `locks` crate around a plain read-check-write, with fenced writes.
//!
//! The lock strategies (`local-mutex` here, the distributed locks later) *trust their
//! lock*: under it they run [`read_check_write`], the same plain read / check / write
//! of a computed value that `unsafe` runs with no lock at all. Any protection they
//! give is the lock's, which is the point of the experiments.

pub mod atomic_sql;
pub mod distributed;
pub mod fence_only;
pub mod local_mutex;
pub mod optimistic;
pub mod pessimistic;
pub mod unsafe_control;

use crate::config::Settings;
use crate::error::{AppError, is_connection_error, mysql_error_number};
use crate::hooks::{Failpoint, Hooks};
use crate::idempotency::InFlight;
use crate::order::{Item, Order};
use crate::stock::{self, LedgerLine};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sqlx::{MySqlConnection, MySqlPool};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// What `/strategies` says about a strategy.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyInfo {
    /// The path segment: `POST /deduct/{name}`.
    pub name: &'static str,
    /// One sentence: the mechanism.
    pub description: &'static str,
    /// What it depends on besides the database (`database` when nothing else).
    pub backend: &'static str,
    /// Whether it prevents overselling when several service instances share the stock.
    pub safe_across_instances: bool,
    /// How writes are fenced against a holder that lost its lock: `none`,
    /// `not needed` (the database does the locking), `token`, `owner tag`.
    pub fencing: &'static str,
}

/// A lock held for one order (one per product for a multi-item order).
#[async_trait]
pub trait HeldLock: Send + Sync {
    /// The product this lock protects, if it protects one.
    fn product_id(&self) -> Option<i64> {
        None
    }
    /// The fencing token of this acquisition, if the backend gives one.
    fn fence_token(&self) -> Option<u64>;
    /// The owner tag of this acquisition, for backends without a token (RedLock).
    fn owner(&self) -> Option<&str> {
        None
    }
    /// Whether the lock is known to be lost (lease ran out, taken, removed).
    fn is_lost(&self) -> bool {
        false
    }
    /// Releases the lock. Called after COMMIT or ROLLBACK, in reverse order of
    /// acquisition.
    async fn release(self: Box<Self>);
}

/// The locks a strategy took for an order (none for the database strategies).
#[derive(Default)]
pub struct Held {
    locks: Vec<Box<dyn HeldLock>>,
    /// Refuse to COMMIT when a lock is known lost (fenced deductions). Off, the
    /// service trusts its lock as the seeds' code does and only reports a loss after
    /// the fact (`lock_lost_after_commit`).
    pub check_lost_before_commit: bool,
}

impl Held {
    pub fn none() -> Held {
        Held::default()
    }

    pub fn push(&mut self, lock: Box<dyn HeldLock>) {
        self.locks.push(lock);
    }

    /// The fencing token reported with the deduction (the highest of the order's locks).
    pub fn fence_token(&self) -> Option<u64> {
        self.locks.iter().filter_map(|l| l.fence_token()).max()
    }

    /// The fencing token of the lock that protects `product_id`.
    pub fn token_for(&self, product_id: i64) -> Option<u64> {
        self.locks
            .iter()
            .find(|l| l.product_id() == Some(product_id))
            .and_then(|l| l.fence_token())
    }

    /// The owner tag of the lock that protects `product_id`.
    pub fn owner_for(&self, product_id: i64) -> Option<&str> {
        self.locks
            .iter()
            .find(|l| l.product_id() == Some(product_id))
            .and_then(|l| l.owner())
    }

    /// Whether any of the order's locks is known to be lost.
    pub fn any_lost(&self) -> bool {
        self.locks.iter().any(|l| l.is_lost())
    }

    /// Releases every lock, last acquired first.
    pub async fn release(self) {
        for lock in self.locks.into_iter().rev() {
            lock.release().await;
        }
    }
}

/// The outcome of one item applied inside the transaction.
#[derive(Debug, Clone, Copy)]
pub struct Applied {
    pub item: Item,
    /// Units left after this deduction.
    pub remaining: i32,
    /// The epoch the units were sold from (for the ledger).
    pub epoch: i32,
}

/// Why a transaction attempt did not produce a deduction.
#[derive(Debug)]
pub enum TxError {
    /// Roll back and run the whole transaction again (deadlock, lock wait timeout,
    /// failed compare-and-set). The text says why, for the final `busy` answer.
    Retry(String),
    /// Roll back and answer with this error.
    Fail(AppError),
}

impl From<AppError> for TxError {
    fn from(e: AppError) -> Self {
        TxError::Fail(e)
    }
}

impl From<sqlx::Error> for TxError {
    fn from(e: sqlx::Error) -> Self {
        TxError::Fail(e.into())
    }
}

/// What `apply` gets besides the transaction: the hooks, and which attempt this is.
pub struct Cx<'a> {
    pub hooks: &'a Hooks,
    /// 1 for the first transaction of a request, 2 for its first retry, ...
    pub attempt: u32,
}

/// One way to deduct stock. Implementations live one per file in this module.
#[async_trait]
pub trait Strategy: Send + Sync + 'static {
    fn info(&self) -> &StrategyInfo;

    /// How many times the transaction may run for one request (1 = no retry).
    fn max_attempts(&self) -> u32 {
        1
    }

    /// Takes the strategy's lock(s) for the order, before BEGIN.
    async fn lock(&self, _order: &Order) -> Result<Held, AppError> {
        Ok(Held::none())
    }

    /// Checks and writes the stock of every item, inside the transaction `tx`.
    /// Returns one [`Applied`] per item, in any order.
    async fn apply(
        &self,
        cx: &Cx<'_>,
        tx: &mut MySqlConnection,
        order: &Order,
        held: &Held,
    ) -> Result<Vec<Applied>, TxError>;
}

/// The registry: every strategy this service serves, in the order they were added
/// (the teaching order: the control first, the distributed locks last).
#[derive(Clone, Default)]
pub struct Strategies {
    list: Vec<Arc<dyn Strategy>>,
}

impl Strategies {
    pub fn add(&mut self, strategy: Arc<dyn Strategy>) {
        self.list.push(strategy);
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Strategy>> {
        self.list.iter().find(|s| s.info().name == name)
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.list.iter().map(|s| s.info().name).collect()
    }

    pub fn infos(&self) -> Vec<StrategyInfo> {
        self.list.iter().map(|s| s.info().clone()).collect()
    }
}

/// One line of a successful deduction's response.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ItemResult {
    pub product_id: i64,
    pub quantity: i32,
    pub remaining: i32,
}

/// The 200 body of a deduction; also what `orders.response` stores.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Deducted {
    pub deducted: bool,
    pub request_id: String,
    pub strategy: String,
    pub items: Vec<ItemResult>,
    /// Transactions run for this request (more than 1 after retries).
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence_token: Option<u64>,
    /// The lock was found lost only after COMMIT (the write was already safe or fenced).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lock_lost_after_commit: bool,
    /// This is the stored answer to an earlier request with the same request_id.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
}

/// Runs one order through `strategy`: the shared path described in the module docs.
pub async fn deduct(
    pool: &MySqlPool,
    in_flight: &InFlight,
    hooks: &Hooks,
    strategy: &dyn Strategy,
    order: &Order,
) -> Result<Deducted, AppError> {
    let name = strategy.info().name;
    let fingerprint = order.fingerprint(name);
    let _entered = in_flight.enter(&order.request_id).await;

    if let Some(stored) = replay(pool, order, &fingerprint).await? {
        return Ok(stored);
    }
    let held = strategy
        .lock(order)
        .instrument(tracing::debug_span!("lock"))
        .await?;
    hooks.at(Failpoint::AfterLock).await;
    let result = transact(pool, hooks, strategy, order, &held, &fingerprint).await;
    held.release()
        .instrument(tracing::debug_span!("release"))
        .await;
    match result {
        // A twin on another instance committed first: answer with its response.
        Err(Outcome::Twin) => replay(pool, order, &fingerprint).await?.ok_or_else(|| {
            AppError::Unexpected(anyhow::anyhow!(
                "orders row vanished after a duplicate-key error"
            ))
        }),
        Err(Outcome::Error(e)) => Err(e),
        Ok(done) => Ok(done),
    }
}

/// The stored response for this request id, marked duplicate; 422 when the id was
/// used for something else; `None` when it never succeeded.
async fn replay(
    pool: &MySqlPool,
    order: &Order,
    fingerprint: &str,
) -> Result<Option<Deducted>, AppError> {
    let mut conn = pool.acquire().await?;
    let Some(stored) = stock::find_order(&mut conn, &order.request_id).await? else {
        return Ok(None);
    };
    if stored.request_hash != fingerprint {
        return Err(AppError::RequestIdReused(order.request_id.clone()));
    }
    let mut response: Deducted = serde_json::from_str(&stored.response).map_err(|e| {
        AppError::Unexpected(anyhow::Error::new(e).context("stored response unreadable"))
    })?;
    response.duplicate = true;
    Ok(Some(response))
}

enum Outcome {
    /// The `orders` insert hit the primary key: the same request id committed
    /// elsewhere while we worked. Our transaction was rolled back.
    Twin,
    Error(AppError),
}

impl<E: Into<AppError>> From<E> for Outcome {
    fn from(e: E) -> Self {
        Outcome::Error(e.into())
    }
}

async fn transact(
    pool: &MySqlPool,
    hooks: &Hooks,
    strategy: &dyn Strategy,
    order: &Order,
    held: &Held,
    fingerprint: &str,
) -> Result<Deducted, Outcome> {
    let name = strategy.info().name;
    let max_attempts = strategy.max_attempts().max(1);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut tx = pool.begin().await?;
        let cx = Cx {
            hooks,
            attempt: attempts,
        };
        let applied = match strategy.apply(&cx, &mut tx, order, held).await {
            Ok(applied) => applied,
            Err(TxError::Retry(reason)) => {
                tx.rollback().await?;
                if attempts >= max_attempts {
                    return Err(AppError::Busy(format!(
                        "gave up after {attempts} attempts: {reason}"
                    ))
                    .into());
                }
                tracing::debug!(attempts, %reason, "retrying the transaction");
                tokio::time::sleep(backoff(attempts)).await;
                continue;
            }
            Err(TxError::Fail(e)) => {
                // An explicit ROLLBACK: dropping the transaction would also roll back,
                // but only when the connection is next used.
                let _ = tx.rollback().await;
                return Err(e.into());
            }
        };
        let fence_token = held.fence_token();
        let items: Vec<ItemResult> = order
            .items
            .iter()
            .map(|item| {
                let a = applied
                    .iter()
                    .find(|a| a.item.product_id == item.product_id)
                    .expect("a strategy applies every item");
                ItemResult {
                    product_id: item.product_id,
                    quantity: item.quantity,
                    remaining: a.remaining,
                }
            })
            .collect();
        let response = Deducted {
            deducted: true,
            request_id: order.request_id.clone(),
            strategy: name.to_string(),
            items,
            attempts,
            fence_token,
            lock_lost_after_commit: false,
            duplicate: false,
        };
        let lines: Vec<LedgerLine> = applied
            .iter()
            .map(|a| LedgerLine {
                item: a.item,
                epoch: a.epoch,
            })
            .collect();
        // The orders row first: its primary key is where a twin that committed on
        // another instance meanwhile is found (1062), before any other write fails.
        let body = serde_json::to_string(&response).map_err(anyhow::Error::new)?;
        if let Err(e) =
            stock::insert_order(&mut tx, &order.request_id, fingerprint, name, &body).await
        {
            let _ = tx.rollback().await;
            return Err(match mysql_error_number(&e) {
                Some(1062) => Outcome::Twin,
                _ => e.into(),
            });
        }
        stock::insert_ledger(&mut tx, &order.request_id, name, fence_token, &lines).await?;
        hooks.at(Failpoint::BeforeCommit).await;
        if held.check_lost_before_commit && held.any_lost() {
            let _ = tx.rollback().await;
            return Err(AppError::LockLost(
                "the lock was lost before COMMIT; nothing was written".into(),
            )
            .into());
        }
        return match tx.commit().await {
            Ok(()) => Ok(Deducted {
                // Known only now; the stored copy (for retries) cannot say it.
                lock_lost_after_commit: held.any_lost(),
                ..response
            }),
            // The COMMIT left; whether it arrived is unknown. Retrying with the same
            // request id is safe: the orders row makes it a no-op if it committed.
            Err(e) if is_connection_error(&e) => Err(AppError::OutcomeUnknown(format!(
                "the database connection broke during COMMIT ({e}); retry with the same request_id"
            ))
            .into()),
            Err(e) => Err(e.into()),
        };
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
/// only the statement was rolled back; the engine's explicit ROLLBACK releases the
/// locks the transaction still holds, since `innodb_rollback_on_timeout` is off).
pub fn retry_on_lock_conflict(e: sqlx::Error) -> TxError {
    match mysql_error_number(&e) {
        Some(1213) => TxError::Retry("deadlock (1213)".into()),
        Some(1205) => TxError::Retry("lock wait timeout (1205)".into()),
        _ => TxError::Fail(e.into()),
    }
}

/// Plain read, check, write the computed value: what a lock strategy does under its
/// lock, and what `unsafe` does with none.
///
/// 1. read each item's row (a plain, non-locking snapshot read) in product order;
///    a missing row is 404, too few units is 409;
/// 2. the `after_read` hook (and any hold);
/// 3. `UPDATE stock SET quantity = <read − requested>` for each item: the value the
///    application computed, **not** `quantity - ?`. If another request wrote the row
///    after our read, its write is silently overwritten: a lost update, which the
///    ledger exposes. Only a lock held around all three steps prevents it.
pub async fn read_check_write(
    cx: &Cx<'_>,
    tx: &mut MySqlConnection,
    order: &Order,
) -> Result<Vec<Applied>, TxError> {
    let applied = read_and_check(tx, order).await?;
    cx.hooks.after_read(order).await;
    for a in &applied {
        stock::write_quantity(tx, a.item.product_id, a.remaining).await?;
    }
    Ok(applied)
}

/// Step 1 of [`read_check_write`]: a plain read of each item in product order,
/// checked; returns what each item would leave.
pub async fn read_and_check(
    tx: &mut MySqlConnection,
    order: &Order,
) -> Result<Vec<Applied>, TxError> {
    let mut applied = Vec::with_capacity(order.items.len());
    for item in order.by_product() {
        let level = stock::read_level(tx, item.product_id)
            .await?
            .ok_or(AppError::UnknownProduct(item.product_id))?;
        check_enough(item, level.quantity)?;
        applied.push(Applied {
            item,
            remaining: level.quantity - item.quantity,
            epoch: level.epoch,
        });
    }
    Ok(applied)
}

/// 409 when fewer than the requested units are left.
pub fn check_enough(item: Item, available: i32) -> Result<(), AppError> {
    if available < item.quantity {
        return Err(AppError::InsufficientStock {
            product_id: item.product_id,
            requested: item.quantity.into(),
            available: available.into(),
        });
    }
    Ok(())
}

/// Every strategy this build serves. Called once, outside the HTTP server's
/// per-worker factory, so state inside a strategy (the local mutexes) is shared by
/// every worker.
pub fn all(settings: &Settings, pool: &MySqlPool) -> Strategies {
    let mut strategies = Strategies::default();
    strategies.add(Arc::new(unsafe_control::Unsafe));
    strategies.add(Arc::new(local_mutex::LocalMutex::default()));
    strategies.add(Arc::new(atomic_sql::AtomicSql));
    strategies.add(Arc::new(pessimistic::Pessimistic {
        max_attempts: settings.pessimistic_max_attempts,
    }));
    strategies.add(Arc::new(optimistic::Optimistic {
        max_attempts: settings.optimistic_max_attempts,
    }));
    strategies.add(Arc::new(fence_only::FenceOnly { pool: pool.clone() }));
    strategies.add(Arc::new(distributed::LockStrategy::mysql(settings, pool)));
    strategies.add(Arc::new(distributed::LockStrategy::redis(settings, pool)));
    strategies.add(Arc::new(distributed::LockStrategy::redlock(settings, pool)));
    strategies.add(Arc::new(distributed::LockStrategy::zookeeper(
        settings, pool,
    )));
    strategies
}
