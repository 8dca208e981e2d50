//! stock-app: stock deduction without overselling, one endpoint per strategy.
//!
//! `POST /deduct/{strategy}` deducts through the named strategy. Each strategy is one
//! file that holds its whole algorithm, top-down, and calls the same small helpers for
//! what every deduction needs (the orders and ledger rows, idempotency, the COMMIT),
//! so the only thing that differs between two endpoints is the concurrency control.
//!
//! # Layout
//! - [`config`]: settings from flags and environment variables.
//! - [`startup`]: [`Application::build`]: pool, migrations, listener, routes.
//! - [`routes`]: handlers, the request-context middleware (request id, `X-Request-Id`
//!   and `Retry-After` on every answer, in one place), admin auth, extractor errors.
//! - [`error`]: [`error::AppError`] and its one status / code table.
//! - [`order`]: the deduction request, validated field by field, fingerprinted.
//! - [`hooks`]: failpoints, holds and barriers for deterministic race tests (off by
//!   default), and the per-request knobs that travel beside an order.
//! - [`stock`]: the admin's SQL (restock, read a product).
//! - [`strategies`]: one file per strategy, and the small helpers they call
//!   (transaction, fencing, idempotency).
//!
//! Modules depend one way: `routes` → `strategies` → `order`, `hooks` → `error`.
//! - [`ready`]: the backend checks behind `/ready`.
//! - [`metrics`]: `GET /metrics`, the Prometheus counters and histograms.
//! - [`openapi`]: `GET /openapi.json`, the OpenAPI 3.1 document, generated (utoipa).
//! - [`telemetry`]: the tracing subscriber.

pub mod config;
pub mod error;
pub mod hooks;
pub mod metrics;
pub mod openapi;
pub mod order;
pub mod ready;
pub mod routes;
pub mod startup;
pub mod stock;
pub mod strategies;
pub mod strict_json;
pub mod telemetry;

pub use config::Settings;
pub use startup::Application;
