//! `loadtest run`: load running services; `loadtest demo`: start everything and
//! compare every strategy (what `./scripts/demo` runs).

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use loadtest::lab::Instance;
use loadtest::report::{Expect, InstanceInfo, Report, Row, print_table};
use loadtest::{Plan, Runner};
use serde_json::json;
use sqlx::mysql::MySqlPoolOptions;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
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
    /// Start private servers and two instances, inject faults under load (frozen and
    /// killed holders, restarted Redis, paused RedLock nodes, a killed ZooKeeper
    /// leader, a partition, an ambiguous commit) and judge every cell from the ledger.
    Chaos(ChaosArgs),
    /// Start everything, run every strategy at concurrency 1, 4, 16, 64, 256 on one
    /// hot product and on 100 products; throughput and p99 as lines in the report.
    Sweep(SweepArgs),
}

#[derive(clap::Args)]
struct SweepArgs {
    /// Only these strategies (comma-separated; default: every one the service lists).
    #[arg(long, value_delimiter = ',')]
    strategies: Vec<String>,
    /// The concurrencies (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = loadtest::sweep::CONCURRENCIES)]
    concurrency: Vec<usize>,
    /// The product layouts: how many products the load is spread over (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = loadtest::sweep::PRODUCTS)]
    products: Vec<usize>,
    /// Multiply every cell's request count (`max(1000, 8 x concurrency)`) by this.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// The stock-app binary (default: next to this one).
    #[arg(long)]
    app_bin: Option<PathBuf>,
    /// Write the JSON report here (default reports/sweep.json; the HTML next to it).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args)]
struct ChaosArgs {
    /// Only these scenarios (comma-separated ids or numbers, e.g. `1,pause-past-lease`;
    /// default: all).
    #[arg(long = "scenario", value_delimiter = ',')]
    scenarios: Vec<String>,
    /// Only these strategies (comma-separated; default: every one of the matrix).
    #[arg(long, value_delimiter = ',')]
    strategies: Vec<String>,
    /// Also the extra cells: the controls (`unsafe`, `local-mutex`) frozen and the
    /// unfenced locks killed, more strategies through the ambiguous commit.
    #[arg(long)]
    all: bool,
    /// Short leases and windows (what the test suite runs).
    #[arg(long)]
    quick: bool,
    /// The lock lease of both instances (`--lock-lease-ms`).
    #[arg(long)]
    lease_ms: Option<u64>,
    /// The ZooKeeper session timeout of both instances (at least 1000: 2 x tickTime).
    #[arg(long)]
    zk_session_ms: Option<u64>,
    /// The stock-app binary (default: next to this one).
    #[arg(long)]
    app_bin: Option<PathBuf>,
    /// Write the JSON report here (default reports/chaos.json; the HTML next to it).
    #[arg(long)]
    json: Option<PathBuf>,
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
        Command::Chaos(args) => {
            tokio::select! {
                result = chaos(args) => result,
                _ = tokio::signal::ctrl_c() => bail!("interrupted; everything started was stopped"),
            }
        }
        Command::Sweep(args) => {
            tokio::select! {
                result = sweep(args) => result,
                _ = tokio::signal::ctrl_c() => bail!("interrupted; everything started was stopped"),
            }
        }
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

/// Writes the JSON report to `json` (default `reports/<name>.json`) and the HTML
/// report next to it; prints the JSON's path and returns the HTML's.
fn write_reports(report: &Report, json: Option<&Path>, name: &str) -> anyhow::Result<PathBuf> {
    let json_path = match json {
        Some(path) => path.to_path_buf(),
        None => std::env::current_dir()?
            .join("reports")
            .join(format!("{name}.json")),
    };
    if let Some(dir) = json_path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    write_json(&json_path, report)?;
    let html_path = json_path.with_extension("html");
    std::fs::write(&html_path, loadtest::html::render(report))?;
    println!("json: {}", json_path.display());
    Ok(html_path)
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

async fn start_instance(
    client: &reqwest::Client,
    app_bin: &Path,
    env: &BTreeMap<&str, String>,
    name: &str,
    hold_ms: u64,
) -> anyhow::Result<Instance> {
    let args: Vec<String> = vec![
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
    Instance::start(client, app_bin, name, &args).await
}

async fn demo(args: DemoArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    eprintln!("demo: starting MariaDB, 5 Redis and ZooKeeper ...");
    let stack = Stack::start(&StackConfig::default())?;
    let env: BTreeMap<_, _> = stack.env().into_iter().collect();
    let app_bin = loadtest::lab::app_bin(args.app_bin.as_deref())?;
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
    // The baseline: the atomic-sql transaction over sqlx, no HTTP, same concurrency.
    if args.load.strategies.is_empty() || args.load.strategies.iter().any(|s| s == "baseline") {
        eprintln!("demo: baseline (atomic-sql over sqlx, no HTTP) ...");
        rows.push(baseline_row(&client, &plain[0].base, &env["DATABASE_URL"], &args.load).await?);
    }
    // Optimistic CAS at low and high concurrency, for the contention claim.
    let mut contention = None;
    if args.load.strategies.is_empty() || args.load.strategies.iter().any(|s| s == "optimistic") {
        let runner = Runner {
            client: client.clone(),
            db: db.clone(),
            bases: plain.iter().map(|i| i.base.clone()).collect(),
            admin_token: ADMIN_TOKEN.into(),
        };
        let mut measured = Vec::new();
        for (i, concurrency) in [4usize, 64].into_iter().enumerate() {
            eprintln!("demo: optimistic at concurrency {concurrency} (contention) ...");
            let mut plan = plan(
                "contention",
                "optimistic",
                first_product(2, i),
                &args.load,
                Expect::Safe,
            );
            plan.concurrency = concurrency;
            plan.requests = args.load.requests / 2;
            let row = runner.run(&plan).await?;
            measured.push((concurrency, row.attempts_per_success));
            rows.push(row);
        }
        contention = Some((measured[0], measured[1]));
    }
    let servers = server_versions(&db, &env).await;
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
    let contention_rows: Vec<&Row> = rows.iter().filter(|r| r.section == "contention").collect();
    if !contention_rows.is_empty() {
        print_table(
            "Optimistic CAS under contention (same product, 2 instances)",
            &contention_rows,
        );
    }
    let instances: Vec<InstanceInfo> = plain
        .iter()
        .chain(held.iter())
        .map(Instance::info)
        .collect();
    for instance in plain.iter_mut().chain(held.iter_mut()) {
        instance.process.kill();
    }
    drop(stack);

    let mut report = Report::new(parameters(&args.load, 2, args.hold_ms), rows);
    report.claims = loadtest::claims::check(&report.results, contention);
    report.instances = instances;
    report.machine.servers = servers;
    println!();
    for claim in &report.claims {
        println!(
            "claim: {} -> {} ({})",
            claim.claim, claim.verdict, claim.evidence
        );
    }
    for instance in &report.instances {
        println!(
            "instance {}: peak RSS {:.1} MiB",
            instance.name,
            instance.peak_rss_kib as f64 / 1024.0
        );
    }
    let html_path = write_reports(&report, args.load.json.as_deref(), "demo")?;
    let verdict = report.all_as_expected();
    if verdict {
        println!(
            "verdict: every strategy behaved as expected: the safe ones never oversold, \
             and the controls oversold when held {} ms between read and write (checked from the ledger)",
            args.hold_ms
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
            .collect();
        bail!("unexpected outcome: {}", unexpected.join(", "))
    }
}

/// The baseline row: the atomic-sql transaction over sqlx, no HTTP.
async fn baseline_row(
    client: &reqwest::Client,
    base: &str,
    database_url: &str,
    load: &LoadArgs,
) -> anyhow::Result<Row> {
    let product = first_product(3, 0);
    loadtest::engine::restock(client, base, ADMIN_TOKEN, product, load.stock).await?;
    let db = MySqlPoolOptions::new()
        .max_connections(load.concurrency.clamp(1, 64) as u32)
        .connect(database_url)
        .await?;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let fired = loadtest::baseline::fire(
        &db,
        product,
        load.requests,
        load.concurrency,
        &format!("base-{id}"),
    )
    .await;
    let verdict = loadtest::verify::verify(&db, &[product], &fired.acknowledged, 0).await?;
    db.close().await;
    let mut plan = plan("throughput", "baseline", product, load, Expect::Safe);
    plan.products = vec![product];
    Ok(Row::new(&plan, 0, &fired, verdict))
}

/// The versions of the servers the run used.
async fn server_versions(
    db: &sqlx::MySqlPool,
    env: &BTreeMap<&str, String>,
) -> BTreeMap<String, String> {
    let mut versions = BTreeMap::new();
    if let Ok(v) = sqlx::query_scalar::<_, String>("SELECT VERSION()")
        .fetch_one(db)
        .await
    {
        versions.insert("mariadb".to_string(), v);
    }
    if let Some(url) = env.get("REDIS_URLS").and_then(|u| u.split(',').next())
        && let Ok(client) = redis::Client::open(url)
        && let Ok(mut conn) = client.get_multiplexed_async_connection().await
        && let Ok(info) = redis::cmd("INFO")
            .arg("server")
            .query_async::<String>(&mut conn)
            .await
        && let Some(v) = info.lines().find_map(|l| l.strip_prefix("redis_version:"))
    {
        versions.insert("redis".to_string(), v.trim().to_string());
    }
    if let Some(host) = env.get("ZK_CONNECT").and_then(|c| c.split(',').next())
        && let Ok(mut stream) = tokio::net::TcpStream::connect(host).await
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut answer = String::new();
        if stream.write_all(b"srvr").await.is_ok()
            && stream.read_to_string(&mut answer).await.is_ok()
            && let Some(v) = answer
                .lines()
                .find_map(|l| l.strip_prefix("Zookeeper version: "))
        {
            // Debian's build says "3.8.0-${mvngit.commit.id}, built on ...": keep "3.8.0".
            let v = v.split(',').next().unwrap_or(v);
            let v = v.split("-$").next().unwrap_or(v).trim();
            versions.insert("zookeeper".to_string(), v.to_string());
        }
    }
    versions
}

async fn sweep(args: SweepArgs) -> anyhow::Result<()> {
    use loadtest::sweep::{Sweep, SweepInfo};
    // `is_nan` too: NaN compares false with everything.
    if args.scale.is_nan()
        || args.scale <= 0.0
        || args.concurrency.contains(&0)
        || args.products.contains(&0)
    {
        bail!("--scale, --concurrency and --products must be positive");
    }
    let started = Instant::now();
    eprintln!("sweep: starting MariaDB, 5 Redis, ZooKeeper and 2 stock-app instances ...");
    let stack = Stack::start(&StackConfig::default())?;
    let env: BTreeMap<_, _> = stack.env().into_iter().collect();
    let app_bin = loadtest::lab::app_bin(args.app_bin.as_deref())?;
    let widest = args.concurrency.iter().copied().max().unwrap_or(1);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(widest)
        .build()?;
    let mut instances = Vec::new();
    for i in 1..=2 {
        instances
            .push(start_instance(&client, &app_bin, &env, &format!("stock-app-{i}"), 0).await?);
    }
    let db = MySqlPoolOptions::new()
        .max_connections(2)
        .connect(&env["DATABASE_URL"])
        .await?;
    let runner = Runner {
        client,
        db: db.clone(),
        bases: instances.iter().map(|i| i.base.clone()).collect(),
        admin_token: ADMIN_TOKEN.into(),
    };
    let mut strategies = runner.strategies().await?;
    if !args.strategies.is_empty() {
        for wanted in &args.strategies {
            if !strategies.iter().any(|(name, _)| name == wanted) {
                let known: Vec<&str> = strategies.iter().map(|(n, _)| n.as_str()).collect();
                bail!("unknown strategy {wanted:?}; known: {}", known.join(", "));
            }
        }
        strategies.retain(|(name, _)| args.strategies.contains(name));
    }
    let sweep = Sweep {
        strategies,
        concurrencies: args.concurrency.clone(),
        products: args.products.clone(),
        scale: args.scale,
    };
    eprintln!(
        "sweep: {} cells, {} requests, over 2 instances ...",
        sweep.cells(),
        sweep.total_requests()
    );
    // Product ids of its own for every cell (up to 1000 products per cell).
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64 % 100_000);
    let rows = sweep
        .run(&runner, |cell| base * 10_000_000 + cell as i64 * 1_000 + 1)
        .await?;
    let servers = server_versions(&db, &env).await;
    db.close().await;
    let info = SweepInfo {
        concurrencies: sweep.concurrencies.clone(),
        products: sweep.products.clone(),
        requests_rule: format!(
            "max(1000, 8 x concurrency) x {} requests per cell; stock = requests (never sold out)",
            sweep.scale
        ),
        scale: sweep.scale,
        seconds: started.elapsed().as_secs_f64(),
    };
    loadtest::sweep::print_tables(&info, &rows);
    let mut report = Report::new(
        json!({
            "command": "sweep", "strategies": args.strategies, "concurrency": args.concurrency,
            "products": args.products, "scale": args.scale, "instances": 2,
        }),
        rows,
    );
    report.machine.servers = servers;
    report.instances = instances.iter().map(Instance::info).collect();
    report.sweep = Some(info);
    let html_path = write_reports(&report, args.json.as_deref(), "sweep")?;
    println!("report: {}", html_path.display());
    println!(
        "sweep: {} cells in {:.0} s",
        report.results.len(),
        started.elapsed().as_secs_f64()
    );
    drop(instances);
    drop(stack);
    if report.all_as_expected() {
        Ok(())
    } else {
        bail!("a strategy did something unexpected (see the report)")
    }
}

async fn chaos(args: ChaosArgs) -> anyhow::Result<()> {
    use loadtest::chaos::{Scenario, Timing};
    let mut scenarios = Vec::new();
    for wanted in &args.scenarios {
        let matching: Vec<Scenario> = Scenario::ALL
            .into_iter()
            .filter(|s| s.id() == wanted || s.number().to_string() == *wanted)
            .collect();
        if matching.is_empty() {
            let known: Vec<&str> = Scenario::ALL.iter().map(|s| s.id()).collect();
            bail!(
                "unknown scenario {wanted:?}; known: 1-8 or {}",
                known.join(", ")
            );
        }
        scenarios.extend(matching);
    }
    let mut timing = if args.quick {
        Timing::quick()
    } else {
        Timing::standard()
    };
    if let Some(lease) = args.lease_ms {
        timing.lease_ms = lease;
    }
    if let Some(session) = args.zk_session_ms {
        timing.zk_session_ms = session.max(1000);
    }
    let app_bin = loadtest::lab::app_bin(args.app_bin.as_deref())?;
    let faults =
        loadtest::chaos::run(app_bin, timing, &scenarios, &args.strategies, args.all).await?;
    loadtest::chaos::print_table(&faults);
    let mut report = Report::new(
        json!({
            "command": "chaos", "scenarios": args.scenarios, "strategies": args.strategies,
            "all": args.all, "quick": args.quick,
        }),
        Vec::new(),
    );
    report.faults = Some(faults);
    let html_path = write_reports(&report, args.json.as_deref(), "chaos")?;
    println!("report: {}", html_path.display());
    let faults = report.faults.as_ref().expect("set above");
    let unexpected: Vec<String> = faults
        .cells
        .iter()
        .filter(|c| !c.as_expected)
        .map(|c| {
            format!(
                "{} / {} ({})",
                c.scenario.id(),
                c.strategy,
                c.verdict.as_str()
            )
        })
        .collect();
    println!(
        "chaos: {} cells in {:.0} s; {} as expected",
        faults.cells.len(),
        faults.seconds,
        faults.cells.len() - unexpected.len()
    );
    if unexpected.is_empty() {
        Ok(())
    } else {
        bail!("unexpected: {}", unexpected.join(", "))
    }
}
