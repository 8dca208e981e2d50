//! The demo's report as a whole (`book/data/demo.json`): the source articles' claims,
//! judged on its sections' rows. Each section's own pages are its chapter's
//! ([`crate::chapter::Chapter::pages`]).

use super::DemoParts;
use crate::markdown::{Pages, banner, table};
use crate::report::Written;
use std::fmt::Write as _;

const SOURCE: &str = crate::demo::SOURCE;

/// Claims as the book shows them: what, from where, judged on which section and load,
/// the verdict and its evidence (the demo's, and the lock bench's).
pub fn claims_table(claims: &[crate::report::Claim]) -> String {
    let body: Vec<Vec<String>> = claims
        .iter()
        .map(|c| {
            vec![
                c.claim.clone(),
                c.source.clone(),
                format!("{}: {}", c.section, c.load),
                format!("**{}**", c.verdict),
                c.evidence.clone(),
            ]
        })
        .collect();
    table(
        &["claim", "from", "judged on", "verdict", "evidence"],
        &body,
    )
}

/// The source articles' claims, judged on the demo's rows.
pub fn claims_page(demo: &Written<DemoParts>, pages: &mut Pages) {
    let mut page = banner(SOURCE);
    page.push_str(&claims_table(&demo.claims));
    let _ = writeln!(
        page,
        "\n{} The rounds' own rates follow each figure, in the order the rounds ran.",
        crate::rate::rule_text()
    );
    // A run from before each round's rate was kept was judged by the rule of its day.
    let pooled_only = demo
        .results
        .iter()
        .any(|r| r.sales.rounds > 1 && r.sales.per_round.is_empty());
    if pooled_only {
        let _ = writeln!(
            page,
            "\nThis run pooled its rounds without keeping each round's rate, so its claims were judged by the rule before: the two figures apart by more than both spreads and by more than {:.0} %.",
            100.0 * crate::rate::MARGIN
        );
    }
    pages.insert("demo/claims.md".to_string(), page);
}
