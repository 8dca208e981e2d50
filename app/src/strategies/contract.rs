//! What a strategy is: the trait it implements, what it is handed, what it answers,
//! and how it declares itself. A strategy uses this file and its helpers, never the
//! registry (`super`); a copied strategy takes it along, with the domain only.

use crate::domain::error::DeductError;
use crate::domain::order::Order;
use crate::domain::probe::{Knobs, Probe};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sqlx::{MySql, MySqlPool, Transaction};
use std::sync::Arc;

/// The four kinds of strategy, in teaching order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// What goes wrong without a (real) lock, and the fence alone.
    Control,
    /// The database's own concurrency control: a conditional UPDATE, row locks, CAS.
    Database,
    /// One product, many buyers: coalescing, split rows, Redis in front.
    HotProduct,
    /// A lock service around a plain read-check-write, fenced.
    DistributedLock,
}

/// What a strategy says about itself: declared once, in its own file.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct StrategyInfo {
    /// The path segment: `POST /deduct/{name}`.
    pub name: &'static str,
    /// Where it is written: its file (`file!()`, from the repository's root); a
    /// strategy of several files lives in that file's folder.
    pub source: &'static str,
    pub family: Family,
    /// One sentence: the mechanism.
    pub description: &'static str,
    /// One sentence: when to choose it.
    pub when_to_use: &'static str,
    /// A paragraph for a reader: how it works, what it costs, how it fails.
    pub explanation: &'static str,
    /// What it depends on besides the database (`database` when nothing else).
    pub backend: &'static str,
    /// Whether it prevents overselling when several service instances share the stock.
    pub safe_across_instances: bool,
    /// How writes are fenced against a holder that lost its lock: `none`,
    /// `not needed` (the database does the locking), `token`, `owner tag`.
    pub fencing: &'static str,
    /// The most statements it sends to MariaDB for one deduction, as the server counts
    /// them (`app/tests/api/statements.rs` holds it to them; its doc says which).
    pub statements: Statements,
    /// What a client reasons about besides the family (the load test's comparisons,
    /// flash sale and faults ask for strategies by trait, never by name).
    pub traits: &'static [Trait],
    /// The fault experiments this strategy goes through (`loadtest chaos`) and what
    /// each is expected to show; at least one (a test holds every strategy to it).
    pub chaos: &'static [ChaosCell],
}

/// Statements sent to MariaDB per deduction, at most: a sale, and a refusal (409).
#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
pub struct Statements {
    pub sale: u32,
    pub refusal: u32,
}

/// A property a client may ask for, declared by the strategies that have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Trait {
    /// No lock at all: read, check, write (the lost-update story).
    NoLock,
    /// A lock inside one process: safe with one instance only.
    ProcessLock,
    /// Every write guarded by the newest claim, so an overtaken request is refused: a
    /// control for the fencing experiments, not a way to sell.
    RefusesOvertaken,
    /// The database checks and decrements in one statement: the reference the others
    /// are measured against.
    ConditionalUpdate,
    /// The database's row lock, taken by a locking read.
    RowLock,
    /// A compare-and-set on a version, retried when another writer got there first
    /// (its transactions per sale measure the contention).
    CompareAndSet,
    /// Many sales share one transaction.
    Batches,
    /// Sells from rows the restock splits the stock into (`buckets`).
    SplitsStock,
    /// Answers before the database has the sale: a persister records it later (wait
    /// for `pending` before judging; its persister is what a killed holder is).
    RecordsLater,
    /// A lease that ends when its holder stops renewing it.
    LeaseLock,
    /// The lock server keeps leases in whole seconds, rounded up (etcd): a lock
    /// outlives the lease asked for by up to a second (the holder still counts on
    /// the lease it asked for).
    LeaseInWholeSeconds,
    /// A lock that lasts as long as its holder's session.
    SessionLock,
}

/// One cell of the fault grid: a scenario of `loadtest chaos`, with fencing on or off.
#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
pub struct ChaosCell {
    /// The scenario's id (`pause-past-lease`, ...).
    pub scenario: &'static str,
    /// `null`: the strategy has no fencing switch.
    pub fencing: Option<bool>,
    /// The verdicts that count as expected: `safe`, `refused`, `unavailable`, `lost`.
    pub expect: &'static [&'static str],
    /// Run only with `loadtest chaos --all`.
    pub extra: bool,
}

impl ChaosCell {
    /// Expected to lose nothing: safe, refused or unavailable.
    pub const NO_LOSS: &'static [&'static str] = &["safe", "refused", "unavailable"];

    pub const fn new(
        scenario: &'static str,
        fencing: Option<bool>,
        expect: &'static [&'static str],
    ) -> ChaosCell {
        ChaosCell {
            scenario,
            fencing,
            expect,
            extra: false,
        }
    }

    /// This cell, run only with `--all`.
    pub const fn extra(self) -> ChaosCell {
        ChaosCell {
            extra: true,
            ..self
        }
    }
}

/// One deduction as a strategy sees it: the order and what it may use.
pub struct Deduction<'a> {
    pub pool: &'a MySqlPool,
    /// Where the plain reads outside a transaction go: the read replica
    /// (`--read-replica-url`) when there is one, else `pool`. Such a read may be stale:
    /// `optimistic`'s compare-and-set then retries; a lock strategy writes from it
    /// (chaos `replica-lag`).
    pub reads: &'a MySqlPool,
    pub order: &'a Order,
    /// The test knobs of this request (all default unless the test hooks are on).
    pub knobs: &'a Knobs,
    /// The test hooks (an `Arc`: a batch task keeps it); nothing in production.
    pub probe: &'a Arc<dyn Probe>,
    /// The strategy's name, stored with the order and its ledger rows.
    pub strategy: &'static str,
    /// What the request asks for, hashed ([`Order::fingerprint`]): a retry must match.
    pub fingerprint: String,
}

impl Deduction<'_> {
    /// `pool.begin()`, with the wait for the connection timed
    /// (`stock_locks_db_pool_wait_seconds`: sqlx's pool has no hook that reports it).
    pub async fn begin(&self) -> Result<Transaction<'static, MySql>, sqlx::Error> {
        let started = std::time::Instant::now();
        let connection = self.pool.acquire().await;
        self.probe.pool_waited(started.elapsed());
        let connection = connection?;
        Transaction::begin(connection, None).await
    }
}

/// What a strategy is handed when the service starts ([`Strategy::start`]).
pub struct Started<'a> {
    pub pool: &'a MySqlPool,
    pub probe: &'a Arc<dyn Probe>,
    /// The service's metrics registry, for metrics of the strategy's own.
    pub registry: &'a prometheus::Registry,
}

/// One way to deduct stock, one per file (or folder) beside this one. The hooks
/// besides [`deduct`](Strategy::deduct) do nothing unless a strategy says otherwise,
/// so the service never names a strategy. The futures are not `Send`: actix-web runs
/// each request on one worker thread.
#[async_trait(?Send)]
pub trait Strategy: Send + Sync + 'static {
    fn info(&self) -> &StrategyInfo;

    /// Deducts every item of `d.order`, all or nothing, and records it.
    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError>;

    /// At start: register the strategy's own metrics, start its background work
    /// (the task is aborted when the service stops). Must not wait on a backend.
    fn start(&self, _started: &Started<'_>) -> Option<tokio::task::JoinHandle<()>> {
        None
    }

    /// After `PUT /stock/{product_id}` started a new epoch: forget what the
    /// strategy kept about the product elsewhere.
    async fn restocked(&self, _product_id: i64) {}

    /// Fields `GET /stock/{product_id}` adds for this strategy (what it keeps about
    /// the product outside the database), merged into the answer.
    async fn stock_view(&self, _product_id: i64) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }

    /// Before `/metrics` is rendered: bring the strategy's own gauges up to date.
    async fn scrape(&self) {}

    /// `/ready`'s look, within `limit`, at a server only this strategy uses (its own
    /// flag, like `--etcd-endpoints`). `None`: it uses only the shared servers.
    async fn ready(&self, _limit: std::time::Duration) -> Option<Reached> {
        None
    }

    /// The classic mistakes it can be made to make (the `mistake` test knob).
    fn mistakes(&self) -> &'static [&'static str] {
        &[]
    }

    /// Deducts `d.order` making `mistake` (one of [`Strategy::mistakes`]) instead of
    /// the strategy's own algorithm.
    async fn deduct_mistaken(
        &self,
        mistake: &str,
        _d: &Deduction<'_>,
    ) -> Result<Deducted, DeductError> {
        Err(DeductError::InvalidRequest(format!(
            "`{}` makes no mistake `{mistake}`",
            self.info().name
        )))
    }
}

/// What a server said to `/ready`.
pub enum Reached {
    /// Not configured; what would configure it.
    NotConfigured(&'static str),
    /// Its answer, or why there was none.
    Answered(Result<String, String>),
}

/// One line of a successful deduction's response.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemResult {
    pub product_id: i64,
    pub quantity: i32,
    pub remaining: i32,
}

/// The 200 body of a deduction; also what `orders.response` stores.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
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
    /// Sales committed in the same transaction as this one (`batched`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    /// The Redis stream entry that carries this sale to the database (`redis-stock`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_entry: Option<String>,
}

/// How a strategy enters the registry: its settings (a `clap::Args` struct marked
/// `#[group(skip)]`, or `NoSettings`) and how it is built from them and from what the
/// strategies share (`Shared`; a strategy that needs none of it is generic over it).
pub trait Declare<Shared> {
    type Settings: clap::Args + clap::FromArgMatches + Clone + std::fmt::Debug;

    fn build(settings: &Self::Settings, context: &Context<'_, Shared>) -> Arc<dyn Strategy>;
}

/// What every strategy may be built with besides its own settings.
pub struct Context<'a, Shared> {
    pub database_url: &'a str,
    pub shared: &'a Shared,
}

/// The settings of a strategy that has none.
#[derive(clap::Args, Debug, Clone, Default)]
#[group(skip)]
pub struct NoSettings {}
