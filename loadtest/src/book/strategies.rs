//! The strategies seen from the demo and the fault grid together: the matrix (each
//! card's promises beside what the reference run saw), and one page per strategy.

use super::Data;
use crate::catalogue::Catalogue;
use crate::chaos::page::{HEADERS, cell_row, section_link};
use crate::chaos::{Cell, CellVerdict, ScenarioInfo};
use crate::markdown::rows::{oversold, timed, verdict};
use crate::markdown::{Pages, banner, linked, num, table, yes_no};
use crate::report::Row;
use crate::report::section;
use crate::section::Section;
use std::collections::BTreeSet;
use std::fmt::Write as _;

const SOURCE: &str = "book/data/demo.json and chaos.json";

/// The grid's cells and scenarios (none without `chaos.json`).
fn grid(data: &Data) -> (&[Cell], &[ScenarioInfo]) {
    data.chaos.as_ref().map_or((&[], &[]), |chaos| {
        (&chaos.parts.faults.cells, &chaos.parts.faults.scenarios)
    })
}

/// The strategies at a glance: each card's promises beside what the reference run saw
/// of it (the flash sale's sales/s and p99; the faults under which it lost sales or
/// stopped selling, with fencing as served, or off where the grid turned it off).
pub fn matrix_page(data: &Data) -> Option<String> {
    let demo = data.demo.as_ref()?;
    let flash = demo.parts.flash_sale.as_ref();
    let throughput = flash.map_or(&[][..], |f| &f.throughput);
    let flash_rows = section(&demo.results, &Section::FlashSale);
    let held = section(&demo.results, &Section::Held);
    let (cells, scenarios) = grid(data);
    // A scenario by its title, linked to its section of the faults chapter.
    let fault = |c: &&Cell| -> String {
        let id = c.scenario.id();
        let title = scenarios
            .iter()
            .find(|s| s.id == id)
            .map_or(id, |s| s.title.as_str());
        format!("[{title}]({})", section_link(c.scenario))
    };
    let mut body: Vec<Vec<String>> = Vec::new();
    let mut broke = String::from("\n");
    for card in &demo.strategies.0 {
        let name = &card.name;
        let t = throughput.iter().find(|t| t.strategy == *name);
        let row = flash_rows.iter().find(|r| r.strategy == *name);
        body.push(vec![
            linked(name),
            yes_no(card.safe_across_instances),
            card.fencing.clone(),
            card.backend.clone(),
            t.map_or("–".to_string(), |t| t.sales.text()),
            row.map_or("–".to_string(), |r| num(r.latency_ms.p99)),
        ]);
        // The strategy as served: the grid's deliberate mistakes are other code.
        let mine: Vec<&Cell> = cells
            .iter()
            .filter(|c| c.strategy == *name && c.scenario.mistake().is_none())
            .collect();
        let listed = |keep: &dyn Fn(&Cell) -> bool| -> Vec<String> {
            let mut seen = BTreeSet::new();
            mine.iter()
                .filter(|c| keep(c))
                .map(fault)
                .filter(|f| seen.insert(f.clone()))
                .collect()
        };
        let mut lost: Vec<String> = held
            .iter()
            .filter(|r| r.strategy == *name && oversold(r))
            .map(|_| "[held between read and write](the-race.md#see-it)".to_string())
            .collect();
        let is_lost = |c: &Cell| c.verdict.is_loss();
        lost.extend(listed(&|c| is_lost(c) && c.fencing != Some(false)));
        // Lost unfenced: "only with fencing off" when the same fault, fenced, did not
        // lose; "not run fenced" when the grid has no fenced cell of it.
        let fenced = |c: &Cell, lost: bool| {
            mine.iter()
                .any(|o| o.scenario == c.scenario && o.fencing == Some(true) && is_lost(o) == lost)
        };
        let unfenced = listed(&|c| is_lost(c) && c.fencing == Some(false) && fenced(c, false));
        let never_fenced = listed(&|c| {
            is_lost(c) && c.fencing == Some(false) && !fenced(c, false) && !fenced(c, true)
        });
        let stopped = listed(&|c| c.verdict == CellVerdict::Unavailable);
        let mut parts = Vec::new();
        for (what, list) in [
            ("Lost sales", lost),
            ("Lost sales only with fencing off", unfenced),
            ("Lost sales unfenced, not run fenced", never_fenced),
            ("Stopped selling", stopped),
        ] {
            if !list.is_empty() {
                parts.push(format!("{what}: {}", list.join("; ")));
            }
        }
        let parts = if parts.is_empty() {
            "Nothing in the grid broke it".to_string()
        } else {
            parts.join(". ")
        };
        let _ = writeln!(broke, "- {}: {parts}.", linked(name));
    }
    let mut page = banner(SOURCE);
    let _ = writeln!(
        page,
        "*Safe across instances, fencing and servers: each strategy's card (`GET /strategies`). Sales/s (q1–q3) and p99: the reference run's flash sale ({} in flight on one hot product, the stock never the limit; – where the strategy was not in it).*\n",
        flash.map_or_else(|| num(f64::NAN), |f| f.concurrency.to_string()),
    );
    page.push_str(&table(
        &[
            "strategy",
            "[safe across instances](glossary.md#safe-across-instances)",
            "fenced by",
            "servers",
            ">flash-sale sales/s (q1–q3)",
            ">p99 ms",
        ],
        &body,
    ));
    let _ = writeln!(
        page,
        "\nWhat broke each in the reference run: the faults of [Faults and fencing](faults.md) whose cell lost sales with the strategy as served (fenced where it fences; some scenarios set it up their own way, as their titles say), and the demo's held section where it oversold; then the faults whose cell lost sales with fencing turned off and not fenced, and those the grid ran unfenced only; then the cells that sold nothing for the fault's length. The grid's deliberate mistakes are left out: they are other code."
    );
    page.push_str(&broke);
    Some(page)
}

/// A row's load, as a strategy's page states it.
fn load(r: &Row) -> String {
    if timed(r) {
        format!(
            "{} in flight over {} instances, stock never the limit",
            r.concurrency, r.instances
        )
    } else {
        format!(
            "{} × {} in flight over {}, stock {}",
            r.requests, r.concurrency, r.instances, r.verdict.initial
        )
    }
}

/// The sell-out's load, its restock included.
fn sell_out_load(r: &Row, s: &crate::flash::SellOut) -> String {
    format!(
        "{} × {} in flight over {}, stock {}{}",
        r.requests,
        r.concurrency,
        r.instances,
        s.stock,
        s.restock_text()
    )
}

/// One page per strategy: its rows in every section of the demo and its chaos cells.
pub fn pages(data: &Data, pages: &mut Pages) {
    let Some(demo) = &data.demo else { return };
    let (cells, scenarios) = grid(data);
    for card in &demo.strategies.0 {
        let name = &card.name;
        let mine: Vec<&Row> = demo
            .results
            .iter()
            .filter(|r| r.strategy == *name)
            .collect();
        let mut page = banner(SOURCE);
        // The sell-out's row counts its last stock epoch; the whole run (its stock,
        // the restock, every unit sold) is the flash sale's.
        let sell_out = demo
            .parts
            .flash_sale
            .as_ref()
            .and_then(|f| f.sell_out.iter().find(|s| s.strategy == *name));
        if !mine.is_empty() {
            let body: Vec<Vec<String>> = mine
                .iter()
                .map(|r| {
                    let whole = sell_out.filter(|_| r.section == Section::SellOut);
                    vec![
                        r.section.to_string(),
                        whole.map_or_else(|| load(r), |s| sell_out_load(r, s)),
                        if timed(r) {
                            r.sales.text()
                        } else {
                            String::new()
                        },
                        num(r.latency_ms.p99),
                        whole.map_or(r.verdict.sold, |s| s.sold).to_string(),
                        r.verdict.lost_updates.to_string(),
                        r.verdict.beyond_stock.to_string(),
                        verdict(r),
                    ]
                })
                .collect();
            page.push_str(&table(
                &[
                    "demo section",
                    "load",
                    ">sales/s (q1–q3), stock never the limit",
                    ">p99 ms",
                    ">sold",
                    ">lost",
                    ">beyond",
                    "verdict",
                ],
                &body,
            ));
        }
        let mine: Vec<(String, &Cell)> = cells
            .iter()
            .filter(|c| c.strategy == *name)
            .map(|c| {
                let title = scenarios
                    .iter()
                    .find(|s| s.id == c.scenario.id())
                    .map_or(String::new(), |s| format!("{}. {}", s.number, s.title));
                (title, c)
            })
            .collect();
        if !mine.is_empty() {
            let body: Vec<Vec<String>> = mine
                .iter()
                .map(|(title, c)| {
                    let mut row = cell_row(c, false);
                    row[0] = format!("[{title}]({})", section_link(c.scenario));
                    row
                })
                .collect();
            let mut headers = HEADERS.to_vec();
            headers[0] = "fault";
            let _ = writeln!(
                page,
                "\nUnder faults (`loadtest chaos`; each fault's page says why its cells came out so):\n"
            );
            page.push_str(&table(&headers, &body));
        }
        pages.insert(format!("strategies/{name}.md"), page);
    }
}

/// A page for every strategy the service serves that the reference run did not
/// measure (added since `scripts/book-data` last ran), so that its chapter can include
/// its page at once: the page says so, and the next reference run fills it.
pub fn unmeasured(strategies: &Catalogue, pages: &mut Pages) {
    for name in strategies.names() {
        pages
            .entry(format!("strategies/{name}.md"))
            .or_insert_with(|| {
                banner("the service's `GET /strategies`")
                    + "\nNot in the reference run yet: `./scripts/book-data` measures it.\n"
            });
    }
}
