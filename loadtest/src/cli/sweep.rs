//! `loadtest sweep`: every strategy across concurrencies and product layouts, drawn as
//! lines; with `--rtt-ms`, at each round-trip time. The lab and the two sections it
//! runs are the library's (`loadtest::sweep::run`, `loadtest::distance::run`).

use super::{server_versions, write_reports};
use anyhow::bail;
use loadtest::chapter::Chapter;
use loadtest::distance::run::AtDistance;
use loadtest::lab::Instance;
use loadtest::report::Report;
use loadtest::sweep::run::{Scaling, SweepArgs, SweepLab};
use serde_json::json;

pub async fn sweep(args: SweepArgs) -> anyhow::Result<()> {
    args.check()?;
    let mut reused = Vec::new();
    for path in &args.reuse {
        reused.extend(loadtest::report::rows_of(path)?);
    }
    let at_a_distance = !args.rtt_ms.is_empty();
    let concurrencies = match (args.concurrency.is_empty(), at_a_distance) {
        (false, _) => args.concurrency.clone(),
        (true, false) => loadtest::sweep::CONCURRENCIES.to_vec(),
        (true, true) => vec![64],
    };
    let widest = concurrencies.iter().copied().max().unwrap_or(1);
    let lab = SweepLab::start(&args, at_a_distance, widest).await?;
    let sweep = lab.sweep(&args, concurrencies, reused)?;
    let parameters = json!({
        "command": "sweep", "strategies": args.strategies, "concurrency": sweep.concurrencies,
        "products": args.products, "seconds": args.seconds, "instances": 2, "rtt_ms": args.rtt_ms,
        "reuse": args.reuse,
    });
    let report = if at_a_distance {
        let mut at_a_distance = AtDistance::new(sweep, args.rtt_ms.clone());
        run(&mut at_a_distance, &lab, parameters).await?
    } else {
        run(&mut Scaling::new(sweep), &lab, parameters).await?
    };
    let html_path = write_reports(&report, args.json.as_deref(), "sweep")?;
    println!("report: {}", html_path.display());
    println!(
        "sweep: {} cells in {:.0} s",
        report.results.len(),
        lab.started.elapsed().as_secs_f64()
    );
    drop(lab);
    if report.all_as_expected() {
        Ok(())
    } else {
        bail!("a strategy did something unexpected (see the report)")
    }
}

/// Runs `chapter` in the lab, prints its tables, and makes its report.
async fn run(
    chapter: &mut impl Chapter<Stage = SweepLab>,
    lab: &SweepLab,
    parameters: serde_json::Value,
) -> anyhow::Result<Report> {
    eprintln!("sweep: {} ...", chapter.title(lab));
    let rows = chapter.run(lab, &[]).await?;
    let servers = server_versions(&lab.db, &lab.env).await;
    chapter.print(lab, &rows);
    let mut report = Report::new(parameters, rows);
    report.machine.servers = servers;
    report.machine.durability = lab.stack.durability();
    report.instances = lab.instances.iter().map(Instance::info).collect();
    report.strategies = lab.catalogue.clone();
    chapter.report(&mut report);
    Ok(report)
}
