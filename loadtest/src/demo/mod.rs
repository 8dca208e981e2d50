//! The demo's options and the [`Stage`] its sections run on: the servers, two plain
//! instances, the catalogue, the live page.
//!
//! `loadtest demo` (what `./scripts/demo` runs) starts a stage and runs each section on
//! it in order, each a [`Chapter`](crate::chapter::Chapter) in a folder (or a file) of
//! its own:
//! [`throughput`](crate::throughput) (every seller on one hot product, the
//! compare-and-set at little contention, the baseline without HTTP),
//! [`one_instance`](crate::one_instance) (the in-process lock where it works),
//! [`durability`](crate::durability) (the throughput section without an fsync at
//! every COMMIT, with `--durability-cost`),
//! [`held`](crate::held) (what breaks, every deduction held between read and write),
//! [`far`](crate::far) (the throughput section at `--far-rtt-ms` from every server),
//! [`flash`](crate::flash) (the flash sale, its sell-out and buckets) and
//! [`overload`](crate::overload) (past capacity, the sell-out with the fast path on and
//! off, the flood).

pub mod stage;

pub use stage::Stage;

use crate::plan::LoadArgs;
use std::path::PathBuf;

/// Where the book reads the demo's reference run (its sections' pages name it).
pub const SOURCE: &str = "book/data/demo.json";

#[derive(clap::Args)]
pub struct DemoArgs {
    /// The held section's pause between read and write, in ms.
    ///
    /// Its two instances run with `stock-app --hold-ms`: a slow business step that
    /// makes the controls without a real lock fail visibly.
    #[arg(long, default_value_t = 5)]
    pub hold_ms: u64,
    /// The stock-app binary (default: next to this one).
    #[arg(long)]
    pub app_bin: Option<PathBuf>,
    /// Skip the flash-sale section.
    ///
    /// That section runs one hot product at high concurrency, a sell-out, and the
    /// split stock by number of buckets.
    #[arg(long)]
    pub no_flash_sale: bool,
    /// Flash sale: requests in flight at once, over both instances.
    ///
    /// Each strategy sends for --seconds; the sell-out has its own count: 20,000
    /// buyers.
    #[arg(long, default_value_t = 256)]
    pub flash_concurrency: usize,
    /// Flash sale: an open loop instead, starting this many requests per second.
    ///
    /// At most --flash-concurrency are in flight.
    #[arg(long)]
    pub flash_rate: Option<f64>,
    /// Serve a live page of the run on this address.
    ///
    /// Given without an address: 127.0.0.1:8090 (loopback). The page shows every
    /// strategy's stock, sales, lost updates and units beyond stock as they happen,
    /// then links the report. It stays up after the run until Ctrl-C.
    #[arg(long, num_args = 0..=1, default_missing_value = "127.0.0.1:8090", value_name = "ADDR")]
    pub serve: Option<String>,
    /// Run the whole demo with every server this far away: a round-trip time in ms.
    ///
    /// Each server sits behind a proxy adding it: 0.5 is inside a data centre, 2
    /// across zones.
    #[arg(long, value_parser = testbed::Latency::parse_ms)]
    pub rtt_ms: Option<f64>,
    /// Every section, the two slow ones too, in rounds of full length.
    ///
    /// The same as `--far-rtt-ms 2 --overload-factor 5 --seconds 2.5`, with the flash
    /// sale's locks measured in every round too. The book's reference run uses it.
    #[arg(long)]
    pub full: bool,
    /// Measure what durability costs: the throughput section again with MariaDB
    /// fsyncing its redo log once a second instead of at every COMMIT.
    ///
    /// The servers are durable alike otherwise: MariaDB fsyncs at every COMMIT as
    /// ZooKeeper and etcd fsync their logs before they answer [default: on with
    /// --full].
    #[arg(long)]
    pub durability_cost: bool,
    /// The far section's round-trip time to every server, in ms; 0 skips it.
    ///
    /// The far section runs the throughput section again on two more instances behind
    /// proxies, beside the loopback figures [default: 0, 2 with --full].
    #[arg(long, value_parser = testbed::Latency::parse_ms)]
    pub far_rtt_ms: Option<f64>,
    /// The overload section's load, as a multiple of capacity; 0 skips it.
    ///
    /// That section runs an open loop at this multiple of each strategy's measured
    /// capacity, with and without an admission limit [default: 0, 5 with --full].
    #[arg(long)]
    pub overload_factor: Option<f64>,
    /// Measure each throughput setup in this many rounds.
    ///
    /// The setups are the throughput, one-instance, contention, flash-sale and
    /// buckets sections. Each round runs every strategy once, every other round in
    /// reverse order, and the rounds are pooled. Without --full the flash sale's
    /// locks, which no claim compares, run one round.
    ///
    /// Each round gives a lead: one figure's rate over the other's. A claim is
    /// confirmed or refuted only when every round's lead points the same way, the
    /// lead is more than the margin, and the rounds agree on its size: every round's
    /// lead is more than the margin, or the lead is larger than it moved between
    /// rounds. Else it is inconclusive.
    ///
    /// With 1 round the windows' quartiles stand in, and a close race can flip from
    /// one run to the next.
    #[arg(long, default_value_t = ROUNDS, value_parser = clap::value_parser!(u32).range(1..=10))]
    pub rounds: u32,
    /// How long each overload run offers its load, in seconds.
    #[arg(long, default_value_t = 4.0)]
    pub overload_seconds: f64,
    /// The strategies the overload section loads past capacity.
    ///
    /// By default the reference (the conditional UPDATE) and the strategy that
    /// batches sales: a database one and a hot-product one, as the service's
    /// catalogue names them.
    #[arg(long, value_delimiter = ',')]
    pub overload_strategies: Vec<String>,
    /// The fixed admission limit of the overload section's limited instances, per
    /// instance.
    #[arg(long, default_value_t = 32)]
    pub overload_max_in_flight: usize,
    /// The overload section's reject hold, in ms.
    ///
    /// Its held settings run with `stock-app --reject-hold-ms`, beside the same limits
    /// without one.
    #[arg(long, default_value_t = 1000)]
    pub overload_reject_hold_ms: u64,
    /// The flood's connections on each setting; 0 skips the flood.
    ///
    /// In the overload section, `wrk` (a closed loop that never backs off) floods the
    /// reference strategy with this many connections.
    #[arg(long, default_value_t = crate::flood::DEFAULT_CONNECTIONS)]
    pub flood_connections: usize,
    #[command(flatten)]
    pub load: LoadArgs,
}

/// Rounds of every throughput setup, in the quick demo's time. Two figures alike are
/// put in the same order by all four rounds by chance one time in eight (either way):
/// the rule asks more of a lead than that ([`crate::rate::decisive`]), and an even
/// count runs every strategy as often early in a round as late.
pub const ROUNDS: u32 = 4;

/// How long each timed run of the quick demo sends, in seconds (`--full` runs rounds
/// of [`crate::plan::THROUGHPUT_SECONDS`]). Four rounds of it send for less than
/// one full-length run did: each run also waits for its last answers, its final read
/// and its check, and the quick demo keeps its few minutes.
pub const QUICK_SECONDS: f64 = 0.5;
