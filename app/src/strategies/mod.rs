//! The strategies: one file each, each holding its whole algorithm.
//!
//! A strategy is one [`Strategy::deduct`], written top-down: its lock (if any), its SQL
//! (the statements themselves, in its file), its retry policy, its COMMIT. It calls a
//! few small helpers instead of being called back by a framework:
//! - [`txn`]: [`txn::with_retries`] (the retry loop with jittered backoff),
//!   [`txn::record`] (the `orders` row and the ledger rows, two statements),
//!   [`txn::commit`] (the `before_commit` failpoint, COMMIT, an ambiguous COMMIT);
//! - [`fencing`]: the ticket, the claim and the guarded write, and what each lock
//!   backend's token is;
//! - [`idempotency`]: in-flight twins, and the one read a refusal makes (a retry of a
//!   request that already succeeded gets its stored answer).
//!
//! The path of a request: `routes::deduct` parses the body into an [`Order`] (and the
//! test-hook knobs beside it), then [`idempotency::once`] runs the strategy's
//! `deduct`. That is all of it.
//!
//! **No statement the algorithm does not need.** A deduction reads nothing up front
//! for idempotency (the `orders` primary key catches twins inside the transaction),
//! a plain read that can refuse runs before BEGIN (a refusal then opens no
//! transaction), and `app/tests/api/statements.rs` holds each strategy to its count of
//! statements as MariaDB counts them.
//!
//! The lock is always taken before BEGIN and released after COMMIT: under REPEATABLE
//! READ a transaction that reads first and locks second may read a snapshot older
//! than the previous holder's commit, and a lock released before COMMIT lets the next
//! holder read what we are about to change. Both mistakes, and four more of the
//! write-ups' classics, are runnable in [`mistakes`] (test hooks only).
//!
//! # Layout
//! - [`unsafe_control`]: `unsafe`, plain read, check, write; no lock. Must oversell.
//! - [`local_mutex`]: `local-mutex`, `unsafe`'s read-check-write under a per-product
//!   mutex inside one process.
//! - [`atomic_sql`]: `atomic-sql`, `UPDATE ... SET quantity = quantity - ? WHERE ... AND quantity >= ?`.
//! - [`pessimistic`]: `pessimistic`, `SELECT ... FOR UPDATE`, retried on deadlock.
//! - [`optimistic`]: `optimistic`, compare-and-set on a version column, retried.
//! - [`fence_only`]: `fence-only`, a ticket, a claim and a guarded write with no lock:
//!   the fence alone (safe; overtaken requests are refused).
//! - [`batched`]: `batched`, the buyers of one product queue briefly and share one
//!   transaction (request coalescing).
//! - [`bucketed`]: `bucketed`, the hot row split into K bucket rows at restock.
//! - [`redis_stock`]: `redis-stock`, a Redis counter sells; a persister writes the
//!   sales into the database in batches.
//! - [`locked`]: `mysql-lock`, `redis-lock`, `redlock`, `zookeeper`: the algorithm of
//!   a distributed lock around `unsafe`'s read-check-write, with fenced writes.
//! - [`distributed`]: the wiring of those four: which backend, which key, how it
//!   connects, and how each one fails.
//! - [`shared`]: what several strategies share (Redis, ZooKeeper, the lock options).
//! - [`mistakes`]: the classic mistakes, made on purpose next to the strategies they
//!   break (a request's `mistake` test hook).

pub mod atomic_sql;
pub mod batched;
pub mod bucketed;
pub mod distributed;
pub mod fence_only;
pub mod fencing;
pub mod idempotency;
pub mod local_mutex;
pub mod locked;
pub mod mistakes;
pub mod optimistic;
pub mod pessimistic;
pub mod redis_stock;
pub mod shared;
pub mod txn;
pub mod unsafe_control;

use crate::error::AppError;
use crate::hooks::{Hooks, RequestHooks};
use crate::order::Order;
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
}

/// An entry of `GET /strategies`: a strategy's [`StrategyInfo`], and where it stands
/// in the registry: its place in the teaching order and its colour in every chart
/// (from [`PALETTE`] by that place), so clients never list strategies by hand.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct StrategyCard {
    #[serde(flatten)]
    pub info: StrategyInfo,
    /// 0, 1, 2, ...: the registry's order (controls first, distributed locks last).
    pub order: usize,
    /// `#rrggbb`, distinct for every strategy of the registry.
    pub colour: &'static str,
}

/// Chart colours, one per place in the registry (Tableau 20's strong and light
/// shades, the strong ten first): a new strategy takes the next free one, and a
/// test fails when the registry outgrows it.
pub const PALETTE: [&str; 20] = [
    "#7f7f7f", "#bcbd22", "#2ca02c", "#1f77b4", "#ff7f0e", "#17becf", "#8c564b", "#d62728",
    "#9467bd", "#e377c2", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd",
    "#e6550d", "#31a354", "#756bb1", "#636363",
];

/// One deduction as a strategy sees it: the order and what it may use.
pub struct Deduction<'a> {
    pub pool: &'a MySqlPool,
    /// Where the plain reads outside a transaction go: the read replica
    /// (`--read-replica-url`) when there is one, else `pool`. A read from a replica
    /// may be stale (replication lag): `optimistic`'s compare-and-set then fails and
    /// retries; a lock strategy writes a value computed from it (the chaos scenario
    /// `replica-lag`).
    pub reads: &'a MySqlPool,
    pub order: &'a Order,
    /// The test-hook knobs of this request (all default without `--enable-test-hooks`).
    pub knobs: &'a RequestHooks,
    /// The failpoints and the server-wide hold (an `Arc`: a batch task keeps it).
    pub hooks: &'a Arc<Hooks>,
    /// The strategy's name, stored with the order and its ledger rows.
    pub strategy: &'static str,
    /// Where the time goes ([`crate::metrics::Phases`]): a strategy with a lock
    /// reports its lock, transaction and release times here; one without gets its
    /// whole work counted as its transaction. [`Deduction::begin`] times pool waits.
    pub phases: &'a crate::metrics::Phases,
    /// What the request asks for, hashed ([`Order::fingerprint`]): a retry must match.
    pub fingerprint: String,
}

impl Deduction<'_> {
    /// BEGIN on a connection from the pool, what `pool.begin()` does, with the wait
    /// for the connection timed (`stock_locks_db_pool_wait_seconds`: sqlx's pool has
    /// no hook that reports it, so the acquisition is timed here and the transaction
    /// begun on the connection the way `Pool::begin` itself does).
    pub async fn begin(&self) -> Result<Transaction<'static, MySql>, sqlx::Error> {
        let connection = self.phases.pool_wait(self.pool.acquire()).await?;
        Transaction::begin(connection, None).await
    }
}

/// What a strategy is handed when the service starts ([`Strategy::start`]).
pub struct Started<'a> {
    pub pool: &'a MySqlPool,
    pub hooks: &'a Arc<Hooks>,
    /// The service's metrics registry, for metrics of the strategy's own.
    pub registry: &'a prometheus::Registry,
}

/// One way to deduct stock. Implementations live one per file in this module.
///
/// Besides [`deduct`](Strategy::deduct), a strategy may take part in the service's
/// life through the hooks below; each does nothing unless the strategy says
/// otherwise, so the service around the strategies never names one of them.
///
/// The futures are not `Send`: actix-web runs each request on one worker thread.
#[async_trait(?Send)]
pub trait Strategy: Send + Sync + 'static {
    fn info(&self) -> &StrategyInfo;

    /// Deducts every item of `d.order`, all or nothing, and records it.
    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, AppError>;

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

    /// A distributed lock's backend name and its watchdogs' counts, once it connected
    /// (for `/metrics`); `None` for a strategy without one.
    fn lock_stats(&self) -> Option<(&'static str, &locks::LockStats)> {
        None
    }
}

/// The registry: every strategy this service serves, in the order they were added
/// (the teaching order: the control first, the distributed locks last).
#[derive(Clone)]
pub struct Strategies {
    list: Vec<Arc<dyn Strategy>>,
    /// The classic mistakes (a request's `mistake` test hook runs one instead of
    /// the strategy).
    pub mistakes: Arc<mistakes::Mistakes>,
}

impl Strategies {
    pub fn add(&mut self, strategy: Arc<dyn Strategy>) {
        self.list.push(strategy);
    }

    /// Every strategy, in the registry's order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Strategy>> {
        self.list.iter()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Strategy>> {
        self.list.iter().find(|s| s.info().name == name)
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.list.iter().map(|s| s.info().name).collect()
    }

    /// The lock backends' renewal and loss counts ([`Strategy::lock_stats`]).
    pub fn lock_stats(&self) -> Vec<(&'static str, &locks::LockStats)> {
        self.list.iter().filter_map(|s| s.lock_stats()).collect()
    }

    /// `GET /strategies`: every strategy in the registry's order, with its colour.
    pub fn cards(&self) -> Vec<StrategyCard> {
        self.list
            .iter()
            .enumerate()
            .map(|(order, s)| StrategyCard {
                info: s.info().clone(),
                order,
                colour: PALETTE[order % PALETTE.len()],
            })
            .collect()
    }
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

/// How a strategy enters the registry: its settings (a `clap::Args` struct of its
/// own, `NoSettings` when it has none; mark it `#[group(skip)]`) and how it is built
/// from them and what the strategies share.
pub trait Declare {
    type Settings: clap::Args + clap::FromArgMatches + Clone + std::fmt::Debug;

    fn build(settings: &Self::Settings, context: &Context<'_>) -> Arc<dyn Strategy>;
}

/// What every strategy may be built with besides its own settings.
pub struct Context<'a> {
    pub database_url: &'a str,
    pub shared: &'a shared::Shared,
}

/// The settings of a strategy that has none.
#[derive(clap::Args, Debug, Clone, Default)]
#[group(skip)]
pub struct NoSettings {}

/// Declares the registry: one line per strategy, `settings_field: Type`, in the
/// teaching order. From it come the service's strategy settings ([`Settings`], every
/// strategy's own flags) and [`all`], the strategies it serves, in that order.
macro_rules! registry {
    ($($field:ident: $strategy:ty),* $(,)?) => {
        /// Every strategy's own settings, each its own struct from its own file.
        #[derive(clap::Args, Debug, Clone)]
        #[group(skip)]
        pub struct Settings {
            $(
                #[command(flatten)]
                pub $field: <$strategy as Declare>::Settings,
            )*
        }

        /// Every strategy this build serves. Called once, outside the HTTP server's
        /// per-worker factory, so state inside a strategy (the local mutexes) is
        /// shared by every worker.
        pub fn all(settings: &Settings, context: &Context<'_>) -> Strategies {
            let mut strategies = Strategies {
                list: Vec::new(),
                mistakes: Arc::new(mistakes::Mistakes::new(context.shared)),
            };
            $( strategies.add(<$strategy as Declare>::build(&settings.$field, context)); )*
            strategies
        }
    };
}

registry! {
    unsafe_control: unsafe_control::Unsafe,
    local_mutex: local_mutex::LocalMutex,
    fence_only: fence_only::FenceOnly,
    atomic_sql: atomic_sql::AtomicSql,
    pessimistic: pessimistic::Pessimistic,
    optimistic: optimistic::Optimistic,
    batched: batched::Batched,
    bucketed: bucketed::Bucketed,
    redis_stock: redis_stock::RedisStock,
    mysql_lock: distributed::MysqlLock,
    redis_lock: distributed::RedisLock,
    redlock: distributed::RedLock,
    zookeeper: distributed::ZooKeeper,
}
