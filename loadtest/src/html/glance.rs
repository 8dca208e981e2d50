//! The report's first screen: what a reader wants at a glance, before any table.
//!
//! The run's verdict in one sentence (and what was unexpected, if anything), each
//! strategy's figure in every section on one line, the sales per second as bars, and
//! the classic claims with their verdicts. The detailed tables follow it.

use super::{bar_chart, escape};
use crate::report::{Report, Row, section};
use crate::section::Section;
use std::fmt::Write;

/// The first screen of `report`, a column for each of `tabled` (the sections shown
/// as tables of rows, in the order their first row came) with more than one row.
pub fn glance(report: &Report, tabled: &[&Section]) -> String {
    let columns = columns(report, tabled);
    let mut html = String::from("<h2>At a glance</h2>");
    html.push_str(&verdict(report));
    html.push_str(&strategy_lines(report, &columns));
    if let Some(column) = columns.iter().find(|c| c.rates) {
        html.push_str(&bar_chart(
            &format!("Sales per second ({}, steady window)", column.section),
            "sales/s",
            &column.rows,
            |r| r.sales.per_second,
        ));
    }
    html.push_str(&claim_lines(report));
    html
}

/// The run's verdict: every row and part as expected, or which were not.
///
/// "As expected" is each row's and part's own expectation (a safe strategy in the
/// demo, a control that must oversell, a fault cell's declared verdicts), so the
/// sentence holds for every kind of report.
fn verdict(report: &Report) -> String {
    if report.results.is_empty() && report.parts.is_empty() {
        return "<p>This run measured nothing.</p>".to_string();
    }
    if report.all_as_expected() {
        return "<p class=\"lesson\"><b>Everything behaved as expected</b>: every strategy \
                gave the verdict expected of it in each setup, as the ledger says (and the \
                checker, where the run recorded its answers' histories).</p>"
            .to_string();
    }
    let unexpected: Vec<String> = report
        .results
        .iter()
        .filter(|r| !r.as_expected)
        .map(|r| format!("{} ({}): {}", r.strategy, r.section, r.verdict_text()))
        .chain(
            report
                .parts
                .iter()
                .filter(|p| !p.as_expected)
                .map(|p| format!("the {} part", p.key)),
        )
        .collect();
    format!(
        "<p class=\"bad\"><b>Unexpected</b>: {}.</p>",
        escape(&unexpected.join("; "))
    )
}

/// One column of the first screen: a section and its rows.
struct Column<'a> {
    section: &'a Section,
    rows: Vec<&'a Row>,
    /// Whether the section's figure is its sales per second (its stock never ran
    /// out); else what the ledger says is its figure.
    rates: bool,
}

/// The first screen's columns: the sections of `tabled` with more than one row.
fn columns<'a>(report: &'a Report, tabled: &[&'a Section]) -> Vec<Column<'a>> {
    tabled
        .iter()
        .map(|&s| {
            let rows = section(&report.results, s);
            let rates = rows.iter().all(|r| r.stock_never_limited());
            Column {
                section: s,
                rows,
                rates,
            }
        })
        .filter(|c| c.rows.len() > 1)
        .collect()
}

/// One line per strategy, one column per section: sales per second in a section
/// whose stock never ran out, else the verdict; green when nothing was oversold, red
/// when it was.
fn strategy_lines(report: &Report, columns: &[Column]) -> String {
    if columns.is_empty() {
        return String::new();
    }
    let mut strategies: Vec<&str> = Vec::new();
    for r in &report.results {
        let shown = columns.iter().any(|c| c.section == &r.section);
        if shown && !strategies.contains(&r.strategy.as_str()) {
            strategies.push(&r.strategy);
        }
    }
    let mut html = String::from("<table><tr><th>strategy</th>");
    for column in columns {
        let _ = write!(html, "<th>{}</th>", escape(&column.section.to_string()));
    }
    html.push_str("</tr>");
    for strategy in strategies {
        let _ = write!(
            html,
            "<tr><td><a href=\"#s-{name}\">{name}</a></td>",
            name = escape(strategy)
        );
        for column in columns {
            let row = column.rows.iter().find(|r| r.strategy == strategy);
            html.push_str(&match row {
                None => "<td></td>".to_string(),
                Some(r) => glance_cell(r, column.rates),
            });
        }
        html.push_str("</tr>");
    }
    html.push_str(
        "</table><p><small>sales/s in a section whose stock never ran out (its spread in \
         brackets), else what the ledger says; green: nothing oversold or missing, red: oversold \
         or acknowledged sales missing. The tables below have every figure.</small></p>",
    );
    html
}

/// A row's cell on the first screen: its sales per second (`rate`) or its verdict.
fn glance_cell(r: &Row, rate: bool) -> String {
    let class = if r.verdict.is_clean() { "ok" } else { "bad" };
    let text = if rate {
        format!("{} sales/s", r.sales.text())
    } else {
        r.verdict_text().to_string()
    };
    format!("<td class=\"{class}\">{}</td>", escape(&text))
}

/// The classic claims, each with its verdict (the evidence is in their section).
fn claim_lines(report: &Report) -> String {
    if report.claims.is_empty() {
        return String::new();
    }
    let mut html = String::from("<table><tr><th>claim</th><th>verdict</th></tr>");
    for c in &report.claims {
        let _ = write!(
            html,
            "<tr><td>{}</td><td class=\"{v}\">{v}</td></tr>",
            escape(&c.claim),
            v = c.verdict
        );
    }
    html.push_str("</table>");
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Fired;
    use crate::plan::Plan;
    use serde_json::json;

    /// A row of `strategy` in `section`: a timed run of 2 instances, nothing sold.
    fn row(section: Section, strategy: &str) -> Row {
        let fired = Fired::from_answers(Vec::new(), std::time::Duration::from_secs(2), 64);
        let plan = Plan::throughput(section, strategy, vec![1], 64, 2.5);
        Row::new(&plan, 2, &fired, Default::default())
    }

    /// A row not as expected is named on the first screen, every name escaped.
    #[test]
    fn the_first_screen_names_what_was_unexpected() {
        let mut odd = row(Section::Throughput, "<i>odd</i>");
        odd.as_expected = false;
        let report = Report::new(json!({}), vec![row(Section::Throughput, "plain"), odd]);
        let html = glance(&report, &[&Section::Throughput]);
        assert!(html.contains("<b>Unexpected</b>: &lt;i&gt;odd&lt;/i&gt; (throughput)"));
        assert!(!html.contains("<i>odd</i>"));
        assert!(!html.contains("Everything behaved as expected"));
    }

    /// A report with no rows and no parts claims nothing about strategies.
    #[test]
    fn an_empty_report_claims_nothing() {
        let html = glance(&Report::new(json!({}), Vec::new()), &[]);
        assert!(html.contains("This run measured nothing."));
        assert!(!html.contains("as expected"));
    }
}
