//! `GET /metrics`: what the service is doing, in the Prometheus text format, from the
//! `prometheus` crate (a registry per service instance, so tests that run several in
//! one process do not mix their counts).
//!
//! Names follow Prometheus' conventions: a `stock_locks_` prefix, base units
//! (`_seconds`), `_total` for counters, labels for what varies (`strategy`,
//! `outcome`). Labels only take values the service defines: a strategy it serves, an
//! outcome it answers; never request input.
//!
//! - `stock_locks_deductions_total{strategy, outcome}`: every answered deduction of a
//!   served strategy. `outcome` is `deducted`, `duplicate` (a retry answered from
//!   `orders`), or the error code of the answer (the wire's `ErrorCode`:
//!   `insufficient_stock`, `busy`, `overloaded`, ...). Exact: after N sales the
//!   `deducted` count is N (a test holds it to the ledger).
//! - `stock_locks_deduction_duration_seconds{strategy}`: how long each took, as a
//!   histogram (from the handler's start to its answer; a body that could not be
//!   read never reaches the handler: counted above, not timed).
//! - `stock_locks_sale_duration_seconds{strategy}`: the same, of the sales alone (the
//!   deductions answered `deducted`): the time a buyer who got a unit waited, which a
//!   flood's quick refusals would hide in the histogram above.
//! - `stock_locks_phase_seconds{strategy, phase}`: where that time went, for the
//!   strategies that report it ([`Phases`]): `lock` (waiting for and taking the lock:
//!   a distributed lock's acquisition, a mutex, a `SELECT ... FOR UPDATE`),
//!   `transaction` (the database work under it), `release` (giving the lock back). A
//!   strategy without a lock reports its whole work as `transaction` (retries and
//!   their backoff included, a wait for a batch, a Redis script). The rest of a
//!   request is parsing, routing, the idempotency layer and answering.
//! - `stock_locks_db_pool_wait_seconds{strategy}`: how long a deduction waited for a
//!   database connection from the pool before its BEGIN (part of `transaction` above;
//!   near zero until every connection is in use).
//! - `stock_locks_transactions_total{strategy}`: the transactions the sales took
//!   (their `attempts`: more than the sales when a strategy retried).
//! - `stock_locks_batch_size{strategy}`: sales per shared transaction, for a strategy
//!   that batches them.
//! - `stock_locks_db_pool_connections{state}` (`in_use`, `idle`) and
//!   `stock_locks_db_pool_max_connections`: the database pool at the scrape; a pool
//!   whose connections are all in use makes requests wait for one.
//! - `stock_locks_admission{value}` (`limit`, `in_flight`): the admission limit at the
//!   scrape (the adaptive one moves; absent with no limit) and the deductions in flight.
//!
//! A strategy may register metrics of its own at start (`Strategy::start`: a lock's
//! renewals and losses, a backlog of sales not yet in the database) and update them
//! before each scrape (`Served::scrape`); its file documents them.

use super::layer::{Answer, Deduct, Request};
use crate::service::phases::{PHASES, Phases};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};
use std::sync::Arc;
use std::time::Duration;

/// What is read at a scrape, not counted as it happens.
pub struct Scrape {
    /// The pool's size, idle connections and maximum.
    pub pool: (u32, usize, u32),
    /// The admission limit (`None`: no limit) and the deductions in flight.
    pub admission: (Option<usize>, usize),
}

/// The service's metrics and the registry they are exposed from.
pub struct Metrics {
    registry: Registry,
    deductions: IntCounterVec,
    sold_out_fast: IntCounterVec,
    duration: HistogramVec,
    sale_duration: HistogramVec,
    phases: HistogramVec,
    pool_wait: HistogramVec,
    transactions: IntCounterVec,
    batch_size: HistogramVec,
    pool: prometheus::IntGaugeVec,
    pool_max: prometheus::IntGauge,
    admission: prometheus::IntGaugeVec,
}

/// Upper bounds of the duration histogram, in seconds: from a cache-hot 0.5 ms sale to
/// a 10 s lock wait.
const DURATION_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
];

/// Upper bounds of the sale duration histogram, in seconds: the duration's, with finer
/// steps where a queue's waits fall (a p99 read from it is interpolated inside one).
const SALE_BUCKETS: [f64; 30] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.75, 0.9,
    1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0,
];

/// Upper bounds of the pool wait histogram, in seconds: an idle connection is taken in
/// microseconds; a wait shows when every connection is in use.
const POOL_WAIT_BUCKETS: [f64; 12] = [
    0.00001, 0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 2.0,
];

/// Upper bounds of the batch size histogram: sales per shared transaction.
const BATCH_BUCKETS: [f64; 9] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// `metric`, registered in `registry`.
fn registered<M>(registry: &Registry, metric: prometheus::Result<M>) -> M
where
    M: prometheus::core::Collector + Clone + 'static,
{
    let metric = metric.expect("a valid metric");
    registry
        .register(Box::new(metric.clone()))
        .expect("registered once");
    metric
}

/// A counter per value of `labels`, registered.
fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    registered(registry, IntCounterVec::new(Opts::new(name, help), labels))
}

/// A histogram per value of `labels` with `buckets`, registered.
fn histogram(
    registry: &Registry,
    name: &str,
    help: &str,
    buckets: &[f64],
    labels: &[&str],
) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    registered(registry, HistogramVec::new(opts, labels))
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let on = &registry;
        let by_strategy: &[&str] = &["strategy"];
        Metrics {
            deductions: counter(
                on,
                "stock_locks_deductions_total",
                "Answered deductions, by strategy and outcome (deducted, duplicate, or the error code).",
                &["strategy", "outcome"],
            ),
            sold_out_fast: counter(
                on,
                "stock_locks_sold_out_fast_total",
                "Deductions refused by the sold-out fast path (the product known sold out here; the strategy did not run), by strategy. Also counted in deductions_total as insufficient_stock.",
                by_strategy,
            ),
            duration: histogram(
                on,
                "stock_locks_deduction_duration_seconds",
                "Time from a deduction's arrival to its answer, by strategy.",
                &DURATION_BUCKETS,
                by_strategy,
            ),
            sale_duration: histogram(
                on,
                "stock_locks_sale_duration_seconds",
                "Time from a sale's arrival to its answer (deductions answered `deducted`), by strategy.",
                &SALE_BUCKETS,
                by_strategy,
            ),
            phases: histogram(
                on,
                "stock_locks_phase_seconds",
                "Where a deduction's time went: waiting for and taking the lock, the transaction (under the lock, or a lock-free strategy's whole work), releasing the lock; by strategy.",
                &DURATION_BUCKETS,
                &["strategy", "phase"],
            ),
            pool_wait: histogram(
                on,
                "stock_locks_db_pool_wait_seconds",
                "Time a deduction waited for a database connection from the pool, by strategy.",
                &POOL_WAIT_BUCKETS,
                by_strategy,
            ),
            transactions: counter(
                on,
                "stock_locks_transactions_total",
                "Transactions the sales took, retries included (a sale's attempts), by strategy.",
                by_strategy,
            ),
            batch_size: histogram(
                on,
                "stock_locks_batch_size",
                "Sales per shared transaction, for the strategies that batch them.",
                &BATCH_BUCKETS,
                by_strategy,
            ),
            pool: registered(
                on,
                prometheus::IntGaugeVec::new(
                    Opts::new(
                        "stock_locks_db_pool_connections",
                        "The database pool's connections at the scrape, in use or idle.",
                    ),
                    &["state"],
                ),
            ),
            pool_max: registered(
                on,
                prometheus::IntGauge::new(
                    "stock_locks_db_pool_max_connections",
                    "The most connections the database pool opens (--db-pool-size).",
                ),
            ),
            admission: registered(
                on,
                prometheus::IntGaugeVec::new(
                    Opts::new(
                        "stock_locks_admission",
                        "The admission limit at the scrape (`limit`, absent without one) and the deductions in flight (`in_flight`).",
                    ),
                    &["value"],
                ),
            ),
            registry,
        }
    }

    /// The registry, for the metrics a strategy registers itself
    /// ([`crate::strategies::Strategy::start`]).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Counts a deduction the sold-out fast path refused.
    pub fn sold_out_fast(&self, strategy: &'static str) {
        self.sold_out_fast.with_label_values(&[strategy]).inc();
    }

    /// Counts one answered deduction of `strategy` and how long it took.
    pub fn deduction(&self, strategy: &'static str, outcome: &'static str, took: Duration) {
        self.deductions
            .with_label_values(&[strategy, outcome])
            .inc();
        self.duration
            .with_label_values(&[strategy])
            .observe(took.as_secs_f64());
        if outcome == "deducted" {
            self.sale_duration
                .with_label_values(&[strategy])
                .observe(took.as_secs_f64());
        }
    }

    /// Counts a deduction refused before its body could be read (malformed JSON, too
    /// large, wrong content type): in `deductions_total`, not timed.
    pub fn refused_unread(&self, strategy: &'static str, outcome: &'static str) {
        self.deductions
            .with_label_values(&[strategy, outcome])
            .inc();
    }

    /// Records what a sale reports about its transactions: how many it took, and how
    /// many sales shared the last one.
    pub fn sale(&self, strategy: &'static str, attempts: u32, batch_size: Option<u32>) {
        self.transactions
            .with_label_values(&[strategy])
            .inc_by(u64::from(attempts));
        if let Some(size) = batch_size {
            self.batch_size
                .with_label_values(&[strategy])
                .observe(f64::from(size));
        }
    }

    /// Records the phases a strategy reported for one request.
    pub fn phases(&self, strategy: &'static str, phases: &Phases) {
        for (phase, label) in PHASES {
            if let Some(spent) = phases.reported(phase) {
                self.phases
                    .with_label_values(&[strategy, label])
                    .observe(spent.as_secs_f64());
            }
        }
        if let Some(waited) = phases.pool_waited() {
            self.pool_wait
                .with_label_values(&[strategy])
                .observe(waited.as_secs_f64());
        }
    }

    /// Everything, in the text exposition format (version 0.0.4), with what is read
    /// at the scrape first (the pool).
    pub fn render(&self, now: &Scrape) -> String {
        let (size, idle, max) = now.pool;
        self.pool
            .with_label_values(&["in_use"])
            .set(i64::from(size) - idle as i64);
        self.pool.with_label_values(&["idle"]).set(idle as i64);
        self.pool_max.set(i64::from(max));
        let (limit, in_flight) = now.admission;
        if let Some(limit) = limit {
            self.admission
                .with_label_values(&["limit"])
                .set(limit as i64);
        }
        self.admission
            .with_label_values(&["in_flight"])
            .set(in_flight as i64);
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("encoding to memory");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// The metrics layer: every answer counted by its outcome, timed from the request's
/// arrival, a sale's transactions and its phases recorded.
pub struct Counted<D> {
    pub metrics: Arc<Metrics>,
    pub inner: D,
}

impl<D: Deduct> Deduct for Counted<D> {
    async fn deduct(&self, request: &Request<'_>) -> Answer {
        let answer = self.inner.deduct(request).await;
        let served = request.deduction.strategy;
        let metrics = &self.metrics;
        metrics.deduction(served, answer.outcome(), request.started.elapsed());
        if answer.by_mark {
            metrics.sold_out_fast(served);
        }
        if let Ok(done) = &answer.result
            && !done.duplicate
        {
            metrics.sale(served, done.attempts, done.batch_size);
        }
        metrics.phases(served, request.phases);
        answer
    }
}
