//! The throughput section: sales per second on one hot product, every seller side by
//! side, the compare-and-set at little contention, and the baseline without HTTP.
//!
//! Run, printed and drawn here; its book pages (the table, where the time goes, the
//! compare-and-set under contention) are `page.rs`.

mod page;

use crate::chapter::{Chapter, Read};
use crate::demo::Stage;
use crate::lab::ADMIN_TOKEN;
use crate::markdown::{Facts, Pages};
use crate::plan::{LoadArgs, Plan, first_product, plan};
use crate::report::{Columns, Expect, Row, print_table, section};
use crate::section::Section;
use sqlx::mysql::MySqlPoolOptions;
use std::fmt::Write as _;
use stock_wire::Trait;

/// The throughput section (and the contention claim's row measured beside it).
pub struct Throughput;

impl Chapter for Throughput {
    type Stage = Stage;
    type Part = ();

    fn title(&self, stage: &Stage) -> String {
        format!(
            "throughput: sales per second on one hot product, {} of {} s each, stock never the limit",
            crate::runner::rounds_text(stage.args.rounds),
            stage.seconds
        )
    }

    /// What a throughput round measures, in this order (every other round in
    /// reverse): every seller; the compare-and-set again at 4 in flight right after
    /// its own row (the contention claim compares the two round by round, so they are
    /// measured side by side); the baseline at the end: the reference's transaction
    /// (the conditional UPDATE) over sqlx, no HTTP, same concurrency, same time, as
    /// many connections as the two instances.
    async fn run(&mut self, stage: &Stage, _before: &[Row]) -> anyhow::Result<Vec<Row>> {
        let reference = stage.reference();
        let plans = plans(stage);
        let baseline = usize::from(stage.wanted("baseline"));
        let runner = stage.runner_on(&stage.plain);
        let load = &stage.args.load;
        let runs = crate::runner::in_rounds(
            plans.len() + baseline,
            stage.args.rounds,
            async |round, k| {
                let Some(plan) = plans.get(k) else {
                    stage.say(&format!(
                        "{}baseline ({reference} over sqlx, no HTTP) ...",
                        stage.round_text(round)
                    ));
                    return baseline_run(
                        &stage.client,
                        &stage.plain[0].base,
                        &stage.env["DATABASE_URL"],
                        load,
                        stage.seconds,
                    )
                    .await;
                };
                let against = match plan.section {
                    Section::Contention => format!(" (against {})", load.concurrency),
                    _ => String::new(),
                };
                stage.say(&format!(
                    "{}({}/{}) {}: {} s at concurrency {}{against} over 2 instances ...",
                    stage.round_text(round),
                    k + 1,
                    plans.len(),
                    plan.strategy,
                    stage.seconds,
                    plan.concurrency
                ));
                runner.run_fired(&plan.in_round(round)).await
            },
        )
        .await?;
        // The throughput section's rows, then the contention row: a table per
        // section, as the live page shows them.
        let (mut rows, contention): (Vec<Row>, Vec<Row>) = runs
            .into_iter()
            .filter_map(crate::runner::pooled_row)
            .map(|(_, row)| row)
            .partition(|row| row.section == Section::Throughput);
        rows.extend(contention);
        Ok(rows)
    }

    fn print(&self, stage: &Stage, rows: &[Row]) {
        let on_loopback = match stage.args.rtt_ms {
            Some(rtt) => format!("RTT {rtt} ms to every server"),
            None => "servers on loopback".to_string(),
        };
        print_table(
            &format!(
                "Throughput: one hot product, {} in flight over 2 instances, {} s per strategy, stock never the limit, {on_loopback}",
                stage.args.load.concurrency, stage.seconds,
            ),
            &section(rows, &Section::Throughput),
            Columns::Throughput,
        );
        let contention = section(rows, &Section::Contention);
        if !contention.is_empty() {
            print_table(
                "Optimistic CAS under little contention (one hot product, 4 in flight over 2 instances; 64 in flight is the throughput section's row)",
                &contention,
                Columns::Throughput,
            );
        }
    }

    fn draws(section: &Section) -> bool {
        matches!(section, Section::Throughput | Section::Contention)
    }

    fn html(report: &Read<'_, ()>) -> String {
        let mut html = String::new();
        let rows = report.section(&Section::Throughput);
        if !rows.is_empty() {
            html.push_str(&crate::html::throughput_section(
                "Throughput: sales per second on one hot product, stock never the limit",
                &rows,
            ));
        }
        let contention = report.section(&Section::Contention);
        if !contention.is_empty() {
            let _ = write!(
                html,
                "<h2>Optimistic CAS under contention</h2><p>The same product at 4 in flight \
                 (here) and at 64 (the throughput section): transactions per sale (tries/sale) grow with \
                 the number of buyers.</p>{}",
                crate::html::table(&contention, Columns::Throughput)
            );
        }
        html
    }

    fn pages(report: &Read<'_, ()>, pages: &mut Pages, facts: &mut Facts) {
        page::pages(report, pages, facts);
    }
}

/// Every seller's plan, and the compare-and-set's at 4 in flight right after its own.
fn plans(stage: &Stage) -> Vec<Plan> {
    let load = &stage.args.load;
    let mut plans: Vec<Plan> = stage
        .sellers()
        .iter()
        .enumerate()
        .map(|(k, strategy)| {
            stage.timed(plan(
                Section::Throughput,
                strategy,
                first_product(0, k),
                load,
                Expect::Safe,
            ))
        })
        .collect();
    if let Some(cas) = stage.first_wanted(Trait::CompareAndSet) {
        let mut low = stage.timed(plan(
            Section::Contention,
            &cas,
            first_product(3, 0),
            load,
            Expect::Safe,
        ));
        low.concurrency = 4;
        low.warmup = 4;
        let after = plans.iter().position(|p| p.strategy == cas);
        plans.insert(after.map_or(plans.len(), |i| i + 1), low);
    }
    plans
}

/// The baseline row: the reference's transaction (the conditional UPDATE) over sqlx,
/// no HTTP.
pub async fn baseline_run(
    client: &reqwest::Client,
    base: &str,
    database_url: &str,
    load: &LoadArgs,
    seconds: f64,
) -> anyhow::Result<(Row, crate::engine::Fired)> {
    let product = first_product(3, 1);
    crate::engine::restock(
        client,
        base,
        ADMIN_TOKEN,
        product,
        crate::plan::NEVER_SOLD_OUT,
        0,
    )
    .await?;
    // As many connections as the two instances' pools hold (32 each, stock-app's
    // default), opened before the clock starts.
    let connections = load.concurrency.clamp(1, 64) as u32;
    let db = MySqlPoolOptions::new()
        .max_connections(connections)
        .min_connections(connections)
        .connect(database_url)
        .await?;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let fired = crate::baseline::fire(
        &db,
        product,
        std::time::Duration::from_secs_f64(seconds),
        load.concurrency,
        &format!("base-{id}"),
    )
    .await;
    let verdict = crate::verify::verify(&db, &[product], &fired.acknowledged, 0).await?;
    db.close().await;
    let mut plan = plan(Section::Throughput, "baseline", product, load, Expect::Safe);
    plan.products = vec![product];
    plan.stock = crate::plan::NEVER_SOLD_OUT;
    Ok((Row::new(&plan, 0, &fired, verdict), fired))
}
