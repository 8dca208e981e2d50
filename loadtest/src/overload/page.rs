//! The demo's runs past capacity (`book/data/demo.json`, its `overload` part,
//! [`OverloadPart`]): the open loop at a multiple of each strategy's capacity, the
//! sell-out past it, and the flood of a client that never backs off.

use crate::flood::FloodRow;
use crate::markdown::{Pages, banner, linked, num, table};
use crate::overload::{OverloadPart, SellOutRow};
use std::fmt::Write as _;

use crate::demo::SOURCE;

/// The overload page, and the flood's when it ran.
pub fn pages(overload: &OverloadPart, pages: &mut Pages) {
    let mut page = banner(SOURCE);
    let _ = writeln!(
        page,
        "*Open loop at {}× each strategy's capacity for {} s (at most {} in flight); the client retries a 429 after its Retry-After within a 20 % retry budget. Capacity = the best no-limit sales/s measured (closed loop at the concurrency named, or the no-limit open loop when it sold faster); reached = requests started per second, *ceiling* when the service held the open loop's in-flight ceiling unanswered and the loop had to wait; goodput = sales/s over the steady window (from the first answer until the last request was started: the queue's drain left out); the p99's multiple is of the closed loop's p99 at capacity.*\n",
        num(overload.factor),
        num(overload.seconds),
        crate::overload::OPEN_LOOP_IN_FLIGHT,
    );
    let body: Vec<Vec<String>> = overload
        .rows
        .iter()
        .map(|r| {
            vec![
                linked(&r.strategy),
                r.mode.clone(),
                format!("{} ({})", num(r.capacity_sales_per_second), r.capacity_from),
                num(r.offered_per_second),
                format!(
                    "{}{}",
                    num(r.achieved_per_second),
                    if r.ceiling_reached { " (ceiling)" } else { "" }
                ),
                format!("{}×", num(r.multiple_reached)),
                r.goodput.text(),
                format!("{} %", num(100.0 * r.goodput_share)),
                format!("{} ({}×)", num(r.accepted_p99_ms), num(r.p99_ratio)),
                num(r.health_max_ms),
                r.overloaded_429.to_string(),
                r.transport_errors.to_string(),
                if r.oversold {
                    "**oversold**".to_string()
                } else {
                    "no".to_string()
                },
            ]
        })
        .collect();
    page.push_str(&table(
        &[
            "strategy",
            "instances",
            ">capacity sales/s (measured at)",
            ">offered req/s",
            ">reached req/s",
            ">× capacity reached",
            ">goodput sales/s (q1–q3)",
            ">goodput / capacity",
            ">p99 accepted ms",
            ">slowest /health ms",
            ">429s",
            ">transport errors",
            "oversold",
        ],
        &body,
    ));
    page.push_str(&sell_out_table(&overload.sell_out));
    pages.insert("demo/overload.md".to_string(), page);
    if !overload.flood.is_empty() {
        pages.insert("demo/flood.md".to_string(), flood_page(&overload.flood));
    }
}

/// Selling out past capacity, under the overload's table.
fn sell_out_table(sell_outs: &[SellOutRow]) -> String {
    let body: Vec<Vec<String>> = sell_outs
        .iter()
        .map(|s| {
            vec![
                linked(&s.strategy),
                s.mode.clone(),
                s.stock.to_string(),
                num(s.offered_per_second),
                s.sold.to_string(),
                s.refused.to_string(),
                s.refused_by_fast_path.to_string(),
                num(s.answers_per_second),
                num(s.p99_ms),
            ]
        })
        .collect();
    let mut out = "\nSelling out past capacity:\n\n".to_string();
    out.push_str(&table(
        &[
            "strategy",
            "instances",
            ">stock",
            ">offered req/s",
            ">sold",
            ">told sold out",
            ">of them by the fast path",
            ">answers/s",
            ">p99 ms",
        ],
        &body,
    ));
    out
}

/// The flood: `wrk` against each setting; `floods` is not empty.
fn flood_page(floods: &[FloodRow]) -> String {
    let mut page = banner(SOURCE);
    let _ = writeln!(
        page,
        "*`wrk`, closed loop, never backing off (each answer, a 429 included, followed at once by the next request), {} connections shared over each setting's instances, {} s per setting, on a hot product of its own (the reference strategy). Capacity = the best no-limit figure, as above; goodput = sales/s in the ledger over the steady window (from a third of the run until just before `wrk` stops); p99 admitted = the sales' p99 over that window, from the instances' `stock_locks_sale_duration_seconds` histogram (inside its bucket, as Prometheus' `histogram_quantile`); 429/s = `wrk`'s, over its whole run; /health = its slowest answer, polled every {} ms on a new connection to each flooded instance (*failed* when one did not answer); CPU = percent of one core over the window; transport errors = requests with no HTTP answer; lost = lost updates and units beyond stock, from the ledger.*\n",
        floods[0].connections,
        num(floods[0].seconds),
        crate::flood::HEALTH_EVERY.as_millis(),
    );
    let body: Vec<Vec<String>> = floods
        .iter()
        .map(|r| {
            vec![
                linked(&r.strategy),
                r.mode.clone(),
                num(r.capacity_sales_per_second),
                num(r.goodput_sales_per_second),
                format!("{} %", num(100.0 * r.goodput_share)),
                r.admitted_p99_ms.map_or("–".to_string(), num),
                num(r.refused_per_second),
                format!(
                    "{}{}",
                    num(r.health_max_ms),
                    if r.health_failures > 0 {
                        " (*failed*)"
                    } else {
                        ""
                    }
                ),
                num(r.cpu_app_percent),
                num(r.cpu_db_percent),
                num(r.cpu_wrk_percent),
                r.transport_errors.to_string(),
                (r.lost_updates + r.beyond_stock).to_string(),
            ]
        })
        .collect();
    page.push_str(&table(
        &[
            "strategy",
            "instances",
            ">capacity sales/s",
            ">goodput sales/s",
            ">goodput / capacity",
            ">p99 admitted ms",
            ">429/s",
            ">slowest /health ms",
            ">CPU instances %",
            ">CPU database %",
            ">CPU wrk %",
            ">transport errors",
            ">lost",
        ],
        &body,
    ));
    page
}
