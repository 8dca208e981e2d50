//! The HTML report: one self-contained file (inline SVG charts drawn with `plotters`,
//! inline CSS, no script, no CDN) that opens offline.
//!
//! Its first screen is `glance` (the verdict, each strategy on one line, the sales
//! per second as bars, the claims); the sections' tables and charts follow.

mod glance;

use crate::report::{Columns, Report, Row};
use crate::section::Section;
use crate::timing::TimeSplit;
use plotters::prelude::*;
use std::fmt::Write;

/// Fonts `plotters` may measure text with (the SVG itself names `sans-serif` and the
/// browser draws it). Debian's `fonts-dejavu-core` provides the first.
const FONTS: [&str; 2] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

fn register_font() -> bool {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *REGISTERED.get_or_init(|| {
        FONTS.iter().any(|path| match std::fs::read(path) {
            Ok(bytes) => {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
            }
            Err(_) => false,
        })
    })
}

pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const NO_FONT: &str =
    "<p><em>(chart unavailable: no font to measure text with; install fonts-dejavu-core)</em></p>";

/// A horizontal bar chart: one bar per row, green when the row's verdict is clean.
pub fn bar_chart(title: &str, unit: &str, rows: &[&Row], value: impl Fn(&Row) -> f64) -> String {
    let names: Vec<&str> = rows.iter().map(|r| r.strategy.as_str()).collect();
    let bars: Vec<Vec<(f64, RGBAColor)>> = rows
        .iter()
        .map(|r| {
            let color = if r.verdict.is_clean() {
                RGBColor(46, 139, 87)
            } else {
                RGBColor(200, 40, 40)
            };
            vec![(value(r), color.mix(0.85))]
        })
        .collect();
    horizontal_bars(title, unit, &names, &bars, |total| format!("{total:.0}"))
}

/// One horizontal bar per name, each a stack of (length, colour) segments from 0, with
/// its total written at its end by `label`: every bar chart of the report.
fn horizontal_bars(
    title: &str,
    unit: &str,
    names: &[&str],
    bars: &[Vec<(f64, RGBAColor)>],
    label: impl Fn(f64) -> String,
) -> String {
    if names.is_empty() || !register_font() {
        return NO_FONT.into();
    }
    let totals: Vec<f64> = bars
        .iter()
        .map(|segments| segments.iter().map(|(length, _)| length).sum())
        .collect();
    let max = totals.iter().copied().fold(0.0, f64::max).max(1.0) * 1.15;
    let height = 60 + 34 * names.len() as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, height)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(110)
            .build_cartesian_2d(0.0..max, (0..names.len()).into_segmented());
        let Ok(mut chart) = chart else {
            return String::new();
        };
        let _ = chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(names.len())
            .x_desc(unit)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => names.get(*i).map_or(String::new(), |n| n.to_string()),
                _ => String::new(),
            })
            .draw();
        let segments = bars.iter().enumerate().flat_map(|(i, segments)| {
            segments.iter().scan(0.0, move |from, &(length, color)| {
                let mut bar = Rectangle::new(
                    [
                        (*from, SegmentValue::Exact(i)),
                        (*from + length, SegmentValue::Exact(i + 1)),
                    ],
                    color.filled(),
                );
                // A gap between neighbouring bars, so each reads as its own.
                bar.set_margin(5, 5, 0, 0);
                *from += length;
                Some(bar)
            })
        });
        let _ = chart.draw_series(segments);
        let _ = chart.draw_series(totals.iter().enumerate().map(|(i, &total)| {
            Text::new(
                label(total),
                (total, SegmentValue::CenterOf(i)),
                ("sans-serif", 13),
            )
        }));
        let _ = root.present();
    }
    svg
}

/// The colours of "Where the time goes", part by part (as [`TimeSplit::parts`]).
const PART_COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(150, 150, 150),
    RGBColor(210, 210, 210),
];

/// "Where the time goes": one stacked bar per strategy of the mean deduction (lock
/// wait, pool wait, the rest of the transaction, release, the rest of the service,
/// outside it), then the same figures as a table. Empty when no row has a split.
pub fn time_split(rows: &[&Row]) -> String {
    let rows: Vec<(&Row, TimeSplit)> = rows
        .iter()
        .filter_map(|r| r.time_split.map(|t| (*r, t)))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut html = String::from(
        "<h3>Where the time goes</h3><p>The mean deduction, from the instances' own \
         <code>/metrics</code> read before and after each run: waiting for the lock, waiting \
         for a database connection from the pool, the transaction (for a strategy without a \
         lock: all its work, retries included), releasing the lock, the rest of the service (parsing, idempotency, answering), \
         and what the client waited outside the service (HTTP, queues). The parts add up \
         to the client's mean latency.</p>",
    );
    let names: Vec<&str> = rows.iter().map(|(r, _)| r.strategy.as_str()).collect();
    let bars: Vec<Vec<(f64, RGBAColor)>> = rows
        .iter()
        .map(|(_, t)| {
            t.parts()
                .iter()
                .zip(PART_COLORS)
                .map(|((_, ms), color)| (*ms, color.to_rgba()))
                .collect()
        })
        .collect();
    html.push_str(&horizontal_bars(
        "Where the time goes (mean ms per deduction)",
        "ms",
        &names,
        &bars,
        |total| format!(" {total:.2}"),
    ));
    html.push_str("<p class=\"legend\">");
    for (name, RGBColor(r, g, b)) in TimeSplit::PARTS.iter().zip(PART_COLORS) {
        let _ = write!(
            html,
            "<span style=\"background:rgb({r},{g},{b})\">&nbsp;&nbsp;&nbsp;</span> {name} &nbsp; "
        );
    }
    html.push_str("</p>");
    html.push_str(
        "<table><tr><th>strategy</th><th>lock wait</th><th>transaction (with pool wait)</th><th>pool wait</th>\
         <th>release</th><th>rest</th><th>outside</th><th>total ms</th><th>deductions</th></tr>",
    );
    for (r, t) in &rows {
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td>\
             <td>{:.3}</td><td>{:.3}</td><td>{}</td></tr>",
            escape(&r.strategy),
            t.lock_ms,
            t.transaction_ms,
            t.pool_wait_ms,
            t.release_ms,
            t.rest_ms,
            t.outside_ms,
            t.total_ms(),
            t.deductions,
        );
    }
    html.push_str("</table>");
    html
}

/// A section's rows as a table: sales/s with its spread where stock never limits
/// ([`Columns::Throughput`]), what was refused and by whom where it runs out.
pub fn table(rows: &[&Row], columns: Columns) -> String {
    let rate_head = match columns {
        Columns::Throughput => "<th>sales/s (q1-q3)</th>",
        Columns::Verdicts => "<th>409 by the fast path</th>",
    };
    let mut html = format!(
        "<table><tr><th>strategy</th><th>concurrency</th>{rate_head}<th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th>\
         <th>sold</th><th>left</th><th>409</th><th>503 busy</th><th>other</th><th>tries/sale</th>\
         <th>lost</th><th>beyond stock</th><th>CPU per sale</th><th>history</th><th>verdict</th></tr>",
    );
    for r in rows {
        let other: u64 = r.other().map(|(_, n)| n).sum();
        let class = if r.verdict.is_clean() { "ok" } else { "bad" };
        let rate = match columns {
            Columns::Throughput => r.sales.text(),
            Columns::Verdicts => r.refused_by_fast_path.to_string(),
        };
        let _ = write!(
            html,
            "<tr><td><a href=\"#s-{name}\">{name}</a></td><td>{}</td><td>{rate}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td>\
             {}{}<td class=\"{class}\">{}</td></tr>",
            r.concurrency,
            r.latency_ms.p50,
            r.latency_ms.p90,
            r.latency_ms.p99,
            r.latency_ms.max,
            r.verdict.sold,
            r.verdict.remaining,
            r.responses.get("409").copied().unwrap_or(0),
            r.responses.get("503 busy").copied().unwrap_or(0),
            other,
            r.attempts_per_success,
            r.verdict.lost_updates,
            r.verdict.beyond_stock,
            cpu_cell(r),
            history_cell(r.history.as_ref()),
            escape(r.verdict_text()),
            name = escape(&r.strategy),
        );
    }
    html.push_str("</table>");
    let _ = write!(
        html,
        "<p><small>{}</small></p>",
        escape(match columns {
            Columns::Throughput => crate::report::THROUGHPUT_COUNTS,
            Columns::Verdicts => crate::report::VERDICT_COUNTS,
        })
    );
    html
}

/// CPU time per sale: the processes' total, the split by process folded under it (a
/// row stays one line high).
fn cpu_cell(r: &Row) -> String {
    let total: f64 = r.cpu_us_per_sale.values().sum();
    if total < 0.5 {
        return "<td></td>".to_string();
    }
    format!(
        "<td><details><summary>{total:.0} µs</summary><small>{}</small></details></td>",
        escape(&r.cpu_text())
    )
}

/// The checker's verdict on a history (a row's, a cell's), its anomalies, linked to
/// the history file.
pub fn history_cell(history: Option<&crate::history::Judged>) -> String {
    use crate::history::Said;
    let said = crate::history::verdict_text(history);
    let class = match history.map(|h| h.verdict) {
        Some(Said::Linearizable) => "ok",
        Some(Said::NotLinearizable) => "bad",
        Some(Said::Undecided | Said::Unobserved) | None => "",
    };
    let mut text = escape(said);
    if let Some(history) = history.filter(|h| !h.anomalies.is_empty()) {
        let _ = write!(
            text,
            "<br><small>{}</small>",
            escape(&history.anomalies_text())
        );
    }
    // The picture of a failing history, else the history itself.
    match history.and_then(|h| h.page.as_ref().or(h.file.as_ref())) {
        Some(file) => format!(
            "<td class=\"{class}\"><a href=\"{}\">{text}</a></td>",
            escape(file)
        ),
        None => format!("<td class=\"{class}\">{text}</td>"),
    }
}

/// The throughput section at a distance beside the loopback one: each strategy's
/// sales/s and p99 on both, the ratio, and the round trips per request the proxies counted.
pub fn distance_table(near: &[&Row], far: &[&Row]) -> String {
    let Some(rtt) = far.first().and_then(|r| r.rtt_ms) else {
        return String::new();
    };
    let mut html = format!(
        "<h2>Throughput at {rtt} ms from every server</h2><p>The throughput section again on two \
         more instances whose every server (MariaDB, Redis, ZooKeeper, etcd) sits behind a \
         proxy adding a {rtt} ms round trip, as across availability zones (the same time, \
         stock and concurrency; the loopback column is the throughput section's figure). On \
         loopback a round trip costs next to nothing and a strategy's cost is its CPU; here it \
         is the round trips it waits for, counted by the proxies.</p><table><tr><th>strategy</th>\
         <th>sales/s (loopback)</th><th>p99 ms</th><th>sales/s at {rtt} ms</th><th>p99 ms</th><th>ratio</th>\
         <th>round trips per request</th><th>verdict</th></tr>",
    );
    for f in far {
        let n = near.iter().find(|n| n.strategy == f.strategy);
        let class = if f.verdict.is_clean() { "ok" } else { "bad" };
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td>\
             <td class=\"{class}\">{}</td></tr>",
            escape(&f.strategy),
            n.map_or(String::new(), |n| n.sales.text()),
            n.map_or(String::new(), |n| format!("{:.1}", n.latency_ms.p99)),
            f.sales.text(),
            f.latency_ms.p99,
            n.map_or(String::new(), |n| format!(
                "{:.2}",
                f.sales.per_second / n.sales.per_second.max(1e-9)
            )),
            escape(&crate::report::by_kind(&f.round_trips_per_request())),
            escape(f.verdict_text()),
        );
    }
    html.push_str("</table>");
    html
}

/// What the baseline row is: it is `loadtest`'s own measurement, not a strategy of the
/// service (their paragraphs come with the report: [`crate::catalogue`]).
const BASELINE: &str = "The reference's transaction (the conditional UPDATE) driven directly over sqlx, no HTTP: the gap to the reference is the service's own overhead.";

/// Renders the whole report.
pub fn render(report: &Report) -> String {
    let mut html = head(report);
    html.push_str(&glance::glance(report));
    html.push_str(&result_sections(report));
    for part in &report.parts {
        html.push_str(&part.html);
    }
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
    if !report.machine.servers.is_empty() {
        let servers: Vec<String> = report
            .machine
            .servers
            .iter()
            .map(|(k, v)| format!("{} {}", escape(k), escape(v)))
            .collect();
        let _ = write!(html, "<p>Servers: {}.</p>", servers.join(", "));
    }
    html
}

/// The sections of the results no part of the report draws itself, in the order
/// their first row came: each a table, and charts where they tell something.
fn result_sections(report: &Report) -> String {
    let mut html = String::new();
    for section in report.own_sections() {
        let rows = crate::report::section(&report.results, section);
        html.push_str(&result_section(report, section, &rows));
    }
    html
}

/// One section of the results: its heading, its table of `rows`, and its charts.
fn result_section(report: &Report, section: &Section, rows: &[&Row]) -> String {
    let mut html = String::new();
    match section {
        Section::Throughput | Section::OneInstance => {
            let _ = write!(
                html,
                "<h2>{}</h2>{}",
                if section == &Section::Throughput {
                    "Throughput: sales per second on one hot product, stock never the limit"
                } else {
                    "One instance: the in-process lock where it works"
                },
                table(rows, Columns::Throughput)
            );
            html.push_str(&bar_chart(
                "Sales per second (steady window)",
                "sales/s",
                rows,
                |r| r.sales.per_second,
            ));
            html.push_str(&bar_chart("Latency p99 (milliseconds)", "ms", rows, |r| {
                r.latency_ms.p99
            }));
            html.push_str(&time_split(rows));
        }
        Section::Held => {
            let _ = write!(
                html,
                "<h2>What breaks: every deduction held {} ms between read and write</h2>\
                 <p>The same strategies on instances started with <code>--hold-ms</code>: a slow business step. The \
                 controls are expected to oversell here; every other strategy must stay green.</p>{}",
                rows[0].hold_ms,
                table(rows, Columns::Verdicts)
            );
            html.push_str(&time_split(rows));
        }
        Section::Contention => {
            let _ = write!(
                html,
                "<h2>Optimistic CAS under contention</h2><p>The same product at 4 in flight \
                 (here) and at 64 (the throughput section): transactions per sale (tries/sale) grow with \
                 the number of buyers.</p>{}",
                table(rows, Columns::Throughput)
            );
        }
        Section::Far { .. } => {
            let near: Vec<&Row> = report
                .results
                .iter()
                .filter(|r| r.section == Section::Throughput)
                .collect();
            html.push_str(&distance_table(&near, rows));
        }
        other => {
            let columns = if rows.iter().all(|r| r.stock_never_limited()) {
                Columns::Throughput
            } else {
                Columns::Verdicts
            };
            let _ = write!(
                html,
                "<h2>Results ({})</h2>{}",
                escape(&other.to_string()),
                table(rows, columns)
            );
            html.push_str(&time_split(rows));
        }
    }
    html
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

/// A line chart over categories on the x axis, described by `x_desc` and labelled
/// `xs`, evenly spaced (the sweep's concurrencies grow by 4×, its round-trip times are
/// chosen), one line per series; `log` draws the y axis logarithmic (latencies span decades).
pub fn line_chart(
    title: &str,
    unit: &str,
    (x_desc, xs): (&str, &[String]),
    series: &[(String, RGBColor, Vec<Option<f64>>)],
    log: bool,
) -> String {
    if series.is_empty() || !register_font() {
        return NO_FONT.into();
    }
    let values = series
        .iter()
        .flat_map(|(_, _, v)| v.iter().flatten().copied());
    let (min, max) = values.fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let last = xs.len().saturating_sub(1).max(1) as i32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (540, 360)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(38)
            .y_label_area_size(58);
        let x_label = |x: &i32| xs.get(*x as usize).cloned().unwrap_or_default();
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart;
                let _ = chart
                    .configure_mesh()
                    .x_labels(xs.len())
                    .x_label_formatter(&x_label)
                    .x_desc(x_desc)
                    .y_label_formatter(&|v: &f64| {
                        if v.abs() >= 10.0 {
                            format!("{v:.0}")
                        } else {
                            format!("{v:.1}")
                        }
                    })
                    .y_desc(unit)
                    .draw();
                for (_, color, points) in series {
                    let line: Vec<(i32, f64)> = points
                        .iter()
                        .enumerate()
                        .filter_map(|(i, v)| v.map(|v| (i as i32, v)))
                        .collect();
                    let _ = chart.draw_series(LineSeries::new(line.clone(), color.stroke_width(2)));
                    let _ = chart
                        .draw_series(line.into_iter().map(|p| Circle::new(p, 3, color.filled())));
                }
            }};
        }
        if log {
            let lo = (min.max(0.01) / 1.5).max(0.01);
            if let Ok(chart) =
                builder.build_cartesian_2d(0..last, (lo..max.max(lo) * 1.5).log_scale())
            {
                draw!(chart);
            }
        } else if let Ok(chart) = builder.build_cartesian_2d(0..last, 0.0..max.max(1.0) * 1.1) {
            draw!(chart);
        }
        let _ = root.present();
    }
    svg
}

/// An HTML table: the mode column kept on one line, the last cell green when the row's
/// flag holds, red otherwise.
pub(crate) fn html_rows(
    columns: &[(&str, usize)],
    rows: impl Iterator<Item = (Vec<String>, bool)>,
) -> String {
    let mut html = String::from("<table><tr>");
    for (heading, _) in columns {
        let _ = write!(html, "<th>{}</th>", escape(heading));
    }
    html.push_str("</tr>");
    for (cells, good) in rows {
        html.push_str("<tr>");
        for (i, cell) in cells.iter().enumerate() {
            let attr = match i {
                1 => " style=\"white-space:nowrap\"".to_string(),
                last if last + 1 == cells.len() => {
                    format!(" class=\"{}\"", if good { "ok" } else { "bad" })
                }
                _ => String::new(),
            };
            let _ = write!(html, "<td{attr}>{}</td>", escape(cell));
        }
        html.push_str("</tr>");
    }
    html.push_str("</table>");
    html
}
