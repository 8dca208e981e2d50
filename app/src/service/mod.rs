//! The deduction as the service runs it, below HTTP: what happens between a parsed
//! order and its answer. The handler (`http::routes`) parses the body, calls
//! [`Service::deduct`], and maps the result to a status; the service tests call it
//! directly, with real servers and no HTTP.
//!
//! One deduction, in order ([`Service::deduct`]):
//! 1. the sold-out fast path ([`sold_out`]): a product this instance knows sold out is
//!    refused without the strategy;
//! 2. the admission limit ([`admission`]), for what the fast path did not answer;
//! 3. the request id's in-flight twin, waited for ([`in_flight`]);
//! 4. the strategy (or the classic mistake it was asked to make), timed by phase
//!    ([`phases`]); a refusal asks `orders` whether this request id succeeded before
//!    (`strategies::idempotency`); the strategy's own "0 left" marks the product sold out;
//! 5. the outcome counted ([`metrics`]).
//!
//! - [`admission`]: the admission limit (fixed or adaptive, Gradient2): past it a
//!   deduction waits in line up to its reject hold (a second unless told otherwise)
//!   and is refused if no place frees; with `--reject-hold-ms 0`, at once.
//! - [`sold_out`]: the sold-out fast path's marks (a restock waits them out).
//! - [`sold_out_reads`]: its reads of `orders`, a flood's refusals gathered into one.
//! - [`in_flight`]: a request waits for its in-flight twin in this process.
//! - [`phases`]: where a deduction's time goes (its probe adds it up).
//! - [`metrics`]: the Prometheus counters and histograms (`GET /metrics` renders them).
//! - [`stock`]: the admin's SQL (restock, read a product); [`Service::restock`] also
//!   tells the strategies and waits out the sold-out marks.

pub mod admission;
pub mod in_flight;
pub mod metrics;
pub mod phases;
pub mod sold_out;
pub mod sold_out_reads;
pub mod stock;

use crate::domain::error::DeductError;
use crate::domain::order::Order;
use crate::domain::probe::{Knobs, Probe};
use crate::strategies::contract::{Deducted, Deduction, Strategy};
use crate::strategies::{Strategies, idempotency};
use admission::Admission;
use in_flight::InFlight;
use metrics::Metrics;
use phases::RequestProbe;
use sold_out::SoldOut;
use sold_out_reads::SoldOutReads;
use sqlx::MySqlPool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stock::StockView;

/// Connections of [`Service::sold_out_reads`]: each reads a batch of refusals' request
/// ids by primary key in one statement, while the main pool sells.
pub const SOLD_OUT_POOL_SIZE: u32 = 2;

/// Why a deduction was not done: the domain's reasons ([`DeductError`]), and the two
/// only the service knows (no such strategy here, no place under the limit).
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// What the strategy, the order or the idempotency layer said.
    #[error(transparent)]
    Deduct(#[from] DeductError),
    /// No strategy of that name is served here.
    #[error("unknown strategy `{name}`; strategies: {known}")]
    UnknownStrategy { name: String, known: String },
    /// The instance works on as many deductions as its admission limit allows
    /// (`--max-in-flight`); nothing was done.
    #[error(
        "{limit} deductions in flight here, the admission limit; nothing was done, retry later"
    )]
    Overloaded {
        limit: usize,
        /// How long the refusal was held before it was answered (`--reject-hold-ms`).
        held: Duration,
    },
}

impl ServiceError {
    /// The outcome's stable code (the error body's `error`, the metrics' `outcome`).
    pub fn code(&self) -> &'static str {
        match self {
            ServiceError::Deduct(e) => e.code(),
            ServiceError::UnknownStrategy { .. } => "unknown_strategy",
            ServiceError::Overloaded { .. } => "overloaded",
        }
    }
}

/// Everything a deduction needs, built once per process (`http::startup`) and shared
/// by every worker.
pub struct Service {
    pub pool: MySqlPool,
    /// Where plain reads go: the read replica (`--read-replica-url`), else `pool`.
    pub reads: MySqlPool,
    /// The sold-out fast path's own small pool ([`SOLD_OUT_POOL_SIZE`] connections) for
    /// its one read of `orders`, many refusals to a statement: a flood of buyers of a
    /// sold-out product waits here, never for the connections other products need.
    pub sold_out_reads: SoldOutReads,
    pub strategies: Strategies,
    pub in_flight: InFlight,
    /// The admission limit on deductions in flight (`--max-in-flight`).
    pub admission: Admission,
    /// Products known sold out here, per strategy (`--sold-out-cache-ms`).
    pub sold_out: SoldOut,
    /// What every deduction's probe passes its failpoints to: the test hooks, or
    /// [`crate::domain::probe::NoProbe`].
    pub hooks: Arc<dyn Probe>,
    pub metrics: Metrics,
}

impl Service {
    /// The strategy served under `name`.
    pub fn strategy(&self, name: &str) -> Result<&Arc<dyn Strategy>, ServiceError> {
        self.strategies
            .get(name)
            .ok_or_else(|| ServiceError::UnknownStrategy {
                name: name.to_owned(),
                known: self.strategies.names().join(", "),
            })
    }

    /// Registers the strategies' own metrics (`Served::register`) and starts their
    /// background work ([`Strategy::start`]: e.g. a persister that writes what Redis
    /// sold to the database); the caller aborts the tasks when it stops.
    pub fn start(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let started = crate::strategies::Started {
            pool: &self.pool,
            probe: &self.hooks,
        };
        for strategy in self.strategies.iter() {
            strategy.register(self.metrics.registry(), &self.hooks);
        }
        self.strategies
            .iter()
            .filter_map(|s| s.start(&started))
            .collect()
    }

    /// A product's stock, its ledger's sales this epoch, and what each strategy keeps
    /// of it elsewhere (a Redis counter).
    pub async fn stock(&self, product_id: i64) -> Result<StockView, DeductError> {
        let mut view = stock::find(&self.pool, product_id)
            .await?
            .ok_or(DeductError::UnknownProduct(product_id))?;
        for strategy in self.strategies.iter() {
            view.elsewhere.extend(strategy.stock_view(product_id).await);
        }
        Ok(view)
    }

    /// Creates or restocks a product into a new epoch ([`stock::restock`]), tells every
    /// strategy (one that keeps the stock elsewhere reloads it), and answers only once
    /// every sold-out mark made before it has expired on every instance: this
    /// instance's marks go now, the others' expire within the marks' lifetime, so no
    /// deduction sent after the answer meets an old mark.
    pub async fn restock(
        &self,
        product_id: i64,
        quantity: i32,
        buckets: u16,
    ) -> Result<StockView, DeductError> {
        let view = stock::restock(&self.pool, product_id, quantity, buckets).await?;
        tracing::info!(
            product_id,
            quantity,
            buckets,
            epoch = view.epoch,
            "restocked"
        );
        for strategy in self.strategies.iter() {
            strategy.restocked(product_id).await;
        }
        self.sold_out.restocked(product_id);
        tokio::time::sleep(self.sold_out.ttl()).await;
        Ok(view)
    }

    /// Closes the pools (after the server stopped: the database sees clean
    /// disconnects).
    pub async fn close(&self) {
        self.pool.close().await;
        self.reads.close().await;
        self.sold_out_reads.pool().close().await;
    }

    /// Counts a deduction refused before it reached the service (its body was bad).
    pub fn refused_input(&self, strategy: &'static str, code: &'static str, started: Instant) {
        self.metrics.deduction(strategy, code, started.elapsed());
    }

    /// Deducts `order` through `strategy` (see the module's steps). `started`: when the
    /// request arrived, for the latency the metrics count. Its span (debug: at ten
    /// thousand deductions a second every span costs) carries the outcome.
    #[tracing::instrument(level = "debug", name = "deduct", skip_all, fields(
        strategy = strategy.info().name,
        order_id = %order.request_id,
        outcome = tracing::field::Empty,
    ))]
    pub async fn deduct(
        &self,
        strategy: &Arc<dyn Strategy>,
        order: &Order,
        knobs: &Knobs,
        started: Instant,
    ) -> Result<Deducted, ServiceError> {
        let served = strategy.info().name;
        let result = self.run(strategy, order, knobs, true).await;
        let outcome = match &result {
            Ok(done) if done.duplicate => "duplicate",
            Ok(_) => "deducted",
            Err(e) => e.code(),
        };
        tracing::Span::current().record("outcome", outcome);
        self.metrics.deduction(served, outcome, started.elapsed());
        if let Ok(done) = &result
            && !done.duplicate
        {
            self.metrics.sale(served, done.attempts, done.batch_size);
        }
        result
    }

    /// The deduction; `marks`: whether this instance's sold-out marks may answer it
    /// (not on the one re-run after a mark the database did not bear out).
    async fn run(
        &self,
        strategy: &Arc<dyn Strategy>,
        order: &Order,
        knobs: &Knobs,
        marks: bool,
    ) -> Result<Deducted, ServiceError> {
        let served = strategy.info().name;
        let products = order.items.iter().map(|item| item.product_id);
        // A product known sold out here is refused without the strategy; after its mark
        // expired one request looks again (`looking`) while the others wait for it.
        let (known_sold_out, looking) = match knobs.mistake {
            Some(_) => (None, None),
            None if !marks => (None, None),
            None => match self.sold_out.find(served, products).await {
                sold_out::Lookup::Known(known) => (Some(known), None),
                sold_out::Lookup::LookAgain(looking) => (None, Some(looking)),
                sold_out::Lookup::Unknown | sold_out::Lookup::Wait(_) => (None, None),
            },
        };
        // Past the admission limit: refused before any backend or lock is touched, or,
        // with a hold (`--reject-hold-ms`), admitted if a place frees while it waits in
        // line and refused when the hold ends: a client that does not back off waits it
        // out, so a flood of refusals costs timers, not the admitted deductions' CPU. A
        // product known sold out is answered without the strategy, so it takes no place.
        // The one request looking again at an expired mark (one per strategy and product
        // at a time) does not wait in the admission line: the waiters behind it would
        // wait out its hold too.
        let mut held_sold_out = false;
        let _admitted = match known_sold_out {
            // Past the product's at-once pace: the refusal waits out the hold first.
            Some(known) => {
                if known.hold {
                    held_sold_out = !self.admission.hold_refusal().await.is_zero();
                }
                None
            }
            None if looking.is_some() => None,
            None => match self.admission.enter().await {
                Ok(permit) => Some(permit),
                Err(refused) => {
                    return Err(ServiceError::Overloaded {
                        limit: refused.limit,
                        held: refused.held,
                    });
                }
            },
        };
        // This request's probe: the service's hooks, and where its time goes.
        let request = Arc::new(RequestProbe::new(self.hooks.clone()));
        let probe: Arc<dyn Probe> = request.clone();
        let phases = &request.phases;
        let d = Deduction {
            pool: &self.pool,
            reads: &self.reads,
            order,
            knobs,
            probe: &probe,
            strategy: served,
            fingerprint: order.fingerprint(served),
        };
        // A twin of this request id in flight here: wait for it (then `orders` answers).
        let _entered = self.in_flight.enter(&order.request_id).await;
        // When the evidence of a refusal was read: a sold-out mark lasts from there.
        let mut evidence_at = Instant::now();
        // A mark the database did not bear out (units left: restocked elsewhere).
        let mut stale = None;
        let result = match knobs.mistake.as_deref() {
            // Known sold out here: refused without running the strategy (one read of
            // `orders`, for a retry of an earlier success, on the fast path's own pool).
            None if let Some(sold_out::Known { product_id, .. }) = known_sold_out => {
                let requested = order
                    .items
                    .iter()
                    .find(|item| item.product_id == product_id)
                    .map_or(1, |item| item.quantity);
                let sold_out = || DeductError::InsufficientStock {
                    product_id,
                    requested: requested.into(),
                    available: Some(0),
                };
                // Read with the other refusals asking now, in one statement each, with
                // what the database has left: the refusal stands only if nothing.
                let read =
                    (self.sold_out_reads).after_refusal(&d, product_id, sold_out(), held_sold_out);
                match read.await {
                    Some(answer) => {
                        self.metrics.sold_out_fast(served);
                        answer
                    }
                    None => {
                        stale = Some(product_id);
                        Err(sold_out())
                    }
                }
            }
            // The strategy runs; a refusal asks `orders` once (`idempotency::once`, in
            // two steps here to note when its evidence was read, for the sold-out mark).
            None => {
                let before = Instant::now();
                match phases.strategy(call(strategy, &d, None)).await {
                    Err(refusal) if refusal.is_refusal() => {
                        // What is left was read by the strategy (it says so) or is read now.
                        let read_it = matches!(
                            refusal,
                            DeductError::InsufficientStock {
                                available: Some(_),
                                ..
                            }
                        );
                        evidence_at = if read_it { before } else { Instant::now() };
                        idempotency::after_refusal(d.pool, &d, refusal).await
                    }
                    done => done,
                }
            }
            Some(mistake) => match self.strategies.maker_of(mistake) {
                Some(maker) if maker.info().name == d.strategy => {
                    let mistaken = phases.strategy(call(strategy, &d, Some(mistake)));
                    idempotency::once(&d, mistaken).await
                }
                maker => Err(DeductError::InvalidRequest(format!(
                    "mistake `{mistake}` is made in `{}`, not in `{}`",
                    maker.map_or("no strategy", |s| s.info().name),
                    d.strategy
                ))),
            },
        };
        // A stale mark: this strategy's forgotten, and the request runs once more,
        // without the marks (the strategy, in the admission line), its twin guard let
        // go first.
        if let Some(product_id) = stale {
            self.sold_out.forget(served, product_id);
            drop(_entered);
            return Box::pin(self.run(strategy, order, knobs, false)).await;
        }
        // The strategy itself found nothing left: mark the product sold out here.
        if known_sold_out.is_none()
            && knobs.mistake.is_none()
            && let Err(DeductError::InsufficientStock {
                product_id,
                available: Some(0),
                ..
            }) = &result
        {
            self.sold_out.mark(served, *product_id, evidence_at);
        }
        self.metrics.phases(served, phases);
        Ok(result?)
    }
}

/// The strategy's own work (or the classic mistake it was asked to make), on a span of
/// its own with the outcome it gave (at debug level: a span per request costs).
#[tracing::instrument(level = "debug", name = "strategy", skip_all, fields(
    strategy = d.strategy,
    mistake,
    outcome = tracing::field::Empty,
))]
async fn call(
    strategy: &Arc<dyn Strategy>,
    d: &Deduction<'_>,
    mistake: Option<&str>,
) -> Result<Deducted, DeductError> {
    let result = match mistake {
        None => strategy.deduct(d).await,
        Some(mistake) => strategy.deduct_mistaken(mistake, d).await,
    };
    let outcome = result.as_ref().map_or_else(|e| e.code(), |_| "deducted");
    tracing::Span::current().record("outcome", outcome);
    result
}
