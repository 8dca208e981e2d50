//! The deduction as the service runs it, below HTTP: what happens between a parsed
//! order and its answer. The handler (`http::routes`) parses the body, calls
//! [`Service::deduct`], and maps the result to a status; the service tests call it
//! directly, with real servers and no HTTP.
//!
//! One deduction passes down a stack of layers ([`layer`]), each one concern that
//! owns its state, in this order ([`Layers`]):
//! 1. [`metrics::Counted`]: the answer counted by its outcome and timed;
//! 2. [`in_flight::Twins`]: a twin of this request id in flight here is waited for;
//! 3. [`sold_out::Marks`]: a product known sold out here is refused without the
//!    layers below (one read of `orders` and of what is left, [`sold_out_reads`]); the
//!    strategy's own "0 left" marks it;
//! 4. [`admission::Admit`]: a place under the admission limit (fixed or adaptive,
//!    Gradient2), or `429 overloaded` after a hold in line;
//! 5. [`once::Once`]: a refusal asks `orders` whether this request id succeeded
//!    before (`strategies::idempotency`);
//! 6. [`run::Run`]: the strategy itself (or the classic mistake it was asked to
//!    make), timed by phase ([`phases`]).
//!
//! The order is the behaviour. A twin waits before its sold-out lookup and without a
//! place in the admission line (so the adaptive limit's latency samples leave that
//! wait out); a stale mark re-runs the layers below the marks still inside the twin
//! guard; a place is given back as soon as the layers below it answer, before the
//! marks layer writes a mark.
//!
//! [`stock`] is the admin's SQL (restock, read a product); [`Service::restock`] also
//! tells the strategies and waits out the sold-out marks.

pub mod admission;
pub mod in_flight;
pub mod layer;
pub mod metrics;
pub mod once;
pub mod phases;
pub mod run;
pub mod sold_out;
pub mod sold_out_reads;
pub mod stock;

use crate::domain::error::DeductError;
use crate::domain::order::Order;
use crate::domain::probe::{Knobs, Probe};
use crate::strategies::Strategies;
use crate::strategies::contract::{Deducted, Deduction, Strategy};
use admission::{Admission, Admit};
use in_flight::{InFlight, Twins};
use layer::{Deduct, Request};
use metrics::{Counted, Metrics};
use once::Once;
use phases::RequestProbe;
use run::Run;
use sold_out::{Marks, SoldOut};
use sold_out_reads::SoldOutReads;
use sqlx::MySqlPool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stock::StockView;
use stock_wire::ErrorCode;

/// Connections of the sold-out fast path's own pool ([`Pools::sold_out`]): each reads
/// a batch of refusals' request ids by primary key in one statement, while the main
/// pool sells.
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
    pub fn code(&self) -> ErrorCode {
        match self {
            ServiceError::Deduct(e) => code_of(e),
            ServiceError::UnknownStrategy { .. } => ErrorCode::UnknownStrategy,
            ServiceError::Overloaded { .. } => ErrorCode::Overloaded,
        }
    }
}

/// The code a deduction's error is answered with: the domain names what went wrong,
/// the wire names it to clients.
pub fn code_of(e: &DeductError) -> ErrorCode {
    use DeductError as D;
    match e {
        D::InvalidRequest(_) => ErrorCode::InvalidRequest,
        D::UnknownProduct(_) => ErrorCode::UnknownProduct,
        D::InsufficientStock { .. } | D::StockConstraint(_) => ErrorCode::InsufficientStock,
        D::RequestIdReused(_) => ErrorCode::RequestIdReused,
        D::Busy(_) => ErrorCode::Busy,
        D::LockLost(_) => ErrorCode::LockLost,
        D::OutcomeUnknown(_) => ErrorCode::OutcomeUnknown,
        D::BackendUnavailable { .. } => ErrorCode::BackendUnavailable,
        D::AlreadyDone(_) | D::Unexpected(_) => ErrorCode::Internal,
    }
}

/// The layers a deduction passes, outermost first (see the module's list).
pub type Layers = Counted<Twins<Marks<Admit<Once<Run>>>>>;

/// Everything a deduction needs, built once per process (`http::startup`) and shared
/// by every worker.
pub struct Service {
    pub pool: MySqlPool,
    /// Where plain reads go: the read replica (`--read-replica-url`), else `pool`.
    pub reads: MySqlPool,
    /// The sold-out fast path's own pool ([`Pools::sold_out`]), closed with the others.
    sold_out_pool: MySqlPool,
    pub strategies: Strategies,
    /// The admission limit on deductions in flight (`--max-in-flight`), shared with
    /// its layer: `/metrics` shows its limit and what is in flight.
    pub admission: Arc<Admission>,
    /// Products known sold out here, per strategy (`--sold-out-cache-ms`), shared with
    /// its layer: a restock clears them.
    pub sold_out: Arc<SoldOut>,
    /// What every deduction's probe passes its failpoints to: the test hooks, or
    /// [`crate::domain::probe::NoProbe`].
    pub hooks: Arc<dyn Probe>,
    /// Shared with its layer: `/metrics` renders it.
    pub metrics: Arc<Metrics>,
    layers: Layers,
}

/// The service's database pools.
pub struct Pools {
    /// Where the strategies sell.
    pub main: MySqlPool,
    /// Where plain reads go: the read replica (`--read-replica-url`), else `main`.
    pub reads: MySqlPool,
    /// The sold-out fast path's own small pool ([`SOLD_OUT_POOL_SIZE`] connections)
    /// for its one read of `orders`, many refusals to a statement: a flood of buyers
    /// of a sold-out product waits here, never for the connections other products
    /// need.
    pub sold_out: MySqlPool,
}

/// What the layers are built from, besides the strategies.
pub struct Limits {
    /// The admission limit, its hold included.
    pub admission: Admission,
    /// The sold-out marks.
    pub sold_out: SoldOut,
}

impl Service {
    /// The service over `pools`, its layers composed once, here.
    pub fn new(
        pools: Pools,
        strategies: Strategies,
        limits: Limits,
        hooks: Arc<dyn Probe>,
    ) -> Service {
        let admission = Arc::new(limits.admission);
        let sold_out = Arc::new(limits.sold_out);
        let metrics = Arc::new(Metrics::new());
        let run = Run {
            strategies: strategies.clone(),
        };
        let admit = Admit {
            admission: admission.clone(),
            inner: Once { inner: run },
        };
        let marks = Marks {
            sold_out: sold_out.clone(),
            reads: SoldOutReads::new(pools.sold_out.clone()),
            admission: admission.clone(),
            inner: admit,
        };
        let twins = Twins {
            in_flight: InFlight::default(),
            inner: marks,
        };
        let layers = Counted {
            metrics: metrics.clone(),
            inner: twins,
        };
        Service {
            pool: pools.main,
            reads: pools.reads,
            sold_out_pool: pools.sold_out,
            strategies,
            admission,
            sold_out,
            hooks,
            metrics,
            layers,
        }
    }

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
        self.sold_out_pool.close().await;
    }

    /// Counts a deduction refused before it reached the service (its body was bad).
    pub fn refused_input(&self, strategy: &'static str, code: &'static str, started: Instant) {
        self.metrics.deduction(strategy, code, started.elapsed());
    }

    /// Deducts `order` through `strategy`, down the layers (see the module's list).
    /// `started`: when the request arrived, for the latency the metrics count. Its span
    /// (debug: at ten thousand deductions a second every span costs) carries the
    /// outcome.
    #[tracing::instrument(level = "debug", name = "deduct", skip_all, fields(
        strategy = strategy.name(),
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
        let served = strategy.name();
        // This request's probe: the service's hooks, and where its time goes.
        let probe = Arc::new(RequestProbe::new(self.hooks.clone()));
        let handed: Arc<dyn Probe> = probe.clone();
        let deduction = Deduction {
            pool: &self.pool,
            reads: &self.reads,
            order,
            knobs,
            probe: &handed,
            strategy: served,
            fingerprint: order.fingerprint(served),
        };
        let request = Request {
            strategy: &**strategy,
            deduction: &deduction,
            phases: &probe.phases,
            started,
            unlimited: false,
        };
        let answer = self.layers.deduct(&request).await;
        tracing::Span::current().record("outcome", answer.outcome());
        answer.result
    }
}
