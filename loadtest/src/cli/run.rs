//! `loadtest run`: load running services, strategy by strategy, verified from the database.

use super::{parameters, write_json};
use anyhow::bail;
use loadtest::plan::{LoadArgs, first_product, plan};
use loadtest::report::{Columns, Expect, Report, Row, print_table};
use loadtest::runner::Runner;
use loadtest::section::Section;
use sqlx::mysql::MySqlPoolOptions;

#[derive(clap::Args)]
pub struct RunArgs {
    /// Service base URLs (repeat or comma-separate); requests go round-robin.
    #[arg(long = "url", required = true, value_delimiter = ',')]
    pub urls: Vec<String>,
    /// The services' database, read directly for the verdict.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// The services' admin token (to restock).
    #[arg(long, env = "ADMIN_TOKEN")]
    pub admin_token: String,
    /// Per-request hold between read and write (a test hook: the services must run
    /// with --enable-test-hooks).
    #[arg(long)]
    pub hold_ms: Option<u64>,
    #[command(flatten)]
    pub load: LoadArgs,
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let db = MySqlPoolOptions::new()
        .max_connections(2)
        .connect(&args.database_url)
        .await?;
    let client = loadtest::lab::http_client(args.load.concurrency)?;
    let runner = Runner {
        histories: Some(loadtest::history::folder(args.load.json.as_deref(), "run")?),
        histories_checked: !args.load.no_history,
        ..Runner::new(client, db, args.urls.clone(), &args.admin_token)
    };
    let mut rows = Vec::new();
    let mut capacities = Vec::new();
    let catalogue = runner.strategies().await?;
    for (i, (name, safe)) in catalogue.safety().into_iter().enumerate() {
        if !args.load.strategies.is_empty() && !args.load.strategies.contains(&name) {
            continue;
        }
        let expect = if safe { Expect::Safe } else { Expect::Either };
        // Open loop: the capacity first (the same load, closed loop, stock never the
        // limit), so the run can say whether its rate is past it.
        if let Some(rate) = args.load.rate {
            let (capacity, measured) =
                measure_capacity(&runner, &args, &name, i, expect, rate).await?;
            capacities.push(measured);
            rows.push(capacity);
        }
        let mut plan = plan(Section::Run, &name, first_product(0, i), &args.load, expect);
        plan.request_hold_ms = args.hold_ms;
        eprintln!(
            "loadtest: {name}: {} requests at concurrency {} ...",
            plan.requests, plan.concurrency
        );
        rows.push(runner.run(&plan).await?);
    }
    for (name, sales, rate, verdict) in &capacities {
        println!("{name}: {rate} requests/s offered, capacity {sales:.0} sales/s: {verdict}");
    }
    runner.db.close().await;
    // Where the stock never ran out, the rate is a throughput; elsewhere the verdicts.
    let columns = if rows.iter().all(|r| r.stock_never_limited()) {
        Columns::Throughput
    } else {
        Columns::Verdicts
    };
    print_table(
        &format!(
            "{} per strategy over {} instance(s)",
            match args.load.seconds {
                Some(s) => format!("{s} s"),
                None => format!("{} requests", args.load.requests),
            },
            args.urls.len()
        ),
        &rows.iter().collect::<Vec<_>>(),
        columns,
    );
    let mut report = Report::new(
        parameters(&args.load, args.urls.len(), args.hold_ms.unwrap_or(0)),
        rows,
    );
    report.strategies = catalogue;
    if !capacities.is_empty() {
        report.parameters["capacity"] = capacities
            .iter()
            .map(|(name, sales, rate, verdict)| {
                (name.clone(), serde_json::json!({"sales_per_second": sales, "offered": rate, "verdict": verdict}))
            })
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    if let Some(path) = &args.load.json {
        write_json(path, &report)?;
        println!("json: {}", path.display());
    }
    if report.all_as_expected() {
        Ok(())
    } else {
        bail!("a strategy did something unexpected (see the table)")
    }
}

/// One strategy's capacity against the rate offered: its name, its sales per
/// second, the rate, and whether the rate is past it.
type Capacity = (String, f64, f64, String);

/// Measures `name`'s capacity (strategy number `index`) before its open-loop run at
/// `rate`: the same load, closed loop, stock never the limit.
async fn measure_capacity(
    runner: &Runner,
    args: &RunArgs,
    name: &str,
    index: usize,
    expect: Expect,
    rate: f64,
) -> anyhow::Result<(Row, Capacity)> {
    let mut closed = plan(
        Section::RunCapacity,
        name,
        first_product(1, index),
        &args.load,
        expect,
    );
    closed.rate = None;
    // Timed, stock never the limit: its sales/s over the steady window.
    closed.stock = loadtest::plan::NEVER_SOLD_OUT;
    closed.requests = loadtest::plan::NEVER_SOLD_OUT as usize;
    closed.duration = Some(std::time::Duration::from_secs_f64(
        args.load
            .seconds
            .unwrap_or(loadtest::plan::THROUGHPUT_SECONDS),
    ));
    closed.request_hold_ms = args.hold_ms;
    let capacity = runner.run(&closed).await?;
    let sales = capacity.sales.per_second;
    let verdict = if rate > sales {
        format!("OVERLOAD: {:.1}x the capacity", rate / sales.max(1e-9))
    } else {
        format!(
            "within capacity ({:.0}% of it)",
            100.0 * rate / sales.max(1e-9)
        )
    };
    eprintln!(
        "loadtest: {name}: capacity {sales:.0} sales/s (closed loop at concurrency {}); {rate} requests/s offered: {verdict}",
        args.load.concurrency
    );
    Ok((capacity, (name.to_string(), sales, rate, verdict)))
}
