//! stock-app: stock deduction without overselling, one endpoint per strategy.
//!
//! `POST /deduct/{strategy}` deducts through the named strategy. Each strategy is one
//! file (or folder) that holds its whole algorithm, top-down, and calls the same small
//! helpers for what every deduction needs (the orders and ledger rows, idempotency,
//! the COMMIT), so the only thing that differs between two endpoints is the
//! concurrency control.
//!
//! # Layers
//! Four, and imports run downwards only (the `layers` crate's test fails on an
//! import circle or an upward import, in this crate and every other):
//! - [`http`], the edge: routes that parse a body, call the service and map its
//!   answer; the request bodies (each one type that parses and documents itself); the
//!   edge's errors and the one response they write, OpenAPI, `/ready`, startup,
//!   configuration, and the test hooks' implementation.
//! - [`service`]: the deduction below HTTP ([`service::Service::deduct`]: a stack of
//!   layers, the metrics, the twin guard, the sold-out fast path, the admission limit
//!   and idempotency, around the strategy); each error's code on the wire
//!   ([`service::code_of`]).
//! - [`strategies`]: the registry, one file or folder per strategy, and the helpers
//!   they call (transaction, idempotency, fencing, the lock algorithm).
//! - [`domain`]: the order, the domain errors (no actix and no codes in them), and
//!   the probe a strategy is handed (failpoints; a no-op in production).

#[cfg(not(feature = "service"))]
compile_error!("the service serves its strategies' cards: build it with the `service` feature");

pub mod domain;
pub mod http;
pub mod service;
pub mod strategies;

pub use http::config::{self, Settings};
pub use http::startup::{self, Application};
pub use http::telemetry;
