//! Production distance: the sweep with the servers behind the testbed's proxies at
//! several round-trip times (`loadtest sweep --rtt-ms 0,0.5,2`).
//!
//! On loopback a round trip to MariaDB, Redis, ZooKeeper or etcd costs tens of
//! microseconds and a strategy's cost is mostly CPU; at 0.5 ms (one data centre) or 2 ms (across zones)
//! it is mostly its round trips. This module measures both sides of that:
//! - [`measure_round_trips`]: each strategy's round trips per request on the success
//!   path and on a refusal (2 asked of 1 left, so that the strategy itself refuses),
//!   at concurrency 1, counted by the proxies (turns, per kind
//!   of server) and, independently, from latency: `(p50 at X ms - p50 at 0) / X` is
//!   the number of round trips the request waited for one after the other (a fan-out
//!   to five Redis in parallel counts five turns and one wait);
//! - [`claim`]: "at production delays, strategies rank by round trips per sale",
//!   judged from the sweep's cells at the largest RTT;
//! - [`html`]: sales/s and p99 against RTT (one line per strategy), the round-trip
//!   table, the claim.

pub mod page;
pub mod run;

use crate::catalogue::Catalogue;
use crate::html::{escape, line_chart};
use crate::plan::{BUCKETS, Plan};
use crate::report::{Claim, ClaimVerdict, Expect, Row, by_kind};
use crate::runner::Runner;
use crate::section::Section;
use crate::sweep::{RoundTripCount, SweepInfo, cell, ms, sales_per_second, section, strategies};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Requests per path and RTT in the round-trip count (concurrency 1).
pub const COUNT_REQUESTS: usize = 40;

/// Counts each strategy's round trips at concurrency 1, at RTT 0 and at `rtt_ms`
/// (`set_rtt` moves the servers; `runner.network` must count them). Each path runs
/// [`COUNT_REQUESTS`] requests on a product of its own: stocked for each of them (every
/// request a sale), or empty (every request refused).
pub async fn measure_round_trips(
    runner: &mut Runner,
    strategies: &[(String, bool)],
    rtt_ms: f64,
    set_rtt: &dyn Fn(f64),
    first_product: &dyn Fn(usize) -> i64,
) -> anyhow::Result<(Vec<RoundTripCount>, Vec<Row>)> {
    let mut counts = Vec::new();
    let mut rows = Vec::new();
    let mut n = 0;
    for (strategy, safe) in strategies {
        // p50 per path at each RTT; the counts from the loopback pass.
        let mut p50 = BTreeMap::new();
        let mut counted = BTreeMap::new();
        for rtt in [0.0, rtt_ms] {
            set_rtt(rtt);
            if let Some((at, _)) = &mut runner.network {
                *at = rtt;
            }
            // A refusal asks for 2 of 1: refused by the strategy itself every time (a
            // product found with 0 left would be refused by the sold-out fast path
            // after the first, without the strategy).
            for (path, stock, quantity) in [("sale", COUNT_REQUESTS as i64, 1), ("refusal", 1, 2)] {
                let plan = Plan {
                    section: Section::RoundTrips {
                        path: path.to_string(),
                        rtt_ms: rtt,
                    },
                    strategy: strategy.clone(),
                    products: vec![first_product(n)],
                    stock,
                    buckets: BUCKETS,
                    requests: COUNT_REQUESTS,
                    duration: None,
                    concurrency: 1,
                    rate: None,
                    quantity,
                    multi_item_share: 0.0,
                    request_hold_ms: None,
                    server_hold_ms: 0,
                    warmup: 0,
                    retries: 0,
                    read_every: None,
                    restock_during: None,
                    expect: if *safe { Expect::Safe } else { Expect::Either },
                };
                n += 1;
                let row = runner.run(&plan).await?;
                p50.insert((path, rtt.to_bits()), row.latency_ms.p50);
                if rtt == 0.0 {
                    counted.insert(path, row.round_trips_per_request());
                }
                rows.push(row);
            }
        }
        let sequential = |path: &str| {
            let far = p50[&(path, rtt_ms.to_bits())];
            let near = p50[&(path, 0f64.to_bits())];
            ((far - near) / rtt_ms).max(0.0)
        };
        let count = RoundTripCount {
            strategy: strategy.clone(),
            sale: counted.remove("sale").unwrap_or_default(),
            refusal: counted.remove("refusal").unwrap_or_default(),
            sequential_sale: sequential("sale"),
            sequential_refusal: sequential("refusal"),
        };
        eprintln!(
            "sweep: round trips of {strategy}: a sale {} ({:.1} one after the other), a refusal {} ({:.1})",
            by_kind(&count.sale),
            count.sequential_sale,
            by_kind(&count.refusal),
            count.sequential_refusal
        );
        counts.push(count);
    }
    Ok((counts, rows))
}

/// Spearman's rank correlation of two equally long samples (ties get their mean rank).
pub fn spearman(xs: &[f64], ys: &[f64]) -> f64 {
    fn ranks(v: &[f64]) -> Vec<f64> {
        let mut order: Vec<usize> = (0..v.len()).collect();
        order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
        let mut ranks = vec![0.0; v.len()];
        let mut i = 0;
        while i < order.len() {
            let mut j = i;
            while j + 1 < order.len() && v[order[j + 1]] == v[order[i]] {
                j += 1;
            }
            let mean = (i + j) as f64 / 2.0;
            for k in &order[i..=j] {
                ranks[*k] = mean;
            }
            i = j + 1;
        }
        ranks
    }
    let (rx, ry) = (ranks(xs), ranks(ys));
    let n = xs.len() as f64;
    let mean = (n - 1.0) / 2.0;
    let cov: f64 = rx
        .iter()
        .zip(&ry)
        .map(|(a, b)| (a - mean) * (b - mean))
        .sum();
    let var_x: f64 = rx.iter().map(|a| (a - mean).powi(2)).sum();
    let var_y: f64 = ry.iter().map(|b| (b - mean).powi(2)).sum();
    if var_x == 0.0 || var_y == 0.0 {
        0.0
    } else {
        cov / (var_x * var_y).sqrt()
    }
}

/// "At production delays, strategies rank by round trips per sale": at the largest
/// RTT, on each layout, the rank correlation of sales/s with the round trips a sale
/// waits for one after the other. Confirmed when it is strongly negative (≤ -0.8) on
/// every layout, refuted when weak (> -0.5) on every layout; the loopback pass's
/// correlation is given beside it, for contrast.
pub fn claim(info: &SweepInfo, rows: &[Row]) -> Option<Claim> {
    let (&far, &near) = (
        info.rtts_ms.iter().max_by(|a, b| a.total_cmp(b))?,
        info.rtts_ms.iter().min_by(|a, b| a.total_cmp(b))?,
    );
    let concurrency = *info.concurrencies.last()?;
    let sequential: BTreeMap<&str, f64> = info
        .round_trips
        .iter()
        .map(|c| (c.strategy.as_str(), c.sequential_sale))
        .collect();
    let mut rhos = Vec::new();
    let mut evidence = Vec::new();
    for &products in &info.products {
        let rho_at = |rtt: f64| {
            let (mut sales, mut trips) = (Vec::new(), Vec::new());
            for s in strategies(rows) {
                if let (Some(r), Some(t)) = (
                    cell(rows, &section(products, Some(rtt)), s, concurrency),
                    sequential.get(s),
                ) {
                    sales.push(sales_per_second(r));
                    trips.push(*t);
                }
            }
            (sales.len() >= 3).then(|| spearman(&sales, &trips))
        };
        let rho = rho_at(far)?;
        rhos.push(rho);
        evidence.push(format!(
            "{products} product(s) at concurrency {concurrency}: Spearman ρ(sales/s, sequential round trips) = {rho:.2} at {} ms{}",
            ms(far),
            rho_at(near).map_or(String::new(), |r| format!(" ({r:.2} at {} ms)", ms(near)))
        ));
    }
    let verdict = if rhos.iter().all(|r| *r <= -0.8) {
        ClaimVerdict::Confirmed
    } else if rhos.iter().all(|r| *r > -0.5) {
        ClaimVerdict::Refuted
    } else {
        ClaimVerdict::Inconclusive
    };
    Some(Claim {
        claim: "At production delays, strategies rank by round trips per sale".into(),
        source: "this project's measurement at a distance (the source articles compare strategies on one machine)".into(),
        section: format!("sweep at RTT {} ms", ms(far)),
        load: format!(
            "{} in flight over 2 instances, stock never the limit, every server behind a proxy",
            concurrency
        ),
        verdict,
        evidence: evidence.join("; "),
    })
}

/// The RTT part of the sweep's page: per layout, sales/s and p99 against RTT; the
/// round-trip table; the claim.
pub fn html(
    info: &SweepInfo,
    rows: &[Row],
    catalogue: &Catalogue,
    claim: Option<&Claim>,
) -> String {
    let mut html = String::new();
    let Some(&concurrency) = info.concurrencies.last() else {
        return html;
    };
    let rtts: Vec<String> = info
        .rtts_ms
        .iter()
        .map(|r| format!("{} ms", ms(*r)))
        .collect();
    let _ = write!(
        html,
        "<h2>At a distance: round-trip time</h2><p>The same strategies with every server \
         (MariaDB, Redis, ZooKeeper, etcd) behind the testbed's proxy, which adds the \
         round-trip time below (half each way; 0 = through the proxy, nothing added) and \
         counts the round trips. Concurrency {concurrency}, 2 instances. On loopback a \
         strategy's cost is its CPU; at a distance it is the round trips it waits for, one \
         after the other, and on one hot row those made while holding the row or the \
         lock.</p>"
    );
    let strategies = strategies(rows);
    html.push_str(&crate::sweep::legend(&strategies, catalogue));
    for &products in &info.products {
        let series = |value: &dyn Fn(&Row) -> f64| {
            strategies
                .iter()
                .map(|s| {
                    let points = info
                        .rtts_ms
                        .iter()
                        .map(|&rtt| {
                            cell(rows, &section(products, Some(rtt)), s, concurrency).map(value)
                        })
                        .collect();
                    (s.to_string(), catalogue.colour(s), points)
                })
                .collect::<Vec<_>>()
        };
        let layout = if products == 1 {
            "one hot product".to_string()
        } else {
            format!("{products} products")
        };
        let _ = write!(
            html,
            "<h3>{layout}: sales/s and p99 by round-trip time</h3>"
        );
        html.push_str(&line_chart(
            &format!("Sales per second, {layout}"),
            "sales/s",
            ("round-trip time to every server", &rtts),
            &series(&sales_per_second),
            true,
        ));
        html.push_str(&line_chart(
            &format!("Latency p99 (ms, log scale), {layout}"),
            "ms",
            ("round-trip time to every server", &rtts),
            &series(&|r| r.latency_ms.p99),
            true,
        ));
    }
    if !info.round_trips.is_empty() {
        html.push_str(&round_trips_table(info));
    }
    if let Some(claim) = claim {
        let _ = write!(
            html,
            "<p><b>Claim:</b> {} → <b>{}</b>. {}</p>",
            escape(&claim.claim),
            claim.verdict,
            escape(&claim.evidence)
        );
    }
    html
}

/// The round-trip table: per strategy, the turns the proxies counted per request by
/// kind of server and the round trips waited, on a sale and on a refusal.
fn round_trips_table(info: &SweepInfo) -> String {
    let mut html = String::new();
    let far = info.rtts_ms.iter().copied().fold(0.0, f64::max);
    let _ = write!(
        html,
        "<h3>Round trips per request</h3><p>At concurrency 1, {n} requests per path: \
         every one a sale, then every one refused by the strategy (2 asked of 1 left; \
         a product known to have 0 left is refused by the sold-out fast path instead). <em>Counted</em>: turns \
         per request seen by the proxies (the client spoke, the server answered), by \
         kind of server. <em>Waited</em>: round trips waited for one after the other, \
         from latency: (p50 at {far} ms − p50 at 0) / {far} ms. A fan-out in parallel \
         (RedLock's five nodes) counts five turns and one wait; background traffic (a \
         lease renewal, a session ping) adds fractions.</p><table><tr><th>strategy</th>\
         <th>sale: counted</th><th>sale: waited</th><th>refusal: counted</th>\
         <th>refusal: waited</th></tr>",
        n = COUNT_REQUESTS,
        far = ms(far),
    );
    for c in &info.round_trips {
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{:.1}</td></tr>",
            escape(&c.strategy),
            escape(&by_kind(&c.sale)),
            c.sequential_sale,
            escape(&by_kind(&c.refusal)),
            c.sequential_refusal
        );
    }
    html.push_str("</table>");
    html
}

/// The RTT sweep as text: per layout, sales/s (p99) per RTT, then the round trips.
pub fn print_tables(info: &SweepInfo, rows: &[Row]) {
    let Some(&concurrency) = info.concurrencies.last() else {
        return;
    };
    for &products in &info.products {
        println!(
            "\n{products} product(s), concurrency {concurrency}: sales/s (p99 ms) by round-trip time"
        );
        let mut header = format!("{:<12}", "strategy");
        for rtt in &info.rtts_ms {
            header.push_str(&format!(" {:>16}", format!("{} ms", ms(*rtt))));
        }
        println!("{header}");
        for s in strategies(rows) {
            let mut line = format!("{s:<12}");
            for &rtt in &info.rtts_ms {
                line.push_str(
                    &match cell(rows, &section(products, Some(rtt)), s, concurrency) {
                        Some(r) => format!(
                            " {:>16}",
                            format!("{:.0} ({:.1})", sales_per_second(r), r.latency_ms.p99)
                        ),
                        None => format!(" {:>16}", "-"),
                    },
                );
            }
            println!("{line}");
        }
    }
    if !info.round_trips.is_empty() {
        println!(
            "\nround trips per request at concurrency 1: counted (by kind) / waited one after the other"
        );
        for c in &info.round_trips {
            println!(
                "{:<12} sale: {} / {:.1}; refusal: {} / {:.1}",
                c.strategy,
                by_kind(&c.sale),
                c.sequential_sale,
                by_kind(&c.refusal),
                c.sequential_refusal
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::spearman;

    #[test]
    fn spearman_ranks() {
        assert!((spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]) - 1.0).abs() < 1e-9);
        assert!((spearman(&[1.0, 2.0, 3.0], &[30.0, 20.0, 10.0]) + 1.0).abs() < 1e-9);
        // Ties share their mean rank.
        let rho = spearman(&[1.0, 1.0, 2.0, 3.0], &[4.0, 3.0, 2.0, 1.0]);
        assert!(rho < -0.9, "{rho}");
        assert_eq!(spearman(&[1.0, 1.0], &[1.0, 2.0]), 0.0);
    }
}
