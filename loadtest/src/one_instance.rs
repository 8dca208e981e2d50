//! The one-instance section: an in-process lock works on one instance only; the claim
//! that ranks it against the database's locks is judged here.

use crate::chapter::{Chapter, Read};
use crate::demo::Stage;
use crate::markdown::rows::section_page;
use crate::markdown::{Facts, Pages};
use crate::plan::{Plan, first_product, plan};
use crate::report::{Columns, Expect, Row, print_table, section};
use crate::section::Section;
use stock_wire::Trait;

/// The in-process lock beside the database's locks, on the first plain instance.
pub struct OneInstance;

impl Chapter for OneInstance {
    type Stage = Stage;
    type Part = ();

    fn title(&self, _stage: &Stage) -> String {
        "one instance: the in-process lock where it works, beside the database's locks".into()
    }

    async fn run(&mut self, stage: &Stage, _before: &[Row]) -> anyhow::Result<Vec<Row>> {
        let one = stage.runner_on(&stage.plain[..1]);
        // Every one of them is safe on one instance: that is the point.
        let plans: Vec<Plan> = [Trait::ConditionalUpdate, Trait::RowLock, Trait::ProcessLock]
            .into_iter()
            .filter_map(|t| stage.first_wanted(t))
            .enumerate()
            .map(|(k, strategy)| {
                stage.timed(plan(
                    Section::OneInstance,
                    &strategy,
                    first_product(1, k),
                    &stage.args.load,
                    Expect::Safe,
                ))
            })
            .collect();
        one.run_in_rounds(&plans, stage.args.rounds, |round, k| {
            stage.say(&format!(
                "{}({}/{}) {}: {} s at concurrency {} on 1 instance ...",
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

    fn print(&self, stage: &Stage, rows: &[Row]) {
        print_table(
            &format!(
                "One instance: the in-process lock where it works ({} in flight, {} s per strategy, stock never the limit)",
                stage.args.load.concurrency, stage.seconds
            ),
            &section(rows, &Section::OneInstance),
            Columns::Throughput,
        );
    }

    fn draws(section: &Section) -> bool {
        section == &Section::OneInstance
    }

    fn html(report: &Read<'_, ()>) -> String {
        let rows = report.section(&Section::OneInstance);
        if rows.is_empty() {
            return String::new();
        }
        crate::html::throughput_section("One instance: the in-process lock where it works", &rows)
    }

    fn pages(report: &Read<'_, ()>, pages: &mut Pages, _facts: &mut Facts) {
        let rows = report.section(&Section::OneInstance);
        if rows.is_empty() {
            return;
        }
        let strategies: Vec<String> = report.strategies.names().map(str::to_string).collect();
        pages.insert(
            "demo/one-instance.md".to_string(),
            section_page(crate::demo::SOURCE, &rows, &strategies, "on loopback", true),
        );
    }
}
