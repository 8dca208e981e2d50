//! What the HTML report is drawn with: tables of rows, charts as inline SVG (drawn
//! with `plotters`), escaping; and its first screen, [`glance()`] (the verdict, each
//! strategy on one line, the sales per second as bars, the claims). Each section draws
//! its own part with these ([`crate::chapter::Chapter::html`]); [`crate::page`] puts
//! the page together.

mod glance;

pub use glance::glance;

use crate::report::{Columns, Row};
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

/// A section of timed rows: its heading `title`, its table, the sales per second and
/// p99 as bars, and where the time went.
pub fn throughput_section(title: &str, rows: &[&Row]) -> String {
    let mut html = format!("<h2>{title}</h2>{}", table(rows, Columns::Throughput));
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
