//! What every handler shares: built once by `startup`, read by `routes`.

use crate::http::config::Settings;
use crate::http::hooks::Hooks;
use crate::http::in_flight::InFlight;
use crate::http::metrics::Metrics;
use crate::strategies::Strategies;
use sqlx::MySqlPool;
use std::sync::Arc;

/// What every handler shares. Built once, **outside** `HttpServer::new`'s factory:
/// the factory runs once per worker thread, and anything created inside it (a mutex
/// map, a cache) would exist once per worker instead of once per process.
pub struct AppState {
    pub pool: MySqlPool,
    /// Where plain reads go: the read replica (`--read-replica-url`), else `pool`.
    pub reads: MySqlPool,
    pub settings: Settings,
    pub strategies: Strategies,
    pub in_flight: InFlight,
    /// The admission limit on deductions in flight (`--max-in-flight`).
    pub admission: crate::http::admission::Admission,
    /// Products known sold out here, per strategy (`--sold-out-cache-ms`).
    pub sold_out: crate::http::sold_out::SoldOut,
    /// The test hooks (failpoints, holds, barriers).
    pub hooks: Arc<Hooks>,
    /// `GET /openapi.json`'s body, generated once at start.
    pub openapi: String,
    pub metrics: Metrics,
}
