//! `loadtest`: fires concurrent deductions at stock-app instances and proves from the
//! database whether anything oversold.
//!
//! This first version has one subcommand, `demo`, which `./scripts/demo` runs: it
//! starts the servers (testbed) and two pairs of `stock-app` instances (one plain, one
//! with `--hold-ms`), sends concurrent single-unit deductions of one hot product
//! through every strategy the service lists, spread over a pair, and prints per
//! strategy what the clients saw and what the ledger says. The load-test issue
//! replaces this engine (HdrHistogram, JSON and HTML reports).

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use futures::StreamExt;
use serde_json::{Value, json};
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
    /// Start everything, run each strategy on one hot product, print the comparison.
    Demo(DemoArgs),
}

#[derive(clap::Args)]
struct DemoArgs {
    /// Units in stock at the start of each strategy's run.
    #[arg(long, default_value_t = 100)]
    stock: i64,
    /// Deduction requests per strategy and section (each asks for one unit).
    #[arg(long, default_value_t = 1000)]
    requests: usize,
    /// Requests in flight at once, spread round-robin over the two instances.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// The hold between read and write (`stock-app --hold-ms`) of the second section,
    /// which makes the unsafe strategies fail visibly.
    #[arg(long, default_value_t = 5)]
    hold_ms: u64,
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

/// What a strategy is expected to do in a section.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// Never oversells.
    Safe,
    /// Must show lost updates (the controls, with a hold).
    Oversells,
    /// A control without a hold: overselling depends on timing; not judged.
    Either,
}

/// One strategy's run, as the clients saw it and as the database has it.
struct Row {
    strategy: String,
    expect: Expect,
    ok: usize,
    sold_out: usize,
    busy: usize,
    other: BTreeMap<String, usize>,
    attempts: u64,
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
    fn oversold(&self, stock: i64) -> bool {
        self.lost_updates(stock) != 0 || self.beyond_stock(stock) != 0
    }
    /// Whether what happened is what the strategy is expected to do.
    fn as_expected(&self, stock: i64) -> bool {
        let acknowledged = self.ok as i64 == self.ledger_sum;
        acknowledged
            && match self.expect {
                Expect::Safe => !self.oversold(stock),
                Expect::Oversells => self.oversold(stock),
                Expect::Either => true,
            }
    }
    fn percentile(&self, p: f64) -> f64 {
        if self.latencies_ms.is_empty() {
            return 0.0;
        }
        let rank = ((p / 100.0) * (self.latencies_ms.len() - 1) as f64).round() as usize;
        self.latencies_ms[rank]
    }
}

fn expectation(info: &Value, held: bool) -> Expect {
    // Two instances: only strategies safe across instances must hold.
    match (
        info["safe_across_instances"].as_bool().unwrap_or(false),
        held,
    ) {
        (true, _) => Expect::Safe,
        (false, true) => Expect::Oversells,
        (false, false) => Expect::Either,
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
        .pool_max_idle_per_host(args.concurrency)
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
    let strategies: Vec<Value> = client
        .get(format!("{}/strategies", plain[0].base))
        .send()
        .await?
        .json()
        .await?;
    let mut sections = Vec::new();
    for (section, (instances, hold)) in [(&plain, 0), (&held, args.hold_ms)].into_iter().enumerate()
    {
        let bases: Vec<String> = instances.iter().map(|i| i.base.clone()).collect();
        let mut rows = Vec::new();
        for (i, info) in strategies.iter().enumerate() {
            let name = info["name"].as_str().context("strategy name")?.to_string();
            let product_id = (section as i64 + 1) * 1000 + i as i64;
            restock(&client, &bases[0], product_id, args.stock).await?;
            eprintln!(
                "demo: {name}{}: {} requests at concurrency {} over 2 instances ...",
                if hold > 0 {
                    format!(" (hold {hold} ms)")
                } else {
                    String::new()
                },
                args.requests,
                args.concurrency
            );
            let mut row = run_strategy(&client, &bases, &db, &name, product_id, &args).await?;
            row.expect = expectation(info, hold > 0);
            rows.push(row);
        }
        sections.push((hold, rows));
    }
    db.close().await;

    let mut unexpected = Vec::new();
    for (hold, rows) in &sections {
        print_table(rows, &args, *hold);
        unexpected.extend(
            rows.iter()
                .filter(|r| !r.as_expected(args.stock))
                .map(|r| format!("{} (hold {hold} ms)", r.strategy)),
        );
    }
    for instance in plain.iter_mut().chain(held.iter_mut()) {
        instance.process.kill();
    }
    drop(stack);
    if unexpected.is_empty() {
        println!(
            "verdict: every strategy behaved as expected: the safe ones never oversold, \
             and the controls oversold when held {} ms between read and write (checked from the ledger)",
            args.hold_ms
        );
        Ok(())
    } else {
        bail!("unexpected outcome: {}", unexpected.join(", "))
    }
}

async fn restock(
    client: &reqwest::Client,
    base: &str,
    product_id: i64,
    stock: i64,
) -> anyhow::Result<()> {
    let response = client
        .put(format!("{base}/stock/{product_id}"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({ "quantity": stock }))
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("restock failed: {}", response.text().await?);
    }
    Ok(())
}

async fn run_strategy(
    client: &reqwest::Client,
    bases: &[String],
    db: &sqlx::MySqlPool,
    name: &str,
    product_id: i64,
    args: &DemoArgs,
) -> anyhow::Result<Row> {
    let started = Instant::now();
    let results: Vec<(String, u64, f64)> = futures::stream::iter(0..args.requests)
        .map(|i| {
            let url = format!("{}/deduct/{name}", bases[i % bases.len()]);
            async move {
                let sent = Instant::now();
                let (outcome, attempts) = match client
                    .post(&url)
                    .json(&json!({ "product_id": product_id }))
                    .send()
                    .await
                {
                    Ok(response) if response.status().is_success() => {
                        let body: Value = response.json().await.unwrap_or(Value::Null);
                        ("ok".to_string(), body["attempts"].as_u64().unwrap_or(1))
                    }
                    Ok(response) => {
                        let status = response.status().as_u16();
                        let body: Value = response.json().await.unwrap_or(Value::Null);
                        (
                            body["error"]
                                .as_str()
                                .map_or(status.to_string(), str::to_string),
                            0,
                        )
                    }
                    Err(e) => (format!("transport: {e}"), 0),
                };
                (outcome, attempts, sent.elapsed().as_secs_f64() * 1000.0)
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
        expect: Expect::Either,
        ok: 0,
        sold_out: 0,
        busy: 0,
        other: BTreeMap::new(),
        attempts: results.iter().map(|(_, a, _)| a).sum(),
        seconds,
        latencies_ms: results.iter().map(|(_, _, ms)| *ms).collect(),
        remaining: remaining.into(),
        ledger_sum,
    };
    row.latencies_ms.sort_by(f64::total_cmp);
    for (outcome, _, _) in results {
        match outcome.as_str() {
            "ok" => row.ok += 1,
            "insufficient_stock" => row.sold_out += 1,
            "busy" => row.busy += 1,
            _ => *row.other.entry(outcome).or_insert(0) += 1,
        }
    }
    Ok(row)
}

fn print_table(rows: &[Row], args: &DemoArgs, hold_ms: u64) {
    println!();
    if hold_ms == 0 {
        println!(
            "Throughput: {} requests per strategy, concurrency {}, spread over 2 instances, one hot product with stock {}",
            args.requests, args.concurrency, args.stock
        );
    } else {
        println!(
            "What breaks: the same, on 2 instances started with --hold-ms {hold_ms} (every deduction waits {hold_ms} ms between read and write)"
        );
    }
    println!(
        "{:<12} {:>7} {:>8} {:>8} {:>5} {:>5} {:>8} {:>5} {:>6} {:>6} {:>5} {:>7}  verdict",
        "strategy",
        "req/s",
        "p50 ms",
        "p99 ms",
        "sold",
        "left",
        "sold-out",
        "busy",
        "other",
        "tries",
        "lost",
        "beyond",
    );
    for row in rows {
        let lost = row.lost_updates(args.stock);
        let beyond = row.beyond_stock(args.stock);
        let verdict = match (
            row.expect,
            row.oversold(args.stock),
            row.as_expected(args.stock),
        ) {
            (_, _, false) if row.ok as i64 != row.ledger_sum => {
                "UNEXPECTED: 200s and ledger disagree"
            }
            (Expect::Safe, false, _) => "safe",
            (Expect::Safe, true, _) => "UNEXPECTED: OVERSOLD",
            (Expect::Oversells, true, _) => "oversold, as expected",
            (Expect::Oversells, false, _) => "UNEXPECTED: the control did not oversell",
            (Expect::Either, true, _) => "oversold (not safe across instances)",
            (Expect::Either, false, _) => "did not oversell this time (not safe across instances)",
        };
        println!(
            "{:<12} {:>7.0} {:>8.2} {:>8.2} {:>5} {:>5} {:>8} {:>5} {:>6} {:>6.2} {:>5} {:>7}  {}",
            row.strategy,
            args.requests as f64 / row.seconds,
            row.percentile(50.0),
            row.percentile(99.0),
            row.ledger_sum,
            row.remaining,
            row.sold_out,
            row.busy,
            row.other.values().sum::<usize>(),
            if row.ok > 0 {
                row.attempts as f64 / row.ok as f64
            } else {
                0.0
            },
            lost,
            beyond,
            verdict,
        );
        for (what, count) in &row.other {
            println!("{:<12}   other: {count} x {what}", "");
        }
    }
    println!(
        "sold = ledger sum; lost = ledger - (stock - left): sales the stock row never saw; beyond = sold past the stock; tries = transactions per sale"
    );
}
