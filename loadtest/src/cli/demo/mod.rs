//! `loadtest demo` (what `./scripts/demo` runs): start everything, run each strategy on
//! one hot product, compare.
//!
//! One setup, one figure: every throughput setup is timed with stock never the limit
//! and measured in one series of rounds (sales per second over its steady windows,
//! strategy after strategy, round after round, the rounds pooled: [`loadtest::rate`]),
//! and the claims compare figures of the same rounds, round by round. The far section
//! (`--far-rtt-ms`) runs one round: no claim is judged on it. Where another section
//! needs the same setup (the far table's loopback column, the contention claim's 64 in
//! flight, the capacity past which the overload runs), it reads that row. The sections
//! whose stock runs out (what breaks, the sell-out) show what was sold and refused,
//! never a rate of answers as a throughput.
//!
//! # Sections
//! Each section is a file of this folder, a [`DemoSection`] run on one [`Stage`] (the
//! servers, two plain instances, the catalogue, the live page: `stage.rs`), in this
//! order:
//! - `throughput.rs`: every seller on one hot product, the compare-and-set at little
//!   contention, the baseline without HTTP;
//! - `one_instance.rs`: the in-process lock where it works;
//! - `held.rs`: what breaks, every deduction held between read and write;
//! - `far.rs`: the throughput section at `--far-rtt-ms` from every server;
//! - `flash.rs`: the flash sale, its sell-out and buckets;
//! - `overload.rs`: past capacity, the sell-out with the fast path on and off, and the
//!   flood.

mod far;
mod flash;
mod held;
mod one_instance;
mod overload;
mod stage;
mod throughput;

use super::{LoadArgs, parameters, server_versions, write_reports};
use anyhow::bail;
use far::Far;
use flash::Flash;
use held::Held;
use loadtest::live::Live;
use loadtest::report::{Report, Row};
use one_instance::OneInstance;
use overload::Overload;
use stage::{DemoSection, Stage};
use std::path::PathBuf;
use throughput::Throughput;

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
    #[arg(long, default_value_t = loadtest::flood::DEFAULT_CONNECTIONS)]
    pub flood_connections: usize,
    #[command(flatten)]
    pub load: LoadArgs,
}

/// Rounds of every throughput setup, in the quick demo's time. Two figures alike are
/// put in the same order by all four rounds by chance one time in eight (either way):
/// the rule asks more of a lead than that ([`loadtest::rate::decisive`]), and an even
/// count runs every strategy as often early in a round as late.
const ROUNDS: u32 = 4;

/// How long each timed run of the quick demo sends, in seconds (`--full` runs rounds
/// of [`loadtest::plan::THROUGHPUT_SECONDS`]). Four rounds of it send for less than
/// one full-length run did: each run also waits for its last answers, its final read
/// and its check, and the quick demo keeps its few minutes.
const QUICK_SECONDS: f64 = 0.5;

/// A latency of `rtt_ms` round trip.
fn round_trip(rtt_ms: f64) -> testbed::Latency {
    testbed::Latency::round_trip(std::time::Duration::from_secs_f64(rtt_ms / 1000.0))
}

/// Runs the demo: starts everything, runs each section in turn, prints their tables,
/// writes the report and says whether every strategy behaved as expected.
pub async fn demo(args: DemoArgs) -> anyhow::Result<()> {
    let stage = Stage::start(args).await?;
    // Two more instances, started with --hold-ms for the section that shows what
    // breaks.
    let mut held = Held::start(&stage).await?;
    stage.say(&format!(
        "servers and 4 stock-app instances up in {:.1} s",
        stage.started.elapsed().as_secs_f64()
    ));
    let mut far = (stage.far_rtt_ms > 0.0).then_some(Far {
        rtt_ms: stage.far_rtt_ms,
    });
    let mut flash = (!stage.args.no_flash_sale).then(Flash::default);
    let mut overload = Overload::new(&stage);
    stage.expect_sections(
        3 + usize::from(far.is_some())
            + usize::from(flash.is_some())
            + usize::from(overload.is_some()),
    );

    let mut rows: Vec<Row> = Vec::new();
    stage.run(&mut Throughput, &mut rows).await?;
    stage.run(&mut OneInstance, &mut rows).await?;
    stage.run(&mut held, &mut rows).await?;
    if let Some(far) = &mut far {
        stage.run(far, &mut rows).await?;
    }
    if let Some(flash) = &mut flash {
        stage.run(flash, &mut rows).await?;
    }
    if let Some(overload) = &mut overload {
        stage.run(overload, &mut rows).await?;
    }
    let servers = server_versions(&stage.db, &stage.env).await;
    stage.db.close().await;

    Throughput.print(&stage, &rows);
    OneInstance.print(&stage, &rows);
    held.print(&stage, &rows);
    if let Some(far) = &far {
        far.print(&stage, &rows);
    }
    if let Some(flash) = &flash {
        flash.print(&stage, &rows);
    }
    if let Some(overload) = &overload {
        overload.print(&stage, &rows);
    }

    let mut report = Report::new(parameters(&stage.args.load, 2, stage.args.hold_ms), rows);
    report.claims = loadtest::claims::check(&report.results, &stage.catalogue);
    report.strategies = stage.catalogue.clone();
    report.instances = stage.plain_info();
    held.report(&mut report);
    if let Some(flash) = &flash {
        flash.report(&mut report);
    }
    if let Some(overload) = &overload {
        overload.report(&mut report);
    }
    report.machine.servers = servers;
    let (args, live) = stage.stop();
    finish(&report, &args, live).await
}

/// Prints the claims and the instances' memory, writes the reports and says the
/// verdict; with a live page, waits for Ctrl-C once the page links the report.
async fn finish(report: &Report, args: &DemoArgs, live: Option<Live>) -> anyhow::Result<()> {
    println!();
    for claim in &report.claims {
        println!(
            "claim: {} -> {} (on {}: {}; {})",
            claim.claim, claim.verdict, claim.section, claim.load, claim.evidence
        );
    }
    for instance in &report.instances {
        println!(
            "instance {}: peak RSS {:.1} MiB",
            instance.name,
            instance.peak_rss_kib as f64 / 1024.0
        );
    }
    let html_path = write_reports(report, args.load.json.as_deref(), "demo")?;
    let outcome = outcome(report, &html_path, args.hold_ms);
    if let Some(live) = &live {
        live.done(
            html_path.clone(),
            html_path.with_extension("json"),
            outcome.is_ok(),
        );
        eprintln!("demo: the live page links the report; it stays up until Ctrl-C");
        tokio::signal::ctrl_c().await?;
    }
    outcome
}

/// The demo's last words: the verdict, and an error naming what was unexpected.
fn outcome(report: &Report, html_path: &std::path::Path, hold_ms: u64) -> anyhow::Result<()> {
    if report.all_as_expected() {
        println!(
            "verdict: every strategy behaved as expected: the safe ones never oversold, \
             and the controls oversold when held {} ms between read and write (checked from the ledger)",
            hold_ms
        );
        println!("report: {}", html_path.display());
        Ok(())
    } else {
        println!("report: {}", html_path.display());
        let unexpected: Vec<String> = report
            .results
            .iter()
            .filter(|r| !r.as_expected)
            .map(|r| format!("{} ({})", r.strategy, r.section))
            .chain(
                report
                    .parts
                    .iter()
                    .filter(|p| !p.as_expected)
                    .map(|p| p.key.to_string()),
            )
            .collect();
        bail!("unexpected outcome: {}", unexpected.join(", "))
    }
}
