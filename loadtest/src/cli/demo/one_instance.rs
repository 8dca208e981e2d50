//! The one-instance section: an in-process lock works on one instance only; the claim
//! that ranks it against the database's locks is judged here.

use super::stage::{DemoSection, Stage};
use crate::cli::{first_product, plan};
use loadtest::plan::Plan;
use loadtest::report::section;
use loadtest::report::{Columns, Expect, Row, print_table};
use loadtest::section::Section;
use stock_wire::Trait;

/// The in-process lock beside the database's locks, on the first plain instance.
pub struct OneInstance;

impl DemoSection for OneInstance {
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
}
