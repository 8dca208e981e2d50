//! Past capacity: a flash sale is more buyers than the service can serve. Measured per
//! strategy in one run: its **capacity** (closed loop, concurrency 64, stock never the
//! limit: sales/s and p99), then an **open loop at a multiple of it** (5× by default:
//! requests start at that rate whatever the answers take) against
//! - instances as they run by default (no admission limit): everything queues;
//! - instances with an admission limit (`--max-in-flight`, fixed, and adaptive:
//!   Gradient2), the client honouring `Retry-After` (bounded retries with jitter, within a retry budget).
//!
//! For each: goodput (sales/s over the run) against the capacity, the p99 of the
//! accepted deductions (answered 200) against the p99 at capacity, `/health` polled
//! every 50 ms on every instance throughout (its slowest answer), 429s, retries,
//! transport errors (no HTTP answer at all, counted apart), and the ledger's verdict.
//! The goal: goodput ≥ 90 % of capacity, p99 accepted ≤ 3× the p99 at capacity,
//! `/health` < 50 ms, nothing oversold, no acknowledged sale missing.

use crate::html::escape;
use crate::report::{Expect, Part, Row};
use crate::sweep::sales_per_second;
use crate::{BUCKETS, Plan, Runner};
use serde::Serialize;
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The open loop's ceiling on requests in flight (so it is open in practice, and the
/// client stays within its file descriptors).
pub const OPEN_LOOP_IN_FLIGHT: usize = 8000;

/// One way of serving the overload.
#[derive(Debug, Clone, Serialize)]
pub struct Mode {
    /// `no limit`, `--max-in-flight 32`, `--adaptive-limit`.
    pub name: String,
    /// Retries the client makes after a 429.
    pub retries: u32,
}

/// One strategy, one mode, past capacity.
#[derive(Debug, Clone, Serialize)]
pub struct OverloadRow {
    pub strategy: String,
    pub mode: String,
    pub capacity_sales_per_second: f64,
    pub capacity_p99_ms: f64,
    pub offered_per_second: f64,
    /// The rate the load generator reached (requests over the time it took to start
    /// them all): under the offered rate when the client itself is the limit.
    pub achieved_per_second: f64,
    /// Sales answered within the seconds the load was offered, per second.
    pub goodput_sales_per_second: f64,
    /// Goodput over capacity.
    pub goodput_share: f64,
    pub accepted_p99_ms: f64,
    /// The accepted p99 over the p99 at capacity.
    pub p99_ratio: f64,
    /// The slowest `/health` answer during the run (ms), and how many failed.
    pub health_max_ms: f64,
    pub health_failures: u64,
    pub overloaded_429: u64,
    pub retries: u64,
    pub transport_errors: u64,
    pub oversold: bool,
    pub missing_acknowledged: u64,
    /// Every goal of the module held.
    pub goal_met: bool,
}

/// `/health` on every base, every 50 ms, until stopped: its slowest answer.
pub struct HealthProbe {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(f64, u64)>,
}

impl HealthProbe {
    pub fn start(client: &reqwest::Client, bases: &[String]) -> HealthProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let (client, bases, flag) = (client.clone(), bases.to_vec(), stop.clone());
        let task = tokio::spawn(async move {
            let (mut slowest, mut failures) = (0f64, 0u64);
            while !flag.load(Ordering::Relaxed) {
                for base in &bases {
                    let started = Instant::now();
                    let answer = client
                        .get(format!("{base}/health"))
                        .timeout(Duration::from_secs(5))
                        .send()
                        .await;
                    slowest = slowest.max(started.elapsed().as_secs_f64() * 1000.0);
                    if !answer.is_ok_and(|a| a.status().is_success()) {
                        failures += 1;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (slowest, failures)
        });
        HealthProbe { stop, task }
    }

    /// The slowest answer (ms) and the failures.
    pub async fn stop(self) -> (f64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or((f64::INFINITY, 1))
    }
}

fn plan(section: &str, strategy: &str, product: i64, requests: usize) -> Plan {
    Plan {
        section: section.into(),
        strategy: strategy.into(),
        products: vec![product],
        // Never sold out: the overload is about serving, not about stock.
        stock: requests as i64,
        buckets: BUCKETS,
        requests,
        concurrency: 64,
        rate: None,
        quantity: 1,
        multi_item_share: 0.0,
        request_hold_ms: None,
        server_hold_ms: 0,
        warmup: 64,
        retries: 0,
        expect: Expect::Safe,
    }
}

/// Measures `strategy`'s capacity on `capacity_runner` (closed loop, concurrency 64,
/// `requests`), then runs the open loop at `factor` × capacity for `seconds` on each
/// `(runner, mode)`. `product(n)` gives each run a product of its own.
pub async fn run(
    strategy: &str,
    capacity_runner: &Runner,
    modes: &[(&Runner, Mode)],
    factor: f64,
    seconds: f64,
    requests: usize,
    product: &dyn Fn(usize) -> i64,
) -> anyhow::Result<(Vec<OverloadRow>, Vec<Row>)> {
    let mut rows = Vec::new();
    let capacity = capacity_runner
        .run(&plan("overload: capacity", strategy, product(0), requests))
        .await?;
    let capacity_sales = sales_per_second(&capacity);
    let capacity_p99 = capacity.latency_ms.p99;
    let offered = (capacity_sales * factor).max(1.0);
    eprintln!(
        "overload: {strategy}: capacity {capacity_sales:.0} sales/s (p99 {capacity_p99:.1} ms); offering {offered:.0}/s for {seconds} s ..."
    );
    rows.push(capacity);
    let mut results = Vec::new();
    for (i, (runner, mode)) in modes.iter().enumerate() {
        let mut plan = plan(
            &format!("overload: {}", mode.name),
            strategy,
            product(i + 1),
            (offered * seconds).round() as usize,
        );
        plan.rate = Some(offered);
        plan.concurrency = OPEN_LOOP_IN_FLIGHT;
        plan.retries = mode.retries;
        plan.warmup = 0;
        let health = HealthProbe::start(&runner.client, &runner.bases);
        let (row, fired) = runner.run_fired(&plan).await?;
        let (health_max_ms, health_failures) = health.stop().await;
        // Sales within the window the load was offered (the retries' tail after it
        // is lighter than the overload).
        let goodput = fired.sales_per_second_within(Duration::from_secs_f64(seconds));
        let accepted_p99 = fired.sold_latency_us.value_at_quantile(0.99) as f64 / 1000.0;
        let transport_errors = row.responses.get("transport").copied().unwrap_or(0)
            + row.responses.get("unreachable").copied().unwrap_or(0);
        let result = OverloadRow {
            strategy: strategy.into(),
            mode: mode.name.clone(),
            capacity_sales_per_second: capacity_sales,
            capacity_p99_ms: capacity_p99,
            offered_per_second: offered,
            achieved_per_second: row.requests as f64
                / (fired.last_sent_us as f64 / 1e6).max(seconds.min(1e-3)),
            goodput_sales_per_second: goodput,
            goodput_share: goodput / capacity_sales.max(1e-9),
            accepted_p99_ms: accepted_p99,
            p99_ratio: accepted_p99 / capacity_p99.max(1e-9),
            health_max_ms,
            health_failures,
            overloaded_429: row.responses.get("429 overloaded").copied().unwrap_or(0),
            retries: fired.retries,
            transport_errors,
            oversold: !row.verdict.is_clean(),
            missing_acknowledged: row.verdict.missing_acknowledged,
            goal_met: false,
        };
        let goal_met = result.goodput_share >= 0.9
            && result.p99_ratio <= 3.0
            && result.health_max_ms < 50.0
            && result.health_failures == 0
            && !result.oversold
            && result.missing_acknowledged == 0;
        let result = OverloadRow { goal_met, ..result };
        eprintln!(
            "overload: {strategy}, {}: goodput {:.0} sales/s ({:.0}% of capacity), p99 accepted {:.1} ms ({:.1}x), /health max {:.1} ms, {} x 429, {} retries, {} transport errors: goal {}",
            mode.name,
            result.goodput_sales_per_second,
            100.0 * result.goodput_share,
            result.accepted_p99_ms,
            result.p99_ratio,
            result.health_max_ms,
            result.overloaded_429,
            result.retries,
            result.transport_errors,
            if goal_met { "met" } else { "missed" }
        );
        results.push(result);
        rows.push(row);
    }
    Ok((results, rows))
}

/// Prints the overload table.
pub fn print_table(results: &[OverloadRow], factor: f64) {
    println!();
    println!(
        "Past capacity: open loop at {factor}x each strategy's capacity (closed loop, concurrency 64), one hot product, 2 instances per mode"
    );
    println!(
        "{:<12} {:<22} {:>8} {:>8} {:>8} {:>9} {:>6} {:>9} {:>7} {:>9} {:>6} {:>7} {:>6}  goal",
        "strategy",
        "mode",
        "cap/s",
        "offered",
        "reached",
        "goodput",
        "share",
        "p99 acc",
        "x cap",
        "health ms",
        "429",
        "retries",
        "transp"
    );
    for r in results {
        println!(
            "{:<12} {:<22} {:>8.0} {:>8.0} {:>8.0} {:>9.0} {:>5.0}% {:>9.1} {:>7.1} {:>9.1} {:>6} {:>7} {:>6}  {}",
            r.strategy,
            r.mode,
            r.capacity_sales_per_second,
            r.offered_per_second,
            r.achieved_per_second,
            r.goodput_sales_per_second,
            100.0 * r.goodput_share,
            r.accepted_p99_ms,
            r.p99_ratio,
            r.health_max_ms,
            r.overloaded_429,
            r.retries,
            r.transport_errors,
            if r.goal_met { "met" } else { "missed" }
        );
    }
    println!(
        "goal: goodput >= 90% of capacity, p99 of accepted <= 3x the p99 at capacity, /health < 50 ms, nothing oversold or missing"
    );
}

/// The overload part of the report: the table, with the goal per row. Its rows'
/// sections (`overload: ...`) are shown here, not as tables of their own.
pub fn part(results: &[OverloadRow], factor: f64, seconds: f64) -> Part {
    let mut html = format!(
        "<h2>Past capacity: {factor}× the capacity, open loop</h2><p>Each strategy's capacity \
         is measured first (closed loop, 64 in flight, one hot product, stock never the limit); \
         then requests start at {factor}× that rate for {seconds} s, whatever the answers take \
         (at most {OPEN_LOOP_IN_FLIGHT} in flight), against instances as they run by default (no \
         limit: everything queues) and against instances with an admission limit, whose \
         excess answers 429 with Retry-After at once; the client sends a 429 again after its \
         Retry-After (jittered), at most 3 times, and retries add at most 20 % to the \
         requests (a retry budget, as Finagle's). <code>/health</code> is polled every 50 ms on every \
         instance throughout. Goal: goodput ≥ 90 % of capacity, p99 of the accepted ≤ 3× the \
         p99 at capacity, /health under 50 ms, nothing oversold or missing.</p>\
         <table><tr><th>strategy</th><th>mode</th><th>capacity sales/s</th><th>p99 at capacity</th>\
         <th>offered/s</th><th>reached/s</th><th>goodput sales/s</th><th>share</th><th>p99 accepted ms</th><th>× capacity p99</th>\
         <th>/health max ms</th><th>429</th><th>retries</th><th>transport errors</th><th>oversold</th><th>goal</th></tr>"
    );
    for r in results {
        let class = if r.goal_met { "ok" } else { "bad" };
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.1}</td><td>{:.0}</td><td>{:.0}</td><td>{:.0}</td><td>{:.0}%</td>\
             <td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{}</td></tr>",
            escape(&r.strategy),
            escape(&r.mode),
            r.capacity_sales_per_second,
            r.capacity_p99_ms,
            r.offered_per_second,
            r.achieved_per_second,
            r.goodput_sales_per_second,
            100.0 * r.goodput_share,
            r.accepted_p99_ms,
            r.p99_ratio,
            r.health_max_ms,
            r.overloaded_429,
            r.retries,
            r.transport_errors,
            if r.oversold || r.missing_acknowledged > 0 {
                "YES"
            } else {
                "no"
            },
            if r.goal_met { "met" } else { "missed" }
        );
    }
    html.push_str("</table>");
    let oversold = results
        .iter()
        .any(|r| r.oversold || r.missing_acknowledged > 0);
    Part {
        key: "overload",
        json: serde_json::json!({ "factor": factor, "seconds": seconds, "rows": results }),
        html,
        title: None,
        sections: std::iter::once("overload: capacity".to_string())
            .chain(results.iter().map(|r| format!("overload: {}", r.mode)))
            .collect(),
        strategies: Vec::new(),
        as_expected: !oversold,
    }
}
