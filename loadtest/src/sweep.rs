//! `loadtest sweep`: how cost grows as load grows. Every strategy at concurrency 1, 4,
//! 16, 64 and 256, on one hot product and spread over 100 products; throughput, p99
//! and (optimistic) transactions per sale for each cell, drawn as one line per
//! strategy in the report.
//!
//! # How many requests a cell gets
//! `max(1000, 8 × concurrency)`, times `--scale`. Eight waves of the concurrency let
//! the closed loop reach its steady state (the first and last wave are ramps); 1000 at
//! least keeps ten samples above the p99 at low concurrency. Stock is never the limit
//! (each product holds as many units as the cell has requests), so no answer is "sold
//! out": a request either deducts or is refused by the strategy itself (`busy`,
//! `lock_lost`). That is why the charts show **sales per second** (200 answers) next
//! to p99: `fence-only` answers 2000 requests per second on a hot row and sells almost
//! nothing. Measured on 2 cores (release): the whole default sweep, 10 strategies ×
//! 5 × 2 = 100 cells, 120,960 requests, in about 3 minutes; figures in the README.

use crate::report::{Expect, Row};
use crate::{Plan, Runner};
use serde::Serialize;

/// The concurrencies of the sweep (requests in flight, closed loop).
pub const CONCURRENCIES: [usize; 5] = [1, 4, 16, 64, 256];
/// The product layouts: one hot row, and the load spread over 100 rows.
pub const PRODUCTS: [usize; 2] = [1, 100];

/// Requests in one cell: eight waves of the concurrency, at least 1000, times `scale`
/// (at least one wave).
pub fn requests_for(concurrency: usize, scale: f64) -> usize {
    let base = (8 * concurrency).max(1000) as f64;
    ((base * scale).round() as usize).max(concurrency)
}

/// The report section of a layout (`sweep: 1 product`, `sweep: 100 products`).
pub fn section(products: usize) -> String {
    format!(
        "sweep: {products} product{}",
        if products == 1 { "" } else { "s" }
    )
}

/// The sweep's shape, stored in the report (`Report.sweep`) next to its rows.
#[derive(Debug, Clone, Serialize)]
pub struct SweepInfo {
    pub concurrencies: Vec<usize>,
    pub products: Vec<usize>,
    /// How the request count of a cell was chosen.
    pub requests_rule: String,
    pub scale: f64,
    /// Wall time of the whole sweep, servers included.
    pub seconds: f64,
}

/// What to sweep.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub strategies: Vec<(String, bool)>,
    pub concurrencies: Vec<usize>,
    pub products: Vec<usize>,
    pub scale: f64,
}

impl Sweep {
    pub fn cells(&self) -> usize {
        self.strategies.len() * self.concurrencies.len() * self.products.len()
    }

    pub fn total_requests(&self) -> usize {
        self.strategies.len()
            * self.products.len()
            * self
                .concurrencies
                .iter()
                .map(|&c| requests_for(c, self.scale))
                .sum::<usize>()
    }

    /// Runs every cell, layout by layout, strategy by strategy, concurrency rising;
    /// `first_product` gives each cell product ids of its own.
    pub async fn run(
        &self,
        runner: &Runner,
        first_product: impl Fn(usize) -> i64,
    ) -> anyhow::Result<Vec<Row>> {
        let mut rows = Vec::new();
        let mut cell = 0;
        for &products in &self.products {
            for (strategy, safe) in &self.strategies {
                for &concurrency in &self.concurrencies {
                    let requests = requests_for(concurrency, self.scale);
                    let first = first_product(cell);
                    cell += 1;
                    let plan = Plan {
                        section: section(products),
                        strategy: strategy.clone(),
                        products: (0..products as i64).map(|i| first + i).collect(),
                        // Never sold out: every request can be a deduction.
                        stock: requests as i64,
                        requests,
                        concurrency,
                        rate: None,
                        quantity: 1,
                        multi_item_share: 0.0,
                        request_hold_ms: None,
                        server_hold_ms: 0,
                        warmup: concurrency.max(20),
                        expect: if *safe { Expect::Safe } else { Expect::Either },
                    };
                    let row = runner.run(&plan).await?;
                    eprintln!(
                        "sweep: [{cell}/{}] {strategy}, {products} product(s), concurrency {concurrency}: \
                         {requests} requests, {:.0} sales/s ({:.0} answers/s), p99 {:.1} ms{}",
                        self.cells(),
                        sales_per_second(&row),
                        row.throughput_rps,
                        row.latency_ms.p99,
                        if strategy == "optimistic" {
                            format!(", {:.2} tries/sale", row.attempts_per_success)
                        } else {
                            String::new()
                        }
                    );
                    rows.push(row);
                }
            }
        }
        Ok(rows)
    }
}

/// The strategies of the sweep's rows, in the order they ran.
pub fn strategies(rows: &[Row]) -> Vec<&str> {
    let mut strategies: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.section.starts_with("sweep: ")) {
        if !strategies.contains(&r.strategy.as_str()) {
            strategies.push(&r.strategy);
        }
    }
    strategies
}

/// The cell of `strategy` at `concurrency` in `section`, if it ran.
pub fn cell<'a>(
    rows: &'a [Row],
    section: &str,
    strategy: &str,
    concurrency: usize,
) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.section == section && r.strategy == strategy && r.concurrency == concurrency)
}

/// Successful deductions (200 answers) per second.
pub fn sales_per_second(row: &Row) -> f64 {
    let sold = row.responses.get("200").copied().unwrap_or(0) as f64;
    if row.seconds > 0.0 {
        sold / row.seconds
    } else {
        0.0
    }
}

/// The share of a cell's answers that were sales, in percent.
pub fn sold_percent(row: &Row) -> f64 {
    let sold = row.responses.get("200").copied().unwrap_or(0) as f64;
    100.0 * sold / (row.requests.max(1) as f64)
}

/// The sweep as text: for each layout, one line per strategy, req/s and p99 per
/// concurrency.
pub fn print_tables(info: &SweepInfo, rows: &[Row]) {
    for &products in &info.products {
        let section = section(products);
        println!(
            "\n{section}: sales/s (p99 ms) by concurrency; * = under 99% of answers were sales"
        );
        let mut header = format!("{:<12}", "strategy");
        for c in &info.concurrencies {
            header.push_str(&format!(" {:>16}", c));
        }
        println!("{header}");
        for strategy in strategies(rows) {
            let mut line = format!("{strategy:<12}");
            for &c in &info.concurrencies {
                line.push_str(&match cell(rows, &section, strategy, c) {
                    Some(r) => format!(
                        " {:>16}",
                        format!(
                            "{}{:.0} ({:.1})",
                            if sold_percent(r) < 99.0 { "*" } else { "" },
                            sales_per_second(r),
                            r.latency_ms.p99
                        )
                    ),
                    None => format!(" {:>16}", "-"),
                });
            }
            println!("{line}");
        }
        let optimistic: Vec<String> = info
            .concurrencies
            .iter()
            .filter_map(|&c| {
                cell(rows, &section, "optimistic", c)
                    .map(|r| format!("{c}: {:.2}", r.attempts_per_success))
            })
            .collect();
        if !optimistic.is_empty() {
            println!(
                "optimistic transactions per sale: {}",
                optimistic.join(", ")
            );
        }
    }
}
