//! Past capacity: a flash sale is more buyers than the service can serve. Measured per
//! strategy in one run:
//! - its **capacity**: the best sales per second it reached without a limit, closed
//!   loop on one hot product, stock never the limit, over the concurrencies the run
//!   measured (the demo's throughput section at 64 in flight and its flash sale at
//!   256: the same rows, not measured again), and the no-limit open loop below if it
//!   sold faster still (its in-flight count is the largest of all);
//! - an **open loop at a multiple of it** (5× by default: requests start at that rate
//!   whatever the answers take, at most [`OPEN_LOOP_IN_FLIGHT`] waiting) against
//!   instances as they run by default (no admission limit: everything queues), and
//!   instances with an admission limit (`--max-in-flight`, fixed, and adaptive:
//!   Gradient2), the client honouring `Retry-After` (bounded retries with jitter,
//!   within a retry budget).
//!
//! For each: the rate offered and the rate reached (when the service holds
//! [`OPEN_LOOP_IN_FLIGHT`] requests unanswered, the open loop must wait, and the row
//! says so), goodput (sales per second over the run's steady window, [`crate::rate`])
//! against the capacity, the p99 of the accepted deductions (answered 200) against the
//! p99 at capacity, `/health` polled every 50 ms on every instance throughout (its
//! slowest answer), 429s, retries, transport errors (no HTTP answer at all, counted
//! apart), and the ledger's verdict. The goal: goodput ≥ 90 % of capacity, p99
//! accepted ≤ 3× the p99 at capacity, `/health` < 50 ms, nothing oversold, no
//! acknowledged sale missing.

pub mod page;
pub mod run;

use crate::html::{escape, html_rows};
use crate::plan::Plan;
use crate::report::{Part, Row, print_rows};
use crate::runner::Runner;
use crate::section::Section;
use serde::{Deserialize, Serialize};
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
    /// `no limit`, `--max-in-flight 32 --reject-hold-ms 0`, ...: the flags, hold
    /// included.
    pub name: String,
    /// Retries the client makes after a 429.
    pub retries: u32,
}

/// One strategy, one mode, past capacity.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OverloadRow {
    pub strategy: String,
    pub mode: String,
    pub capacity_sales_per_second: f64,
    pub capacity_p99_ms: f64,
    /// Where the capacity was measured: `256 in flight` (closed loop), or `the
    /// no-limit open loop` when that sold faster.
    pub capacity_from: String,
    pub offered_per_second: f64,
    /// The rate the load generator reached (requests over the time it took to start
    /// them all): under the offered rate when the service held
    /// [`OPEN_LOOP_IN_FLIGHT`] unanswered.
    pub achieved_per_second: f64,
    /// The achieved rate over the capacity: the multiple of it really offered.
    pub multiple_reached: f64,
    /// The open loop had to wait for a free slot ([`OPEN_LOOP_IN_FLIGHT`] in flight).
    pub ceiling_reached: bool,
    /// Sales per second over the run's steady window ([`crate::rate`]), with its
    /// spread.
    pub goodput: crate::rate::SalesRate,
    pub goodput_sales_per_second: f64,
    /// Goodput over capacity.
    pub goodput_share: f64,
    pub accepted_p99_ms: f64,
    /// The accepted p99 over the p99 at capacity (always the closed loop's).
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

/// The overload's part of the report, under `overload`: written by [`part`], read
/// back by the book.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OverloadPart {
    /// The multiple of each strategy's capacity offered, and how long each run sent
    /// (seconds).
    pub factor: f64,
    pub seconds: f64,
    pub rows: Vec<OverloadRow>,
    pub sell_out: Vec<SellOutRow>,
    pub flood: Vec<crate::flood::FloodRow>,
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

/// An open loop's plan: timed, stock never the limit (the overload is about serving,
/// not about stock), at most [`OPEN_LOOP_IN_FLIGHT`] in flight, no warm-up.
fn plan(section: Section, strategy: &str, product: i64, seconds: f64) -> Plan {
    Plan {
        warmup: 0,
        ..Plan::throughput(
            section,
            strategy,
            vec![product],
            OPEN_LOOP_IN_FLIGHT,
            seconds,
        )
    }
}

/// The best of `rows` (no-limit closed loops of the strategy, stock never the limit):
/// its sales/s, its p99 and where it was measured.
pub fn capacity(rows: &[&Row]) -> Option<(f64, f64, String)> {
    rows.iter()
        .max_by(|a, b| a.sales.per_second.total_cmp(&b.sales.per_second))
        .map(|r| {
            (
                r.sales.per_second,
                r.latency_ms.p99,
                format!("{} in flight", r.concurrency),
            )
        })
}

/// Runs the open loop at `factor` × the capacity `measured` ([`capacity`]) for
/// `seconds` on each `(runner, mode)`; the first mode is the instances without a limit,
/// whose goodput raises the capacity if it sold faster. `product(n)` gives each run a
/// product of its own.
pub async fn run(
    strategy: &str,
    measured: (f64, f64, String),
    modes: &[(&Runner, Mode)],
    factor: f64,
    seconds: f64,
    product: &dyn Fn(usize) -> i64,
) -> anyhow::Result<(Vec<OverloadRow>, Vec<Row>)> {
    let mut rows = Vec::new();
    let (capacity_sales, capacity_p99, from) = measured;
    let offered = (capacity_sales * factor).max(1.0);
    eprintln!(
        "overload: {strategy}: capacity {capacity_sales:.0} sales/s at {from} (p99 {capacity_p99:.1} ms); offering {offered:.0}/s for {seconds} s ..."
    );
    let mut results = Vec::new();
    for (i, (runner, mode)) in modes.iter().enumerate() {
        let mut plan = plan(
            Section::Overload {
                mode: mode.name.clone(),
            },
            strategy,
            product(i + 1),
            seconds,
        );
        plan.rate = Some(offered);
        plan.retries = mode.retries;
        let health = HealthProbe::start(&runner.client, &runner.bases);
        let (row, fired) = runner.run_fired(&plan).await?;
        let (health_max_ms, health_failures) = health.stop().await;
        let accepted_p99 = fired.sold_latency_us.value_at_quantile(0.99) as f64 / 1000.0;
        let transport_errors = row.responses.get("transport").copied().unwrap_or(0)
            + row.responses.get("unreachable").copied().unwrap_or(0);
        let achieved = row.requests as f64 / (fired.last_sent_us as f64 / 1e6).max(1e-3);
        results.push(OverloadRow {
            strategy: strategy.into(),
            mode: mode.name.clone(),
            capacity_sales_per_second: capacity_sales,
            capacity_p99_ms: capacity_p99,
            capacity_from: from.clone(),
            offered_per_second: offered,
            achieved_per_second: achieved,
            multiple_reached: 0.0,
            ceiling_reached: fired.ceiling_reached,
            goodput: row.sales.clone(),
            goodput_sales_per_second: row.sales.per_second,
            goodput_share: 0.0,
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
        });
        rows.push(row);
    }
    // The capacity is the best no-limit figure: the open loop without a limit holds
    // the most in flight, and a strategy that batches sells faster with more. Only
    // the rate is raised: the p99 the goal compares with stays the closed loop's (the
    // open loop's is that of a queue thousands deep, against which any p99 passes).
    if let Some(no_limit) = results.first()
        && no_limit.goodput_sales_per_second > capacity_sales
    {
        let best = no_limit.goodput_sales_per_second;
        for r in &mut results {
            r.capacity_sales_per_second = best;
            r.capacity_from = "the no-limit open loop".into();
        }
    }
    for result in &mut results {
        let capacity = result.capacity_sales_per_second.max(1e-9);
        result.goodput_share = result.goodput_sales_per_second / capacity;
        result.multiple_reached = result.achieved_per_second / capacity;
        result.goal_met = result.goodput_share >= 0.9
            && result.p99_ratio <= 3.0
            && result.health_max_ms < 50.0
            && result.health_failures == 0
            && !result.oversold
            && result.missing_acknowledged == 0;
        eprintln!(
            "overload: {strategy}, {}: offered {:.0}/s, reached {:.0}/s ({:.1}x capacity{}), goodput {} sales/s ({:.0}% of capacity), p99 accepted {:.1} ms ({:.1}x), /health max {:.1} ms, {} x 429, {} retries, {} transport errors: goal {}",
            result.mode,
            result.offered_per_second,
            result.achieved_per_second,
            result.multiple_reached,
            if result.ceiling_reached {
                ", the in-flight ceiling reached"
            } else {
                ""
            },
            result.goodput.text(),
            100.0 * result.goodput_share,
            result.accepted_p99_ms,
            result.p99_ratio,
            result.health_max_ms,
            result.overloaded_429,
            result.retries,
            result.transport_errors,
            if result.goal_met { "met" } else { "missed" }
        );
    }
    Ok((results, rows))
}

/// The table's columns: heading and width in the text table.
const COLUMNS: [(&str, usize); 17] = [
    ("strategy", 12),
    ("mode", 22),
    ("capacity/s", 10),
    ("measured at", 22),
    ("offered/s", 9),
    ("reached/s", 16),
    ("x capacity", 10),
    ("goodput/s (q1-q3)", 20),
    ("share", 6),
    ("p99 acc ms", 10),
    ("x cap p99", 9),
    ("health ms", 9),
    ("429", 7),
    ("retries", 7),
    ("transport", 9),
    ("oversold", 8),
    ("goal", 6),
];

impl OverloadRow {
    /// One row's cells, as both tables show them.
    fn cells(&self) -> [String; 17] {
        [
            self.strategy.clone(),
            self.mode.clone(),
            format!("{:.0}", self.capacity_sales_per_second),
            self.capacity_from.clone(),
            format!("{:.0}", self.offered_per_second),
            format!(
                "{:.0}{}",
                self.achieved_per_second,
                if self.ceiling_reached {
                    " (ceiling)"
                } else {
                    ""
                }
            ),
            format!("{:.1}x", self.multiple_reached),
            self.goodput.text(),
            format!("{:.0}%", 100.0 * self.goodput_share),
            format!("{:.1}", self.accepted_p99_ms),
            format!("{:.1}", self.p99_ratio),
            format!("{:.1}", self.health_max_ms),
            self.overloaded_429.to_string(),
            self.retries.to_string(),
            self.transport_errors.to_string(),
            (if self.oversold || self.missing_acknowledged > 0 {
                "YES"
            } else {
                "no"
            })
            .into(),
            (if self.goal_met { "met" } else { "missed" }).into(),
        ]
    }
}

/// The key the overload part is stored under in the JSON report.
pub const KEY: &str = "overload";

/// The line under the table: what it counts.
pub const COUNTS: &str = "capacity = the best no-limit sales/s measured (closed loop at the concurrency named, or the no-limit open loop when it sold faster); reached = requests started per second (ceiling: the service held the open loop's in-flight ceiling unanswered, so the loop waited); goodput = sales/s over the steady window (from the first answer until the last request was started: the queue's drain left out), its spread the interquartile range over ten slices; x cap p99 = the accepted p99 over the closed loop's p99 at capacity";

/// Prints the overload table.
pub fn print_table(results: &[OverloadRow], factor: f64) {
    println!();
    println!(
        "Past capacity: open loop at {factor}x each strategy's capacity, one hot product, 2 instances per mode (at most {OPEN_LOOP_IN_FLIGHT} in flight)"
    );
    print_rows(&COLUMNS, results.iter().map(|r| r.cells().to_vec()));
    println!("{COUNTS}");
    println!(
        "goal: goodput >= 90% of capacity, p99 of accepted <= 3x the p99 at capacity, /health < 50 ms, nothing oversold or missing"
    );
}

/// The overload part of the HTML report: the table, with the goal per row, the
/// sell-out with the fast path on and off, and the flood. Its rows' sections
/// (`overload: ...`) are shown here, not as tables of their own.
pub fn html(part: &OverloadPart) -> String {
    let OverloadPart {
        factor,
        seconds,
        rows: results,
        sell_out: sell_outs,
        flood: floods,
    } = part;
    let mut html = format!(
        "<h2>Past capacity: {factor}× the capacity, open loop</h2><p>Each strategy's capacity \
         is the best it sold without a limit (closed loop on one hot product, stock never the \
         limit, at the concurrencies the run measured; or the no-limit open loop below when it \
         sold faster); requests start at {factor}× that rate for {seconds} s, whatever the answers \
         take (at most {OPEN_LOOP_IN_FLIGHT} in flight: when the service holds that many \
         unanswered, the loop waits and reaches less than it offers, and the row says \
         <i>ceiling</i>), against instances as they run by default (no \
         limit: everything queues) and against instances with an admission limit, whose \
         excess answers 429 with Retry-After, at once or after a reject hold (each row names \
         its <code>--reject-hold-ms</code>); the client sends a 429 again after its \
         Retry-After (jittered), at most 3 times, and retries add at most 20 % to the \
         requests (a retry budget, as Finagle's). <code>/health</code> is polled every 50 ms on every \
         instance throughout. Goal: goodput ≥ 90 % of capacity, p99 of the accepted ≤ 3× the \
         p99 at capacity, /health under 50 ms, nothing oversold or missing.</p>"
    );
    let _ = write!(html, "<p><small>{}</small></p>", escape(COUNTS));
    html.push_str(&html_rows(
        &COLUMNS,
        results.iter().map(|r| (r.cells().to_vec(), r.goal_met)),
    ));
    if !sell_outs.is_empty() {
        html.push_str(&sell_out_html(sell_outs));
    }
    html.push_str(&crate::flood::html(floods));
    html
}

/// The overload part of the report: what it measured, under [`KEY`] (drawn by
/// [`html`]).
pub fn part(
    results: &[OverloadRow],
    sell_outs: &[SellOutRow],
    floods: &[crate::flood::FloodRow],
    factor: f64,
    seconds: f64,
) -> Part {
    let oversold = results
        .iter()
        .any(|r| r.oversold || r.missing_acknowledged > 0);
    let oversold = oversold || floods.iter().any(|r| !r.clean());
    Part {
        key: KEY,
        json: serde_json::to_value(OverloadPart {
            factor,
            seconds,
            rows: results.to_vec(),
            sell_out: sell_outs.to_vec(),
            flood: floods.to_vec(),
        })
        .expect("plain data"),
        title: None,
        strategies: Vec::new(),
        as_expected: !oversold && sell_outs.iter().all(|r| r.exact),
    }
}

/// A sell-out past capacity, with the sold-out fast path on and off: the stock is
/// small, so nearly every buyer is refused; what a refusal costs decides how the
/// service holds up.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SellOutRow {
    pub strategy: String,
    pub mode: String,
    pub stock: i64,
    pub offered_per_second: f64,
    pub sold: i64,
    pub refused: u64,
    /// Of the refusals, those the sold-out fast path gave without running the strategy.
    pub refused_by_fast_path: u64,
    /// Answers per second over the run.
    pub answers_per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// CPU per answer, microseconds, by process group.
    pub cpu_us_per_answer: std::collections::BTreeMap<String, f64>,
    pub exact: bool,
}

impl SellOutRow {
    /// `loadtest 40 µs, mariadb 102 µs, ...`: the CPU per answer.
    fn cpu_text(&self) -> String {
        let cpu: Vec<String> = self
            .cpu_us_per_answer
            .iter()
            .filter(|(_, us)| **us >= 0.5)
            .map(|(name, us)| format!("{name} {us:.0} µs"))
            .collect();
        cpu.join(", ")
    }
}

/// Sells `stock` units of `strategy` to `offered` requests a second for `seconds`, on
/// each `(runner, mode)`: with the fast path (the instances' default) and without
/// (`--sold-out-cache-ms 0`). No retries: a 429 is an answer here.
pub async fn sell_out(
    strategy: &str,
    modes: &[(&Runner, &str)],
    offered: f64,
    seconds: f64,
    stock: i64,
    product: &dyn Fn(usize) -> i64,
) -> anyhow::Result<(Vec<SellOutRow>, Vec<Row>)> {
    let (mut results, mut rows) = (Vec::new(), Vec::new());
    for (i, (runner, mode)) in modes.iter().enumerate() {
        let mut plan = plan(
            Section::OverloadSellOut {
                mode: mode.to_string(),
            },
            strategy,
            product(i),
            seconds,
        );
        plan.stock = stock;
        plan.rate = Some(offered);
        let (row, fired) = runner.run_fired(&plan).await?;
        let answers = row.requests.max(1) as f64;
        let sold = fired.count(&crate::engine::Outcome::Sold);
        let result = SellOutRow {
            strategy: strategy.into(),
            mode: mode.to_string(),
            stock,
            offered_per_second: offered,
            sold: row.verdict.sold,
            refused: row.responses.get("409").copied().unwrap_or(0),
            refused_by_fast_path: row.refused_by_fast_path,
            answers_per_second: row.answers_per_second,
            p50_ms: row.latency_ms.p50,
            p99_ms: row.latency_ms.p99,
            // The row's CPU is per sale: per answer here, where nearly all are refusals.
            cpu_us_per_answer: row
                .cpu_us_per_sale
                .iter()
                .map(|(name, us)| (name.clone(), us * sold as f64 / answers))
                .collect(),
            exact: row.verdict.sold == stock
                && row.verdict.is_clean()
                && row.verdict.missing_acknowledged == 0,
        };
        eprintln!(
            "overload: {strategy} sell-out, {mode}: {} sold of {stock}, {} refused, {:.0} answers/s, p50 {:.1} ms, p99 {:.1} ms",
            result.sold, result.refused, result.answers_per_second, result.p50_ms, result.p99_ms
        );
        results.push(result);
        rows.push(row);
    }
    Ok((results, rows))
}

/// The sell-out table's columns: heading and width in the text table.
const SELL_OUT_COLUMNS: [(&str, usize); 12] = [
    ("strategy", 12),
    ("mode", 34),
    ("stock", 6),
    ("offered/s", 9),
    ("sold", 6),
    ("refused", 8),
    ("by fast path", 12),
    ("answers/s", 10),
    ("p50 ms", 8),
    ("p99 ms", 8),
    ("CPU per answer", 40),
    ("exact", 9),
];

impl SellOutRow {
    fn cells(&self) -> [String; 12] {
        [
            self.strategy.clone(),
            self.mode.clone(),
            self.stock.to_string(),
            format!("{:.0}", self.offered_per_second),
            self.sold.to_string(),
            self.refused.to_string(),
            self.refused_by_fast_path.to_string(),
            format!("{:.0}", self.answers_per_second),
            format!("{:.1}", self.p50_ms),
            format!("{:.1}", self.p99_ms),
            self.cpu_text(),
            (if self.exact { "exact" } else { "NOT EXACT" }).into(),
        ]
    }
}

/// The sell-out's text table.
pub fn print_sell_out(results: &[SellOutRow]) {
    println!();
    println!(
        "Sell-out past capacity: the sold-out fast path on and off (open loop, one hot product)"
    );
    print_rows(
        &SELL_OUT_COLUMNS,
        results.iter().map(|r| r.cells().to_vec()),
    );
    println!("{SELL_OUT_COUNTS}");
}

/// The line under the sell-out table: what it counts.
pub const SELL_OUT_COUNTS: &str = "refusals are the subject here, not a throughput: refused = 409 answers, by fast path = those the sold-out fast path gave without running the strategy; answers/s = every answer over the whole run";

/// The sell-out's HTML, appended to the overload part.
pub fn sell_out_html(results: &[SellOutRow]) -> String {
    let mut html = String::from(
        "<h3>Sell-out past capacity: the sold-out fast path on and off</h3><p>The same offered \
         rate, a small stock: nearly every buyer is refused. With the fast path (the default) an \
         instance that saw the product with nothing left refuses it without running the \
         strategy (one read of <code>orders</code>); without it (<code>--sold-out-cache-ms 0</code>) \
         every refusal runs the strategy.</p>",
    );
    html.push_str(&html_rows(
        &SELL_OUT_COLUMNS,
        results.iter().map(|r| (r.cells().to_vec(), r.exact)),
    ));
    let _ = write!(html, "<p><small>{}</small></p>", escape(SELL_OUT_COUNTS));
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The three tables render every column of every row, the verdict cell coloured.
    #[test]
    fn the_part_shows_every_table() {
        let row = OverloadRow {
            strategy: "s".into(),
            mode: "--max-in-flight 32".into(),
            capacity_sales_per_second: 100.0,
            capacity_p99_ms: 10.0,
            capacity_from: "256 in flight".into(),
            offered_per_second: 500.0,
            achieved_per_second: 500.0,
            multiple_reached: 5.0,
            ceiling_reached: false,
            goodput: crate::rate::SalesRate {
                per_second: 95.0,
                q1: 90.0,
                q3: 99.0,
                ..Default::default()
            },
            goodput_sales_per_second: 95.0,
            goodput_share: 0.95,
            accepted_p99_ms: 20.0,
            p99_ratio: 2.0,
            health_max_ms: 3.0,
            health_failures: 0,
            overloaded_429: 7,
            retries: 1,
            transport_errors: 0,
            oversold: false,
            missing_acknowledged: 0,
            goal_met: true,
        };
        let sell_out = SellOutRow {
            strategy: "s".into(),
            mode: "fast path on".into(),
            stock: 100,
            offered_per_second: 500.0,
            sold: 100,
            refused: 1900,
            refused_by_fast_path: 1800,
            answers_per_second: 480.0,
            p50_ms: 1.0,
            p99_ms: 5.0,
            cpu_us_per_answer: [("mariadb".to_string(), 80.0)].into(),
            exact: false,
        };
        let flood = crate::flood::FloodRow {
            strategy: "s".into(),
            mode: "--max-in-flight 32 --reject-hold-ms 1000".into(),
            connections: 2000,
            seconds: 6.0,
            capacity_sales_per_second: 100.0,
            goodput_sales_per_second: 98.0,
            goodput_share: 0.98,
            answers_per_second: 99.0,
            refused_per_second: 1.0,
            admitted_p99_ms: Some(1200.0),
            health_max_ms: 4.0,
            health_failures: 0,
            cpu_app_percent: 50.0,
            cpu_db_percent: 60.0,
            cpu_wrk_percent: 9.0,
            transport_errors: 0,
            lost_updates: 0,
            beyond_stock: 0,
        };
        let part = part(&[row], &[sell_out], &[flood], 5.0, 4.0);
        // Drawn from what the report stores, as the page and the book read it.
        let html = html(&serde_json::from_value(part.json.clone()).expect("it reads back"));
        assert_eq!(html.matches("<table>").count(), 3);
        assert_eq!(
            html.matches("<th>").count(),
            COLUMNS.len() + SELL_OUT_COLUMNS.len() + crate::flood::COLUMNS.len()
        );
        assert!(html.contains("--reject-hold-ms 1000"));
        assert_eq!(part.json["flood"][0]["connections"], 2000);
        assert!(html.contains("<td class=\"ok\">met</td>"), "{html}");
        assert!(html.contains("<td class=\"bad\">NOT EXACT</td>"));
        assert!(html.contains("mariadb 80 µs"));
        assert!(
            !part.as_expected,
            "a sell-out that is not exact is unexpected"
        );
    }
}
