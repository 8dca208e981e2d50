//! The throughput section's pages of the book: its table, where the time goes, and
//! the compare-and-set under contention.

use crate::chapter::Read;
use crate::markdown::rows::{load_shape, section_page, time_split_page, verdict};
use crate::markdown::{Facts, Pages, banner, num, table};
use crate::section::Section;
use std::fmt::Write as _;

/// Every page of the section, and each strategy's sales per second as a fact.
pub(super) fn pages(report: &Read<'_, ()>, pages: &mut Pages, facts: &mut Facts) {
    let rows = report.section(&Section::Throughput);
    if !rows.is_empty() {
        let strategies: Vec<String> = report.strategies.names().map(str::to_string).collect();
        pages.insert(
            "demo/throughput.md".to_string(),
            section_page(crate::demo::SOURCE, &rows, &strategies, "on loopback", true),
        );
        for r in &rows {
            facts.add(
                &format!("throughput-{}", r.strategy),
                num(r.sales.per_second),
            );
        }
    }
    if let Some(page) = time_split_page(crate::demo::SOURCE, &rows, "the throughput section") {
        pages.insert(format!("demo/time-split-{}.md", Section::Throughput), page);
    }
    contention_page(report, pages);
}

/// The compare-and-set at a growing number in flight.
fn contention_page(report: &Read<'_, ()>, pages: &mut Pages) {
    let mut contention = report.section(&Section::Contention);
    let Some(cas) = contention.first().map(|r| r.strategy.clone()) else {
        return;
    };
    // Its high concurrency is the throughput section's row: one setup, one figure.
    contention.extend(
        report
            .section(&Section::Throughput)
            .into_iter()
            .filter(|r| r.strategy == cas),
    );
    let mut page = banner(crate::demo::SOURCE);
    let _ = writeln!(
        page,
        "*{}; the row at {} in flight is the throughput section's.*\n",
        load_shape(&contention).replace(
            &format!("{} in flight", contention[0].concurrency),
            "the given number in flight"
        ),
        contention
            .last()
            .map(|r| r.concurrency.to_string())
            .unwrap_or_default()
    );
    let body: Vec<Vec<String>> = contention
        .iter()
        .map(|r| {
            vec![
                format!("`{}`", r.strategy),
                r.concurrency.to_string(),
                r.sales.text(),
                num(r.latency_ms.p99),
                num(r.attempts_per_success),
                verdict(r),
            ]
        })
        .collect();
    page.push_str(&table(
        &[
            "strategy",
            ">in flight",
            ">sales/s (q1–q3)",
            ">p99 ms",
            ">tries per sale",
            "verdict",
        ],
        &body,
    ));
    pages.insert("demo/contention.md".to_string(), page);
}
