//! What every data page says of a report's rows ([`Row`]): the ledger's verdict, the
//! rate with its spread, the load's shape, and the load table the demo's sections
//! share.

use super::{banner, linked, num, table};
use crate::report::{Expect, Row};
use std::fmt::Write as _;

/// What a throughput table's figure counts, under it.
pub const SALES_LEGEND: &str = "sales/s = deductions answered 200 (one unit each) per second over the run's steady window (after the first wave's answers, until the last request was sent); q1–q3 = its spread, the interquartile range over ten slices of the window (of every round's window together, where the setup was measured in rounds, strategy after strategy, round after round).";

pub const THROUGHPUT_LEGEND: &str = "sold = the ledger's sum; lost = sales the stock row never saw (ledger − (stock − left)); beyond = sold past the stock; tries = transactions per sale.";

pub const LEGEND: &str = "sold = the ledger's sum; lost = sales the stock row never saw (ledger − (stock − left)); beyond = sold past the stock; tries = transactions per sale; sold out (by the fast path) = 409 answers, and of them those the sold-out fast path gave without running the strategy.";

/// Whether the ledger says a row's run lost updates or sold beyond its stock.
pub fn oversold(row: &Row) -> bool {
    row.verdict.beyond_stock > 0 || row.verdict.lost_updates > 0
}

/// What the ledger says of a row: `safe`, `oversold`, `oversold, as expected`.
pub fn verdict(row: &Row) -> String {
    let mut out = match (oversold(row), row.expect) {
        (true, Expect::Oversells) => "oversold, as expected".to_string(),
        (true, _) => "oversold".to_string(),
        (false, _) => "safe".to_string(),
    };
    if row.verdict.missing_acknowledged > 0 {
        out.push_str(", acknowledged sales missing");
    }
    if !row.as_expected {
        out.push_str(" (**not as expected**)");
    }
    out
}

/// A row's count of one kind of answer (`409`), `–` when it had none of that kind.
fn answers(row: &Row, kind: &str) -> String {
    row.responses
        .get(kind)
        .map_or_else(|| num(f64::NAN), u64::to_string)
}

/// What the rows' figures were taken over ([`crate::rate::windows_text`]): `a 2.3 s
/// steady window`, `steady windows of 1.7–2.4 s`, `3 rounds' steady windows, 6.9 s in
/// all`.
pub fn window_text(rows: &[&Row]) -> String {
    crate::rate::windows_text(&rows.iter().map(|r| &r.sales).collect::<Vec<_>>())
}

/// Whether a row is a timed throughput run (its figure is sales/s): it says so
/// (`timed_s`). A run of a fixed number of requests whose lost updates left stock
/// over is not one.
pub fn timed(row: &Row) -> bool {
    row.timed_s.is_some()
}

/// The load rows' common columns: sales/s with its spread where the stock never
/// limits (`throughput`), what was sold and refused where it runs out; the rows of
/// `strategies` linked to their chapters (the others, such as the baseline, have none).
pub fn load_table(rows: &[&Row], strategies: &[String], throughput: bool) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut cells = vec![if strategies.contains(&r.strategy) {
                linked(&r.strategy)
            } else {
                format!("`{}`", r.strategy)
            }];
            if throughput {
                cells.push(r.sales.text());
            }
            cells.extend([
                num(r.latency_ms.p50),
                num(r.latency_ms.p99),
                r.verdict.sold.to_string(),
            ]);
            if !throughput {
                cells.extend([
                    r.verdict.remaining.to_string(),
                    format!("{} ({})", answers(r, "409"), r.refused_by_fast_path),
                ]);
            }
            cells.extend([
                r.verdict.lost_updates.to_string(),
                r.verdict.beyond_stock.to_string(),
                num(r.attempts_per_success),
                verdict(r),
            ]);
            cells
        })
        .collect();
    let mut headers = vec!["strategy"];
    if throughput {
        headers.push(">sales/s (q1–q3)");
    }
    headers.extend([">p50 ms", ">p99 ms", ">sold"]);
    if !throughput {
        headers.extend([">left", ">sold out (by the fast path)"]);
    }
    headers.extend([">lost", ">beyond", ">tries", "verdict"]);
    table(&headers, &body)
}

/// The shape of a section's load, from its first row (the others share it): timed
/// with stock never the limit (and every row's window), or a number of requests at a
/// stock that runs out.
pub fn load_shape(rows: &[&Row]) -> String {
    let Some(row) = rows.first() else {
        return String::new();
    };
    let products = match row.products {
        1 => "one hot product".to_string(),
        n => format!("{n} products"),
    };
    let instances = match row.instances {
        1 => "on 1 instance".to_string(),
        n => format!("over {n} instances"),
    };
    if rows.iter().any(|r| timed(r)) {
        format!(
            "{products}, {} in flight {instances}, stock never the limit; sales/s over {}",
            row.concurrency,
            window_text(rows),
        )
    } else {
        format!(
            "{products}, {} requests per strategy, {} in flight {instances}, stock {}",
            row.requests, row.concurrency, row.verdict.initial,
        )
    }
}

/// A section's page of rows from `source`: the load's shape, `title` and the rows'
/// hold, then the load table ([`load_table`]) and its legend.
pub fn section_page(
    source: &str,
    rows: &[&Row],
    strategies: &[String],
    title: &str,
    throughput: bool,
) -> String {
    let hold = rows.first().map_or(0, |r| r.hold_ms);
    let mut page = banner(source);
    let _ = writeln!(
        page,
        "*{}; {title}{}.*\n",
        load_shape(rows),
        if hold > 0 {
            format!(": {hold} ms")
        } else {
            String::new()
        }
    );
    page.push_str(&load_table(rows, strategies, throughput));
    if throughput {
        let _ = writeln!(page, "\n{SALES_LEGEND} {THROUGHPUT_LEGEND}");
    } else {
        let _ = writeln!(page, "\n{LEGEND}");
    }
    page
}

/// Where the time goes in `title` (a section), from `source`: the service's phases
/// per deduction, from /metrics; `None` when no row has them.
pub fn time_split_page(source: &str, rows: &[&Row], title: &str) -> Option<String> {
    let split: Vec<(&Row, &crate::timing::TimeSplit)> = rows
        .iter()
        .filter_map(|r| Some((*r, r.time_split.as_ref()?)))
        .collect();
    if split.is_empty() {
        return None;
    }
    let mut page = banner(source);
    let _ = writeln!(
        page,
        "*Mean milliseconds per deduction in {title}; the transaction includes the wait for a pooled connection.*\n"
    );
    let body: Vec<Vec<String>> = split
        .iter()
        .map(|(r, t)| {
            let total: f64 = [
                t.lock_ms,
                t.transaction_ms,
                t.release_ms,
                t.rest_ms,
                t.outside_ms,
            ]
            .iter()
            .sum();
            vec![
                linked(&r.strategy),
                num(t.lock_ms),
                num(t.pool_wait_ms),
                num(t.transaction_ms - t.pool_wait_ms),
                num(t.release_ms),
                num(t.rest_ms + t.outside_ms),
                num(total),
            ]
        })
        .collect();
    page.push_str(&table(
        &[
            "strategy",
            ">lock wait",
            ">pool wait",
            ">rest of the transaction",
            ">release",
            ">handler rest + outside",
            ">total",
        ],
        &body,
    ));
    Some(page)
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::{Value, json};

    /// A row as the report writes it: one strategy's timed run in `section`, selling
    /// `per_second` (its spread 1200–1250), nothing lost.
    pub(crate) fn row(section: &str, strategy: &str, per_second: f64) -> Value {
        json!({"section": section, "strategy": strategy, "instances": 2, "products": 1,
            "hold_ms": 0, "requests": 10, "concurrency": 2, "seconds": 2.5,
            "sales": {"per_second": per_second, "q1": 1200.0, "q3": 1250.0, "sales": 5,
                "from_s": 0.5, "to_s": 2.5},
            "answers_per_second": 4.0, "refused_by_fast_path": 0,
            "latency_ms": {"p50": 1.0, "p90": 1.5, "p99": 2.0, "max": 3.0},
            "responses": {"200": 10}, "attempts_per_success": 1.0,
            "verdict": {"initial": 1000000, "remaining": 999995, "sold": 5,
                "lost_updates": 0, "beyond_stock": 0, "missing_acknowledged": 0,
                "outcome_unknown": 0},
            "expect": "safe", "as_expected": true, "timed_s": 2.5})
    }

    /// A report as `loadtest` writes it, of these rows, its strategies theirs.
    pub(crate) fn report(results: Vec<Value>) -> Value {
        let mut names: Vec<&str> = results
            .iter()
            .filter_map(|r| r["strategy"].as_str())
            .collect();
        names.dedup();
        let strategies: Vec<Value> = names
            .iter()
            .enumerate()
            .map(|(order, name)| {
                json!({"name": name, "family": "database", "description": "",
                    "when_to_use": "", "explanation": "", "backend": "database",
                    "safe_across_instances": true, "fencing": "none", "order": order,
                    "colour": "#000000"})
            })
            .collect();
        json!({"version": crate::report::SCHEMA_VERSION, "generated_at": 1_795_588_081_u64,
            "results": results, "claims": [], "strategies": strategies})
    }
}
