//! The RTT sweep (`book/data/distance.json`): per product layout, sales/s as every
//! server moves farther away; each strategy's round trips; the claim it checks.

use crate::chapter::Read;
use crate::markdown::rows::{SALES_LEGEND, verdict};
use crate::markdown::{Pages, banner, linked, num, table};
use crate::report::{Claim, Row, section};
use crate::sweep::page::{measured_here_or_marked, slug};
use crate::sweep::{RoundTripCount, SweepInfo};
use crate::sweep::{ms, section as sweep_section};
use std::fmt::Write as _;

const SOURCE: &str = "book/data/distance.json";

/// One page per product layout, and the round trips with the claim.
pub fn pages(distance: &Read<'_, SweepInfo>, pages: &mut Pages) {
    let Some(info) = distance.part else {
        return;
    };
    let rtts = &info.rtts_ms;
    let (Some(&near), Some(&far)) = (rtts.first(), rtts.last()) else {
        return;
    };
    let concurrency = info
        .concurrencies
        .last()
        .map(usize::to_string)
        .unwrap_or_default();
    let measured = i64::try_from(distance.generated_at)
        .ok()
        .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_default();
    for &products in &info.products {
        // Each pass's rows, nearest first.
        let passes: Vec<Vec<&Row>> = rtts
            .iter()
            .map(|&rtt| section(distance.results, &sweep_section(products, Some(rtt))))
            .collect();
        let (first, last) = (&passes[0], &passes[passes.len() - 1]);
        // The same load with no proxy at all, when the run took it from another
        // report (one setup, one figure): what the proxies themselves cost.
        let loopback = section(distance.results, &sweep_section(products, None));
        let mut headers: Vec<String> = vec!["strategy".into()];
        if !loopback.is_empty() {
            headers.push(">no proxy †".into());
        }
        headers.extend(rtts.iter().map(|r| format!(">{} ms", ms(*r))));
        headers.push(format!(">{} ms / {} ms", ms(far), ms(near)));
        headers.push(format!(">p99 ms at {} ms", ms(far)));
        headers.push("verdict".into());
        let body: Vec<Vec<String>> = first
            .iter()
            .map(|r0| {
                let mut row = vec![linked(&r0.strategy)];
                let same = |r: &&&Row| r.strategy == r0.strategy;
                if !loopback.is_empty() {
                    let cell = loopback.iter().find(same);
                    row.push(cell.map_or(String::new(), |r| num(r.sales.per_second)));
                }
                for pass in &passes {
                    // † on a cell another run measured (the demo's far table).
                    let cell = pass.iter().find(same);
                    row.push(cell.map_or(String::new(), |r| measured_here_or_marked(r)));
                }
                let r2 = last.iter().find(same);
                row.push(r2.map_or(String::new(), |r| {
                    format!("{}×", num(r.sales.per_second / r0.sales.per_second))
                }));
                row.push(r2.map_or(String::new(), |r| num(r.latency_ms.p99)));
                row.push(r2.map_or(String::new(), |r| verdict(r)));
                row
            })
            .collect();
        let mut page = banner(SOURCE);
        let _ = writeln!(
            page,
            "*Sales per second with every server the given round-trip time away ({products} product{}, {concurrency} in flight over 2 instances, stock never the limit; measured {measured}). Every server sits behind a proxy that adds the round trip: 0 ms is through the proxies with nothing added, not the same setup as loopback without them{}.*\n",
            if products == 1 { "" } else { "s" },
            if loopback.is_empty() {
                ""
            } else {
                " († no proxy: the sweep's figure for that setup, not measured twice; † on a cell: the demo's figure for that setup)"
            },
        );
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        page.push_str(&table(&headers, &body));
        let _ = writeln!(page, "\n{SALES_LEGEND}");
        let layout = sweep_section(products, None);
        pages.insert(format!("distance/{}.md", slug(&layout)), page);
    }
    round_trips_page(&info.round_trips, distance.claims, near, far, pages);
}

/// Round trips counted per request, and waited for one after the other.
fn round_trips_page(
    counts: &[RoundTripCount],
    claims: &[Claim],
    near: f64,
    far: f64,
    pages: &mut Pages,
) {
    if counts.is_empty() {
        return;
    }
    let by_kind = crate::report::by_kind;
    let body: Vec<Vec<String>> = counts
        .iter()
        .map(|c| {
            vec![
                linked(&c.strategy),
                by_kind(&c.sale),
                num(c.sequential_sale),
                by_kind(&c.refusal),
                num(c.sequential_refusal),
            ]
        })
        .collect();
    let mut page = banner(SOURCE);
    let _ = writeln!(
        page,
        "*Round trips per request, one request at a time: counted by the proxies (by kind of server), and waited for one after the other (p50 at {} ms minus p50 at {} ms, over {} ms). A refusal asks for 2 of 1.*\n",
        ms(far),
        ms(near),
        ms(far),
    );
    page.push_str(&table(
        &[
            "strategy",
            "a sale: counted",
            ">waited",
            "a refusal: counted",
            ">waited",
        ],
        &body,
    ));
    for c in claims {
        let _ = writeln!(
            page,
            "\n**Claim**: {} → **{}**. {}",
            c.claim, c.verdict, c.evidence
        );
    }
    pages.insert("distance/round-trips.md".to_string(), page);
}
