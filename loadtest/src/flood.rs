//! Past capacity against a client that does not back off: Debian's `wrk`, closed loop,
//! each answer (a 429 included, its `Retry-After` ignored) followed at once by the next
//! request, as buyers pressing "buy" again and scripts resending in a loop do. The
//! polite open loop of [`crate::overload`] honours `Retry-After` within a retry budget;
//! this is the other client a flash sale meets.
//!
//! Per setting of the instances (no limit, a fixed limit, the adaptive one, each with
//! and without a reject hold), one run of `wrk` per instance for `seconds`, together
//! `connections` connections, on a hot product of its own, stock never the limit:
//! - **goodput**: sales per second in the ledger over the run's steady window (from a
//!   third of the run until just before `wrk` stops, the database's clock), against
//!   the strategy's capacity (the same figure the polite rows are judged against);
//! - **p99 of the admitted**: from the instances' `stock_locks_sale_duration_seconds`
//!   histogram (the sales alone; `wrk`'s own latency mixes in the refusals), read at
//!   the steady window's ends, interpolated inside its bucket as Prometheus'
//!   `histogram_quantile` does;
//! - **429/s** and every other answer, counted by `wrk`'s script over its whole run,
//!   and the requests that got no HTTP answer at all (transport errors);
//! - **`/health`**: polled every [`HEALTH_EVERY`] on a new connection to each flooded instance
//!   (the slowest answer, and failures);
//! - **the CPU split**: the instances', the database's and `wrk`'s own, in percent of
//!   one core over the steady window (`/proc/<pid>/stat`), so a row shows where the
//!   machine went;
//! - **the ledger's verdict** for the product (lost updates, units beyond stock).

use crate::html::escape;
use crate::runner::Runner;
use anyhow::Context;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// How often `/health` is asked during a flood, each time on a new connection.
pub const HEALTH_EVERY: Duration = Duration::from_millis(200);

/// The flood's connections, over all instances of a setting (`wrk -c`).
pub const DEFAULT_CONNECTIONS: usize = 2000;

/// `wrk`'s scripts, written next to each other into a directory of their own: the
/// request (one product, every request id new) and the answers counted by status.
const DEDUCT_LUA: &str = include_str!("../../scripts/wrk/deduct.lua");
const COUNT_LUA: &str = include_str!("../../scripts/wrk/count.lua");

/// One setting of instances the flood is sent to.
pub struct Target<'a> {
    /// `no limit`, `--max-in-flight 32 --reject-hold-ms 1000`, ...
    pub mode: String,
    pub runner: &'a Runner,
}

/// What the flood did to one setting.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct FloodRow {
    pub strategy: String,
    pub mode: String,
    pub connections: usize,
    pub seconds: f64,
    pub capacity_sales_per_second: f64,
    /// Sales per second in the ledger over the steady window.
    pub goodput_sales_per_second: f64,
    /// Goodput over capacity.
    pub goodput_share: f64,
    /// Answers per second, every status, as `wrk` counted them.
    pub answers_per_second: f64,
    /// 429s (`overloaded`) per second.
    pub refused_per_second: f64,
    /// The admitted deductions' p99 (ms), from the instances' sale histogram; `None`
    /// when nothing sold.
    pub admitted_p99_ms: Option<f64>,
    pub health_max_ms: f64,
    pub health_failures: u64,
    /// Percent of one core over the run: the instances, the database, `wrk`.
    pub cpu_app_percent: f64,
    pub cpu_db_percent: f64,
    pub cpu_wrk_percent: f64,
    /// `wrk`'s connect, read, write and timeout errors (no HTTP answer).
    pub transport_errors: u64,
    pub lost_updates: i64,
    pub beyond_stock: i64,
}

impl FloodRow {
    /// Nothing oversold or lost.
    pub fn clean(&self) -> bool {
        self.lost_updates == 0 && self.beyond_stock == 0
    }
}

/// What one `wrk` printed (scripts/wrk/count.lua).
#[derive(Debug, Default)]
struct WrkOut {
    codes: BTreeMap<u16, u64>,
    /// Requests with no HTTP answer.
    errors: u64,
    /// How long it ran, as it reports it.
    seconds: f64,
}

fn parse_wrk(text: &str) -> WrkOut {
    let mut out = WrkOut::default();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["status", code, n] => {
                if let (Ok(code), Ok(n)) = (code.parse(), n.parse::<u64>()) {
                    *out.codes.entry(code).or_default() += n;
                }
            }
            ["errors", n] => out.errors += n.parse::<u64>().unwrap_or(0),
            ["seconds", s] => out.seconds = s.parse().unwrap_or(0.0),
            _ => {}
        }
    }
    out
}

/// The buckets of `stock_locks_sale_duration_seconds` for `strategy`, summed over the
/// instances: (upper bound in seconds, cumulative count).
async fn sale_buckets(runner: &Runner, strategy: &str) -> anyhow::Result<Vec<(f64, f64)>> {
    let mut summed: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    // Every instance at once: the scrapes are one moment, as far as they can be.
    let scrapes = futures::future::try_join_all(runner.bases.iter().map(|base| async move {
        (runner.client.get(format!("{base}/metrics")).send().await?)
            .text()
            .await
    }))
    .await?;
    for text in scrapes {
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))?;
        for sample in scrape.samples {
            if sample.metric != "stock_locks_sale_duration_seconds"
                || sample.labels.get("strategy") != Some(strategy)
            {
                continue;
            }
            if let prometheus_parse::Value::Histogram(buckets) = sample.value {
                for b in buckets {
                    let entry = summed
                        .entry(b.less_than.to_bits())
                        .or_insert((b.less_than, 0.0));
                    entry.1 += b.count;
                }
            }
        }
    }
    let mut buckets: Vec<(f64, f64)> = summed.into_values().collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(buckets)
}

/// The `q` quantile of the observations between two cumulative histograms, linear
/// inside its bucket (Prometheus' `histogram_quantile`); the last finite bound when it
/// falls in the `+Inf` bucket.
pub fn quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<f64> {
    let counts: Vec<(f64, f64)> = after
        .iter()
        .map(|&(le, n)| {
            let then = (before.iter().find(|(b, _)| *b == le)).map_or(0.0, |(_, n)| *n);
            (le, n - then)
        })
        .collect();
    let total = counts.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, n) in &counts {
        if n >= rank {
            if le.is_infinite() {
                return Some(lower.0);
            }
            let inside = (rank - lower.1) / (n - lower.1).max(1e-9);
            return Some(lower.0 + (le - lower.0) * inside);
        }
        lower = (le, n);
    }
    Some(lower.0)
}

/// `/health` on every base, every [`HEALTH_EVERY`], each on a new connection, until `stop`:
/// the slowest answer (ms) and the failures.
async fn probe_health(bases: Vec<String>, stop: tokio::sync::watch::Receiver<bool>) -> (f64, u64) {
    let Ok(client) = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
    else {
        return (f64::INFINITY, 1);
    };
    let (mut slowest, mut failures) = (0f64, 0u64);
    // Until told to stop, or the run it watches ended without saying so (an error).
    while !*stop.borrow() && stop.has_changed().is_ok() {
        for base in &bases {
            let started = Instant::now();
            let answer = client.get(format!("{base}/health")).send().await;
            slowest = slowest.max(started.elapsed().as_secs_f64() * 1000.0);
            if !answer.is_ok_and(|a| a.status().is_success()) {
                failures += 1;
            }
        }
        tokio::time::sleep(HEALTH_EVERY).await;
    }
    (slowest, failures)
}

/// The database's clock now (the ledger's `created_at` is written by it).
async fn db_now(runner: &Runner) -> anyhow::Result<String> {
    Ok(sqlx::query_scalar("SELECT CAST(NOW(6) AS CHAR)")
        .fetch_one(&runner.db)
        .await?)
}

/// CPU seconds of the `pids` together.
fn cpu(pids: &[u32]) -> f64 {
    pids.iter()
        .filter_map(|p| crate::cost::cpu_seconds(*p))
        .sum()
}

/// Floods each target in turn: `connections` over its instances for `seconds`, on the
/// product `product(i)` of its own.
pub async fn run(
    strategy: &str,
    capacity: f64,
    targets: &[Target<'_>],
    connections: usize,
    seconds: f64,
    product: &dyn Fn(usize) -> i64,
) -> anyhow::Result<Vec<FloodRow>> {
    let scripts = tempfile::tempdir().context("a directory for wrk's scripts")?;
    let lua = scripts.path().join("scripts/wrk");
    std::fs::create_dir_all(&lua)?;
    std::fs::write(lua.join("deduct.lua"), DEDUCT_LUA)?;
    std::fs::write(lua.join("count.lua"), COUNT_LUA)?;
    let mut rows = Vec::new();
    for (i, target) in targets.iter().enumerate() {
        let product = product(i);
        let row = one(
            strategy,
            capacity,
            target,
            connections,
            seconds,
            product,
            scripts.path(),
        )
        .await
        .with_context(|| format!("the flood on {}", target.mode))?;
        eprintln!(
            "flood: {strategy}, {}: {} connections, goodput {:.0} sales/s ({:.0}% of capacity), admitted p99 {}, {:.0} 429/s, /health max {:.1} ms, CPU app {:.0}% db {:.0}% wrk {:.0}%{}",
            row.mode,
            row.connections,
            row.goodput_sales_per_second,
            100.0 * row.goodput_share,
            row.admitted_p99_ms
                .map_or("-".into(), |ms| format!("{ms:.0} ms")),
            row.refused_per_second,
            row.health_max_ms,
            row.cpu_app_percent,
            row.cpu_db_percent,
            row.cpu_wrk_percent,
            if row.clean() {
                ""
            } else {
                ", LOST OR OVERSOLD"
            }
        );
        rows.push(row);
    }
    Ok(rows)
}

async fn one(
    strategy: &str,
    capacity: f64,
    target: &Target<'_>,
    connections: usize,
    seconds: f64,
    product: i64,
    scripts: &Path,
) -> anyhow::Result<FloodRow> {
    let runner = target.runner;
    let stock = 100_000_000;
    crate::engine::restock(
        &runner.client,
        &runner.bases[0],
        &runner.admin_token,
        product,
        stock,
        0,
    )
    .await?;
    let (apps, dbs): (Vec<_>, Vec<_>) = runner
        .processes
        .iter()
        .filter(|(name, _)| name.starts_with("stock-app") || name == "mariadb")
        .partition(|(name, _)| name.starts_with("stock-app"));
    let apps: Vec<u32> = apps.iter().map(|(_, pid)| *pid).collect();
    let dbs: Vec<u32> = dbs.iter().map(|(_, pid)| *pid).collect();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let health = tokio::spawn(probe_health(runner.bases.clone(), stopped));
    // One wrk per instance, the connections shared out, all at once.
    let per_instance = connections.div_ceil(runner.bases.len()).max(1);
    let run_for = seconds.ceil();
    let wrks = start_wrks(runner, strategy, product, per_instance, run_for, scripts)?;
    let wrk_pids: Vec<u32> = wrks.iter().filter_map(|c| c.id()).collect();
    // The steady window, every figure of the row but the answer counts over the same
    // one: from a third of the run until just before wrk stops (all still sending).
    let started = Instant::now();
    let window = |at: f64| started + Duration::from_secs_f64(at);
    // At each end: the CPU (instant), the database's clock, the histograms (together).
    tokio::time::sleep_until(window(run_for / 3.0).into()).await;
    let (app0, db0, wrk0) = (cpu(&apps), cpu(&dbs), cpu(&wrk_pids));
    let opened = Instant::now();
    let (from, before) = tokio::try_join!(db_now(runner), sale_buckets(runner, strategy))?;
    tokio::time::sleep_until(window(run_for - 0.5).into()).await;
    let (app1, db1, wrk1) = (cpu(&apps), cpu(&dbs), cpu(&wrk_pids));
    let span = opened.elapsed().as_secs_f64();
    let (to, after) = tokio::try_join!(db_now(runner), sale_buckets(runner, strategy))?;
    let outs = finish_wrks(wrks).await?;
    let _ = stop.send(true);
    let (health_max_ms, health_failures) = health.await.unwrap_or((f64::INFINITY, 1));
    let (sold, window_s) = ledger_sales(runner, product, &from, &to).await?;
    let verdict = crate::verify::stock(&runner.db, &[product]).await?;
    // The answers over each wrk's own run (its duration as it reports it).
    let per_second = |count: &dyn Fn(&WrkOut) -> u64| -> f64 {
        outs.iter()
            .map(|o| count(o) as f64 / o.seconds.max(1e-3))
            .sum()
    };
    let goodput = sold as f64 / window_s.max(1e-3);
    let percent = |used: f64| 100.0 * used / span.max(1e-3);
    Ok(FloodRow {
        strategy: strategy.into(),
        mode: target.mode.clone(),
        connections: per_instance * runner.bases.len(),
        seconds: run_for,
        capacity_sales_per_second: capacity,
        goodput_sales_per_second: goodput,
        goodput_share: goodput / capacity.max(1e-9),
        answers_per_second: per_second(&|o| o.codes.values().sum()),
        refused_per_second: per_second(&|o| o.codes.get(&429).copied().unwrap_or(0)),
        admitted_p99_ms: quantile(&before, &after, 0.99).map(|s| s * 1000.0),
        health_max_ms,
        health_failures,
        cpu_app_percent: percent(app1 - app0),
        cpu_db_percent: percent(db1 - db0),
        cpu_wrk_percent: percent(wrk1 - wrk0),
        transport_errors: outs.iter().map(|o| o.errors).sum(),
        lost_updates: verdict.lost_updates,
        beyond_stock: verdict.beyond_stock,
    })
}

/// Starts one `wrk` per instance, `per_instance` connections each, sending
/// `strategy`'s deductions of `product` for `run_for` seconds.
fn start_wrks(
    runner: &Runner,
    strategy: &str,
    product: i64,
    per_instance: usize,
    run_for: f64,
    scripts: &Path,
) -> anyhow::Result<Vec<tokio::process::Child>> {
    let mut wrks = Vec::new();
    for (n, base) in runner.bases.iter().enumerate() {
        let child = tokio::process::Command::new("wrk")
            .current_dir(scripts)
            .args(["-t1", &format!("-c{per_instance}")])
            .arg(format!("-d{run_for}s"))
            .args([
                "--timeout",
                "10s",
                "-s",
                "scripts/wrk/count.lua",
                base,
                "--",
            ])
            .args([
                strategy,
                &product.to_string(),
                &format!("flood{product}-{n}"),
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting wrk (Debian's `wrk`: ./scripts/install-deps demo)")?;
        wrks.push(child);
    }
    Ok(wrks)
}

/// Checks that every `wrk` still sent when the window closed, then waits for each
/// and reads its answer counts.
async fn finish_wrks(mut wrks: Vec<tokio::process::Child>) -> anyhow::Result<Vec<WrkOut>> {
    // The window closed while every wrk still sent.
    for child in &mut wrks {
        anyhow::ensure!(
            child.try_wait()?.is_none(),
            "a wrk stopped before the flood's window closed: its figures would include the drain"
        );
    }
    let mut outs = Vec::new();
    for child in wrks {
        let out = child.wait_with_output().await?;
        anyhow::ensure!(
            out.status.success(),
            "wrk failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        outs.push(parse_wrk(&String::from_utf8_lossy(&out.stdout)));
    }
    Ok(outs)
}

/// The units the ledger holds for `product` between the database times `from` and
/// `to`, and that window's length in seconds (the database's clock).
async fn ledger_sales(
    runner: &Runner,
    product: i64,
    from: &str,
    to: &str,
) -> anyhow::Result<(i64, f64)> {
    let (sold, window_s): (i64, f64) = sqlx::query_as(
        "SELECT CAST(COALESCE(SUM(quantity), 0) AS SIGNED),
                TIMESTAMPDIFF(MICROSECOND, ?, ?) / 1e6
         FROM ledger WHERE product_id = ? AND created_at >= ? AND created_at < ?",
    )
    .bind(from)
    .bind(to)
    .bind(product)
    .bind(from)
    .bind(to)
    .fetch_one(&runner.db)
    .await?;
    Ok((sold, window_s))
}

/// The table's columns: heading and width in the text table.
pub(crate) const COLUMNS: [(&str, usize); 15] = [
    ("strategy", 12),
    ("mode", 40),
    ("conns", 5),
    ("capacity/s", 10),
    ("goodput/s", 9),
    ("share", 6),
    ("p99 adm ms", 10),
    ("429/s", 7),
    ("answers/s", 9),
    ("health ms", 9),
    ("app %", 5),
    ("db %", 5),
    ("wrk %", 5),
    ("transport", 9),
    ("lost", 5),
];

impl FloodRow {
    /// One row's cells, as both tables show them.
    fn cells(&self) -> Vec<String> {
        vec![
            self.strategy.clone(),
            self.mode.clone(),
            self.connections.to_string(),
            format!("{:.0}", self.capacity_sales_per_second),
            format!("{:.0}", self.goodput_sales_per_second),
            format!("{:.0}%", 100.0 * self.goodput_share),
            self.admitted_p99_ms
                .map_or("-".into(), |ms| format!("{ms:.0}")),
            format!("{:.0}", self.refused_per_second),
            format!("{:.0}", self.answers_per_second),
            format!(
                "{:.1}{}",
                self.health_max_ms,
                if self.health_failures > 0 {
                    " (failed)"
                } else {
                    ""
                }
            ),
            format!("{:.0}", self.cpu_app_percent),
            format!("{:.0}", self.cpu_db_percent),
            format!("{:.0}", self.cpu_wrk_percent),
            self.transport_errors.to_string(),
            (self.lost_updates + self.beyond_stock).to_string(),
        ]
    }
}

/// The line under the table: what it counts.
pub fn counts() -> String {
    format!(
        "wrk, closed loop, never backing off (a 429 is followed at once by the next request), the connections shared over the setting's instances; capacity = the polite rows' capacity; goodput = sales/s in the ledger over the steady window (from a third of the run until just before wrk stops); p99 adm = the sales' p99 over that window from the instances' sale histogram (inside its bucket, as histogram_quantile); 429/s, answers/s = wrk's, over its whole run; health ms = the slowest /health, polled every {} ms on a new connection to each flooded instance; app, db, wrk = CPU in percent of one core over the window (the instances together, the database, wrk); transport = requests with no HTTP answer; lost = lost updates + units beyond stock, from the ledger",
        HEALTH_EVERY.as_millis()
    )
}

/// Prints the flood's table.
pub fn print_table(rows: &[FloodRow]) {
    if rows.is_empty() {
        return;
    }
    println!();
    println!("Past capacity, a client that does not back off: wrk's flood on each setting");
    crate::report::print_rows(&COLUMNS, rows.iter().map(FloodRow::cells));
    println!("{}", counts());
}

/// The flood's table in the report.
pub fn html(rows: &[FloodRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut html = String::from(
        "<h3>Past capacity, a client that does not back off</h3><p>The same settings, \
         flooded by <code>wrk</code>: closed loop, each answer followed at once by the next \
         request, a 429's Retry-After ignored. A refusal answered at once comes straight \
         back; a refusal held (<code>--reject-hold-ms</code>) comes back only after its \
         hold.</p>",
    );
    let _ = write!(html, "<p><small>{}</small></p>", escape(&counts()));
    html.push_str(&crate::html::html_rows(
        &COLUMNS,
        rows.iter().map(|r| (r.cells(), r.clean())),
    ));
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_output_is_read_by_status() {
        let out = parse_wrk("status 200 10\nstatus 429 5\nseconds 6.001\np50 1.0\nerrors 2\n");
        assert_eq!(out.seconds, 6.001);
        assert_eq!(out.codes.get(&200), Some(&10));
        assert_eq!(out.codes.get(&429), Some(&5));
        assert_eq!(out.errors, 2);
    }

    /// The quantile of what was observed between two scrapes, linear in its bucket.
    #[test]
    fn the_p99_comes_from_the_buckets_between_two_scrapes() {
        let inf = f64::INFINITY;
        let before = [(0.1, 50.0), (1.0, 50.0), (inf, 50.0)];
        // 100 more: 90 under 0.1 s, 10 between 0.1 and 1 s.
        let after = [(0.1, 140.0), (1.0, 150.0), (inf, 150.0)];
        let p99 = quantile(&before, &after, 0.99).unwrap();
        assert!((p99 - 0.91).abs() < 1e-9, "{p99}");
        let p50 = quantile(&before, &after, 0.5).unwrap();
        assert!((p50 - 0.1 * 50.0 / 90.0).abs() < 1e-9, "{p50}");
        assert_eq!(quantile(&after, &after, 0.99), None, "nothing observed");
        // Past the last finite bound: that bound.
        let slow = [(0.1, 50.0), (1.0, 50.0), (inf, 60.0)];
        assert_eq!(quantile(&before, &slow, 0.99), Some(1.0));
    }
}
