//! What every handler shares: built once by `startup`, read by `routes`.

use crate::http::config::Settings;
use crate::http::hooks::Hooks;
use crate::service::Service;
use std::sync::Arc;

/// What every handler shares. Built once, **outside** `HttpServer::new`'s factory:
/// the factory runs once per worker thread, and anything created inside it (a mutex
/// map, a cache) would exist once per worker instead of once per process.
pub struct AppState {
    /// The deduction and everything it needs (pools, strategies, the fast path, the
    /// admission limit, the metrics).
    pub service: Service,
    pub settings: Settings,
    /// The test hooks (failpoints, holds, barriers): the routes that set them; the
    /// service holds them as its probe.
    pub hooks: Arc<Hooks>,
    /// `GET /openapi.json`'s body, generated once at start.
    pub openapi: String,
}
