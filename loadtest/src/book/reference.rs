//! The reference pages, rendered from the code: each binary's `--help`, the HTTP API
//! ([`super::api`]), the strategies as `GET /strategies` lists them, the metrics of a
//! `/metrics` scrape.

use super::prometheus::families;
use crate::catalogue::Catalogue;
use crate::markdown::{Pages, banner, table, yes_no};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// What the reference chapters are made of, read from the code and a running service.
pub struct Live {
    /// `(title, --help text)`, each binary and subcommand.
    pub help: Vec<(String, String)>,
    /// The service's `GET /openapi.json`: not written by `loadtest`, read as JSON
    /// ([`super::api`]).
    pub openapi: serde_json::Value,
    pub strategies: Catalogue,
    /// A scrape of `/metrics` after one deduction on every strategy.
    pub metrics: String,
}

/// The reference pages.
pub fn reference(live: &Live) -> Pages {
    let mut pages = BTreeMap::new();
    let mut binaries: BTreeMap<String, String> = BTreeMap::new();
    for (title, help) in &live.help {
        let binary = title.split_whitespace().next().unwrap_or(title).to_string();
        let page = binaries
            .entry(binary.clone())
            .or_insert_with(|| banner(&format!("`{binary} --help`")));
        let _ = write!(
            page,
            "\n## `{title}`\n\n```text\n{}\n```\n",
            help.trim_end()
        );
    }
    for (binary, page) in binaries {
        pages.insert(format!("reference/{binary}.md"), page);
    }
    pages.insert(
        "reference/http-api.md".to_string(),
        super::api::page(&live.openapi),
    );
    pages.insert(
        "reference/strategies.md".to_string(),
        strategies_page(&live.strategies),
    );
    pages.insert(
        "reference/metrics.md".to_string(),
        metrics_page(&live.metrics),
    );
    pages
}

fn strategies_page(strategies: &Catalogue) -> String {
    let mut page = banner("the service's `GET /strategies`");
    let body: Vec<Vec<String>> = strategies
        .0
        .iter()
        .map(|s| {
            let traits: Vec<String> = s.traits.iter().map(|t| format!("`{}`", t.id())).collect();
            vec![
                format!("`{}`", s.name),
                s.family.id().to_string(),
                format!("`{}`", s.source),
                yes_no(s.safe_across_instances),
                s.fencing.clone(),
                traits.join(" "),
                s.description.clone(),
            ]
        })
        .collect();
    page.push_str(&table(
        &[
            "strategy",
            "family",
            "source",
            "safe across instances",
            "fencing",
            "traits",
            "what it does",
        ],
        &body,
    ));
    page
}

fn metrics_page(scrape: &str) -> String {
    let mut page = banner("a `GET /metrics` scrape after one deduction on every strategy");
    let body: Vec<Vec<String>> = families(scrape)
        .into_iter()
        .map(|(name, family)| {
            let labels: Vec<String> = family.labels.iter().map(|l| format!("`{l}`")).collect();
            vec![
                format!("`{name}`"),
                family.kind,
                labels.join(" "),
                family.help,
            ]
        })
        .collect();
    page.push_str(&table(&["metric", "type", "labels", "meaning"], &body));
    page
}
