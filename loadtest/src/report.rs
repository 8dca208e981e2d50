//! Results: one [`Row`] per strategy and section, printed as a table and written as
//! JSON (schema in `loadtest/report.schema.json`, `"version": 1`). A leaf: it knows no subcommand. What
//! one adds beyond rows and claims (the chaos grid, the sweep's shape) comes in as a
//! [`Part`]: JSON under its key, HTML for the page, made by the subcommand.

use crate::verify::Verdict;
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;

/// The JSON schema version; bump it on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// What a strategy is expected to do in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// One strategy's run.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `throughput` (no hold) or `held` (the demonstration of failures).
    pub section: String,
    pub strategy: String,
    pub instances: usize,
    pub hold_ms: u64,
    pub requests: usize,
    pub concurrency: usize,
    pub seconds: f64,
    pub throughput_rps: f64,
    pub latency_ms: Latency,
    /// Answers by kind: `200`, `409`, `503 busy`, `503 lock_lost`, `4xx`, `5xx`, `transport`.
    pub responses: BTreeMap<String, u64>,
    pub attempts_per_success: f64,
    pub verdict: Verdict,
    pub expect: Expect,
    pub as_expected: bool,
    /// Where the time went, from the instances' `/metrics` before and after the run
    /// (absent when they could not be read, or for the baseline, which has no service).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_split: Option<crate::timing::TimeSplit>,
    /// The round-trip time added between the services and every server (ms), when
    /// the servers ran behind the testbed's proxies (`--rtt-ms`); absent on loopback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt_ms: Option<f64>,
    /// Round trips per sale by kind of server (`database`, `redis`, `zookeeper`,
    /// `etcd`), counted by those proxies during the run: turns of a conversation, so
    /// requests pipelined on one connection count once. Absent on loopback.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub round_trips_per_sale: BTreeMap<String, f64>,
    /// The same counts in total over the run (every answer, sales or not).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub round_trips: BTreeMap<String, u64>,
    /// CPU time per sale of each process involved (microseconds, user + system, from
    /// /proc, numbered processes added up: `stock-app`, `mariadb`, `redis`, ...,
    /// `loadtest`), over the run and until its sales were recorded.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub cpu_us_per_sale: BTreeMap<String, f64>,
    /// Redis's own time per sale on the first Redis: its main thread's CPU (`INFO
    /// cpu`), microseconds; what caps a strategy that runs on one Redis.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_us_per_sale: Option<f64>,
    /// Where it goes: microseconds per sale by command (`INFO commandstats`; a
    /// script's inner commands appear under their names and inside `evalsha`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub redis_commands_us_per_sale: BTreeMap<String, f64>,
    /// Requests that got no HTTP answer (`transport`, `unreachable`), by the innermost
    /// error the client saw: which side dropped them.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub transport_errors: BTreeMap<String, u64>,
}

impl Row {
    pub fn verdict_text(&self) -> &'static str {
        let oversold = !self.verdict.is_clean();
        match (self.expect, oversold, self.as_expected) {
            (_, _, false) if self.verdict.missing_acknowledged > 0 => {
                "UNEXPECTED: acknowledged sales missing from the ledger"
            }
            (Expect::Safe, false, _) => "safe",
            (Expect::Safe, true, _) => "UNEXPECTED: OVERSOLD",
            (Expect::Oversells, true, _) => "oversold, as expected",
            (Expect::Oversells, false, _) => "UNEXPECTED: the control did not oversell",
            (Expect::Either, true, _) => "oversold (not safe across instances)",
            (Expect::Either, false, _) => "did not oversell this time (not safe across instances)",
        }
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
        let mut parts: Vec<String> = (self.cpu_us_per_sale.iter())
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
        (self.round_trips.iter())
            .map(|(kind, n)| (kind.clone(), *n as f64 / requests))
            .collect()
    }

    /// `database 5.0, redis 1.0`: the round trips per sale, or "" on loopback.
    pub fn round_trips_text(&self) -> String {
        let parts: Vec<String> = (self.round_trips_per_sale.iter())
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
    /// Unix seconds when the run ended.
    pub generated_at: u64,
    pub machine: Machine,
    pub parameters: serde_json::Value,
    pub results: Vec<Row>,
    /// The seeds' claims checked against this run (the demo's; empty otherwise).
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

/// What a run says about a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, Serialize)]
pub struct Claim {
    pub claim: String,
    /// Where the claim comes from.
    pub source: String,
    pub verdict: ClaimVerdict,
    /// The numbers behind the verdict.
    pub evidence: String,
}

/// A part of the report one subcommand adds. The report stores `json` under `key`
/// and puts `html` into the page after the rows' sections; nothing more.
#[derive(Debug, Clone)]
pub struct Part {
    pub key: &'static str,
    pub json: serde_json::Value,
    pub html: String,
    /// The page's title and subtitle when this part is what the run is about.
    pub title: Option<(&'static str, &'static str)>,
    /// Row sections the part's HTML shows itself (the page skips them).
    pub sections: Vec<String>,
    /// Strategies it mentions beyond the rows' (explained at the end of the page).
    pub strategies: Vec<String>,
    /// Whether everything in it came out as expected.
    pub as_expected: bool,
}

fn parts_json<S: Serializer>(parts: &[Part], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_map(parts.iter().map(|p| (p.key, &p.json)))
}

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cores: usize,
    /// Server name → version (`mariadb`, `redis`, `zookeeper`), when known.
    pub servers: BTreeMap<String, String>,
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
            generated_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            machine: Machine {
                cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
                servers: BTreeMap::new(),
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

/// Prints a section's rows as a table.
pub fn print_table(title: &str, rows: &[&Row]) {
    println!();
    println!("{title}");
    println!(
        "{:<12} {:>7} {:>8} {:>8} {:>5} {:>5} {:>8} {:>5} {:>6} {:>6} {:>5} {:>7}  verdict",
        "strategy",
        "req/s",
        "p50 ms",
        "p99 ms",
        "sold",
        "left",
        "sold-out",
        "busy",
        "other",
        "tries",
        "lost",
        "beyond",
    );
    for row in rows {
        let other: u64 = row.other().map(|(_, n)| n).sum();
        println!(
            "{:<12} {:>7.0} {:>8.2} {:>8.2} {:>5} {:>5} {:>8} {:>5} {:>6} {:>6.2} {:>5} {:>7}  {}",
            row.strategy,
            row.throughput_rps,
            row.latency_ms.p50,
            row.latency_ms.p99,
            row.verdict.sold,
            row.verdict.remaining,
            row.count("409"),
            row.count("503 busy"),
            other,
            row.attempts_per_success,
            row.verdict.lost_updates,
            row.verdict.beyond_stock,
            row.verdict_text(),
        );
        for (kind, n) in row.other() {
            println!("{:<12}   other: {n} x {kind}", "");
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
    println!(
        "sold = ledger sum; lost = ledger - (stock - left): sales the stock row never saw; beyond = sold past the stock; tries = transactions per sale"
    );
}
