//! `loadtest`: fires concurrent deductions at stock-app instances and proves from the
//! database whether anything oversold.
//!
//! This first version has one subcommand, `demo`, which `./scripts/demo` runs: it
//! starts the servers (testbed) and one `stock-app`, sends concurrent single-unit
//! deductions of one hot product through every strategy the service lists, and prints
//! per strategy what the clients saw and what the ledger says. The load-test issue
//! replaces this engine (HdrHistogram, several instances, JSON and HTML reports).

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use futures::StreamExt;
use serde_json::{Value, json};
use sqlx::mysql::MySqlPoolOptions;
use std::collections::BTreeMap;
use std::path::PathBuf;
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
    /// Start everything, run each strategy on one hot product, print the comparison.
    Demo(DemoArgs),
}

#[derive(clap::Args)]
struct DemoArgs {
    /// Units in stock at the start of each strategy's run.
    #[arg(long, default_value_t = 100)]
    stock: i64,
    /// Deduction requests per strategy (each asks for one unit).
    #[arg(long, default_value_t = 1000)]
    requests: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// The stock-app binary (default: next to this one).
    #[arg(long)]
    app_bin: Option<PathBuf>,
}

const ADMIN_TOKEN: &str = "demo-admin-token";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
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

/// One strategy's run, as the clients saw it and as the database has it.
struct Row {
    strategy: String,
    ok: usize,
    sold_out: usize,
    busy: usize,
    other: BTreeMap<String, usize>,
    seconds: f64,
    latencies_ms: Vec<f64>,
    remaining: i64,
    ledger_sum: i64,
}

impl Row {
    fn lost_updates(&self, stock: i64) -> i64 {
        self.ledger_sum - (stock - self.remaining)
    }
    fn beyond_stock(&self, stock: i64) -> i64 {
        (self.ledger_sum - stock).max(0)
    }
    fn percentile(&self, p: f64) -> f64 {
        if self.latencies_ms.is_empty() {
            return 0.0;
        }
        let rank = ((p / 100.0) * (self.latencies_ms.len() - 1) as f64).round() as usize;
        self.latencies_ms[rank]
    }
}

async fn demo(args: DemoArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    eprintln!("demo: starting MariaDB, 5 Redis and ZooKeeper ...");
    let stack = Stack::start(&StackConfig::default())?;
    let env: BTreeMap<_, _> = stack.env().into_iter().collect();
    let database_url = env["DATABASE_URL"].clone();

    let app_bin = match &args.app_bin {
        Some(path) => path.clone(),
        None => std::env::current_exe()?.with_file_name("stock-app"),
    };
    let port = free_port()?;
    let log = std::env::temp_dir().join(format!("stock-app-demo-{port}.log"));
    let app_args: Vec<String> = vec![
        "--bind".into(),
        format!("127.0.0.1:{port}"),
        "--database-url".into(),
        database_url.clone(),
        "--redis-urls".into(),
        env["REDIS_URLS"].clone(),
        "--zk-connect".into(),
        env["ZK_CONNECT"].clone(),
        "--admin-token".into(),
        ADMIN_TOKEN.into(),
    ];
    let mut app =
        ServerProcess::spawn("stock-app", &app_bin, &app_args, log).with_context(|| {
            format!(
                "starting {} (build it: cargo build --release -p stock-app)",
                app_bin.display()
            )
        })?;
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    wait_healthy(&client, &base, &mut app).await?;
    eprintln!(
        "demo: servers and stock-app (pid {}) up in {:.1} s",
        app.pid(),
        started.elapsed().as_secs_f64()
    );

    let db = MySqlPoolOptions::new()
        .max_connections(2)
        .connect(&database_url)
        .await?;
    let strategies: Vec<Value> = client
        .get(format!("{base}/strategies"))
        .send()
        .await?
        .json()
        .await?;
    let mut rows = Vec::new();
    for (i, strategy) in strategies.iter().enumerate() {
        let name = strategy["name"]
            .as_str()
            .context("strategy name")?
            .to_string();
        let product_id = i as i64 + 1;
        let restock = client
            .put(format!("{base}/stock/{product_id}"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({ "quantity": args.stock }))
            .send()
            .await?;
        if !restock.status().is_success() {
            bail!("restock failed: {}", restock.text().await?);
        }
        eprintln!(
            "demo: {name}: {} requests at concurrency {} ...",
            args.requests, args.concurrency
        );
        rows.push(run_strategy(&client, &base, &db, &name, product_id, &args).await?);
    }
    db.close().await;

    print_table(&rows, &args);
    let failed: Vec<&str> = rows
        .iter()
        .filter(|r| r.lost_updates(args.stock) != 0 || r.beyond_stock(args.stock) != 0)
        .map(|r| r.strategy.as_str())
        .collect();
    drop(app);
    drop(stack);
    if failed.is_empty() {
        println!("verdict: no strategy oversold (checked from the ledger)");
        Ok(())
    } else {
        bail!("oversold: {}", failed.join(", "))
    }
}

async fn wait_healthy(
    client: &reqwest::Client,
    base: &str,
    app: &mut ServerProcess,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(response) = client.get(format!("{base}/health")).send().await
            && response.status().is_success()
        {
            return Ok(());
        }
        if !app.is_running() || Instant::now() > deadline {
            bail!("stock-app did not come up; its log:\n{}", app.log_tail(20));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn run_strategy(
    client: &reqwest::Client,
    base: &str,
    db: &sqlx::MySqlPool,
    name: &str,
    product_id: i64,
    args: &DemoArgs,
) -> anyhow::Result<Row> {
    let url = format!("{base}/deduct/{name}");
    let started = Instant::now();
    let results: Vec<(String, f64)> = futures::stream::iter(0..args.requests)
        .map(|_| {
            let url = url.clone();
            async move {
                let sent = Instant::now();
                let outcome = match client
                    .post(&url)
                    .json(&json!({ "product_id": product_id }))
                    .send()
                    .await
                {
                    Ok(response) if response.status().is_success() => "ok".to_string(),
                    Ok(response) => {
                        let status = response.status().as_u16();
                        let body: Value = response.json().await.unwrap_or(Value::Null);
                        body["error"]
                            .as_str()
                            .map_or(status.to_string(), str::to_string)
                    }
                    Err(e) => format!("transport: {e}"),
                };
                (outcome, sent.elapsed().as_secs_f64() * 1000.0)
            }
        })
        .buffer_unordered(args.concurrency)
        .collect()
        .await;
    let seconds = started.elapsed().as_secs_f64();

    // The verdict comes from the database, after every request has finished.
    let (remaining, ledger_sum): (i32, i64) = sqlx::query_as(
        "SELECT s.quantity, CAST(COALESCE((SELECT SUM(l.quantity) FROM ledger l \
         WHERE l.product_id = s.product_id AND l.epoch = s.epoch), 0) AS SIGNED) \
         FROM stock s WHERE s.product_id = ?",
    )
    .bind(product_id)
    .fetch_one(db)
    .await?;

    let mut row = Row {
        strategy: name.to_string(),
        ok: 0,
        sold_out: 0,
        busy: 0,
        other: BTreeMap::new(),
        seconds,
        latencies_ms: results.iter().map(|(_, ms)| *ms).collect(),
        remaining: remaining.into(),
        ledger_sum,
    };
    row.latencies_ms.sort_by(f64::total_cmp);
    for (outcome, _) in results {
        match outcome.as_str() {
            "ok" => row.ok += 1,
            "insufficient_stock" => row.sold_out += 1,
            "busy" => row.busy += 1,
            _ => *row.other.entry(outcome).or_insert(0) += 1,
        }
    }
    Ok(row)
}

fn print_table(rows: &[Row], args: &DemoArgs) {
    println!();
    println!(
        "{} requests per strategy, concurrency {}, one hot product with stock {}; sold/lost/beyond read from the ledger",
        args.requests, args.concurrency, args.stock
    );
    println!(
        "{:<12} {:>8} {:>8} {:>8} {:>5} {:>5} {:>8} {:>5} {:>6} {:>5} {:>12} {:>4}",
        "strategy",
        "req/s",
        "p50 ms",
        "p99 ms",
        "sold",
        "left",
        "sold-out",
        "busy",
        "other",
        "lost",
        "beyond stock",
        "ok?"
    );
    for row in rows {
        let lost = row.lost_updates(args.stock);
        let beyond = row.beyond_stock(args.stock);
        println!(
            "{:<12} {:>8.0} {:>8.2} {:>8.2} {:>5} {:>5} {:>8} {:>5} {:>6} {:>5} {:>12} {:>4}",
            row.strategy,
            args.requests as f64 / row.seconds,
            row.percentile(50.0),
            row.percentile(99.0),
            row.ledger_sum,
            row.remaining,
            row.sold_out,
            row.busy,
            row.other.values().sum::<usize>(),
            lost,
            beyond,
            if lost == 0 && beyond == 0 && row.ok as i64 == row.ledger_sum {
                "yes"
            } else {
                "NO"
            },
        );
        for (what, count) in &row.other {
            println!("{:<12}   other: {count} × {what}", "");
        }
    }
    println!();
}
