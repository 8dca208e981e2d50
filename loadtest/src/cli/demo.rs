//! `loadtest demo` (what `./scripts/demo` runs): start everything, run each strategy on
//! one hot product, compare.
//!
//! One setup, one figure: every throughput setup is timed with stock never the limit
//! and measured in one series of rounds (sales per second over its steady windows,
//! strategy after strategy, round after round, the rounds pooled: [`loadtest::rate`]),
//! and the claims compare figures of the same rounds, round by round. The far section
//! (`--far-rtt-ms`) runs one round: no claim is judged on it. Where another section
//! needs the same setup (the far table's loopback column, the contention claim's 64 in
//! flight, the capacity past which the overload runs), it reads that row. The sections
//! whose stock runs out (what breaks, the sell-out) show what was sold and refused,
//! never a rate of answers as a throughput.
//!
//! # Sections
//! Each section is a [`Chapter`] in a folder of the library's, run on one [`Stage`]
//! (the servers, two plain instances, the catalogue, the live page), in this order:
//! throughput, what durability costs, one instance, held, far, the flash sale, past
//! capacity
//! ([`loadtest::demo`] says what each measures).

use super::{parameters, server_versions, write_reports};
use anyhow::bail;
use loadtest::chapter::Chapter;
use loadtest::demo::{DemoArgs, Stage};
use loadtest::durability::Durability;
use loadtest::far::Far;
use loadtest::flash::run::Flash;
use loadtest::held::Held;
use loadtest::live::Live;
use loadtest::one_instance::OneInstance;
use loadtest::overload::run::Overload;
use loadtest::report::{Report, Row};
use loadtest::throughput::Throughput;

/// Runs the demo: starts everything, runs each section in turn, prints their tables,
/// writes the report and says whether every strategy behaved as expected.
pub async fn demo(args: DemoArgs) -> anyhow::Result<()> {
    let stage = Stage::start(args).await?;
    // Two more instances, started with --hold-ms for the section that shows what
    // breaks.
    let mut held = Held::start(&stage).await?;
    stage.say(&format!(
        "servers and 4 stock-app instances up in {:.1} s",
        stage.started.elapsed().as_secs_f64()
    ));
    let mut far = (stage.far_rtt_ms > 0.0).then_some(Far {
        rtt_ms: stage.far_rtt_ms,
    });
    let mut durability = (stage.args.full || stage.args.durability_cost).then_some(Durability);
    let mut flash = (!stage.args.no_flash_sale).then(Flash::default);
    let mut overload = Overload::new(&stage);
    stage.expect_sections(
        3 + usize::from(durability.is_some())
            + usize::from(far.is_some())
            + usize::from(flash.is_some())
            + usize::from(overload.is_some()),
    );

    let mut rows: Vec<Row> = Vec::new();
    stage.run(&mut Throughput, &mut rows).await?;
    if let Some(durability) = &mut durability {
        stage.run(durability, &mut rows).await?;
    }
    stage.run(&mut OneInstance, &mut rows).await?;
    stage.run(&mut held, &mut rows).await?;
    if let Some(far) = &mut far {
        stage.run(far, &mut rows).await?;
    }
    if let Some(flash) = &mut flash {
        stage.run(flash, &mut rows).await?;
    }
    if let Some(overload) = &mut overload {
        stage.run(overload, &mut rows).await?;
    }
    let servers = server_versions(&stage.db, &stage.env).await;
    let kept = stage.stack.durability();
    stage.db.close().await;

    Throughput.print(&stage, &rows);
    if let Some(durability) = &durability {
        durability.print(&stage, &rows);
    }
    OneInstance.print(&stage, &rows);
    held.print(&stage, &rows);
    if let Some(far) = &far {
        far.print(&stage, &rows);
    }
    if let Some(flash) = &flash {
        flash.print(&stage, &rows);
    }
    if let Some(overload) = &overload {
        overload.print(&stage, &rows);
    }

    let mut report = Report::new(parameters(&stage.args.load, 2, stage.args.hold_ms), rows);
    report.claims = loadtest::claims::check(&report.results, &stage.catalogue);
    report.strategies = stage.catalogue.clone();
    report.instances = stage.plain_info();
    Throughput.report(&mut report);
    if let Some(durability) = &durability {
        durability.report(&mut report);
    }
    OneInstance.report(&mut report);
    held.report(&mut report);
    if let Some(far) = &far {
        far.report(&mut report);
    }
    if let Some(flash) = &flash {
        flash.report(&mut report);
    }
    if let Some(overload) = &overload {
        overload.report(&mut report);
    }
    report.machine.servers = servers;
    report.machine.durability = kept;
    let (args, live) = stage.stop();
    finish(&report, &args, live).await
}

/// Prints the claims and the instances' memory, writes the reports and says the
/// verdict; with a live page, waits for Ctrl-C once the page links the report.
async fn finish(report: &Report, args: &DemoArgs, live: Option<Live>) -> anyhow::Result<()> {
    println!();
    for claim in &report.claims {
        println!(
            "claim: {} -> {} (on {}: {}; {})",
            claim.claim, claim.verdict, claim.section, claim.load, claim.evidence
        );
    }
    for instance in &report.instances {
        println!(
            "instance {}: peak RSS {:.1} MiB",
            instance.name,
            instance.peak_rss_kib as f64 / 1024.0
        );
    }
    let html_path = write_reports(report, args.load.json.as_deref(), "demo")?;
    let outcome = outcome(report, &html_path, args.hold_ms);
    if let Some(live) = &live {
        live.done(
            html_path.clone(),
            html_path.with_extension("json"),
            outcome.is_ok(),
        );
        eprintln!("demo: the live page links the report; it stays up until Ctrl-C");
        tokio::signal::ctrl_c().await?;
    }
    outcome
}

/// The demo's last words: the verdict, and an error naming what was unexpected.
fn outcome(report: &Report, html_path: &std::path::Path, hold_ms: u64) -> anyhow::Result<()> {
    if report.all_as_expected() {
        println!(
            "verdict: every strategy behaved as expected: the safe ones never oversold, \
             and the controls oversold when held {} ms between read and write (checked from the ledger)",
            hold_ms
        );
        println!("report: {}", html_path.display());
        Ok(())
    } else {
        println!("report: {}", html_path.display());
        let unexpected: Vec<String> = report
            .results
            .iter()
            .filter(|r| !r.as_expected)
            .map(|r| format!("{} ({})", r.strategy, r.section))
            .chain(
                report
                    .parts
                    .iter()
                    .filter(|p| !p.as_expected)
                    .map(|p| p.key.to_string()),
            )
            .collect();
        bail!("unexpected outcome: {}", unexpected.join(", "))
    }
}
