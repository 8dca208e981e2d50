//! What every handler shares: built once by `startup`, read by `routes`.

use crate::http::config::Settings;
use crate::http::hooks::Hooks;
use crate::http::in_flight::InFlight;
use crate::http::metrics::Metrics;
use crate::strategies::Strategies;
use sqlx::MySqlPool;
use std::sync::Arc;

/// Connections of [`AppState::sold_out_reads`]: each reads a batch of refusals'
/// request ids by primary key in one statement, while the main pool sells.
pub const SOLD_OUT_POOL_SIZE: u32 = 2;

/// What every handler shares. Built once, **outside** `HttpServer::new`'s factory:
/// the factory runs once per worker thread, and anything created inside it (a mutex
/// map, a cache) would exist once per worker instead of once per process.
pub struct AppState {
    pub pool: MySqlPool,
    /// Where plain reads go: the read replica (`--read-replica-url`), else `pool`.
    pub reads: MySqlPool,
    /// The sold-out fast path's own small pool ([`SOLD_OUT_POOL_SIZE`] connections) for
    /// its one read of `orders`, many refusals to a statement: a flood of buyers of a
    /// sold-out product waits here, never for the connections other products need.
    pub sold_out_reads: crate::http::sold_out_reads::SoldOutReads,
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
