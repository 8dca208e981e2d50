//! The HTTP edge: everything that knows about requests, status codes and the
//! process. It may use [`crate::service`], [`crate::strategies`] and
//! [`crate::domain`]; nothing below uses it. A deduction's handler parses the body,
//! calls [`crate::service::Service::deduct`] and maps its answer.
//!
//! - [`config`]: settings from flags and environment variables (each strategy's own
//!   flags come from its `served.rs`, through the registry).
//! - [`startup`]: [`startup::Application::build`]: pool, migrations, listener, routes.
//! - [`state`]: what every handler shares.
//! - [`routes`]: handlers, the request-context middleware (request id, `X-Request-Id`
//!   and `Retry-After` on every answer, in one place), admin auth, extractor errors.
//! - [`error`]: the edge's errors, each with its code (the wire's `ErrorCode`, which
//!   carries its status), and the response every error writes.
//! - [`hooks`]: failpoints, holds and barriers for deterministic race tests (off by
//!   default): the service's [`crate::domain::probe::Probe`].
//! - [`strict_json`]: JSON bodies that refuse a repeated key; cutting echoed input.
//! - [`ready`]: the backend checks behind `/ready`.
//! - [`bodies`]: the request bodies, each one type that parses and documents itself.
//! - [`openapi`]: `GET /openapi.json`, the OpenAPI 3.1 document, generated (utoipa).
//! - [`telemetry`]: the tracing subscriber.

pub mod bodies;
pub mod config;
pub mod error;
pub mod hooks;
pub mod openapi;
pub mod ready;
pub mod routes;
pub mod startup;
pub mod state;
pub mod strict_json;
pub mod telemetry;
