//! The demo's flash sale (`book/data/demo.json`, its `flash_sale` part,
//! [`FlashPart`]): what limits each strategy, the sell-out, the split stock by number
//! of buckets.

use crate::flash::{FlashPart, Limits};
use crate::markdown::rows::{SALES_LEGEND, verdict, window_text};
use crate::markdown::{Facts, Pages, banner, linked, num, table};
use crate::report::Row;
use crate::report::section;
use crate::section::Section;
use std::fmt::Write as _;

use crate::demo::SOURCE;

/// The flash sale's three pages; `results` are the demo's rows.
pub fn pages(flash: &FlashPart, results: &[Row], pages: &mut Pages, facts: &mut Facts) {
    pages.insert(
        "demo/flash-sale.md".to_string(),
        throughput_page(flash, results, facts),
    );
    pages.insert("demo/sell-out.md".to_string(), sell_out_page(flash));
    let mut page = banner(SOURCE);
    let body: Vec<Vec<String>> = flash
        .buckets
        .iter()
        .map(|b| vec![b.buckets.to_string(), b.sales.text()])
        .collect();
    page.push_str(&table(&[">buckets", ">sales/s (q1–q3)"], &body));
    let _ = writeln!(page, "\n{SALES_LEGEND}");
    pages.insert("demo/buckets.md".to_string(), page);
}

/// A flash-sale row's sales/s over the reference's, with its range when the data has
/// it: `7.8× (7.0–8.4)` ([`crate::rate::ratio`]).
fn times_reference(limits: &Limits) -> String {
    let times = limits.times_atomic_sql.unwrap_or(f64::NAN);
    match limits.times_atomic_sql_range {
        Some([low, high]) => crate::rate::Ratio { times, low, high }.text(),
        None => format!("{}×", num(times)),
    }
}

fn throughput_page(flash: &FlashPart, results: &[Row], facts: &mut Facts) -> String {
    let sale_rows = section(results, &Section::FlashSale);
    let mut page = banner(SOURCE);
    let _ = writeln!(
        page,
        "*One hot product, {} s per strategy and run, {} in flight over 2 instances; the stock never the limit; sales/s over {}; the reference is the conditional UPDATE; × the reference (range) = sales/s over the reference's, from q1 over its q3 to q3 over its q1. {SALES_LEGEND}*\n",
        num(flash.seconds),
        flash.concurrency,
        window_text(&sale_rows),
    );
    let body: Vec<Vec<String>> = flash
        .throughput
        .iter()
        .map(|t| {
            let name = &t.strategy;
            let row = sale_rows.iter().find(|r| r.strategy == t.strategy);
            facts.add(&format!("flash-{name}"), num(t.sales.per_second));
            facts.add(
                &format!("flash-statements-{name}"),
                num(t.statements_per_sale),
            );
            vec![
                linked(name),
                t.sales.text(),
                times_reference(t),
                num(t.statements_per_sale),
                num(t.sales_per_transaction),
                row.map_or(String::new(), |r| num(r.latency_ms.p99)),
                row.map_or(String::new(), |r| r.verdict.sold.to_string()),
                row.map_or(String::new(), |r| verdict(r)),
            ]
        })
        .collect();
    page.push_str(&table(
        &[
            "strategy",
            ">sales/s (q1–q3)",
            ">× the reference (range)",
            ">statements per sale",
            ">sales per transaction",
            ">p99 ms",
            ">sold",
            "verdict",
        ],
        &body,
    ));
    page
}

fn sell_out_page(flash: &FlashPart) -> String {
    let mut page = banner(SOURCE);
    // A restock during the sell-out gets its column (reference runs before it had none).
    let restocked = flash.sell_out.iter().any(|s| s.restocked > 0);
    let body: Vec<Vec<String>> = flash
        .sell_out
        .iter()
        .map(|s| {
            let mut row = vec![
                linked(&s.strategy),
                s.stock.to_string(),
                s.buyers.to_string(),
                s.sold.to_string(),
                s.refused.to_string(),
                s.refused_by_fast_path.to_string(),
                num(s.answers_per_second),
                s.other.to_string(),
                if s.exact {
                    "exact".to_string()
                } else {
                    "**not exact**".to_string()
                },
            ];
            if restocked {
                row.insert(3, format!("{} after {}", s.restocked, s.restocked_after));
            }
            row
        })
        .collect();
    let mut head = vec![
        "strategy",
        ">stock",
        ">buyers",
        ">sold",
        ">refused (sold out)",
        ">of them by the fast path",
        ">answers/s",
        ">other",
        "ledger",
    ];
    if restocked {
        head.insert(3, ">restocked (after answers)");
    }
    page.push_str(&table(&head, &body));
    let _ = writeln!(
        page,
        "\nRefusals are the subject here, not a throughput: the sold-out fast path answers many of them without running the strategy (its column counts them); answers/s counts every answer over the whole run."
    );
    page
}
