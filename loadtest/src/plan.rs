//! How one strategy is loaded ([`Plan`]), and the defaults every run shares.

use crate::report::{self, Expect};
use crate::section::Section;
use std::path::PathBuf;

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

/// The options of a load, as every subcommand that runs one takes them.
#[derive(clap::Args, Clone)]
pub struct LoadArgs {
    /// Units in stock at the start of each strategy's run (per product).
    #[arg(long, default_value_t = 100)]
    pub stock: i64,
    /// Buckets a product is split into for a strategy that sells from split rows.
    ///
    /// The other strategies always get one row.
    #[arg(long, default_value_t = crate::plan::BUCKETS)]
    pub buckets: u16,
    /// Deduction requests per strategy (at most, with --seconds).
    #[arg(long, default_value_t = 1000)]
    pub requests: usize,
    /// Send for this long per strategy, in seconds, instead of a number of requests.
    ///
    /// A timed run's sales per second are taken over its steady window. `loadtest
    /// demo` times its throughput sections so: each of its rounds 0.5 s by default,
    /// 2.5 s with --full.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Requests in flight at once (closed loop), spread round-robin over the instances.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// An open loop instead: start this many requests per second.
    ///
    /// At most --concurrency are in flight.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Products per strategy (1 = one hot row).
    #[arg(long, default_value_t = 1)]
    pub products: usize,
    /// Units per item.
    #[arg(long, default_value_t = 1)]
    pub quantity: i64,
    /// Share of requests that order two products at once (0.0-1.0; needs products ≥ 2).
    #[arg(long, default_value_t = 0.0)]
    pub multi_item_share: f64,
    /// Warm-up requests per strategy on a product of their own, not counted.
    #[arg(long, default_value_t = 0)]
    pub warmup: usize,
    /// Only these strategies (comma-separated; default: every one the service lists).
    #[arg(long, value_delimiter = ',')]
    pub strategies: Vec<String>,
    /// How many times a 429 is sent again, at most.
    ///
    /// A 429 comes from past the instances' admission limit; it is sent again after
    /// its Retry-After, jittered 0.5-1.5x.
    #[arg(long, default_value_t = 3)]
    pub retries: u32,
    /// Read each product's stock every this many ms during the load.
    ///
    /// The reads (`GET /stock`) go into the history the checker judges.
    #[arg(long)]
    pub read_every_ms: Option<u64>,
    /// Restock every product during the load, once this many deductions were answered.
    ///
    /// Each product gets --restock-to units: a new epoch, in the history too. The
    /// deductions not yet sent by then wait for its answer.
    #[arg(long, requires = "restock_to")]
    pub restock_after: Option<u64>,
    /// The units of the restock during the load (with --restock-after).
    #[arg(long, requires = "restock_after")]
    pub restock_to: Option<i64>,
    /// Neither build, check nor write the runs' histories.
    ///
    /// The verdicts then come from the ledger alone. What recording costs is measured
    /// with and without it.
    #[arg(long)]
    pub no_history: bool,
    /// Write the JSON report here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// `strategy`'s plan in `section` for the load `load`, on products from `first_product`.
pub fn plan(
    section: Section,
    strategy: &str,
    first_product: i64,
    load: &LoadArgs,
    expect: Expect,
) -> Plan {
    Plan {
        section,
        strategy: strategy.into(),
        products: (0..load.products.max(1) as i64)
            .map(|i| first_product + i)
            .collect(),
        stock: load.stock,
        buckets: load.buckets,
        requests: match load.seconds {
            Some(_) => crate::plan::NEVER_SOLD_OUT as usize,
            None => load.requests,
        },
        duration: load.seconds.map(std::time::Duration::from_secs_f64),
        concurrency: load.concurrency,
        rate: load.rate,
        quantity: load.quantity,
        multi_item_share: load.multi_item_share,
        request_hold_ms: None,
        server_hold_ms: 0,
        warmup: load.warmup,
        retries: load.retries,
        read_every: load.read_every_ms.map(std::time::Duration::from_millis),
        restock_during: load.restock_after.zip(load.restock_to),
        expect,
    }
}

/// A product id range of its own for each run, so runs never share stock.
pub fn first_product(section: usize, index: usize) -> i64 {
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64 % 1_000_000);
    base * 1_000 + (section as i64) * 100 + index as i64 * 10 + 1
}
