//! The far section's page of the book: each strategy on loopback and far away.

use crate::chapter::Read;
use crate::markdown::rows::{load_shape, verdict, window_text};
use crate::markdown::{Pages, banner, linked, num, table};
use crate::section::Section;
use std::fmt::Write as _;

/// The same load, every server farther away.
pub(super) fn pages(report: &Read<'_, ()>, pages: &mut Pages) {
    let Some(rtt_ms) = report.results.iter().find_map(|r| match r.section {
        Section::Far { rtt_ms } => Some(rtt_ms),
        _ => None,
    }) else {
        return;
    };
    let near = report.section(&Section::Throughput);
    let far = report.section(&Section::Far { rtt_ms });
    let mut page = banner(crate::demo::SOURCE);
    let _ = writeln!(
        page,
        "*{}; the throughput section's figure on loopback against the same load at RTT {} ms (every server behind a proxy adding the round trip and counting round trips), measured over {}.*\n",
        load_shape(&near).replace("sales/s over", "on loopback sales/s over"),
        crate::section::ms(rtt_ms),
        window_text(&far),
    );
    let body: Vec<Vec<String>> = far
        .iter()
        .map(|r| {
            let there = near.iter().find(|n| n.strategy == r.strategy);
            let loopback = there.map_or(f64::NAN, |n| n.sales.per_second);
            // Per request, a sale's and a refusal's alike (a lock that polls makes
            // round trips while it waits, and its refusals make some too).
            // None counted (no proxies): no figure.
            let trips = if r.round_trips.is_empty() {
                f64::NAN
            } else {
                r.round_trips.values().map(|n| *n as f64).sum::<f64>() / r.requests as f64
            };
            vec![
                linked(&r.strategy),
                there.map_or(String::new(), |n| n.sales.text()),
                r.sales.text(),
                format!("{}×", num(r.sales.per_second / loopback)),
                num(r.latency_ms.p99),
                num(trips),
                verdict(r),
            ]
        })
        .collect();
    page.push_str(&table(
        &[
            "strategy",
            ">sales/s loopback (q1–q3)",
            ">sales/s far (q1–q3)",
            ">far / loopback",
            ">p99 ms far",
            ">round trips per request",
            "verdict",
        ],
        &body,
    ));
    pages.insert("demo/far.md".to_string(), page);
}
