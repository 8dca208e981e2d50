//! What breaks: every strategy on two instances that hold each deduction between its
//! read and its write, with stock that runs out.

use crate::chapter::{Chapter, Read};
use crate::demo::Stage;
use crate::lab::Instance;
use crate::markdown::rows::section_page;
use crate::markdown::{Facts, Pages};
use crate::plan::{first_product, plan};
use crate::report::{Columns, Expect, InstanceInfo, Report, Row, print_table, section};
use crate::section::Section;

/// The held section, with its two instances started with `--hold-ms`.
pub struct Held {
    /// The held instances, until the section is done.
    instances: Vec<Instance>,
    /// The held instances as the report lists them, read before they stopped.
    info: Vec<InstanceInfo>,
}

impl Held {
    /// Starts the two held instances (at the demo's start, beside the plain ones).
    pub async fn start(stage: &Stage) -> anyhow::Result<Held> {
        let hold = stage.args.hold_ms.to_string();
        let instances = stage
            .start_pair(&stage.env, "held", &["--hold-ms", &hold])
            .await?;
        Ok(Held {
            instances,
            info: Vec::new(),
        })
    }
}

impl Chapter for Held {
    type Stage = Stage;
    type Part = ();

    fn title(&self, _stage: &Stage) -> String {
        "what breaks: every deduction held between read and write, stock that runs out".into()
    }

    async fn run(&mut self, stage: &Stage, _before: &[Row]) -> anyhow::Result<Vec<Row>> {
        let args = &stage.args;
        let runner = stage.runner_on(&self.instances);
        let all: Vec<(String, bool)> = stage
            .catalogue
            .safety()
            .into_iter()
            .filter(|(name, _)| stage.wanted(name))
            .collect();
        let mut rows = Vec::new();
        for (k, (strategy, safe)) in all.iter().enumerate() {
            // Two instances: only strategies safe across instances must hold; the
            // controls must oversell.
            let expect = if *safe {
                Expect::Safe
            } else {
                Expect::Oversells
            };
            let mut plan = plan(
                Section::Held,
                strategy,
                first_product(2, k),
                &args.load,
                expect,
            );
            plan.server_hold_ms = args.hold_ms;
            // Reads of what is left beside the deductions: a lost update shows in them
            // (a stock that no order of the sales explains) before the ledger is read.
            plan.read_every = plan
                .read_every
                .or(Some(std::time::Duration::from_millis(5)));
            // Not timed: a number of requests at a stock that runs out.
            plan.duration = None;
            plan.requests = args.load.requests;
            stage.say(&format!(
                "({}/{}) {strategy} (hold {} ms): {} requests at concurrency {} over 2 instances, stock {} ...",
                k + 1,
                all.len(),
                args.hold_ms,
                plan.requests,
                plan.concurrency,
                plan.stock
            ));
            rows.push(runner.run(&plan).await?);
        }
        // The held instances are done: stopped now, their connections and prepared
        // statements with them.
        self.info = self.instances.iter().map(Instance::info).collect();
        self.instances.clear();
        Ok(rows)
    }

    fn print(&self, stage: &Stage, rows: &[Row]) {
        let args = &stage.args;
        print_table(
            &format!(
                "What breaks: {} requests per strategy at {} in flight over 2 instances started with --hold-ms {h} (every deduction waits {h} ms between read and write), stock {}",
                args.load.requests,
                args.load.concurrency,
                args.load.stock,
                h = args.hold_ms
            ),
            &section(rows, &Section::Held),
            Columns::Verdicts,
        );
    }

    fn report(&self, report: &mut Report) {
        report.instances.extend(self.info.iter().cloned());
    }

    fn draws(section: &Section) -> bool {
        section == &Section::Held
    }

    fn html(report: &Read<'_, ()>) -> String {
        let rows = report.section(&Section::Held);
        let Some(first) = rows.first() else {
            return String::new();
        };
        let mut html = format!(
            "<h2>What breaks: every deduction held {} ms between read and write</h2>\
             <p>The same strategies on instances started with <code>--hold-ms</code>: a slow business step. The \
             controls are expected to oversell here; every other strategy must stay green.</p>{}",
            first.hold_ms,
            crate::html::table(&rows, Columns::Verdicts)
        );
        html.push_str(&crate::html::time_split(&rows));
        html
    }

    fn pages(report: &Read<'_, ()>, pages: &mut Pages, _facts: &mut Facts) {
        let rows = report.section(&Section::Held);
        if rows.is_empty() {
            return;
        }
        let strategies: Vec<String> = report.strategies.names().map(str::to_string).collect();
        let title = "every deduction held between read and write (`--hold-ms`)";
        pages.insert(
            "demo/held.md".to_string(),
            section_page(crate::demo::SOURCE, &rows, &strategies, title, false),
        );
    }
}
