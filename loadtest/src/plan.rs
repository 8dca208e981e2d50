//! How one strategy is loaded ([`Plan`]), and the defaults every run shares.

use crate::report::{self, Expect};
use crate::section::Section;

/// The longest a run waits for the persisters of a strategy that records its sales
/// later before its verdict.
pub const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a throughput run sends, in seconds, unless told otherwise: long enough for
/// a steady window of about two seconds after the first wave ([`crate::rate`]).
pub const THROUGHPUT_SECONDS: f64 = 2.5;

/// The stock of a run whose stock must never be the limit (and its request cap: a
/// timed run stops on its clock long before).
pub const NEVER_SOLD_OUT: i64 = 1_000_000;

/// Buckets per product for a strategy that splits the stock, unless told otherwise:
/// enough for the database connections of two instances to work on different rows.
pub const BUCKETS: u16 = 32;

/// How one strategy is loaded.
#[derive(Debug, Clone)]
pub struct Plan {
    pub section: Section,
    pub strategy: String,
    /// The products to restock and deduct.
    pub products: Vec<i64>,
    pub stock: i64,
    /// Buckets each product is split into at restock, if the strategy sells from split
    /// rows (its card's `splits-stock`); the others sell only the product row.
    pub buckets: u16,
    /// Requests to send (at most, when the run is timed).
    pub requests: usize,
    /// Stop sending after this long: a throughput run is timed ([`crate::rate`]).
    pub duration: Option<std::time::Duration>,
    pub concurrency: usize,
    pub rate: Option<f64>,
    pub quantity: i64,
    pub multi_item_share: f64,
    /// Per-request hold (a test hook), if any.
    pub request_hold_ms: Option<u64>,
    /// The hold the instances were started with (`--hold-ms`), for the report.
    pub server_hold_ms: u64,
    pub warmup: usize,
    /// A 429 is sent again after its Retry-After, up to this many times.
    pub retries: u32,
    /// A `GET /stock` of the plan's products every this long during the load
    /// (recorded in the history for the checker).
    pub read_every: Option<std::time::Duration>,
    /// Once this many deductions were answered, every product restocked to this many
    /// units (a new epoch) during the load: (answers, units).
    pub restock_during: Option<(u64, i64)>,
    pub expect: Expect,
}

impl Plan {
    /// A throughput run: one unit per request on `products`, `concurrency` in flight
    /// (closed loop), timed for `seconds` with the stock never the limit, one warm-up
    /// round, nothing held, no retries, expected safe.
    pub fn throughput(
        section: Section,
        strategy: &str,
        products: Vec<i64>,
        concurrency: usize,
        seconds: f64,
    ) -> Plan {
        Plan {
            section,
            strategy: strategy.into(),
            products,
            stock: 0,
            buckets: BUCKETS,
            requests: 0,
            duration: None,
            concurrency,
            rate: None,
            quantity: 1,
            multi_item_share: 0.0,
            request_hold_ms: None,
            server_hold_ms: 0,
            warmup: concurrency,
            retries: 0,
            read_every: None,
            restock_during: None,
            expect: report::Expect::Safe,
        }
        .timed(seconds)
    }

    /// This plan timed for `seconds`, the stock never the limit, one warm-up round.
    pub fn timed(self, seconds: f64) -> Plan {
        Plan {
            stock: NEVER_SOLD_OUT,
            requests: NEVER_SOLD_OUT as usize,
            duration: Some(std::time::Duration::from_secs_f64(seconds)),
            warmup: self.concurrency,
            ..self
        }
    }

    /// This plan as run in `round` of several ([`crate::runner::in_rounds`]): its
    /// warm-up in the first round only. The connections and caches it warms stay warm
    /// from one round to the next, and a slow lock's warm-up costs as long as a run.
    pub fn in_round(&self, round: u32) -> Plan {
        Plan {
            warmup: if round == 0 { self.warmup } else { 0 },
            ..self.clone()
        }
    }
}
