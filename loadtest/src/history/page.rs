//! A picture of a history that failed: a self-contained HTML page (no script from a
//! network, no font, no CDN) with one lane per client, each operation a bar from its
//! request to its answer, the locks as their holders logged them on lanes of their own
//! (a key's holders one after the other on one lane, two at once on two), the proving
//! operations of each anomaly outlined, and the operations
//! the search could put in order before it stuck underlined. Hovering a bar shows the
//! operation, its times and, for a deduction, the units the product had left before
//! and after it in the order found (where the search found one that far).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use stock_check::classes::Anomaly;
use stock_check::history::{DeductAnswer, Item, Record, RestockAnswer};

/// Height of a lane, its bar, and the width of the drawing, in pixels.
const LANE: f64 = 9.0;
const BAR: f64 = 6.0;
const WIDTH: f64 = 1800.0;
/// Left margin for the lane names.
const LEFT: f64 = 150.0;
/// Anomalies listed per class (each with its proving lines); the rest are counted.
const SHOWN: usize = 3;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The page for `records` and their `anomalies`, with the longest order the search
/// finds for each part (`history::ordered`).
pub fn draw(title: &str, records: &[Record], anomalies: &[Anomaly]) -> String {
    render(title, records, anomalies, &super::ordered(records))
}

/// The page for `records` (a history), its `anomalies`, and the operations the search
/// put in order (`ordered`: record index and the stock of each product of its part
/// after it, in order), titled `title`.
fn render(
    title: &str,
    records: &[Record],
    anomalies: &[Anomaly],
    ordered: &[(usize, Vec<(i64, i64)>)],
) -> String {
    let axis = Axis::of(records);
    let findings = Findings::of(records, anomalies, ordered);
    let hold_lane = hold_lanes(records);
    // Lanes: clients in order, then each lock key's.
    let mut lanes: BTreeMap<String, usize> = BTreeMap::new();
    let lane_of = |name: String, lanes: &mut BTreeMap<String, usize>| {
        let next = lanes.len();
        *lanes.entry(name).or_insert(next)
    };
    let mut bars = String::new();
    for (i, record) in records.iter().enumerate() {
        let Some(bar) = bar_of(i, record, &hold_lane) else {
            continue;
        };
        let lane = lane_of(bar.lane.clone(), &mut lanes);
        draw_bar(&mut bars, i, &bar, lane, &axis, &findings);
    }
    let height = 40.0 + lanes.len() as f64 * LANE;
    let mut names = String::new();
    for (name, lane) in &lanes {
        let _ = writeln!(
            names,
            "<text x=\"4\" y=\"{:.1}\" font-size=\"8\">{}</text>",
            30.0 + *lane as f64 * LANE + BAR,
            escape(name)
        );
    }
    let found = anomaly_list(anomalies);
    format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{title}</title>\
         <style>body{{font-family:sans-serif;margin:1em}} .scroll{{overflow:auto;border:1px solid #ccc}} \
         .key span{{display:inline-block;width:1em;height:0.7em;margin:0 0.3em 0 1em}}</style></head><body>\
         <h1>{title}</h1>\
         <p>One lane per client (a sequential process), each operation a bar from its request to its answer \
         (faded to the right edge: never answered); the locks as their holders logged them, each key's holders one after \
         the other on one lane, two at once on two. Outlined in red: the operations that prove an anomaly. \
         Underlined in yellow: the operations the search put in one order before no order could go on. Hover a bar for the operation, its times and the \
         stock before and after it in that order.</p>\
         <p class=\"key\"><span style=\"background:#2e7d32\"></span>sold<span style=\"background:#1565c0\"></span>duplicate\
         <span style=\"background:#9e9e9e\"></span>refused<span style=\"background:#ef6c00\"></span>failed\
         <span style=\"background:#6a1b9a\"></span>unknown<span style=\"background:#00838f\"></span>read\
         <span style=\"background:#000\"></span>restock<span style=\"background:#5d4037\"></span>lock held</p>\
         <ul>{found}</ul>\
         <div class=\"scroll\"><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w:.0}\" height=\"{height:.0}\">\
         <text x=\"{LEFT}\" y=\"14\" font-size=\"10\">+{first:.1} ms</text>\
         <text x=\"{right:.0}\" y=\"14\" font-size=\"10\" text-anchor=\"end\">+{total:.1} ms</text>\
         {names}{bars}</svg></div></body></html>",
        title = escape(title),
        w = LEFT + WIDTH + 10.0,
        right = LEFT + WIDTH,
        first = axis.ms(axis.start),
        total = axis.ms(axis.end),
    )
}

/// The time axis: from the first request to the last answer (or request), in
/// microseconds of the history's clock.
struct Axis {
    start: u64,
    end: u64,
}

impl Axis {
    /// The time axis of `records`: from the first request to the last answer (or
    /// request).
    fn of(records: &[Record]) -> Axis {
        let times: Vec<u64> = records
            .iter()
            .flat_map(|r| match r {
                Record::Hold {
                    from_us, until_us, ..
                } => vec![Some(*from_us), *until_us],
                other => match other.interval() {
                    Some((sent, answered)) => vec![Some(sent), answered],
                    None => Vec::new(),
                },
            })
            .flatten()
            .collect();
        let (start, end) = match (times.iter().min(), times.iter().max()) {
            (Some(&s), Some(&e)) if e > s => (s, e),
            (Some(&s), _) => (s, s + 1),
            _ => (0, 1),
        };
        Axis { start, end }
    }

    /// Where time `t` is drawn, in pixels from the left edge.
    fn x(&self, t: u64) -> f64 {
        LEFT + (t.saturating_sub(self.start)) as f64 / (self.end - self.start) as f64 * WIDTH
    }

    /// Time `t` in milliseconds since the axis starts.
    fn ms(&self, t: u64) -> f64 {
        (t.saturating_sub(self.start)) as f64 / 1000.0
    }
}

/// What the checker and the search found of each operation (by record index): the
/// anomalies it proves, the stock before and after it in the order found, and
/// whether the search put it in order.
struct Findings<'a> {
    proving: BTreeMap<usize, Vec<&'a str>>,
    before_after: BTreeMap<usize, String>,
    ordered: BTreeSet<usize>,
}

impl<'a> Findings<'a> {
    /// What `anomalies` and the order found (`ordered`) say of each of `records`.
    fn of(
        records: &[Record],
        anomalies: &'a [Anomaly],
        ordered: &[(usize, Vec<(i64, i64)>)],
    ) -> Findings<'a> {
        let proving: BTreeMap<usize, Vec<&str>> = {
            let mut by_op: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
            for a in anomalies {
                for op in &a.ops {
                    by_op.entry(*op).or_default().push(a.class.name());
                }
            }
            by_op
        };
        // Stock before and after each operation in the order found, per product.
        let mut before_after: BTreeMap<usize, String> = BTreeMap::new();
        let mut last: BTreeMap<i64, i64> = records
            .iter()
            .filter_map(|r| match r {
                Record::Init { product_id, stock } => Some((*product_id, *stock)),
                _ => None,
            })
            .collect();
        for (op, after) in ordered {
            let text: Vec<String> = after
                .iter()
                .map(|(p, s)| format!("product {p}: {} -> {s}", last.get(p).copied().unwrap_or(0)))
                .collect();
            for (p, s) in after {
                last.insert(*p, *s);
            }
            before_after.insert(*op, text.join("; "));
        }
        let ordered: BTreeSet<usize> = ordered.iter().map(|(op, _)| *op).collect();
        Findings {
            proving,
            before_after,
            ordered,
        }
    }
}

/// The lane of each lock hold (by record index) among its key's lanes.
///
/// A lock's holds packed on as few lanes as its key needs: holders one after the
/// other share a lane, two at once take two.
fn hold_lanes(records: &[Record]) -> BTreeMap<usize, usize> {
    let mut hold_lane: BTreeMap<usize, usize> = BTreeMap::new();
    let mut by_key: BTreeMap<&str, Vec<(u64, u64, usize)>> = BTreeMap::new();
    for (i, record) in records.iter().enumerate() {
        if let Record::Hold {
            key,
            from_us,
            until_us,
            ..
        } = record
        {
            let until = until_us.unwrap_or(u64::MAX);
            by_key.entry(key).or_default().push((*from_us, until, i));
        }
    }
    for holds in by_key.values_mut() {
        holds.sort_unstable();
        let mut free_at: Vec<u64> = Vec::new();
        for &(from, until, i) in holds.iter() {
            let lane = match free_at.iter().position(|&t| t <= from) {
                Some(lane) => lane,
                None => {
                    free_at.push(0);
                    free_at.len() - 1
                }
            };
            free_at[lane] = until;
            hold_lane.insert(i, lane);
        }
    }
    hold_lane
}

/// One operation's bar: the name of its lane, from its request to its answer (none:
/// never answered), its colour, and what it was.
struct Bar {
    lane: String,
    from: u64,
    until: Option<u64>,
    fill: &'static str,
    what: String,
}

/// The bar of record `i` (a lock hold on its lane of `hold_lane`); none for the stock
/// a product has before the first operation.
fn bar_of(i: usize, record: &Record, hold_lane: &BTreeMap<usize, usize>) -> Option<Bar> {
    let (lane, from, until, fill, what) = match record {
        Record::Deduct {
            client,
            request_id,
            items,
            sent_us,
            answered_us,
            answer,
            recorded,
        } => (
            format!("client {client:>5}"),
            *sent_us,
            *answered_us,
            deduct_fill(answer),
            deduct_what(request_id, items, answer, *recorded),
        ),
        Record::Restock {
            client,
            product_id,
            stock,
            sent_us,
            answered_us,
            answer,
        } => (
            format!("client {client:>5}"),
            *sent_us,
            *answered_us,
            "#000000",
            format!(
                "restock product {product_id} to {stock}{}",
                if *answer == RestockAnswer::Unknown {
                    " (no answer)"
                } else {
                    ""
                }
            ),
        ),
        Record::Read {
            client,
            product_id,
            sent_us,
            answered_us,
            stock,
        } => (
            format!("client {client:>5}"),
            *sent_us,
            *answered_us,
            "#00838f",
            format!(
                "read product {product_id}: {}",
                stock.map_or("no answer".to_string(), |s| format!("{s} left"))
            ),
        ),
        Record::Hold {
            request_id,
            key,
            token,
            from_us,
            until_us,
            lost,
        } => (
            format!("lock {key} #{}", hold_lane[&i]),
            *from_us,
            *until_us,
            "#5d4037",
            format!(
                "{key} held by {request_id}{}{}",
                token.map_or(String::new(), |t| format!(", token {t}")),
                if *lost {
                    ", until it learned it was lost"
                } else {
                    ""
                }
            ),
        ),
        Record::Init { .. } => return None,
    };
    Some(Bar {
        lane,
        from,
        until,
        fill,
        what,
    })
}

/// The colour of a deduction's bar, by its answer.
fn deduct_fill(answer: &DeductAnswer) -> &'static str {
    match answer {
        DeductAnswer::Sold => "#2e7d32",
        DeductAnswer::Duplicate => "#1565c0",
        DeductAnswer::Refused => "#9e9e9e",
        DeductAnswer::Failed => "#ef6c00",
        DeductAnswer::Unknown => "#6a1b9a",
    }
}

/// What a deduction was: its request id, its items, its answer, and whether the
/// ledger holds it.
fn deduct_what(
    request_id: &str,
    items: &[Item],
    answer: &DeductAnswer,
    recorded: Option<bool>,
) -> String {
    let items: Vec<String> = items
        .iter()
        .map(|it| format!("{} x product {}", it.quantity, it.product_id))
        .collect();
    format!(
        "deduct {request_id}: {}; answered {answer:?}{}",
        items.join(", "),
        match recorded {
            Some(true) => ", in the ledger",
            Some(false) => ", not in the ledger",
            None => "",
        }
    )
}

/// Draws the bar of record `i` on `lane` into `bars`: outlined when it proves an
/// anomaly, faded when never answered, underlined when the search put it in order,
/// with the operation, its times and what was found of it on hover.
fn draw_bar(bars: &mut String, i: usize, bar: &Bar, lane: usize, axis: &Axis, findings: &Findings) {
    let (from, until, fill, what) = (bar.from, bar.until, bar.fill, &bar.what);
    let y = 30.0 + lane as f64 * LANE;
    let (x0, x1) = (axis.x(from), until.map_or(LEFT + WIDTH, |u| axis.x(u)));
    let width = (x1 - x0).max(1.0);
    let classes = findings.proving.get(&i);
    let stroke = match classes {
        Some(_) => " stroke=\"#d50000\" stroke-width=\"2\"",
        None => "",
    };
    let opacity = if until.is_none() {
        " fill-opacity=\"0.35\""
    } else {
        ""
    };
    let mut tip = format!(
        "line {}: {what}\nsent +{:.3} ms, {}",
        i + 1,
        axis.ms(from),
        until.map_or("never answered".to_string(), |u| format!(
            "answered +{:.3} ms",
            axis.ms(u)
        ))
    );
    if let Some(stock) = findings.before_after.get(&i) {
        let _ = write!(tip, "\nin the order found: {stock}");
    }
    if let Some(classes) = classes {
        let _ = write!(tip, "\nproves: {}", classes.join(", "));
    }
    let _ = writeln!(
        bars,
        "<rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{width:.1}\" height=\"{BAR}\" fill=\"{fill}\"{opacity}{stroke}><title>{}</title></rect>",
        escape(&tip)
    );
    if findings.ordered.contains(&i) {
        let _ = writeln!(
            bars,
            "<rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{width:.1}\" height=\"1.5\" fill=\"#ffd600\"/>",
            y + BAR
        );
    }
}

/// Per class: how many, and the first few with their proving lines.
fn anomaly_list(anomalies: &[Anomaly]) -> String {
    let mut found = String::new();
    let mut classes: Vec<_> = anomalies.iter().map(|a| a.class).collect();
    classes.sort();
    classes.dedup();
    for class in classes {
        let of: Vec<&Anomaly> = anomalies.iter().filter(|a| a.class == class).collect();
        let _ = write!(found, "<li><b>{}</b> x {}<ul>", class.name(), of.len());
        for a in of.iter().take(SHOWN) {
            let lines: Vec<String> = a.ops.iter().map(|i| (i + 1).to_string()).collect();
            let _ = write!(
                found,
                "<li>{} (lines {})</li>",
                escape(&a.says),
                lines.join(", ")
            );
        }
        found.push_str("</ul></li>");
    }
    found
}
