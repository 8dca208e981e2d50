//! `loadtest run`: load running services, strategy by strategy, verified from the database.

use super::{LoadArgs, first_product, parameters, plan, write_json};
use anyhow::bail;
use loadtest::Runner;
use loadtest::report::{Expect, Report, print_table};
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
    let runner = Runner::new(client, db, args.urls.clone(), &args.admin_token);
    let mut rows = Vec::new();
    let catalogue = runner.strategies().await?;
    for (i, (name, safe)) in catalogue.safety().into_iter().enumerate() {
        if !args.load.strategies.is_empty() && !args.load.strategies.contains(&name) {
            continue;
        }
        let expect = if safe { Expect::Safe } else { Expect::Either };
        let mut plan = plan("run", &name, first_product(0, i), &args.load, expect);
        plan.request_hold_ms = args.hold_ms;
        eprintln!(
            "loadtest: {name}: {} requests at concurrency {} ...",
            plan.requests, plan.concurrency
        );
        rows.push(runner.run(&plan).await?);
    }
    runner.db.close().await;
    print_table(
        &format!(
            "{} requests per strategy over {} instance(s)",
            args.load.requests,
            args.urls.len()
        ),
        &rows.iter().collect::<Vec<_>>(),
    );
    let mut report = Report::new(
        parameters(&args.load, args.urls.len(), args.hold_ms.unwrap_or(0)),
        rows,
    );
    report.strategies = catalogue;
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
