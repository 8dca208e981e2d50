//! The sweep (`book/data/sweep.json`): sales per second by requests in flight, one
//! page per product layout.

use super::SweepInfo;
use crate::chapter::Read;
use crate::markdown::rows::{SALES_LEGEND, verdict};
use crate::markdown::{Pages, banner, linked, num, table};
use crate::report::Row;
use crate::section::Section;
use std::fmt::Write as _;

const SOURCE: &str = "book/data/sweep.json";

/// A sweep layout's page name: `sweep: 100 products` → `100-products`.
pub fn slug(section: &Section) -> String {
    let text = section.to_string();
    let slug: String = text
        .trim_start_matches("sweep: ")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    slug.trim_matches('-').to_string()
}

/// `1234 †`: a cell's sales/s, marked when another run measured it (`measured_in`).
pub fn measured_here_or_marked(row: &Row) -> String {
    let mark = if row.measured_in.is_some() {
        " †"
    } else {
        ""
    };
    format!("{}{mark}", num(row.sales.per_second))
}

/// One page per layout (`sweep: 1 product`, `sweep: 100 products`).
pub fn pages(sweep: &Read<'_, SweepInfo>, pages: &mut Pages) {
    let results = sweep.results;
    let mut sections: Vec<&Section> = Vec::new();
    for r in results {
        if matches!(r.section, Section::Sweep { .. }) && !sections.contains(&&r.section) {
            sections.push(&r.section);
        }
    }
    for section in sections {
        let rows: Vec<&Row> = results.iter().filter(|r| &r.section == section).collect();
        let mut concurrencies: Vec<usize> = rows.iter().map(|r| r.concurrency).collect();
        concurrencies.sort_unstable();
        concurrencies.dedup();
        let mut strategies: Vec<&str> = Vec::new();
        for r in &rows {
            if !strategies.contains(&r.strategy.as_str()) {
                strategies.push(&r.strategy);
            }
        }
        let mut headers = vec!["strategy".to_string()];
        headers.extend(concurrencies.iter().map(|c| format!(">{c} in flight")));
        let body: Vec<Vec<String>> = strategies
            .iter()
            .map(|s| {
                let mut row = vec![linked(s)];
                for c in &concurrencies {
                    let cell = rows
                        .iter()
                        .find(|r| r.strategy == *s && r.concurrency == *c);
                    row.push(cell.map_or(String::new(), |r| {
                        let oversold = verdict(r).starts_with("oversold");
                        format!(
                            "{}{}",
                            measured_here_or_marked(r),
                            if oversold { " ⚠" } else { "" }
                        )
                    }));
                }
                row
            })
            .collect();
        let mut page = banner(SOURCE);
        let _ = writeln!(
            page,
            "*Sales per second by requests in flight ({}, over 2 instances, stock never the limit; ⚠ = oversold; † = the demo's figure for the same setup, taken from its run (`--reuse`), not measured twice).*\n",
            section.to_string().trim_start_matches("sweep: "),
        );
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        page.push_str(&table(&headers, &body));
        let _ = writeln!(page, "\n{SALES_LEGEND}");
        pages.insert(format!("sweep/{}.md", slug(section)), page);
    }
}
