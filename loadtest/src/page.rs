//! The HTML report of a run: one self-contained file (inline SVG charts drawn with
//! `plotters`, inline CSS, no script, no CDN) that opens offline.
//!
//! Its first screen is the glance (the verdict, each strategy on one line, the sales
//! per second as bars, the claims); then each section as its [`Chapter`] draws it from
//! the report: the demo's sections of rows (throughput, one instance, held, far), any
//! rows no chapter draws as plain tables (a `loadtest run`'s), then the sections with
//! a part of their own (the flash sale, past capacity, the sweep, the distance, the
//! fault grid; a report has only those it ran); then the claims, the instances, what
//! each strategy is, and the parameters. The pieces every chapter draws with (tables,
//! charts, escaping) are [`crate::html`]'s.

use crate::chapter::{Chapter, Read};
use crate::html::{escape, glance, table, time_split};
use crate::report::{Columns, Report};
use crate::section::Section;
use serde::Deserialize as _;
use std::fmt::Write;

/// Renders the whole report.
pub fn render(report: &Report) -> String {
    let mut html = head(report);
    html.push_str(&glance(report, &tabled(report)));
    html.push_str(&chapters(report));
    html.push_str(&claims_section(report));
    html.push_str(&instances_section(report));
    html.push_str(&strategies_section(report));
    let _ = write!(
        html,
        "<h2>Parameters</h2><pre>{}</pre></body></html>",
        escape(&serde_json::to_string_pretty(&report.parameters).unwrap_or_default())
    );
    html
}

/// One chapter as the page asks it: its HTML from a report, and which rows are its.
struct Drawer {
    html: fn(&Report) -> String,
    draws: fn(&Section) -> bool,
}

/// `C` as the page asks it.
const fn drawer<C: Chapter>() -> Drawer {
    Drawer {
        html: chapter::<C>,
        draws: C::draws,
    }
}

/// The demo's chapters of rows alone, in the order it runs them.
const OF_ROWS: [Drawer; 5] = [
    drawer::<crate::throughput::Throughput>(),
    drawer::<crate::durability::Durability>(),
    drawer::<crate::one_instance::OneInstance>(),
    drawer::<crate::held::Held>(),
    drawer::<crate::far::Far>(),
];

/// The chapters with a part of their own, in the order the demo and the subcommands
/// run them.
const WITH_PARTS: [Drawer; 5] = [
    drawer::<crate::flash::run::Flash>(),
    drawer::<crate::overload::run::Overload>(),
    drawer::<crate::sweep::run::Scaling>(),
    drawer::<crate::distance::run::AtDistance>(),
    drawer::<crate::chaos::run::Grid>(),
];

/// Every section as its chapter draws it, with the rows no chapter draws as plain
/// tables between the chapters of rows and those with parts.
fn chapters(report: &Report) -> String {
    let mut html = String::new();
    for drawer in &OF_ROWS {
        html.push_str(&(drawer.html)(report));
    }
    html.push_str(&undrawn(report));
    for drawer in &WITH_PARTS {
        html.push_str(&(drawer.html)(report));
    }
    html
}

/// One chapter's HTML, from the report's rows and its part (read back from the JSON
/// the report stores, as the book reads it).
fn chapter<C: Chapter>(report: &Report) -> String {
    let part = C::KEY
        .and_then(|key| report.parts.iter().find(|p| p.key == key))
        .map(|p| C::Part::deserialize(&p.json));
    let part = match part.transpose() {
        Ok(part) => part,
        Err(e) => {
            return format!(
                "<p class=\"bad\">Part {} unreadable: {}</p>",
                C::KEY.unwrap_or_default(),
                escape(&e.to_string())
            );
        }
    };
    C::html(&Read {
        results: &report.results,
        strategies: &report.strategies,
        claims: &report.claims,
        generated_at: report.generated_at,
        part: part.as_ref(),
    })
}

/// The sections of the results shown as tables of rows, in the order their first
/// row came: every one but those a chapter with a part draws in a layout of its own.
fn tabled(report: &Report) -> Vec<&Section> {
    sections(report, |s| !WITH_PARTS.iter().any(|d| (d.draws)(s)))
}

/// The sections of the results that `keep` keeps, in the order their first row came.
fn sections(report: &Report, keep: impl Fn(&Section) -> bool) -> Vec<&Section> {
    let mut sections: Vec<&Section> = Vec::new();
    for r in &report.results {
        if keep(&r.section) && !sections.contains(&&r.section) {
            sections.push(&r.section);
        }
    }
    sections
}

/// Whether a chapter draws rows of `section`.
fn drawn(section: &Section) -> bool {
    OF_ROWS
        .iter()
        .chain(&WITH_PARTS)
        .any(|d| (d.draws)(section))
}

/// The sections of the results no chapter draws, in the order their first row came:
/// each a plain table, with where the time went.
fn undrawn(report: &Report) -> String {
    let mut html = String::new();
    for section in sections(report, |s| !drawn(s)) {
        let rows = crate::report::section(&report.results, section);
        let columns = if rows.iter().all(|r| r.stock_never_limited()) {
            Columns::Throughput
        } else {
            Columns::Verdicts
        };
        let _ = write!(
            html,
            "<h2>Results ({})</h2>{}",
            escape(&section.to_string()),
            table(&rows, columns)
        );
        html.push_str(&time_split(&rows));
    }
    html
}

/// The page's head and style, its title, what the verdicts mean, and the servers.
fn head(report: &Report) -> String {
    let mut html = String::new();
    let (title, what) = report.parts.iter().find_map(|p| p.title).unwrap_or((
        "stock-locks: every strategy side by side",
        "One run of <code>./scripts/demo</code>",
    ));
    let _ = write!(
        html,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title><style>\
         body{{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0;font-size:14px}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}\
         td:first-child,th:first-child,td:last-child,th:last-child{{text-align:left}}.ok{{background:#d9f2e3}}.bad{{background:#f8d4d4}}\
         .confirmed{{color:#1d7a3f;font-weight:bold}}.refuted{{color:#b02020;font-weight:bold}}.inconclusive{{color:#8a6d00;font-weight:bold}}\
         table.grid{{font-size:12px}}table.grid td,table.grid th{{text-align:left;vertical-align:top;padding:3px 4px}}table.grid td:first-child{{min-width:170px}}.v{{display:block;padding:2px 5px;margin:2px 0;border-radius:3px;font-size:12px}}\
         .safe{{background:#cdebd7}}.refused{{background:#d3e2f7}}.unavailable{{background:#fbe3b5}}.erased,.missing{{background:#f5c2c2;font-weight:bold}}\
         .surprise{{outline:3px solid #b02020}}table.why td{{text-align:left;vertical-align:top}}.lesson{{border-left:4px solid #2e8b57;padding:0.5em 1em;background:#f4faf6}}\
         code{{background:#f3f3f3;padding:0 3px}}summary{{white-space:nowrap}}</style></head><body>\
         <h1>{title}</h1>\
         <p>{what} ({tool}); {cores} cores. Verdicts are read from the database after the requests \
         stopped: <b>lost</b> = ledger − (stock − left), sales the stock row never saw; <b>beyond stock</b> = units sold past the stock. \
         Green: neither happened. Red: stock was oversold.</p>",
        tool = escape(&report.tool),
        cores = report.machine.cores,
    );
    html.push_str(&listed("Servers", &report.machine.servers, ", "));
    html.push_str(&listed("Durability", &report.machine.durability, "; "));
    html
}

/// `<p>Title: name value, name value.</p>`, or nothing for an empty map.
fn listed(title: &str, map: &std::collections::BTreeMap<String, String>, sep: &str) -> String {
    if map.is_empty() {
        return String::new();
    }
    let items: Vec<String> = map
        .iter()
        .map(|(k, v)| format!("{} {}", escape(k), escape(v)))
        .collect();
    format!("<p>{title}: {}.</p>", items.join(sep))
}

/// The classic claims this run checked, and the rule they were judged by (none: no
/// section).
fn claims_section(report: &Report) -> String {
    let mut html = String::new();
    if !report.claims.is_empty() {
        html.push_str("<h2>The classic claims, checked by this run</h2><table><tr><th>claim</th><th>source</th><th>judged on</th><th>verdict</th><th>evidence</th></tr>");
        for c in &report.claims {
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}: {}</td><td class=\"{v}\">{v}</td><td>{}</td></tr>",
                escape(&c.claim),
                escape(&c.source),
                escape(&c.section),
                escape(&c.load),
                escape(&c.evidence),
                v = c.verdict
            );
        }
        let _ = write!(html, "</table><p>{}</p>", escape(&crate::rate::rule_text()));
    }
    html
}

/// Each service instance's peak memory (none: no section).
fn instances_section(report: &Report) -> String {
    let mut html = String::new();
    if !report.instances.is_empty() {
        html.push_str(
            "<h2>Service instances</h2><table><tr><th>instance</th><th>peak RSS (MiB)</th></tr>",
        );
        for i in &report.instances {
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{:.1}</td></tr>",
                escape(&i.name),
                i.peak_rss_kib as f64 / 1024.0
            );
        }
        html.push_str("</table>");
    }
    html
}

/// What each strategy of the report is, and when to use it, in the order they first
/// appear.
fn strategies_section(report: &Report) -> String {
    let mut html = String::from("<h2>The strategies</h2>");
    let mut seen: Vec<String> = Vec::new();
    let names = report
        .results
        .iter()
        .map(|r| &r.strategy)
        .chain(report.parts.iter().flat_map(|p| &p.strategies));
    for name in names {
        if seen.contains(name) {
            continue;
        }
        seen.push(name.clone());
        let (when, explanation) = match report.strategies.get(name) {
            Some(card) => (card.when_to_use.as_str(), card.explanation.as_str()),
            None if name == "baseline" => ("", BASELINE),
            None => ("", ""),
        };
        let _ = write!(
            html,
            "<h3 id=\"s-{name}\">{name}</h3><p>{}</p>",
            escape(explanation),
            name = escape(name)
        );
        if !when.is_empty() {
            let _ = write!(html, "<p><i>Use it when:</i> {}</p>", escape(when));
        }
    }
    html
}

/// What the baseline row is: it is `loadtest`'s own measurement, not a strategy of the
/// service (their paragraphs come with the report: [`crate::catalogue`]).
const BASELINE: &str = "The reference's transaction (the conditional UPDATE) driven directly over sqlx, no HTTP: the gap to the reference is the service's own overhead.";
