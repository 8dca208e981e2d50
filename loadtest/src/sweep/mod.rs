//! `loadtest sweep`: how cost grows as load grows. Every strategy at concurrency 1, 4,
//! 16, 64 and 256, on one hot product and spread over 100 products; sales per second
//! with its spread, p99 and (a compare-and-set's) transactions per sale for each cell,
//! drawn as one line per strategy in the report.
//!
//! # How long a cell runs
//! Each cell is timed ([`crate::plan::THROUGHPUT_SECONDS`] by default): a closed loop sends
//! for that long after one warm-up round, and its figure is the sales per second of
//! its steady window ([`crate::rate`]: the first wave and the drain left out). Stock is
//! never the limit, so no answer is "sold out": a request either deducts or is refused
//! by the strategy itself (`busy`, `lock_lost`). That is why the charts show **sales
//! per second** (200 answers) next to p99: the fence alone answers thousands of
//! requests per second on a hot row and sells almost nothing.
//!
//! # One setup, one figure
//! A cell whose setup another run already measured (the demo's throughput section
//! and flash sale are the sweep's 64 and 256 in flight on one product) can be taken
//! from that run's report (`--reuse FILE`) instead of measured again; the cell says
//! where it was measured ([`reuse`]).

pub mod page;
pub mod run;

use crate::catalogue::Catalogue;
use crate::html::{escape, line_chart};
use crate::plan::Plan;
use crate::report::{Expect, Part, Row};
use crate::runner::Runner;
use crate::section::Section;
pub use crate::section::ms;
use plotters::style::RGBColor;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;
use stock_wire::Trait;

/// The concurrencies of the sweep (requests in flight, closed loop).
pub const CONCURRENCIES: [usize; 5] = [1, 4, 16, 64, 256];
/// The product layouts: one hot row, and the load spread over 100 rows.
pub const PRODUCTS: [usize; 2] = [1, 100];

/// The report section of a layout (`sweep: 1 product`, `sweep: 100 products`), at a
/// round-trip time when the servers ran at a distance (`sweep: 1 product, RTT 2 ms`).
pub fn section(products: usize, rtt_ms: Option<f64>) -> Section {
    Section::Sweep { products, rtt_ms }
}

/// One strategy's round trips per request, on the success path and on a refusal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoundTripCount {
    pub strategy: String,
    /// Counted by the proxies: turns per request by kind of server, every request a sale.
    pub sale: BTreeMap<String, f64>,
    /// The same, every request refused (sold out).
    pub refusal: BTreeMap<String, f64>,
    /// Round trips waited for one after the other on a sale: the p50 latency at the
    /// largest RTT minus the p50 at 0, over that RTT.
    pub sequential_sale: f64,
    /// The same on a refusal.
    pub sequential_refusal: f64,
}

/// The sweep's shape, stored in the report (`Report.sweep`) next to its rows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepInfo {
    pub concurrencies: Vec<usize>,
    pub products: Vec<usize>,
    /// How long each cell sent, in seconds, and how its figure was taken.
    pub cell_seconds: f64,
    pub requests_rule: String,
    /// Wall time of the whole sweep, servers included.
    pub seconds: f64,
    /// The round-trip times the servers were put behind (`--rtt-ms`), one pass each;
    /// empty on loopback.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rtts_ms: Vec<f64>,
    /// Each strategy's round trips per request on the success path and on a refusal
    /// (with `--rtt-ms`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub round_trips: Vec<RoundTripCount>,
}

impl SweepInfo {
    /// Every section of the sweep: each layout, at each round-trip time.
    pub fn sections(&self) -> Vec<Section> {
        let rtts: Vec<Option<f64>> = if self.rtts_ms.is_empty() {
            vec![None]
        } else {
            self.rtts_ms.iter().copied().map(Some).collect()
        };
        self.products
            .iter()
            .flat_map(|&p| rtts.iter().map(move |&rtt| section(p, rtt)))
            .collect()
    }
}

/// The key the sweep's part is stored under in the JSON report.
pub const KEY: &str = "sweep";

/// What `loadtest sweep` adds to its report's rows, as the book reads it back: the
/// sweep's shape (at a distance, its round trips).
#[derive(Debug, Clone, Deserialize)]
pub struct SweepParts {
    pub sweep: SweepInfo,
}

/// What to sweep.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub strategies: Vec<(String, bool)>,
    pub concurrencies: Vec<usize>,
    pub products: Vec<usize>,
    /// How long each cell sends.
    pub seconds: f64,
    /// The round-trip time the servers are behind for this pass, if at a distance.
    pub rtt_ms: Option<f64>,
    /// Cells measured by another run of the same setup ([`reuse`]), taken as they are.
    pub reused: Vec<Row>,
}

impl Sweep {
    pub fn cells(&self) -> usize {
        self.strategies.len() * self.concurrencies.len() * self.products.len()
    }

    /// Runs every cell, layout by layout, strategy by strategy, concurrency rising;
    /// `first_product` gives each cell product ids of its own.
    pub async fn run(
        &self,
        runner: &Runner,
        first_product: impl Fn(usize) -> i64,
    ) -> anyhow::Result<Vec<Row>> {
        let catalogue = runner.strategies().await?;
        let mut rows = Vec::new();
        let mut cell = 0;
        for &products in &self.products {
            for (strategy, safe) in &self.strategies {
                for &concurrency in &self.concurrencies {
                    let first = first_product(cell);
                    cell += 1;
                    let section = section(products, self.rtt_ms);
                    let setup = Cell {
                        strategy,
                        products,
                        concurrency,
                        seconds: self.seconds,
                        rtt_ms: self.rtt_ms,
                    };
                    if let Some(row) = reuse(&self.reused, setup) {
                        eprintln!(
                            "sweep: [{cell}/{}] {strategy}, {products} product(s), concurrency {concurrency}: \
                             {} sales/s, measured in {}",
                            self.cells(),
                            row.sales.text(),
                            row.measured_in.as_deref().unwrap_or("another run")
                        );
                        rows.push(Row { section, ..row });
                        continue;
                    }
                    // Never sold out: every request can be a deduction.
                    let plan = Plan {
                        warmup: concurrency.max(20),
                        expect: if *safe { Expect::Safe } else { Expect::Either },
                        ..Plan::throughput(
                            section.clone(),
                            strategy,
                            (0..products as i64).map(|i| first + i).collect(),
                            concurrency,
                            self.seconds,
                        )
                    };
                    let row = runner.run(&plan).await?;
                    eprintln!(
                        "sweep: [{cell}/{}] {strategy}, {products} product(s), concurrency {concurrency}{}: \
                         {} requests, {} sales/s ({:.0} answers/s), p99 {:.1} ms{}",
                        self.cells(),
                        self.rtt_ms
                            .map_or(String::new(), |rtt| format!(", RTT {} ms", ms(rtt))),
                        row.requests,
                        row.sales.text(),
                        row.answers_per_second,
                        row.latency_ms.p99,
                        if catalogue.has(strategy, Trait::CompareAndSet) {
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
    for r in rows
        .iter()
        .filter(|r| matches!(r.section, Section::Sweep { .. }))
    {
        if !strategies.contains(&r.strategy.as_str()) {
            strategies.push(&r.strategy);
        }
    }
    strategies
}

/// The cell of `strategy` at `concurrency` in `section`, if it ran.
pub fn cell<'a>(
    rows: &'a [Row],
    section: &Section,
    strategy: &str,
    concurrency: usize,
) -> Option<&'a Row> {
    rows.iter()
        .find(|r| &r.section == section && r.strategy == strategy && r.concurrency == concurrency)
}

/// Sales per second over the cell's steady window ([`crate::rate`]).
pub fn sales_per_second(row: &Row) -> f64 {
    row.sales.per_second
}

/// Whether a section of another run holds throughput cells (one hot product, stock
/// never the limit, nothing held): the demo's throughput section, its flash sale and
/// its throughput section at a distance (`throughput, RTT 2 ms`).
pub fn reusable_section(section: &Section) -> bool {
    matches!(
        section,
        Section::Throughput | Section::FlashSale | Section::Far { .. }
    )
}

/// The setup of one sweep cell, as another run's row must match it to be reused.
#[derive(Debug, Clone, Copy)]
pub struct Cell<'a> {
    pub strategy: &'a str,
    pub products: usize,
    pub concurrency: usize,
    /// Each cell sends this long (closed loop, one unit per deduction).
    pub seconds: f64,
    /// The servers' round-trip time through the proxies; `None`: loopback, no proxy.
    pub rtt_ms: Option<f64>,
}

/// A row of another run measuring the sweep's `cell` (the same strategy, products,
/// concurrency, time and distance; a closed loop of one unit per deduction over 2
/// instances, stock never the limit, nothing held), if `rows` has one.
pub fn reuse(rows: &[Row], cell: Cell) -> Option<Row> {
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
    rows.iter()
        .find(|r| {
            r.strategy == cell.strategy
                && r.products == cell.products
                && r.concurrency == cell.concurrency
                && r.instances == 2
                && r.hold_ms == 0
                && r.rate.is_none()
                && r.quantity == 1
                && r.timed_s.is_some_and(|s| close(s, cell.seconds))
                && match (r.rtt_ms, cell.rtt_ms) {
                    (None, None) => true,
                    (Some(a), Some(b)) => close(a, b),
                    _ => false,
                }
                && (reusable_section(&r.section)
                    || r.section == section(cell.products, cell.rtt_ms))
        })
        .map(|r| Row {
            measured_in: Some(
                r.measured_in
                    .clone()
                    .unwrap_or_else(|| r.section.to_string()),
            ),
            ..r.clone()
        })
}

/// The share of a cell's answers that were sales, in percent.
pub fn sold_percent(row: &Row) -> f64 {
    let sold = row.responses.get("200").copied().unwrap_or(0) as f64;
    100.0 * sold / (row.requests.max(1) as f64)
}

/// The sweep as text: for each layout, one line per strategy, sales/s and p99 per
/// concurrency.
pub fn print_tables(info: &SweepInfo, rows: &[Row], catalogue: &Catalogue) {
    for section in info.sections() {
        println!(
            "\n{section}: sales/s (p99 ms) by concurrency; * = under 99% of answers were sales; † = the demo's figure for the same setup, taken from its report (--reuse), not measured twice"
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
                            "{}{}{} ({:.1})",
                            if sold_percent(r) < 99.0 { "*" } else { "" },
                            crate::rate::round(sales_per_second(r)),
                            if r.measured_in.is_some() { "†" } else { "" },
                            r.latency_ms.p99
                        )
                    ),
                    None => format!(" {:>16}", "-"),
                });
            }
            println!("{line}");
        }
        // A compare-and-set throws a transaction away at every conflict.
        for cas in catalogue.with(Trait::CompareAndSet) {
            let tries: Vec<String> = info
                .concurrencies
                .iter()
                .filter_map(|&c| {
                    cell(rows, &section, &cas.name, c)
                        .map(|r| format!("{c}: {:.2}", r.attempts_per_success))
                })
                .collect();
            if !tries.is_empty() {
                println!("{} transactions per sale: {}", cas.name, tries.join(", "));
            }
        }
    }
}

impl SweepInfo {
    /// The sweep's part of the report: its shape under [`KEY`] (drawn by [`html`], and
    /// at several RTTs by [`crate::distance::html`] after it).
    pub fn part(&self) -> Part {
        Part {
            key: KEY,
            json: serde_json::to_value(self).expect("plain data"),
            title: Some((
                "stock-locks: how cost grows with load",
                "One run of <code>loadtest sweep</code>",
            )),
            strategies: Vec::new(),
            as_expected: true,
        }
    }
}

/// A line per strategy's colour and name, above the charts.
pub fn legend(strategies: &[&str], catalogue: &Catalogue) -> String {
    let mut html = String::from("<p>");
    for s in strategies {
        let c = catalogue.colour(s);
        let _ = write!(
            html,
            "<span style=\"display:inline-block;margin-right:14px\"><span style=\"display:inline-block;width:14px;height:14px;\
             vertical-align:middle;background:rgb({},{},{})\"></span> {}</span>",
            c.0,
            c.1,
            c.2,
            escape(s)
        );
    }
    html.push_str("</p>");
    html
}

/// `loadtest sweep`: per layout, a table and two line charts (throughput, p99), then
/// a compare-and-set's transactions per sale on both layouts.
pub fn html(info: &SweepInfo, rows: &[Row], catalogue: &Catalogue) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<h2>Scaling sweep</h2><p>Every strategy at each concurrency (requests in flight, closed loop, \
         spread over 2 instances), first on one hot product, then spread over more. \
         Stock never runs out, so an answer that is not a sale is the strategy refusing \
         (<code>busy</code>, <code>lock_lost</code>): the charts count sales per second over \
         each cell's steady window (the table gives its spread, q1–q3; † = the demo's figure \
         for the same setup, taken from its report, not measured twice), p99 is over all answers. \
         {} ({:.0} s in all). Read the lines for their shape: a strategy that serializes on \
         one row or one lock stops gaining throughput early and pays for more buyers in \
         p99 (queueing); spreading the load over many products lets the row- and \
         key-level strategies scale again, until the 2 cores are the limit.</p>",
        escape(&info.requests_rule),
        info.seconds
    );
    let strategies = strategies(rows);
    html.push_str(&legend(&strategies, catalogue));
    let concurrencies: Vec<String> = info.concurrencies.iter().map(|c| c.to_string()).collect();
    let by_concurrency = ("requests in flight (concurrency)", &concurrencies[..]);
    for section in info.sections() {
        let _ = write!(html, "<h3>{}</h3>", escape(&section.to_string()));
        let series = |value: &dyn Fn(&Row) -> f64| -> Vec<(String, RGBColor, Vec<Option<f64>>)> {
            strategies
                .iter()
                .map(|s| {
                    let points = info
                        .concurrencies
                        .iter()
                        .map(|&c| cell(rows, &section, s, c).map(value))
                        .collect();
                    (s.to_string(), catalogue.colour(s), points)
                })
                .collect()
        };
        html.push_str(&line_chart(
            "Sales per second (200 answers)",
            "sales/s",
            by_concurrency,
            &series(&sales_per_second),
            false,
        ));
        html.push_str(&line_chart(
            "Latency p99 (ms, log scale)",
            "ms",
            by_concurrency,
            &series(&|r| r.latency_ms.p99),
            true,
        ));
        html.push_str(&layout_table(info, rows, &strategies, &section));
    }
    let Some(cas) = catalogue.first_with(Trait::CompareAndSet) else {
        return html;
    };
    html.push_str(&tries_html(info, rows, &cas.name, by_concurrency));
    html
}

/// A layout's table: per strategy, each concurrency's sales per second (with how much
/// of the answers were sales when it refused) and p99, and whether it oversold.
fn layout_table(info: &SweepInfo, rows: &[Row], strategies: &[&str], section: &Section) -> String {
    let mut html = String::new();
    html.push_str("<table><tr><th>strategy</th>");
    for c in &info.concurrencies {
        let _ = write!(html, "<th>{c}: sales/s</th><th>p99 ms</th>");
    }
    html.push_str("<th>verdicts</th></tr>");
    for s in strategies {
        let _ = write!(html, "<tr><td>{}</td>", escape(s));
        let mut clean = true;
        for &c in &info.concurrencies {
            match cell(rows, section, s, c) {
                Some(r) => {
                    clean &= r.verdict.is_clean();
                    // A strategy that refuses (busy, lock_lost) answers fast and
                    // sells little: say how much of its answers were sales.
                    let sold = sold_percent(r);
                    let refused = if sold < 99.0 {
                        format!(" <small>({sold:.0}% sold)</small>")
                    } else {
                        String::new()
                    };
                    let _ = write!(
                        html,
                        "<td>{}{}{refused}</td><td>{:.1}</td>",
                        r.sales.text(),
                        if r.measured_in.is_some() { " †" } else { "" },
                        r.latency_ms.p99
                    );
                }
                None => html.push_str("<td></td><td></td>"),
            }
        }
        let _ = write!(
            html,
            "<td class=\"{}\">{}</td></tr>",
            if clean { "ok" } else { "bad" },
            if clean { "clean" } else { "oversold" }
        );
    }
    html.push_str("</table>");
    html
}

/// The compare-and-set strategy `cas`'s transactions per sale by concurrency, one
/// line per layout (at the first round-trip time); nothing where it never ran.
fn tries_html(
    info: &SweepInfo,
    rows: &[Row],
    cas: &str,
    by_concurrency: (&str, &[String]),
) -> String {
    let mut html = String::new();
    let tries: Vec<(String, RGBColor, Vec<Option<f64>>)> = info
        .products
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let section = section(p, info.rtts_ms.first().copied());
            let points: Vec<Option<f64>> = info
                .concurrencies
                .iter()
                .map(|&c| cell(rows, &section, cas, c).map(|r| r.attempts_per_success))
                .collect();
            let color = if i == 0 {
                RGBColor(214, 39, 40)
            } else {
                RGBColor(31, 119, 180)
            };
            (section.to_string(), color, points)
        })
        .filter(|(_, _, points)| points.iter().any(Option::is_some))
        .collect();
    if !tries.is_empty() {
        let _ = write!(
            html,
            "<h3>{}: transactions per sale</h3><p>Every failed compare-and-set is \
             a transaction thrown away. On one hot row the count grows with the buyers; \
             spread over many rows conflicts are rare. ",
            escape(cas)
        );
        for (name, color, _) in &tries {
            let _ = write!(
                html,
                "<span style=\"color:rgb({},{},{})\">&#9632;</span> {} ",
                color.0,
                color.1,
                color.2,
                escape(name)
            );
        }
        html.push_str("</p>");
        html.push_str(&line_chart(
            &format!("{cas}: transactions per sale"),
            "tries/sale",
            by_concurrency,
            &tries,
            false,
        ));
    }
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Fired;

    /// A row of another run: `strategy` on one product at 64 in flight over 2
    /// instances, timed for `seconds`.
    fn row(section: Section, strategy: &str, seconds: f64) -> Row {
        let fired = Fired::from_answers(Vec::new(), std::time::Duration::from_secs(2), 64);
        let plan = Plan::throughput(section, strategy, vec![1], 64, seconds);
        Row::new(&plan, 2, &fired, Default::default())
    }

    fn cell(rtt_ms: Option<f64>) -> Cell<'static> {
        Cell {
            strategy: "atomic-sql",
            products: 1,
            concurrency: 64,
            seconds: 2.5,
            rtt_ms,
        }
    }

    #[test]
    fn a_cell_is_reused_only_from_the_same_setup() {
        let demo = row(Section::Throughput, "atomic-sql", 2.5);
        let reused = reuse(std::slice::from_ref(&demo), cell(None)).expect("the same setup");
        assert_eq!(reused.measured_in, Some(Section::Throughput.to_string()));
        assert_eq!(reused.sales, demo.sales);
        // Another strategy, concurrency, time, an open loop, two units, one instance:
        // another setup.
        let others = [
            row(Section::Throughput, "batched", 2.5),
            Row {
                concurrency: 256,
                ..demo.clone()
            },
            row(Section::Throughput, "atomic-sql", 5.0),
            Row {
                rate: Some(1000.0),
                ..demo.clone()
            },
            Row {
                quantity: 2,
                ..demo.clone()
            },
            Row {
                instances: 1,
                ..demo.clone()
            },
            Row {
                section: Section::Held,
                ..demo.clone()
            },
        ];
        for other in &others {
            assert!(
                reuse(std::slice::from_ref(other), cell(None)).is_none(),
                "{other:?}"
            );
        }
        // At a distance: the demo's section at 2 ms is the sweep's 2 ms cell, and
        // neither is the loopback cell, nor one at another distance.
        let far = Row {
            rtt_ms: Some(2.0),
            ..row(Section::Far { rtt_ms: 2.0 }, "atomic-sql", 2.5)
        };
        assert!(reuse(std::slice::from_ref(&far), cell(Some(2.0))).is_some());
        assert!(reuse(std::slice::from_ref(&far), cell(None)).is_none());
        assert!(reuse(std::slice::from_ref(&far), cell(Some(0.5))).is_none());
        assert!(reuse(std::slice::from_ref(&demo), cell(Some(2.0))).is_none());
    }
}
