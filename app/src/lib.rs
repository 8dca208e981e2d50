//! stock-app: stock deduction without overselling, one endpoint per strategy.
//!
//! `POST /deduct/{strategy}` deducts through the named strategy; every strategy shares
//! the same request validation, idempotency, ledger and error handling, so the only
//! thing that differs between two endpoints is the concurrency control itself.
//!
//! # Layout
//! - [`config`]: settings from flags and environment variables.
//! - [`startup`]: [`Application::build`]: pool, migrations, listener, routes.
//! - [`routes`]: handlers, the request-id middleware, admin auth, extractor errors.
//! - [`error`]: [`error::AppError`] and its mapping to HTTP, in one place.
//! - [`order`]: the deduction request, validated field by field, fingerprinted.
//! - [`idempotency`]: in-process waiting for a twin request with the same id.
//! - [`hooks`]: failpoints, holds and barriers for deterministic race tests (off by
//!   default).
//! - [`stock`]: the SQL for stock, orders and the ledger.
//! - [`strategies`]: the [`strategies::Strategy`] trait, the shared
//!   lock → transact → release path, and one file per strategy.
//! - [`ready`]: the backend checks behind `/ready`.
//! - [`telemetry`]: the tracing subscriber.

pub mod config;
pub mod error;
pub mod hooks;
pub mod idempotency;
pub mod order;
pub mod ready;
pub mod routes;
pub mod startup;
pub mod stock;
pub mod strategies;
pub mod telemetry;

pub use config::Settings;
pub use startup::Application;
