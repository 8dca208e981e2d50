//! The far section: the throughput section again with every server farther away, on
//! two more instances behind a second set of proxies.
//!
//! Run, printed and drawn here; its book page is `page.rs`.

mod page;

use crate::chapter::{Chapter, Read};
use crate::demo::Stage;
use crate::html::escape;
use crate::markdown::{Facts, Pages};
use crate::plan::{first_product, plan};
use crate::report::{Expect, Row, section};
use crate::section::Section;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The sellers at `rtt_ms` from every server, one round each: no claim is judged on
/// it.
pub struct Far {
    /// The round-trip time to every server, in ms.
    pub rtt_ms: f64,
}

impl Far {
    /// The section of its rows: `throughput, RTT 2 ms`.
    fn section(&self) -> Section {
        Section::Far {
            rtt_ms: self.rtt_ms,
        }
    }
}

impl Chapter for Far {
    type Stage = Stage;
    type Part = ();

    fn title(&self, _stage: &Stage) -> String {
        format!("throughput at {} ms from every server", self.rtt_ms)
    }

    async fn run(&mut self, stage: &Stage, _before: &[Row]) -> anyhow::Result<Vec<Row>> {
        let distance = stage.stack.distance(crate::lab::round_trip(self.rtt_ms))?;
        let far_env: BTreeMap<_, _> = distance.env().into_iter().collect();
        let far = stage
            .start_pair(&far_env, "far", &["--hold-ms", "0"])
            .await?;
        let runner = crate::runner::Runner {
            network: Some((self.rtt_ms, distance.round_trips())),
            ..stage.runner_on(&far)
        };
        let sellers = stage.sellers();
        let mut rows = Vec::new();
        for (k, strategy) in sellers.iter().enumerate() {
            let plan = stage.timed(plan(
                self.section(),
                strategy,
                first_product(5, k),
                &stage.args.load,
                Expect::Safe,
            ));
            stage.say(&format!(
                "({}/{}) {strategy} at {} ms from every server: {} s at concurrency {} ...",
                k + 1,
                sellers.len(),
                self.rtt_ms,
                stage.seconds,
                plan.concurrency
            ));
            rows.push(runner.run(&plan).await?);
        }
        for mut instance in far {
            instance.process.kill();
        }
        Ok(rows)
    }

    /// The throughput table's distance columns: each strategy on loopback (or the
    /// demo's own RTT) and at the far RTT, with the round trips per request counted
    /// there.
    fn print(&self, _stage: &Stage, rows: &[Row]) {
        let near = section(rows, &Section::Throughput);
        let far = section(rows, &self.section());
        if far.is_empty() {
            return;
        }
        let rtt_ms = self.rtt_ms;
        println!();
        println!(
            "Throughput at {rtt_ms} ms RTT to every server (every server behind a proxy; the same time, stock and concurrency) beside the throughput section's figures"
        );
        println!(
            "{:<12} {:>9} {:>9} {:>11} {:>11} {:>7}  round trips per request (counted)",
            "strategy", "sales/s", "p99 ms", "far sales/s", "far p99 ms", "ratio"
        );
        for f in far {
            let n = near.iter().find(|n| n.strategy == f.strategy);
            println!(
                "{:<12} {:>9} {:>9} {:>11} {:>11.1} {:>7}  {}",
                f.strategy,
                n.map_or("-".into(), |n| crate::rate::round(n.sales.per_second)),
                n.map_or("-".into(), |n| format!("{:.1}", n.latency_ms.p99)),
                crate::rate::round(f.sales.per_second),
                f.latency_ms.p99,
                n.map_or("-".into(), |n| format!(
                    "{:.2}",
                    f.sales.per_second / n.sales.per_second.max(1e-9)
                )),
                crate::report::by_kind(&f.round_trips_per_request())
            );
        }
        println!(
            "sales/s as in the throughput section (steady window); ratio = far / loopback; round trips counted by the proxies per request, sales and refusals alike"
        );
    }

    fn draws(section: &Section) -> bool {
        matches!(section, Section::Far { .. })
    }

    /// Beside the throughput section's figures, which it reads there.
    fn html(report: &Read<'_, ()>) -> String {
        let near = report.section(&Section::Throughput);
        let far: Vec<&Row> = report
            .results
            .iter()
            .filter(|r| Self::draws(&r.section))
            .collect();
        html_table(&near, &far)
    }

    fn pages(report: &Read<'_, ()>, pages: &mut Pages, _facts: &mut Facts) {
        page::pages(report, pages);
    }
}

/// The throughput section at a distance beside the loopback one: each strategy's
/// sales/s and p99 on both, the ratio, and the round trips per request the proxies counted.
fn html_table(near: &[&Row], far: &[&Row]) -> String {
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
