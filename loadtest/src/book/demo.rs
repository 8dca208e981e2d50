//! The demo's load sections (`book/data/demo.json`): throughput on loopback and on
//! one instance, the held section, the same load far away, where the time goes, the
//! compare-and-set under contention, and the source articles' claims.

use super::DemoParts;
use crate::markdown::rows::{
    LEGEND, SALES_LEGEND, THROUGHPUT_LEGEND, load_shape, load_table, verdict, window_text,
};
use crate::markdown::{Facts, Pages, banner, linked, num, table};
use crate::report::section;
use crate::report::{Row, Written};
use crate::section::Section;
use std::fmt::Write as _;

const SOURCE: &str = "book/data/demo.json";

/// The demo's row sections, far table, time splits and contention page.
pub fn pages(demo: &Written<DemoParts>, pages: &mut Pages, facts: &mut Facts) {
    let strategies: Vec<String> = demo.strategies.names().map(str::to_string).collect();
    facts.add("strategy-count", strategies.len().to_string());
    for (name, file, title, throughput) in [
        (
            Section::Throughput,
            "demo/throughput.md",
            "on loopback",
            true,
        ),
        (
            Section::OneInstance,
            "demo/one-instance.md",
            "on loopback",
            true,
        ),
        (
            Section::Held,
            "demo/held.md",
            "every deduction held between read and write (`--hold-ms`)",
            false,
        ),
    ] {
        let rows = section(&demo.results, &name);
        let Some(first) = rows.first() else { continue };
        let hold = first.hold_ms;
        let mut page = banner(SOURCE);
        let _ = writeln!(
            page,
            "*{}; {title}{}.*\n",
            load_shape(&rows),
            if hold > 0 {
                format!(": {hold} ms")
            } else {
                String::new()
            }
        );
        page.push_str(&load_table(&rows, &strategies, throughput));
        if throughput {
            let _ = writeln!(page, "\n{SALES_LEGEND} {THROUGHPUT_LEGEND}");
        } else {
            let _ = writeln!(page, "\n{LEGEND}");
        }
        pages.insert(file.to_string(), page);
        if name == Section::Throughput {
            for r in &rows {
                facts.add(
                    &format!("throughput-{}", r.strategy),
                    num(r.sales.per_second),
                );
            }
        }
    }
    far_page(&demo.results, pages);
    time_split_pages(&demo.results, pages);
    contention_page(&demo.results, pages);
}

/// The same load, every server farther away.
fn far_page(results: &[Row], pages: &mut Pages) {
    let Some(rtt_ms) = results.iter().find_map(|r| match r.section {
        Section::Far { rtt_ms } => Some(rtt_ms),
        _ => None,
    }) else {
        return;
    };
    let near = section(results, &Section::Throughput);
    let far = section(results, &Section::Far { rtt_ms });
    let mut page = banner(SOURCE);
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

/// Where the time goes: the service's phases per deduction, from /metrics.
fn time_split_pages(results: &[Row], pages: &mut Pages) {
    for (name, title) in [
        (Section::Throughput, "the throughput section"),
        (Section::FlashSale, "the flash sale"),
    ] {
        let split: Vec<(&Row, &crate::timing::TimeSplit)> = section(results, &name)
            .into_iter()
            .filter_map(|r| Some((r, r.time_split.as_ref()?)))
            .collect();
        if split.is_empty() {
            continue;
        }
        let mut page = banner(SOURCE);
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
        pages.insert(format!("demo/time-split-{name}.md"), page);
    }
}

/// The compare-and-set at a growing number in flight.
fn contention_page(results: &[Row], pages: &mut Pages) {
    let mut contention = section(results, &Section::Contention);
    let Some(cas) = contention.first().map(|r| r.strategy.clone()) else {
        return;
    };
    // Its high concurrency is the throughput section's row: one setup, one figure.
    contention.extend(
        section(results, &Section::Throughput)
            .into_iter()
            .filter(|r| r.strategy == cas),
    );
    let mut page = banner(SOURCE);
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
