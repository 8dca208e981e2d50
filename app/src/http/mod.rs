//! The HTTP edge: everything that knows about requests, status codes and the
//! process. It may use [`crate::strategies`] and [`crate::domain`]; nothing below
//! uses it.
//!
//! - [`config`]: settings from flags and environment variables (each strategy's own
//!   flags come from its file, through the registry).
//! - [`startup`]: [`startup::Application::build`]: pool, migrations, listener, routes.
//! - [`state`]: what every handler shares.
//! - [`routes`]: handlers, the request-context middleware (request id, `X-Request-Id`
//!   and `Retry-After` on every answer, in one place), admin auth, extractor errors.
//! - [`error`]: the edge's errors and the one table that maps every error, the
//!   domain's included, to a status and a code.
//! - [`hooks`]: failpoints, holds and barriers for deterministic race tests (off by
//!   default): the service's [`crate::domain::probe::Probe`].
//! - [`in_flight`]: a request waits for its in-flight twin in this process.
//! - [`admission`]: the admission limit (fixed or adaptive, Gradient2): past it a
//!   deduction waits in line up to its reject hold (a second unless told otherwise)
//!   and is answered 429 if no place frees; with `--reject-hold-ms 0`, at once.
//! - [`sold_out`]: the sold-out fast path (a product known sold out here is refused
//!   without running the strategy; a restock waits out the marks).
//! - [`sold_out_reads`]: its reads of `orders`, a flood's refusals gathered into one.
//! - [`strict_json`]: JSON bodies that refuse a repeated key; cutting echoed input.
//! - [`stock`]: the admin's SQL (restock, read a product).
//! - [`phases`]: where a request's time goes (its probe adds it up).
//! - [`ready`]: the backend checks behind `/ready`.
//! - [`metrics`]: `GET /metrics`, the Prometheus counters and histograms.
//! - [`bodies`]: the request bodies as the OpenAPI document describes them.
//! - [`openapi`]: `GET /openapi.json`, the OpenAPI 3.1 document, generated (utoipa).
//! - [`telemetry`]: the tracing subscriber.

pub mod admission;
pub mod bodies;
pub mod config;
pub mod error;
pub mod hooks;
pub mod in_flight;
pub mod metrics;
pub mod openapi;
pub mod phases;
pub mod ready;
pub mod routes;
pub mod sold_out;
pub mod sold_out_reads;
pub mod startup;
pub mod state;
pub mod stock;
pub mod strict_json;
pub mod telemetry;
