//! The durability section: what an fsync at every COMMIT costs each strategy.
//!
//! The testbed's MariaDB fsyncs its redo log at every COMMIT
//! (`innodb_flush_log_at_trx_commit=1`), as ZooKeeper and etcd fsync their logs before
//! they answer a write: a sale confirmed is on disk, wherever it was decided. This
//! section runs the throughput section's sellers again, on the same two instances and
//! the same load, with MariaDB told (`SET GLOBAL`) to write its redo log at COMMIT and
//! fsync it once a second (`=2`), the setting many benchmarks run with. A MariaDB
//! process that dies loses nothing either way; an operating-system crash or a power
//! cut loses up to a second of confirmed sales with `=2`.
//!
//! Every strategy writes its sale and its ledger row to MariaDB, so every one pays the
//! fsync; what differs is how many COMMITs a sale costs (a batch pays one for many
//! sales) and what else a sale waits for (a lock service's own fsync is not changed
//! here). The table puts each strategy's two figures side by side.

use crate::chapter::{Chapter, Read};
use crate::demo::Stage;
use crate::html::escape;
use crate::markdown::rows::{load_shape, verdict, window_text};
use crate::markdown::{Facts, Pages, banner, linked, num, table};
use crate::plan::{Plan, first_product, plan};
use crate::report::{Expect, Row, section};
use crate::section::Section;
use anyhow::Context as _;
use std::fmt::Write as _;

/// The sellers again with MariaDB not fsyncing at COMMIT, in the throughput section's
/// rounds.
pub struct Durability;

/// MariaDB's `innodb_flush_log_at_trx_commit` during the section: the redo log written
/// to the operating system at COMMIT, fsynced once a second.
const NO_FSYNC: u8 = 2;

impl Chapter for Durability {
    type Stage = Stage;
    type Part = ();

    fn title(&self, _stage: &Stage) -> String {
        "what durability costs: the throughput section with MariaDB not fsyncing at COMMIT".into()
    }

    async fn run(&mut self, stage: &Stage, _before: &[Row]) -> anyhow::Result<Vec<Row>> {
        let was: u8 = sqlx::query_scalar("SELECT @@GLOBAL.innodb_flush_log_at_trx_commit")
            .fetch_one(&stage.db)
            .await?;
        set_flush(stage, NO_FSYNC).await?;
        let rows = measure(stage).await;
        // Put back whatever the outcome: the sections after this one measure the
        // setting the report states. (A run cancelled in between leaves it changed;
        // its MariaDB is the testbed's own and goes with it.)
        let restored = set_flush(stage, was).await;
        let rows = rows?;
        restored.context("putting innodb_flush_log_at_trx_commit back")?;
        Ok(rows)
    }

    fn print(&self, _stage: &Stage, rows: &[Row]) {
        let with = section(rows, &Section::Throughput);
        let without = section(rows, &Section::NoFsync);
        if without.is_empty() {
            return;
        }
        println!();
        println!(
            "What durability costs: the throughput section's figure (MariaDB fsyncs at every COMMIT) beside the same load with MariaDB fsyncing once a second"
        );
        println!(
            "{:<12} {:>14} {:>14} {:>8}",
            "strategy", "fsync sales/s", "no-fsync", "ratio"
        );
        for w in without {
            let f = with.iter().find(|f| f.strategy == w.strategy);
            println!(
                "{:<12} {:>14} {:>14} {:>8}",
                w.strategy,
                f.map_or("-".into(), |f| crate::rate::round(f.sales.per_second)),
                crate::rate::round(w.sales.per_second),
                f.map_or("-".into(), |f| format!("{:.2}", ratio(f, w))),
            );
        }
        println!("ratio = with fsync / without: what the fsync at COMMIT leaves of each");
    }

    fn draws(section: &Section) -> bool {
        section == &Section::NoFsync
    }

    fn html(report: &Read<'_, ()>) -> String {
        let with = report.section(&Section::Throughput);
        let without = report.section(&Section::NoFsync);
        if without.is_empty() {
            return String::new();
        }
        let mut html = String::from(
            "<h2>What durability costs</h2><p>The throughput section's figure, with MariaDB \
             fsyncing its redo log at every COMMIT (as ZooKeeper and etcd fsync theirs), beside \
             the same load with MariaDB fsyncing once a second \
             (<code>innodb_flush_log_at_trx_commit=2</code>: an operating-system crash loses \
             up to a second of confirmed sales).</p><table><tr><th>strategy</th>\
             <th>sales/s, fsync at COMMIT</th><th>sales/s, fsync once a second</th>\
             <th>with / without</th><th>verdict</th></tr>",
        );
        for w in without {
            let f = with.iter().find(|f| f.strategy == w.strategy);
            let class = if w.verdict.is_clean() { "ok" } else { "bad" };
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{}</td></tr>",
                escape(&w.strategy),
                f.map_or(String::new(), |f| f.sales.text()),
                w.sales.text(),
                f.map_or(String::new(), |f| format!("{:.2}", ratio(f, w))),
                escape(w.verdict_text()),
            );
        }
        html.push_str("</table>");
        html
    }

    fn pages(report: &Read<'_, ()>, pages: &mut Pages, _facts: &mut Facts) {
        let with = report.section(&Section::Throughput);
        let without = report.section(&Section::NoFsync);
        if without.is_empty() {
            return;
        }
        let mut page = banner(crate::demo::SOURCE);
        let _ = writeln!(
            page,
            "*{}; the throughput section's figure, MariaDB fsyncing its redo log at every COMMIT, against the same load with MariaDB fsyncing it once a second (`innodb_flush_log_at_trx_commit=2`), measured over {}.*\n",
            load_shape(&with),
            window_text(&without),
        );
        let body: Vec<Vec<String>> = without
            .iter()
            .map(|w| {
                let f = with.iter().find(|f| f.strategy == w.strategy);
                vec![
                    linked(&w.strategy),
                    f.map_or(String::new(), |f| f.sales.text()),
                    w.sales.text(),
                    f.map_or(String::new(), |f| format!("{}×", num(ratio(f, w)))),
                    verdict(w),
                ]
            })
            .collect();
        page.push_str(&table(
            &[
                "strategy",
                ">sales/s, fsync at COMMIT (q1–q3)",
                ">sales/s, fsync once a second (q1–q3)",
                ">with / without",
                "verdict",
            ],
            &body,
        ));
        pages.insert("demo/durability.md".to_string(), page);
    }
}

/// What the fsync leaves of a strategy's rate: with it over without it.
fn ratio(with: &Row, without: &Row) -> f64 {
    with.sales.per_second / without.sales.per_second.max(1e-9)
}

/// Sets MariaDB's `innodb_flush_log_at_trx_commit` for every connection from now on.
async fn set_flush(stage: &Stage, value: u8) -> anyhow::Result<()> {
    sqlx::query(&format!(
        "SET GLOBAL innodb_flush_log_at_trx_commit = {value}"
    ))
    .execute(&stage.db)
    .await?;
    Ok(())
}

/// Every seller at the throughput section's load, in its rounds.
async fn measure(stage: &Stage) -> anyhow::Result<Vec<Row>> {
    let sellers = stage.sellers();
    let plans: Vec<Plan> = sellers
        .iter()
        .enumerate()
        .map(|(k, strategy)| {
            stage.timed(plan(
                Section::NoFsync,
                strategy,
                first_product(8, k),
                &stage.args.load,
                Expect::Safe,
            ))
        })
        .collect();
    let runner = stage.runner_on(&stage.plain);
    runner
        .run_in_rounds(&plans, stage.args.rounds, |round, k| {
            stage.say(&format!(
                "{}({}/{}) {} with MariaDB fsyncing once a second: {} s at concurrency {} ...",
                stage.round_text(round),
                k + 1,
                plans.len(),
                plans[k].strategy,
                stage.seconds,
                plans[k].concurrency
            ))
        })
        .await
}
