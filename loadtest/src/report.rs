//! Results: one [`Row`] per strategy and section, printed as a table and written as
//! JSON (schema in `loadtest/report.schema.json`, `"version": 2`). A leaf: it knows no subcommand. What
//! one adds beyond rows and claims (the chaos grid, the sweep's shape) comes in as a
//! [`Part`]: JSON under its key, HTML for the page, made by the subcommand.

use crate::section::Section;
use crate::verify::Verdict;
use serde::{Deserialize, Serialize, Serializer};
use std::collections::BTreeMap;

/// The JSON schema version; bump it on any incompatible change.
pub const SCHEMA_VERSION: u32 = 2;

/// What a strategy is expected to do in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// Never oversells.
    Safe,
    /// Must oversell (a control, in a run made to show it).
    Oversells,
    /// A control where overselling depends on timing: not judged.
    Either,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// One strategy's run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// The setup the row was measured in ([`Section`]: `throughput`, `held`,
    /// `sweep: 100 products`, ...).
    pub section: Section,
    pub strategy: String,
    pub instances: usize,
    /// Products the load was spread over (1: one hot product).
    pub products: usize,
    pub hold_ms: u64,
    pub requests: usize,
    pub concurrency: usize,
    /// The whole run's wall time, from the first request sent to the last answer.
    pub seconds: f64,
    /// Sales per second over the steady window, with its spread ([`crate::rate`]):
    /// the throughput, wherever one is shown.
    pub sales: crate::rate::SalesRate,
    /// Answers of every kind per second of the whole run: only where refusals are the
    /// subject (a sell-out).
    pub answers_per_second: f64,
    /// Of the 409 answers, those the sold-out fast path gave without running the
    /// strategy (the instances' own count); the rest are the strategy's.
    pub refused_by_fast_path: u64,
    pub latency_ms: Latency,
    /// Answers by kind: `200`, `409`, `503 busy`, `503 lock_lost`, `4xx`, `5xx`, `transport`.
    pub responses: BTreeMap<String, u64>,
    pub attempts_per_success: f64,
    pub verdict: Verdict,
    pub expect: Expect,
    pub as_expected: bool,
    /// Where the time went, from the instances' `/metrics` before and after the run
    /// (absent when they could not be read, or for the baseline, which has no service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_split: Option<crate::timing::TimeSplit>,
    /// The round-trip time added between the services and every server (ms), when
    /// the servers ran behind the testbed's proxies (`--rtt-ms`); absent on loopback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_ms: Option<f64>,
    /// Round trips per sale by kind of server (`database`, `redis`, `zookeeper`,
    /// `etcd`), counted by those proxies during the run: turns of a conversation, so
    /// requests pipelined on one connection count once. Absent on loopback.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub round_trips_per_sale: BTreeMap<String, f64>,
    /// The same counts in total over the run (every answer, sales or not).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub round_trips: BTreeMap<String, u64>,
    /// CPU time per sale of each process involved (microseconds, user + system, from
    /// /proc, numbered processes added up: `stock-app`, `mariadb`, `redis`, ...,
    /// `loadtest`), over the run and until its sales were recorded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cpu_us_per_sale: BTreeMap<String, f64>,
    /// Redis's own time per sale on the first Redis: its main thread's CPU (`INFO
    /// cpu`), microseconds; what caps a strategy that runs on one Redis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis_us_per_sale: Option<f64>,
    /// Where it goes: microseconds per sale by command (`INFO commandstats`; a
    /// script's inner commands appear under their names and inside `evalsha`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub redis_commands_us_per_sale: BTreeMap<String, f64>,
    /// Requests that got no HTTP answer (`transport`, `unreachable`), by the innermost
    /// error the client saw: which side dropped them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub transport_errors: BTreeMap<String, u64>,
    /// Where this figure was measured, when it is shown in another section or run
    /// measuring the same setup (`throughput`: the demo's throughput section): one
    /// setup, one figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_in: Option<String>,
    /// How long the load was planned to send, in seconds (a timed run); absent when
    /// it sent a number of requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_s: Option<f64>,
    /// An open loop's rate, requests started per second; absent for a closed loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Units per item.
    #[serde(default = "one_unit")]
    pub quantity: i64,
    /// The checker's verdict on the run's history (every answer, not the ledger's
    /// sum), and where the history was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<crate::history::Judged>,
}

fn one_unit() -> i64 {
    1
}

/// The rows of a report written earlier (its `results`).
pub fn rows_of(path: &std::path::Path) -> anyhow::Result<Vec<Row>> {
    use anyhow::Context;
    #[derive(Deserialize)]
    struct Results {
        version: u32,
        results: Vec<Row>,
    }
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let report: Results = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not a loadtest report", path.display()))?;
    anyhow::ensure!(
        report.version == SCHEMA_VERSION,
        "{} is a version {} report; this loadtest reads version {SCHEMA_VERSION}",
        path.display(),
        report.version
    );
    Ok(report.results)
}

impl Row {
    pub fn verdict_text(&self) -> &'static str {
        let oversold = !self.verdict.is_clean();
        match (self.expect, oversold, self.as_expected) {
            (_, _, false) if self.verdict.missing_acknowledged > 0 => {
                "UNEXPECTED: acknowledged sales missing from the ledger"
            }
            (Expect::Safe, false, false) => "UNEXPECTED: answers no order explains",
            (Expect::Safe, false, _) => "safe",
            (Expect::Safe, true, _) => "UNEXPECTED: OVERSOLD",
            (Expect::Oversells, true, _) => "oversold, as expected",
            (Expect::Oversells, false, _) => "UNEXPECTED: the control did not oversell",
            (Expect::Either, true, _) => "oversold (not safe across instances)",
            (Expect::Either, false, _) => "did not oversell this time (not safe across instances)",
        }
    }

    /// The checker's word on the run's history: `linearizable`, `NOT linearizable`,
    /// `undecided`, or `-` where none was checked.
    pub fn history_text(&self) -> &'static str {
        crate::history::verdict_text(self.history.as_ref())
    }

    /// Whether the stock never limited the run: nobody was told "sold out", and some
    /// was left. Only then is its sales/s a throughput.
    pub fn stock_never_limited(&self) -> bool {
        self.count("409") == 0 && self.verdict.remaining > 0
    }

    /// Answers that are neither a sale, a sold-out nor busy (`503 lock_lost`, 4xx, ...).
    pub fn other(&self) -> impl Iterator<Item = (&String, &u64)> {
        self.responses
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "200" | "409" | "503 busy"))
    }

    fn count(&self, key: &str) -> u64 {
        self.responses.get(key).copied().unwrap_or(0)
    }

    /// `stock-app 210 µs, mariadb 330 µs, loadtest 60 µs (Redis 12 µs)`: CPU per sale.
    pub fn cpu_text(&self) -> String {
        let mut parts: Vec<String> = self
            .cpu_us_per_sale
            .iter()
            .filter(|(_, us)| **us >= 0.5)
            .map(|(name, us)| format!("{name} {us:.0} µs"))
            .collect();
        if let Some(redis) = self.redis_us_per_sale.filter(|us| *us > 0.0) {
            parts.push(format!("(Redis's main thread {redis:.1} µs)"));
        }
        parts.join(", ")
    }

    /// Round trips per request (every answer) by kind of server.
    pub fn round_trips_per_request(&self) -> BTreeMap<String, f64> {
        let requests = self.requests.max(1) as f64;
        self.round_trips
            .iter()
            .map(|(kind, n)| (kind.clone(), *n as f64 / requests))
            .collect()
    }

    /// `database 5.0, redis 1.0`: the round trips per sale, or "" on loopback.
    pub fn round_trips_text(&self) -> String {
        let parts: Vec<String> = self
            .round_trips_per_sale
            .iter()
            .filter(|(_, n)| **n >= 0.05)
            .map(|(kind, n)| format!("{kind} {n:.1}"))
            .collect();
        parts.join(", ")
    }
}

/// The whole report, as written to JSON.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub version: u32,
    pub tool: String,
    /// The run this report is part of, when it is one of several measured together
    /// (the book's reference run: `scripts/book-data` names it in [`RUN_VARIABLE`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Unix seconds when the run ended.
    pub generated_at: u64,
    pub machine: Machine,
    pub parameters: serde_json::Value,
    pub results: Vec<Row>,
    /// The source articles' claims checked against this run (the demo's; empty otherwise).
    pub claims: Vec<Claim>,
    /// The service instances the run started, with their peak memory.
    pub instances: Vec<InstanceInfo>,
    /// The strategies as the service described them (`GET /strategies`): their order,
    /// family, colour and explanation.
    pub strategies: crate::catalogue::Catalogue,
    /// What the subcommand added, each under its key (`faults`, `sweep`).
    #[serde(flatten, serialize_with = "parts_json")]
    pub parts: Vec<Part>,
}

/// A report as read back from its JSON: what [`Report`] wrote, with the parts typed
/// by the reader (`P`, flattened: each part under its key, as [`Part`] stores it,
/// such as `struct { flash_sale: Option<FlashPart> }`). What the reader leaves out
/// (`parameters`, `machine`, `instances`) is not read.
#[derive(Debug, Clone, Deserialize)]
pub struct Written<P> {
    pub version: u32,
    /// The run it is part of ([`Report::run`]).
    #[serde(default)]
    pub run: Option<String>,
    /// Where it ran: the cores and each server's durability.
    #[serde(default)]
    pub machine: Machine,
    /// Unix seconds when the run ended.
    pub generated_at: u64,
    pub results: Vec<Row>,
    pub claims: Vec<Claim>,
    pub strategies: crate::catalogue::Catalogue,
    #[serde(flatten)]
    pub parts: P,
}

/// What a run says about a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClaimVerdict {
    Confirmed,
    Refuted,
    /// Within the noise margin, or not every comparison agrees.
    Inconclusive,
}

impl ClaimVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimVerdict::Confirmed => "confirmed",
            ClaimVerdict::Refuted => "refuted",
            ClaimVerdict::Inconclusive => "inconclusive",
        }
    }
}

impl std::fmt::Display for ClaimVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One of the write-ups' claims, checked against a run (`claims::check`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claim {
    pub claim: String,
    /// Where the claim comes from: a source article by title.
    pub source: String,
    /// The section of the run it was judged on, and that section's load.
    pub section: String,
    pub load: String,
    pub verdict: ClaimVerdict,
    /// The numbers behind the verdict.
    pub evidence: String,
}

/// A part of the report one subcommand adds. The report stores `json` under `key`;
/// the page draws it from there ([`crate::chapter::Chapter::html`]), as the book does.
#[derive(Debug, Clone)]
pub struct Part {
    pub key: &'static str,
    pub json: serde_json::Value,
    /// The page's title and subtitle when this part is what the run is about.
    pub title: Option<(&'static str, &'static str)>,
    /// Strategies it mentions beyond the rows' (explained at the end of the page).
    pub strategies: Vec<String>,
    /// Whether everything in it came out as expected.
    pub as_expected: bool,
}

fn parts_json<S: Serializer>(parts: &[Part], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_map(parts.iter().map(|p| (p.key, &p.json)))
}

/// The environment variable naming the run a report is part of ([`Report::run`]).
pub const RUN_VARIABLE: &str = "STOCK_LOCKS_RUN";

/// Where a run ran: the machine's cores and the servers as they were set.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Machine {
    pub cores: usize,
    /// Server name → version (`mariadb`, `redis`, `zookeeper`), when known.
    pub servers: BTreeMap<String, String>,
    /// Server name → what it keeps of an acknowledged write and when it fsyncs
    /// ([`crate::setup`]), as the testbed says it when the run ended.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub durability: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct InstanceInfo {
    pub name: String,
    /// Peak resident memory (VmHWM from /proc), KiB.
    pub peak_rss_kib: u64,
}

impl Report {
    pub fn new(parameters: serde_json::Value, results: Vec<Row>) -> Report {
        Report {
            version: SCHEMA_VERSION,
            tool: format!("loadtest {}", env!("CARGO_PKG_VERSION")),
            run: std::env::var(RUN_VARIABLE).ok().filter(|r| !r.is_empty()),
            generated_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            machine: Machine {
                cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
                servers: BTreeMap::new(),
                durability: BTreeMap::new(),
            },
            parameters,
            results,
            claims: Vec::new(),
            instances: Vec::new(),
            strategies: Default::default(),
            parts: Vec::new(),
        }
    }

    pub fn all_as_expected(&self) -> bool {
        self.results.iter().all(|r| r.as_expected) && self.parts.iter().all(|p| p.as_expected)
    }
}

/// The rows of `section`, in their order.
pub fn section<'a>(rows: &'a [Row], section: &Section) -> Vec<&'a Row> {
    rows.iter().filter(|r| &r.section == section).collect()
}

/// `1 hot product, 64 in flight` (or `100 products, 64 in flight`): a row's load, as
/// tables and claims state it.
pub fn load_text(row: &Row) -> String {
    let products = match row.products {
        1 => "1 hot product".to_string(),
        n => format!("{n} products"),
    };
    format!("{products}, {} in flight", row.concurrency)
}

/// What a table shows besides the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Columns {
    /// Sales per second with its spread: a section whose stock never limits.
    Throughput,
    /// What was sold and refused, no rate: a section whose stock runs out (the
    /// oversell verdicts, a sell-out).
    Verdicts,
}

/// The line under a throughput table: what its figures count.
pub const THROUGHPUT_COUNTS: &str = "sales/s = deductions answered 200 per second over the steady window (after the first wave's answers, until the last request was sent), stock never the limit; (q1–q3) = its spread, the interquartile range over ten slices of the window (of every round's window together, with --rounds)";

/// The line under a verdict table.
pub const VERDICT_COUNTS: &str = "history = the checker's verdict on every answer (is there one order of the requests, each taking effect between its sending and its answer, that a single correct stock counter would have answered so?); sold = the ledger's sum; lost = ledger - (stock - left): sales the stock row never saw; beyond = sold past the stock; tries = transactions per sale";

/// Prints a section's rows as a table.
pub fn print_table(title: &str, rows: &[&Row], columns: Columns) {
    println!();
    println!("{title}");
    let head = match columns {
        Columns::Throughput => format!("{:>21}", "sales/s (q1–q3)"),
        Columns::Verdicts => format!(
            "{:>5} {:>5} {:>8} {:>8}",
            "sold", "left", "sold-out", "fast"
        ),
    };
    println!(
        "{:<12} {head} {:>8} {:>8} {:>5} {:>6} {:>6} {:>5} {:>7}  {:<16}  verdict",
        "strategy", "p50 ms", "p99 ms", "busy", "other", "tries", "lost", "beyond", "history",
    );
    for row in rows {
        let other: u64 = row.other().map(|(_, n)| n).sum();
        let cells = match columns {
            Columns::Throughput => format!("{:>21}", row.sales.text()),
            Columns::Verdicts => format!(
                "{:>5} {:>5} {:>8} {:>8}",
                row.verdict.sold,
                row.verdict.remaining,
                row.count("409"),
                row.refused_by_fast_path
            ),
        };
        println!(
            "{:<12} {cells} {:>8.2} {:>8.2} {:>5} {:>6} {:>6.2} {:>5} {:>7}  {:<16}  {}",
            row.strategy,
            row.latency_ms.p50,
            row.latency_ms.p99,
            row.count("503 busy"),
            other,
            row.attempts_per_success,
            row.verdict.lost_updates,
            row.verdict.beyond_stock,
            row.history_text(),
            row.verdict_text(),
        );
        for (kind, n) in row.other() {
            println!("{:<12}   other: {n} x {kind}", "");
        }
        if let Some(history) = row.history.as_ref().filter(|h| !h.anomalies.is_empty()) {
            println!("{:<12}   history: {}", "", history.anomalies_text());
            if let Some(first) = history.anomalies.first() {
                println!("{:<12}     e.g. {}: {}", "", first.class, first.says);
            }
        }
        for (error, n) in &row.transport_errors {
            println!("{:<12}   no answer: {n} x {error}", "");
        }
        if !row.round_trips_per_sale.is_empty() {
            println!(
                "{:<12}   round trips per sale: {}",
                "",
                row.round_trips_text()
            );
        }
    }
    match columns {
        Columns::Throughput => println!("{THROUGHPUT_COUNTS}; {VERDICT_COUNTS}"),
        Columns::Verdicts => println!(
            "{VERDICT_COUNTS}; sold-out = 409 answers, fast = those of them the sold-out fast path gave without running the strategy"
        ),
    }
}

/// `database 5, redis 1` (whole numbers shown without decimals).
pub fn by_kind(counts: &BTreeMap<String, f64>) -> String {
    let parts: Vec<String> = counts
        .iter()
        .filter(|(_, n)| **n >= 0.05)
        .map(|(kind, n)| {
            if (n - n.round()).abs() < 0.05 {
                format!("{kind} {n:.0}")
            } else {
                format!("{kind} {n:.1}")
            }
        })
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// A text table: the first two columns left-aligned (names), the rest right.
pub(crate) fn print_rows(columns: &[(&str, usize)], rows: impl Iterator<Item = Vec<String>>) {
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(columns)
            .enumerate()
            .map(|(i, (cell, (_, width)))| match i {
                0 | 1 => format!("{cell:<width$}"),
                _ => format!("{cell:>width$}"),
            })
            .collect();
        println!("{}", padded.join(" "));
    };
    line(
        &columns
            .iter()
            .map(|(h, _)| h.to_string())
            .collect::<Vec<_>>(),
    );
    for cells in rows {
        line(&cells);
    }
}
