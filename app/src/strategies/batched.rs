//! `batched`: request coalescing. Many buyers of one product share one transaction
//! (an application-level group commit).
//!
//! # Copying this file
//! A copy takes this file, the domain, the contract and the helpers it calls, under the
//! same module paths, with the schema: `copies.toml` lists them under
//! `[strategy.batched]`, with the crates they need. `./scripts/copy-check batched DIR`
//! builds such a copy and sells from it on a real server.
//!
//! Every other safe strategy runs one transaction per sale, and all of them queue on
//! the same thing for a hot product: its row lock (or a lock key in front of it). The
//! row lock passes from transaction to transaction at a few thousand hand-overs a
//! second at best, so that is the ceiling of a flash sale. The same row lock can
//! carry a whole batch of sales per hand-over.
//!
//! # Algorithm
//! In each service instance, one queue per product:
//! 1. A deduction of one product joins its product's queue and waits for its answer.
//!    If no batch task runs for that product, it starts one.
//! 2. The batch task waits the batching window (`--batch-window-us`, default 0), then
//!    takes what is waiting, in arrival order, up to `--batch-max` (default 256)
//!    requests. Whatever arrives while a batch runs waits for the next one, so under
//!    load a batch grows by itself to what arrived during one transaction, and an
//!    idle product answers its first buyer without any wait.
//! 3. One transaction for the whole batch:
//!    ```sql
//!    BEGIN;
//!    SELECT product_id, quantity, epoch FROM stock WHERE product_id IN (:id)
//!      ORDER BY product_id FOR UPDATE;                       -- the row lock, once
//!    -- allocate units in arrival order: a request that no longer fits is refused
//!    -- (409); a later, smaller one may still fit
//!    INSERT INTO orders (...) VALUES (...), (...), ...;     -- one row per sale
//!    INSERT INTO ledger (...) VALUES (...), (...), ...;     -- one row per sale
//!    UPDATE stock SET quantity = :left, version = version + 1 WHERE product_id = :id;
//!    COMMIT;
//!    ```
//! 4. Each member is answered: its sale (with `batch_size`, the number of sales its
//!    transaction carried) or its refusal.
//!
//! Six statements per batch, however many sales it carries: at 100 sales a batch that
//! is 0.06 statements per sale, where `atomic-sql` needs 5.
//!
//! # Why it cannot oversell
//! The batch reads the row under `FOR UPDATE`, so it sees the latest committed
//! quantity and nobody else can change it until COMMIT: allocation and write are one
//! critical section, exactly as in `pessimistic`. Batches of different instances
//! queue on the same row lock, so the strategy is safe across instances; the queue in
//! each instance only decides who rides together.
//!
//! # Guarantees and failure modes
//! - **A batch is all or nothing.** If its transaction fails (deadlock retries run
//!   out, the database goes away, a statement fails), every member gets the same
//!   error and nothing was written. If the COMMIT's reply is lost, every member that
//!   was allocated units gets 503 `outcome_unknown`, and a retry with the same
//!   `request_id` says what happened (the `orders` row decides, as everywhere).
//! - **Idempotency.** Twins in one instance never meet in a batch: the in-flight map
//!   ([`super::idempotency`]) holds the second until the first is answered, and the
//!   batch task also keeps a second request with the same id in the queue for the
//!   next batch. A twin that committed elsewhere (another instance, an earlier batch)
//!   makes the batch's `orders` INSERT fail with a duplicate key: the batch rolls
//!   back, reads which of its request ids are already in `orders`, answers those with
//!   their stored response, and runs again without them.
//! - **A buyer that hangs up does not cancel its sale.** The batch runs in its own
//!   task; an answer nobody waits for is dropped, the sale stands, and a retry with
//!   the same request_id gets it back as a duplicate.
//! - **A crash (kill -9) mid-batch** loses the transaction, not a sale: nobody was
//!   answered yet, MariaDB rolls the open transaction back, and every member's client
//!   sees its connection fail (and may retry with its request_id).
//! - **Fairness is per instance.** Within a batch, units go in arrival order. Between
//!   instances, batches go in the order their transactions reach the row lock: a
//!   buyer on one instance may be refused while a later buyer on the other instance
//!   gets a unit. The flash-sale report measures how often.
//! - **Latency for throughput.** A buyer waits for the batch in front of it and then
//!   for its own: about two transactions, however long the queue.
//!
//! # Orders with several items
//! Supported, all or nothing: such an order is a batch of its own (its rows locked in
//! product order in one transaction, run in the request's task). Batches hold a
//! single product row, so they can never wait on a multi-item order in a cycle.
//!
//! # When to use it
//! One product that many buyers want at once (a flash sale, a ticket drop), where one
//! row's lock hand-overs are the ceiling and every sale must be in the database when
//! it is confirmed. It needs no other server. It does not help a catalogue of many
//! lukewarm products (batches of one), and it trades a little latency for throughput.

use super::contract::{Deducted, Deduction, ItemResult, Strategy};
use super::record_many;
use super::retry::{self, backoff, retry_on_lock_conflict};
use super::txn;
use crate::domain::error::{DeductError, mysql_error_number};
use crate::domain::order::Order;
use crate::domain::probe::{Knobs, Probe};
use async_trait::async_trait;
use sqlx::{MySql, MySqlPool, QueryBuilder};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// How the service registers it: its card for the catalogue and its flags
/// (`batched/served.rs`; a copy leaves it out).
#[cfg(feature = "service")]
mod served;

/// Where this strategy is written, from the repository's root (its card's `source`).
pub const SOURCE: &str = file!();

/// The coalescing strategy: one queue (and at most one running batch) per product.
pub struct Batched {
    shared: Arc<Shared>,
}

/// How batches are formed and retried.
#[derive(Debug, Clone, Copy)]
pub struct BatchSettings {
    /// How long a batch task waits for more buyers before it takes the queue.
    pub window: Duration,
    /// The most requests one transaction carries.
    pub max_batch: usize,
    /// Transactions a batch may run before its members are answered 503 `busy`
    /// (retries after a deadlock or a lock wait timeout).
    pub max_attempts: u32,
}

/// No window (a batch is what arrived while the previous one ran); the service's
/// flags take their defaults from here.
impl Default for BatchSettings {
    fn default() -> Self {
        BatchSettings {
            window: Duration::ZERO,
            max_batch: 256,
            max_attempts: 5,
        }
    }
}

struct Shared {
    settings: BatchSettings,
    // A std mutex: held only to push to or take from a queue, never across an
    // `.await`.
    queues: Mutex<HashMap<i64, Queue>>,
}

/// One product's queue. It exists while its batch task runs.
#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
}

/// A buyer in a queue: what it asks for, and where its answer goes.
struct Waiting {
    buyer: Buyer,
    answer: oneshot::Sender<Result<Deducted, DeductError>>,
}

/// What a batch needs to know about one request.
struct Buyer {
    order: Order,
    fingerprint: String,
    hold_ms: Option<u64>,
}

const NAME: &str = "batched";

impl<S> super::contract::Declare<S> for Batched {
    type Settings = BatchSettings;

    fn build(settings: &BatchSettings, _: &super::contract::Context<'_, S>) -> Arc<dyn Strategy> {
        Arc::new(Batched::new(*settings))
    }
}

impl Batched {
    /// A batch carries at least one request (`max_batch` 0 counts as 1: an empty
    /// batch would never end its queue).
    pub fn new(settings: BatchSettings) -> Batched {
        let settings = BatchSettings {
            max_batch: settings.max_batch.max(1),
            ..settings
        };
        Batched {
            shared: Arc::new(Shared {
                settings,
                queues: Mutex::default(),
            }),
        }
    }
}

#[async_trait(?Send)]
impl Strategy for Batched {
    fn name(&self) -> &'static str {
        NAME
    }

    // ANCHOR: deduct
    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        let buyer = Buyer {
            order: d.order.clone(),
            fingerprint: d.fingerprint.clone(),
            hold_ms: d.knobs.hold_ms,
        };
        if d.order.items.len() > 1 {
            // A batch of its own: it locks several rows, in product order.
            let settings = &self.shared.settings;
            let mut answers = settle(d.pool, d.probe, settings.max_attempts, vec![buyer]).await;
            return answers.pop().expect("one answer per buyer");
        }
        let product_id = d.order.items[0].product_id;
        let (answer, answered) = oneshot::channel();
        let start = {
            let mut queues = self.shared.queues.lock().expect("queues poisoned");
            let idle = !queues.contains_key(&product_id);
            let queue = queues.entry(product_id).or_default();
            queue.waiting.push_back(Waiting { buyer, answer });
            idle
        };
        if start {
            // The batch task owns what it needs: it outlives any one request.
            let task = BatchTask {
                shared: self.shared.clone(),
                product_id,
                finished: false,
            };
            tokio::spawn(task.run(d.pool.clone(), d.probe.clone()));
        }
        answered.await.unwrap_or_else(|_| {
            Err(DeductError::OutcomeUnknown(
                "the batch ended without an answer; retry with the same request_id".into(),
            ))
        })
    }
    // ANCHOR_END: deduct
}

/// The task that runs one product's batches until its queue is empty.
struct BatchTask {
    shared: Arc<Shared>,
    product_id: i64,
    /// Set when the task removed its queue itself (it was empty).
    finished: bool,
}

impl BatchTask {
    async fn run(mut self, pool: MySqlPool, probe: Arc<dyn Probe>) {
        let settings = self.shared.settings;
        loop {
            if !settings.window.is_zero() {
                tokio::time::sleep(settings.window).await;
            }
            let Some(batch) = self.take(settings.max_batch) else {
                return;
            };
            let (buyers, answers): (Vec<Buyer>, Vec<_>) =
                batch.into_iter().map(|w| (w.buyer, w.answer)).unzip();
            let results = settle(&pool, &probe, settings.max_attempts, buyers).await;
            for (answer, result) in answers.into_iter().zip(results) {
                // Err: the buyer hung up. Its sale (if any) stands; a retry finds it.
                let _ = answer.send(result);
            }
        }
    }

    /// Takes the next batch off the queue, in arrival order: up to `max` requests, no
    /// request id twice (a twin waits for the next batch). `None` when the queue is
    /// empty: the queue is removed (under the same lock a buyer uses to join it, so a
    /// buyer either joined this task's queue or finds none and starts a new task).
    fn take(&mut self, max: usize) -> Option<Vec<Waiting>> {
        let mut queues = self.shared.queues.lock().expect("queues poisoned");
        let queue = queues.get_mut(&self.product_id).expect("our queue exists");
        if queue.waiting.is_empty() {
            queues.remove(&self.product_id);
            self.finished = true;
            return None;
        }
        let mut batch = Vec::with_capacity(queue.waiting.len().min(max));
        let mut ids = HashSet::new();
        let mut later = VecDeque::new();
        for waiting in queue.waiting.drain(..) {
            if batch.len() < max && ids.insert(waiting.buyer.order.request_id.clone()) {
                batch.push(waiting);
            } else {
                later.push_back(waiting);
            }
        }
        queue.waiting = later;
        Some(batch)
    }
}

impl Drop for BatchTask {
    /// A task that ends any other way (a panic, a runtime shutting down) removes its
    /// queue: the buyers still in it are answered `outcome_unknown` by their dropped
    /// channels, and the next buyer starts a new task.
    fn drop(&mut self) {
        if !self.finished {
            let mut queues = self.shared.queues.lock().expect("queues poisoned");
            queues.remove(&self.product_id);
        }
    }
}

/// Why one transaction of a batch did not finish.
enum Failed {
    /// A deadlock or a lock wait timeout: run the batch again.
    Conflict(String),
    /// The `orders` INSERT met a request id that is already there.
    Duplicate,
    /// Anything else: every member gets this answer.
    Error(DeductError),
}

impl From<sqlx::Error> for Failed {
    fn from(e: sqlx::Error) -> Failed {
        match retry_on_lock_conflict(e) {
            retry::TxError::Retry(reason) => Failed::Conflict(reason),
            retry::TxError::Fail(e) => Failed::Error(e),
        }
    }
}

/// Runs `buyers` as one batch until every one has its answer (in the same order):
/// retries after lock conflicts (bounded, with backoff), answers members whose request
/// id committed meanwhile from `orders`, and gives every member the batch's error if
/// it fails.
async fn settle(
    pool: &MySqlPool,
    probe: &Arc<dyn Probe>,
    max_attempts: u32,
    buyers: Vec<Buyer>,
) -> Vec<Result<Deducted, DeductError>> {
    let mut answers: Vec<Option<Result<Deducted, DeductError>>> =
        buyers.iter().map(|_| None).collect();
    let mut attempt = 0;
    loop {
        let live: Vec<usize> = (0..buyers.len())
            .filter(|&i| answers[i].is_none())
            .collect();
        if live.is_empty() {
            break;
        }
        attempt += 1;
        let batch: Vec<&Buyer> = live.iter().map(|&i| &buyers[i]).collect();
        let failed = match transact(pool, probe, &batch, attempt).await {
            Ok(results) => {
                for (i, result) in live.into_iter().zip(results) {
                    answers[i] = Some(result);
                }
                continue;
            }
            Err(failed) => failed,
        };
        match failed {
            Failed::Duplicate => {
                match record_many::recorded(pool, batch.iter().map(|b| b.order.request_id.as_str()))
                    .await
                {
                    // Answered from `orders` by the idempotency layer; the rest go again.
                    Ok(done) if !done.is_empty() => {
                        for i in live {
                            if done.contains_key(&buyers[i].order.request_id) {
                                answers[i] = Some(Err(DeductError::AlreadyDone(
                                    buyers[i].order.request_id.clone(),
                                )));
                            }
                        }
                    }
                    Ok(_) => {
                        let e =
                            anyhow::anyhow!("duplicate key in orders, but no request id is there");
                        fail(&mut answers, &live, DeductError::Unexpected(e));
                    }
                    Err(e) => fail(&mut answers, &live, e.into()),
                }
            }
            Failed::Conflict(reason) if attempt < max_attempts.max(1) => {
                tracing::debug!(attempt, %reason, "retrying the batch");
                tokio::time::sleep(backoff(attempt)).await;
            }
            Failed::Conflict(reason) => {
                let e = DeductError::Busy(format!("gave up after {attempt} attempts: {reason}"));
                fail(&mut answers, &live, e);
            }
            Failed::Error(e) => fail(&mut answers, &live, e),
        }
    }
    answers.into_iter().map(|a| a.expect("answered")).collect()
}

/// Gives every live member of a failed batch the batch's error.
fn fail(answers: &mut [Option<Result<Deducted, DeductError>>], live: &[usize], e: DeductError) {
    if matches!(e, DeductError::Unexpected(_)) {
        tracing::error!(error = ?e, members = live.len(), "a batch failed");
    }
    for &i in live {
        answers[i] = Some(Err(for_each_member(&e)));
    }
}

/// The same error, once per member (errors are not `Clone`: an internal cause is
/// logged once by [`fail`] and not repeated to clients).
fn for_each_member(e: &DeductError) -> DeductError {
    match e {
        DeductError::Busy(m) => DeductError::Busy(m.clone()),
        DeductError::OutcomeUnknown(m) => DeductError::OutcomeUnknown(m.clone()),
        DeductError::BackendUnavailable {
            backend, detail, ..
        } => DeductError::unavailable(backend, detail.clone()),
        _ => DeductError::Unexpected(anyhow::anyhow!("the batch's transaction failed")),
    }
}

/// One transaction for the batch: lock its rows once, allocate in arrival order,
/// write every sale, COMMIT. Returns each member's answer, in order.
async fn transact(
    pool: &MySqlPool,
    probe: &Arc<dyn Probe>,
    batch: &[&Buyer],
    attempt: u32,
) -> Result<Vec<Result<Deducted, DeductError>>, Failed> {
    let mut products: Vec<i64> = batch
        .iter()
        .flat_map(|b| b.order.items.iter().map(|item| item.product_id))
        .collect();
    products.sort_unstable();
    products.dedup();

    let mut tx = pool.begin().await?;
    // 1. The row lock, once for the batch (rows in product order: a multi-item order
    //    is a batch of its own and takes several).
    let mut lock: QueryBuilder<MySql> =
        QueryBuilder::new("SELECT product_id, quantity, epoch FROM stock WHERE product_id IN (");
    let mut ids = lock.separated(", ");
    for id in &products {
        ids.push_bind(id);
    }
    lock.push(") ORDER BY product_id FOR UPDATE");
    let rows: Vec<(i64, i32, i32)> = lock.build_query_as().fetch_all(&mut *tx).await?;
    let start: HashMap<i64, i32> = rows.iter().map(|&(id, q, _)| (id, q)).collect();
    let epoch: HashMap<i64, i32> = rows.iter().map(|&(id, _, e)| (id, e)).collect();
    let mut left = start.clone();

    // 2. Allocate in arrival order.
    let mut results = Vec::with_capacity(batch.len());
    let mut sold: Vec<usize> = Vec::new();
    for (i, buyer) in batch.iter().enumerate() {
        match allocate(&mut left, &buyer.order) {
            Ok(items) => {
                sold.push(i);
                results.push(Ok(items));
            }
            Err(refusal) => results.push(Err(refusal)),
        }
    }
    // The business step between decide and write, for the whole batch: the longest
    // hold any member asked for (or the server's `--hold-ms`).
    let hold = Knobs {
        hold_ms: batch.iter().filter_map(|b| b.hold_ms).max(),
        ..Knobs::default()
    };
    probe.after_read(&hold).await;
    if sold.is_empty() {
        tx.rollback().await?;
        return Ok(results
            .into_iter()
            .map(|r| Err(r.expect_err("nothing was sold")))
            .collect());
    }

    // 3. The answers, and every sale written: orders, ledger, stock.
    let answers: Vec<(usize, Deducted)> = sold
        .iter()
        .map(|&i| {
            let items = results[i].as_ref().expect("sold").clone();
            let answer = Deducted {
                deducted: true,
                request_id: batch[i].order.request_id.clone(),
                strategy: NAME.to_string(),
                items,
                attempts: attempt,
                fence_token: None,
                lock_lost_after_commit: false,
                duplicate: false,
                batch_size: Some(sold.len() as u32),
                stream_entry: None,
            };
            (i, answer)
        })
        .collect();
    let records: Vec<record_many::Record> = answers
        .iter()
        .map(|(i, answer)| record_many::Record {
            answer,
            fingerprint: &batch[*i].fingerprint,
            epochs: answer
                .items
                .iter()
                .map(|item| epoch[&item.product_id])
                .collect(),
        })
        .collect();
    if let Err(e) = record_many::record_many(&mut tx, NAME, &records).await {
        tx.rollback().await?;
        return Err(match mysql_error_number(&e) {
            Some(1062) => Failed::Duplicate,
            _ => e.into(),
        });
    }
    for id in &products {
        if left[id] != start[id] {
            sqlx::query(
                "UPDATE stock SET quantity = ?, version = version + 1 WHERE product_id = ?",
            )
            .bind(left[id])
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
    }
    txn::commit(tx, probe).await.map_err(Failed::Error)?;

    let mut answers = answers.into_iter();
    Ok(results
        .into_iter()
        .map(|r| r.map(|_| answers.next().expect("one answer per sale").1))
        .collect())
}

/// Takes an order's units from `left` if every item fits (and changes nothing if one
/// does not): the items as answered, each with what its product has left.
fn allocate(left: &mut HashMap<i64, i32>, order: &Order) -> Result<Vec<ItemResult>, DeductError> {
    for item in &order.items {
        let Some(&available) = left.get(&item.product_id) else {
            return Err(DeductError::UnknownProduct(item.product_id));
        };
        if available < item.quantity {
            return Err(DeductError::InsufficientStock {
                product_id: item.product_id,
                requested: item.quantity.into(),
                available: Some(available.into()),
            });
        }
    }
    Ok(order
        .items
        .iter()
        .map(|item| {
            let remaining = left.get_mut(&item.product_id).expect("checked");
            *remaining -= item.quantity;
            ItemResult {
                product_id: item.product_id,
                quantity: item.quantity,
                remaining: *remaining,
            }
        })
        .collect())
}
