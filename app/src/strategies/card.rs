//! What only the service asks of a strategy.
//!
//! Its card for the catalogue (`GET /strategies`, the load test, the book, the
//! tests) is a `static INFO: StrategyInfo` declared beside it (its `served.rs`) and
//! handed to the registry by [`Registered::card`](super::registered::Registered).
//! The hooks of `GET /stock`, `/metrics` and `/ready` are [`Served`]'s. The service
//! has them (the `service` feature, on by default); a copied strategy runs without.

use async_trait::async_trait;
use serde::Serialize;
pub use stock_wire::{CellVerdict, ChaosCell, Family, Scenario, Trait};

/// What the service asks of every [`Strategy`](super::contract::Strategy) besides
/// its sales (a supertrait of it with the feature). The hooks do nothing unless a
/// strategy says otherwise, so the service never names a strategy.
#[async_trait(?Send)]
pub trait Served {
    /// Fields `GET /stock/{product_id}` adds for this strategy (what it keeps about
    /// the product outside the database), merged into the answer.
    async fn stock_view(&self, _product_id: i64) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }

    /// At start, before [`Strategy::start`](super::contract::Strategy::start):
    /// register the strategy's own metrics in the service's registry. `probe` is the
    /// service's (a lock strategy tells it every hold).
    fn register(
        &self,
        _registry: &prometheus::Registry,
        _probe: &std::sync::Arc<dyn crate::domain::probe::Probe>,
    ) {
    }

    /// Before `/metrics` is rendered: bring the strategy's own gauges up to date.
    async fn scrape(&self) {}

    /// `/ready`'s look, within `limit`, at a server only this strategy uses (its own
    /// flag, like `--etcd-endpoints`). `None`: it uses only the shared servers.
    async fn ready(&self, _limit: std::time::Duration) -> Option<Reached> {
        None
    }
}

/// What a server said to `/ready`.
pub enum Reached {
    /// Not configured; what would configure it.
    NotConfigured(&'static str),
    /// Its answer, or why there was none.
    Answered(Result<String, String>),
}

/// What a strategy says about itself: declared once, beside it (its `served.rs`).
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
