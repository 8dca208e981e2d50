//! The far section: the throughput section again with every server farther away, on
//! two more instances behind a second set of proxies.

use super::stage::{DemoSection, Stage};
use crate::cli::{first_product, plan};
use loadtest::report::section;
use loadtest::report::{Expect, Row};
use loadtest::section::Section;
use std::collections::BTreeMap;

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

impl DemoSection for Far {
    fn title(&self, _stage: &Stage) -> String {
        format!("throughput at {} ms from every server", self.rtt_ms)
    }

    async fn run(&mut self, stage: &Stage, _before: &[Row]) -> anyhow::Result<Vec<Row>> {
        let distance = stage.stack.distance(super::round_trip(self.rtt_ms))?;
        let far_env: BTreeMap<_, _> = distance.env().into_iter().collect();
        let far = stage
            .start_pair(&far_env, "far", &["--hold-ms", "0"])
            .await?;
        let runner = loadtest::runner::Runner {
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
                n.map_or("-".into(), |n| loadtest::rate::round(n.sales.per_second)),
                n.map_or("-".into(), |n| format!("{:.1}", n.latency_ms.p99)),
                loadtest::rate::round(f.sales.per_second),
                f.latency_ms.p99,
                n.map_or("-".into(), |n| format!(
                    "{:.2}",
                    f.sales.per_second / n.sales.per_second.max(1e-9)
                )),
                loadtest::report::by_kind(&f.round_trips_per_request())
            );
        }
        println!(
            "sales/s as in the throughput section (steady window); ratio = far / loopback; round trips counted by the proxies per request, sales and refusals alike"
        );
    }
}
