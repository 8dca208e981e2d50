//! The flash sale's part of the HTML report, drawn from the report alone: its part
//! ([`FlashPart`]), the rows of its sections and the strategies' cards.

use super::FlashPart;
use crate::catalogue::Catalogue;
use crate::html::{bar_chart, escape};
use crate::plan::BUCKETS;
use crate::report::Row;
use crate::section::Section;
use std::fmt::Write;
use stock_wire::Trait;

/// The flash sale's HTML: the throughput table and chart, the sell-outs, the split
/// stock by buckets, and the rule its figures are judged by.
///
/// The strategies it names are those of `catalogue` the run measured in any
/// section: a run told `--strategies` names none it left out.
pub fn html(part: &FlashPart, results: &[Row], catalogue: &Catalogue) -> String {
    let ran = Catalogue(
        catalogue
            .0
            .iter()
            .filter(|c| results.iter().any(|r| r.strategy == c.name))
            .cloned()
            .collect(),
    );
    Drawn {
        part,
        results,
        catalogue: &ran,
    }
    .html()
}

/// What the flash sale is drawn from.
struct Drawn<'a> {
    part: &'a FlashPart,
    results: &'a [Row],
    catalogue: &'a Catalogue,
}

impl Drawn<'_> {
    fn html(&self) -> String {
        let mut html = self.throughput_html();
        html.push_str(&self.sell_out_html());
        if !self.part.buckets.is_empty() {
            html.push_str(&self.buckets_html());
        }
        let _ = write!(
            html,
            "<p>{}</p>",
            crate::html::escape(&crate::rate::rule_text())
        );
        html
    }

    /// The strategies of a trait, named as the service names them.
    fn named_html(&self, t: Trait) -> String {
        let names: Vec<String> = self
            .catalogue
            .with(t)
            .iter()
            .map(|c| format!("<code>{}</code>", escape(&c.name)))
            .collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    }

    /// The throughput run in HTML: what it measures, its table of limits per
    /// strategy, its sales chart and where the time went.
    fn throughput_html(&self) -> String {
        let o = self.part;
        let reference = self
            .catalogue
            .first_with(Trait::ConditionalUpdate)
            .map_or("the reference".to_string(), |c| escape(&c.name));
        let mut html = format!(
            "<h2>Flash sale: one hot product</h2><p>Every strategy safe across instances on one product whose stock is \
             never the limit: {} s of requests at {} over 2 instances ({}, a control that refuses every \
             overtaken request, is left out). <b>Sales/s</b> counts the 200 answers over the run's steady window \
             (after the first wave's answers, until the last request was sent), with its spread: the \
             interquartile range over ten slices of the window. Every other strategy passes one row lock (or one lock key) per sale; {} carries many sales per transaction, {} spreads them \
             over {BUCKETS} rows, {} sells from a Redis counter and records the sales afterwards \
             (<b>pending at the end</b>: sales answered but not yet in the database when the last buyer was answered). <b>Statements per sale</b> is MariaDB's own count (<code>Questions</code>) over the run; \
             <b>CPU</b> is percent of one core per process: where the machine's time went.</p>",
            o.seconds,
            o.rate
                .map_or(format!("concurrency {}", o.concurrency), |r| format!(
                    "{r:.0} requests/s (open loop, at most {} in flight)",
                    o.concurrency
                )),
            self.named_html(Trait::RefusesOvertaken),
            self.named_html(Trait::Batches),
            self.named_html(Trait::SplitsStock),
            self.named_html(Trait::RecordsLater),
        );
        let rows: Vec<&Row> = self
            .results
            .iter()
            .filter(|r| r.section == Section::FlashSale)
            .collect();
        let _ = write!(
            html,
            "<table><tr><th>strategy</th><th>sales/s (q1-q3)</th><th>× {reference} (range)</th><th>p50 ms</th><th>p99 ms</th><th>not sold (refused, busy, errors)</th>\
             <th>statements/sale</th><th>sales/transaction</th><th>pending at the end (recorded after)</th><th>CPU % (one core = 100)</th><th>verdict</th></tr>",
        );
        for (row, limits) in rows.iter().zip(&self.part.throughput) {
            let refused: u64 = row
                .responses
                .iter()
                .filter(|(k, _)| *k != "200")
                .map(|(_, n)| n)
                .sum();
            let cpu: Vec<String> = limits
                .cpu_percent
                .iter()
                .filter(|(_, p)| **p >= 1.0)
                .map(|(name, p)| format!("{} {p:.0}", escape(name)))
                .collect();
            let class = if row.verdict.is_clean() { "ok" } else { "bad" };
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{refused}</td><td>{:.2}</td><td>{:.1}</td>\
                 <td>{}</td><td>{}</td><td class=\"{class}\">{}</td></tr>",
                escape(&row.strategy),
                limits.sales.text(),
                limits.ratio().map_or("".into(), |r| r.text()),
                row.latency_ms.p50,
                row.latency_ms.p99,
                limits.statements_per_sale,
                limits.sales_per_transaction,
                if limits.pending_at_end > 0 {
                    format!("{} ({:.0} ms)", limits.pending_at_end, limits.drain_ms)
                } else {
                    String::new()
                },
                cpu.join(", "),
                escape(row.verdict_text()),
            );
        }
        html.push_str("</table>");
        html.push_str(&bar_chart(
            "Flash sale: sales per second, one hot product",
            "sales/s",
            &rows,
            |r| r.sales.per_second,
        ));
        html.push_str(&crate::html::time_split(&rows));
        html
    }

    /// The sell-outs in HTML: what they must show, and their table.
    fn sell_out_html(&self) -> String {
        // Every sell-out ran with the same stock, buyers and restock.
        let Some(o) = self.part.sell_out.first() else {
            return String::new();
        };
        let mut html = String::new();
        let _ = write!(
            html,
            "<h3>Sell-out: stock {}, {} buyers{}</h3><p>Exactly the stock must be sold, everyone else told 409, nobody \
             twice (the ledger decides); <b>history</b>: whether one order of every answer (and of the reads of what \
             was left) explains them all, as a single stock counter would have given them. <b>Overtaken</b>: per instance, buyers refused although a buyer who sent \
             later to the same instance got a unit (first come, first served would make it 0). Refusals are the subject \
             here: <b>by fast path</b> counts those the sold-out fast path gave without running the strategy, \
             <b>answers/s</b> all answers over the whole run.</p>\
             <table><tr><th>strategy</th><th>sold</th><th>409</th><th>by fast path</th><th>other</th><th>overtaken (per instance)</th><th>answers/s</th><th>p99 ms</th><th>exact</th><th>history</th></tr>",
            o.stock,
            o.buyers,
            match o.restocked {
                0 => String::new(),
                units => format!(
                    "; restocked to {units} once half the buyers were answered, the buyers in flight overlapping it, the rest sent after it"
                ),
            }
        );
        let sell_rows = self
            .results
            .iter()
            .filter(|r| r.section == Section::SellOut);
        for (s, row) in self.part.sell_out.iter().zip(sell_rows) {
            let overtaken: Vec<String> = s.overtaken.iter().map(u64::to_string).collect();
            let class = if s.exact { "ok" } else { "bad" };
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.1}</td><td class=\"{class}\">{}</td>{}</tr>",
                escape(&s.strategy),
                s.sold,
                s.refused,
                s.refused_by_fast_path,
                s.other,
                overtaken.join(" / "),
                s.answers_per_second,
                row.latency_ms.p99,
                if s.exact { "exact" } else { "NOT EXACT" },
                crate::html::history_cell(row.history.as_ref()),
            );
        }
        html.push_str("</table>");
        html
    }

    /// The splitting strategy's sales per second by number of buckets, in HTML.
    fn buckets_html(&self) -> String {
        let mut html = String::new();
        let _ = write!(
            html,
            "<h3>{} by number of buckets</h3><p>The same load; the product split into K rows at restock.</p>\
             <table><tr><th>buckets</th><th>sales/s (q1-q3)</th></tr>",
            self.named_html(Trait::SplitsStock),
        );
        for b in &self.part.buckets {
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td></tr>",
                b.buckets,
                b.sales.text()
            );
        }
        html.push_str("</table>");
        html
    }
}
