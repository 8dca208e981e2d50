//! The service's API tests: one binary, one module per area. Every test talks to a
//! real MariaDB (run them under `./scripts/test` or `testbed run -- cargo nextest run`)
//! on a database of its own, so they run in parallel.

mod controls;
mod curator;
mod deadlock;
mod faults;
mod flash_sale;
mod helpers;
mod hooks;
mod idempotency;
mod locks;
mod metrics;
mod mistakes;
mod openapi;
mod races;
mod service;
mod sold_out;
mod statements;
mod validation;
mod without_http;
