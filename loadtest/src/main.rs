//! `loadtest run`: load running services; `loadtest demo`: start everything and
//! compare every strategy (what `./scripts/demo` runs).

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use loadtest::report::{Expect, Report, Row, print_table};
use loadtest::{Plan, Runner};
use serde_json::json;
use sqlx::mysql::MySqlPoolOptions;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use testbed::process::{ServerProcess, free_port};
use testbed::{Stack, StackConfig};

#[derive(Parser)]
#[command(
    version,
    about = "Concurrent deductions against stock-app, verified from the database"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load running stock-app instances, strategy by strategy, and verify from the database.
    Run(RunArgs),
    /// Start everything, run each strategy on one hot product, print the comparison.
    Demo(DemoArgs),
}

#[derive(clap::Args, Clone)]
struct LoadArgs {
    /// Units in stock at the start of each strategy's run (per product).
    #[arg(long, default_value_t = 100)]
    stock: i64,
    /// Deduction requests per strategy.
    #[arg(long, default_value_t = 1000)]
    requests: usize,
    /// Requests in flight at once (closed loop), spread round-robin over the instances.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Open loop instead: start this many requests per second (at most `concurrency`
    /// in flight).
    #[arg(long)]
    rate: Option<f64>,
    /// Products per strategy (1 = one hot row).
    #[arg(long, default_value_t = 1)]
    products: usize,
    /// Units per item.
    #[arg(long, default_value_t = 1)]
    quantity: i64,
    /// Share of requests that order two products at once (0.0-1.0; needs products ≥ 2).
    #[arg(long, default_value_t = 0.0)]
    multi_item_share: f64,
    /// Warm-up requests per strategy on a product of their own, not counted.
    #[arg(long, default_value_t = 0)]
    warmup: usize,
    /// Only these strategies (comma-separated; default: every one the service lists).
    #[arg(long, value_delimiter = ',')]
    strategies: Vec<String>,
    /// Write the JSON report here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Service base URLs (repeat or comma-separate); requests go round-robin.
    #[arg(long = "url", required = true, value_delimiter = ',')]
    urls: Vec<String>,
    /// The services' database, read directly for the verdict.
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// The services' admin token (to restock).
    #[arg(long, env = "ADMIN_TOKEN")]
    admin_token: String,
    /// Per-request hold between read and write (a test hook: the services must run
    /// with --enable-test-hooks).
    #[arg(long)]
    hold_ms: Option<u64>,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(clap::Args)]
struct DemoArgs {
    /// The hold between read and write (`stock-app --hold-ms`) of the second section,
    /// which makes the unsafe strategies fail visibly.
    #[arg(long, default_value_t = 5)]
    hold_ms: u64,
    /// The stock-app binary (default: next to this one).
    #[arg(long)]
    app_bin: Option<PathBuf>,
    #[command(flatten)]
    load: LoadArgs,
}

const ADMIN_TOKEN: &str = "demo-admin-token";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Run(args) => run(args).await,
        Command::Demo(args) => {
            // Everything started is owned by `demo` and stopped when it returns,
            // including on Ctrl-C (the servers are in their own process groups, so
            // the terminal's SIGINT reaches only us).
            tokio::select! {
                result = demo(args) => result,
                _ = tokio::signal::ctrl_c() => bail!("interrupted; everything started was stopped"),
            }
        }
    }
}

fn plan(
    section: &str,
    strategy: &str,
    first_product: i64,
    load: &LoadArgs,
    expect: Expect,
) -> Plan {
    Plan {
        section: section.into(),
        strategy: strategy.into(),
        products: (0..load.products.max(1) as i64)
            .map(|i| first_product + i)
            .collect(),
        stock: load.stock,
        requests: load.requests,
        concurrency: load.concurrency,
        rate: load.rate,
        quantity: load.quantity,
        multi_item_share: load.multi_item_share,
        request_hold_ms: None,
        server_hold_ms: 0,
        warmup: load.warmup,
        expect,
    }
}

fn parameters(load: &LoadArgs, instances: usize, hold_ms: u64) -> serde_json::Value {
    json!({
        "stock": load.stock, "requests": load.requests, "concurrency": load.concurrency,
        "rate": load.rate, "products": load.products, "quantity": load.quantity,
        "multi_item_share": load.multi_item_share, "warmup": load.warmup,
        "instances": instances, "hold_ms": hold_ms,
    })
}

fn write_json(path: &Path, report: &Report) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_vec_pretty(report)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// A product id range of its own for each run, so runs never share stock.
fn first_product(section: usize, index: usize) -> i64 {
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64 % 1_000_000);
    base * 1_000 + (section as i64) * 100 + index as i64 * 10 + 1
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let db = MySqlPoolOptions::new()
        .max_connections(2)
        .connect(&args.database_url)
        .await?;
    let runner = Runner {
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(args.load.concurrency)
            .build()?,
        db,
        bases: args.urls.clone(),
        admin_token: args.admin_token.clone(),
    };
    let mut rows = Vec::new();
    for (i, (name, safe)) in runner.strategies().await?.into_iter().enumerate() {
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
    let report = Report::new(
        parameters(&args.load, args.urls.len(), args.hold_ms.unwrap_or(0)),
        rows,
    );
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

/// A `stock-app` child process and its address.
struct Instance {
    process: ServerProcess,
    base: String,
}

async fn start_instance(
    client: &reqwest::Client,
    app_bin: &Path,
    env: &BTreeMap<&str, String>,
    name: &str,
    hold_ms: u64,
) -> anyhow::Result<Instance> {
    let port = free_port()?;
    let log = std::env::temp_dir().join(format!("stock-locks-demo-{name}-{port}.log"));
    let args: Vec<String> = vec![
        "--bind".into(),
        format!("127.0.0.1:{port}"),
        "--database-url".into(),
        env["DATABASE_URL"].clone(),
        "--redis-urls".into(),
        env["REDIS_URLS"].clone(),
        "--zk-connect".into(),
        env["ZK_CONNECT"].clone(),
        "--admin-token".into(),
        ADMIN_TOKEN.into(),
        "--hold-ms".into(),
        hold_ms.to_string(),
    ];
    let mut process = ServerProcess::spawn(name, app_bin, &args, log).with_context(|| {
        format!(
            "starting {} (build it: cargo build --release -p stock-app)",
            app_bin.display()
        )
    })?;
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(response) = client.get(format!("{base}/health")).send().await
            && response.status().is_success()
        {
            return Ok(Instance { process, base });
        }
        if !process.is_running() || Instant::now() > deadline {
            bail!("{name} did not come up; its log:\n{}", process.log_tail(20));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn demo(args: DemoArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    eprintln!("demo: starting MariaDB, 5 Redis and ZooKeeper ...");
    let stack = Stack::start(&StackConfig::default())?;
    let env: BTreeMap<_, _> = stack.env().into_iter().collect();
    let app_bin = match &args.app_bin {
        Some(path) => path.clone(),
        None => std::env::current_exe()?.with_file_name("stock-app"),
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.load.concurrency)
        .build()?;
    // Two instances as they would run behind a load balancer, and two more started
    // with --hold-ms for the section that shows what breaks.
    let mut plain = Vec::new();
    let mut held = Vec::new();
    for i in 1..=2 {
        plain.push(start_instance(&client, &app_bin, &env, &format!("stock-app-{i}"), 0).await?);
    }
    for i in 1..=2 {
        held.push(
            start_instance(
                &client,
                &app_bin,
                &env,
                &format!("stock-app-held-{i}"),
                args.hold_ms,
            )
            .await?,
        );
    }
    eprintln!(
        "demo: servers and 4 stock-app instances up in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let db = MySqlPoolOptions::new()
        .max_connections(2)
        .connect(&env["DATABASE_URL"])
        .await?;
    let mut rows: Vec<Row> = Vec::new();
    for (section, (instances, hold)) in [(&plain, 0), (&held, args.hold_ms)].into_iter().enumerate()
    {
        let runner = Runner {
            client: client.clone(),
            db: db.clone(),
            bases: instances.iter().map(|i| i.base.clone()).collect(),
            admin_token: ADMIN_TOKEN.into(),
        };
        let name = if hold == 0 { "throughput" } else { "held" };
        for (i, (strategy, safe)) in runner.strategies().await?.into_iter().enumerate() {
            if !args.load.strategies.is_empty() && !args.load.strategies.contains(&strategy) {
                continue;
            }
            // Two instances: only strategies safe across instances must hold; the
            // controls must oversell when held.
            let expect = match (safe, hold > 0) {
                (true, _) => Expect::Safe,
                (false, true) => Expect::Oversells,
                (false, false) => Expect::Either,
            };
            let mut plan = plan(
                name,
                &strategy,
                first_product(section, i),
                &args.load,
                expect,
            );
            plan.server_hold_ms = hold;
            eprintln!(
                "demo: {strategy}{}: {} requests at concurrency {} over 2 instances ...",
                if hold > 0 {
                    format!(" (hold {hold} ms)")
                } else {
                    String::new()
                },
                plan.requests,
                plan.concurrency
            );
            rows.push(runner.run(&plan).await?);
        }
    }
    db.close().await;

    let throughput: Vec<&Row> = rows.iter().filter(|r| r.section == "throughput").collect();
    let broken: Vec<&Row> = rows.iter().filter(|r| r.section == "held").collect();
    print_table(
        &format!(
            "Throughput: {} requests per strategy, concurrency {}, spread over 2 instances, {} product(s) with stock {}",
            args.load.requests, args.load.concurrency, args.load.products, args.load.stock
        ),
        &throughput,
    );
    print_table(
        &format!(
            "What breaks: the same, on 2 instances started with --hold-ms {h} (every deduction waits {h} ms between read and write)",
            h = args.hold_ms
        ),
        &broken,
    );
    for instance in plain.iter_mut().chain(held.iter_mut()) {
        instance.process.kill();
    }
    drop(stack);

    let report = Report::new(parameters(&args.load, 2, args.hold_ms), rows);
    let json_path = match &args.load.json {
        Some(path) => path.clone(),
        None => std::env::current_dir()?.join("reports").join("demo.json"),
    };
    if let Some(dir) = json_path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    write_json(&json_path, &report)?;
    println!("json: {}", json_path.display());
    if report.all_as_expected() {
        println!(
            "verdict: every strategy behaved as expected: the safe ones never oversold, \
             and the controls oversold when held {} ms between read and write (checked from the ledger)",
            args.hold_ms
        );
        Ok(())
    } else {
        let unexpected: Vec<String> = report
            .results
            .iter()
            .filter(|r| !r.as_expected)
            .map(|r| format!("{} ({})", r.strategy, r.section))
            .collect();
        bail!("unexpected outcome: {}", unexpected.join(", "))
    }
}
