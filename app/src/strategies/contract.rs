//! What a strategy is: the trait it implements, what it is handed, what it answers,
//! and how it is built. A strategy uses this file and its helpers, never the registry
//! (`super`); a copied strategy takes it along, with the domain only. What only the
//! service asks (its card and flags, `registered.rs`' `Registered`; the hooks of
//! `card.rs`' `Served`: a view or gauge beside a sale) compiles with the `service`
//! feature: a copy declares it (`service = []` under `[features]`), leaves it off
//! and takes neither file.

use crate::domain::error::DeductError;
use crate::domain::order::Order;
use crate::domain::probe::{Knobs, Probe};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sqlx::{MySql, MySqlPool, Transaction};
use std::sync::Arc;

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
}

#[cfg(feature = "service")]
pub use super::card::Served;
/// Without the `service` feature, nothing: every type is `Served`.
#[cfg(not(feature = "service"))]
pub trait Served {}
#[cfg(not(feature = "service"))]
impl<T> Served for T {}

/// One way to deduct stock, one per file (or folder) beside this one. The hooks
/// besides [`deduct`](Strategy::deduct) do nothing unless a strategy says otherwise.
/// The futures are not `Send`: actix-web runs each request on one worker thread.
#[async_trait(?Send)]
pub trait Strategy: Served + Send + Sync + 'static {
    /// The path segment: `POST /deduct/{name}`.
    fn name(&self) -> &'static str;

    /// Deducts every item of `d.order`, all or nothing, and records it.
    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError>;

    /// At start: start the strategy's background work (the task is aborted when the
    /// service stops). Must not wait on a backend. (The service registers its metrics
    /// just before, through `Served::register`.)
    fn start(&self, _started: &Started<'_>) -> Option<tokio::task::JoinHandle<()>> {
        None
    }

    /// After `PUT /stock/{product_id}` started a new epoch: forget what the
    /// strategy kept about the product elsewhere.
    async fn restocked(&self, _product_id: i64) {}

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
            self.name()
        )))
    }
}

/// One line of a successful deduction's response.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "service", derive(utoipa::ToSchema))]
pub struct ItemResult {
    pub product_id: i64,
    pub quantity: i32,
    pub remaining: i32,
}

/// The 200 body of a deduction; also what `orders.response` stores.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "service", derive(utoipa::ToSchema))]
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

/// How a strategy is built: from its settings and from what the strategies share
/// (`Shared`; a strategy that needs none of it is generic over it).
///
/// The settings are plain values with their defaults (`Default`), or [`NoSettings`];
/// the service reads them from its command line (its flags, beside each strategy in
/// its `served.rs`), a copy from wherever it likes.
pub trait Declare<Shared> {
    type Settings: Clone + std::fmt::Debug;

    fn build(settings: &Self::Settings, context: &Context<'_, Shared>) -> Arc<dyn Strategy>;
}

/// What every strategy may be built with besides its own settings.
pub struct Context<'a, Shared> {
    pub database_url: &'a str,
    pub shared: &'a Shared,
}

/// The settings of a strategy that has none.
#[derive(Debug, Clone, Default)]
pub struct NoSettings {}
