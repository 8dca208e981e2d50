//! `loadtest chaos`: faults under load in two instances, every cell judged from the ledger.

use super::write_reports;
use anyhow::bail;
use loadtest::chaos::run::Grid;
use loadtest::chapter::Chapter;
use loadtest::report::Report;
use serde_json::json;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ChaosArgs {
    /// Only these scenarios (comma-separated ids or numbers, e.g. `1,pause-past-lease`;
    /// default: all).
    #[arg(long = "scenario", value_delimiter = ',')]
    pub scenarios: Vec<String>,
    /// Only these strategies (comma-separated; default: every one of the matrix).
    #[arg(long, value_delimiter = ',')]
    pub strategies: Vec<String>,
    /// Also run the extra cells.
    ///
    /// They freeze the controls without a real lock, kill the unfenced locks' holders,
    /// and put more strategies through the ambiguous commit.
    #[arg(long)]
    pub all: bool,
    /// Short leases and windows (what the test suite runs).
    #[arg(long)]
    pub quick: bool,
    /// The lock lease of both instances (`--lock-lease-ms`).
    #[arg(long)]
    pub lease_ms: Option<u64>,
    /// The ZooKeeper session timeout of both instances (at least 1000: 2 x tickTime).
    #[arg(long)]
    pub zk_session_ms: Option<u64>,
    /// Put every server this far away: a round-trip time in ms.
    ///
    /// Every server goes behind a proxy adding it, and instance A's fault proxies too;
    /// the report's title says so.
    #[arg(long, value_parser = testbed::Latency::parse_ms)]
    pub rtt_ms: Option<f64>,
    /// The stock-app binary (default: next to this one).
    #[arg(long)]
    pub app_bin: Option<PathBuf>,
    /// Write the JSON report here (default reports/chaos.json; the HTML next to it).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub async fn chaos(args: ChaosArgs) -> anyhow::Result<()> {
    use loadtest::chaos::{Scenario, Timing};
    let mut scenarios = Vec::new();
    for wanted in &args.scenarios {
        let matching: Vec<Scenario> = Scenario::ALL
            .iter()
            .copied()
            .filter(|s| s.id() == wanted || s.number().to_string() == *wanted)
            .collect();
        if matching.is_empty() {
            let known: Vec<&str> = Scenario::ALL.iter().map(|s| s.id()).collect();
            bail!(
                "unknown scenario {wanted:?}; known: 1-10 or {}",
                known.join(", ")
            );
        }
        scenarios.extend(matching);
    }
    let mut timing = if args.quick {
        Timing::quick()
    } else {
        Timing::standard()
    };
    if let Some(lease) = args.lease_ms {
        timing.lease_ms = lease;
    }
    if let Some(session) = args.zk_session_ms {
        timing.zk_session_ms = session.max(1000);
    }
    timing.rtt_ms = args.rtt_ms;
    let app_bin = loadtest::lab::app_bin(args.app_bin.as_deref())?;
    let histories = loadtest::history::folder(args.json.as_deref(), "chaos")?;
    let mut grid = Grid::new(
        timing,
        scenarios,
        args.strategies.clone(),
        args.all,
        app_bin,
        Some(histories),
    );
    eprintln!("chaos: {} ...", grid.title(&()));
    grid.run(&(), &[]).await?;
    grid.print(&(), &[]);
    let mut report = Report::new(
        json!({
            "command": "chaos", "scenarios": args.scenarios, "strategies": args.strategies,
            "all": args.all, "quick": args.quick, "rtt_ms": args.rtt_ms,
        }),
        Vec::new(),
    );
    grid.report(&mut report);
    for claim in &report.claims {
        println!("claim: {} -> {}", claim.claim, claim.verdict);
    }
    let faults = grid.measured().expect("the grid ran");
    let html_path = write_reports(&report, args.json.as_deref(), "chaos")?;
    println!("report: {}", html_path.display());
    let unexpected: Vec<String> = faults
        .cells
        .iter()
        .filter(|c| !c.as_expected)
        .map(|c| {
            format!(
                "{} / {} ({}, history {}, expected history {})",
                c.scenario.id(),
                c.strategy,
                c.verdict.id(),
                loadtest::history::verdict_text(c.history.as_ref()),
                c.expected_history.text()
            )
        })
        .collect();
    println!(
        "chaos: {} cells in {:.0} s; {} as expected",
        faults.cells.len(),
        faults.seconds,
        faults.cells.len() - unexpected.len()
    );
    if unexpected.is_empty() {
        Ok(())
    } else {
        bail!("unexpected: {}", unexpected.join(", "))
    }
}
