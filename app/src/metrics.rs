//! `GET /metrics`: what the service is doing, in the Prometheus text format, from the
//! `prometheus` crate (a registry per service instance, so tests that run several in
//! one process do not mix their counts).
//!
//! Names follow Prometheus' conventions: a `stock_locks_` prefix, base units
//! (`_seconds`), `_total` for counters, labels for what varies (`strategy`,
//! `outcome`). Labels only take values the service defines: a strategy it serves, an
//! outcome it answers; never request input.
//!
//! - `stock_locks_deductions_total{strategy, outcome}`: every answered deduction of a
//!   served strategy. `outcome` is `deducted`, `duplicate` (a retry answered from
//!   `orders`), or the error code of the answer (`insufficient_stock`, `busy`,
//!   `lock_lost`, `outcome_unknown`, `invalid_request`, `unknown_product`,
//!   `request_id_reused`, `backend_unavailable`, `internal`). Exact: after N sales the
//!   `deducted` count is N (a test holds it to the ledger).
//! - `stock_locks_deduction_duration_seconds{strategy}`: how long each took, as a
//!   histogram (from the handler's start to its answer).

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};
use std::time::Duration;

/// The service's metrics and the registry they are exposed from.
pub struct Metrics {
    registry: Registry,
    deductions: IntCounterVec,
    duration: HistogramVec,
}

/// Upper bounds of the duration histogram, in seconds: from a cache-hot 0.5 ms sale to
/// a 10 s lock wait.
const DURATION_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
];

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let deductions = IntCounterVec::new(
            Opts::new(
                "stock_locks_deductions_total",
                "Answered deductions, by strategy and outcome (deducted, duplicate, or the error code).",
            ),
            &["strategy", "outcome"],
        )
        .expect("a valid metric");
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "stock_locks_deduction_duration_seconds",
                "Time from a deduction's arrival to its answer, by strategy.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["strategy"],
        )
        .expect("a valid metric");
        registry
            .register(Box::new(deductions.clone()))
            .expect("registered once");
        registry
            .register(Box::new(duration.clone()))
            .expect("registered once");
        Metrics {
            registry,
            deductions,
            duration,
        }
    }

    /// Counts one answered deduction of `strategy` and how long it took.
    pub fn deduction(&self, strategy: &'static str, outcome: &'static str, took: Duration) {
        self.deductions
            .with_label_values(&[strategy, outcome])
            .inc();
        self.duration
            .with_label_values(&[strategy])
            .observe(took.as_secs_f64());
    }

    /// Everything, in the text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("encoding to memory");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
