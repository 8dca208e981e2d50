//! The subcommands, one module each, and what they share: the load options, plans,
//! report files, service instances.

pub mod book;
pub mod chaos;
pub mod check;
pub mod demo;
pub mod run;
pub mod sweep;

use anyhow::Context;
use loadtest::lab::Instance;
use loadtest::plan::Plan;
use loadtest::report::{Expect, Report};
use loadtest::section::Section;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Clone)]
pub struct LoadArgs {
    /// Units in stock at the start of each strategy's run (per product).
    #[arg(long, default_value_t = 100)]
    pub stock: i64,
    /// Buckets a product is split into for a strategy that sells from split rows.
    ///
    /// The other strategies always get one row.
    #[arg(long, default_value_t = loadtest::plan::BUCKETS)]
    pub buckets: u16,
    /// Deduction requests per strategy (at most, with --seconds).
    #[arg(long, default_value_t = 1000)]
    pub requests: usize,
    /// Send for this long per strategy, in seconds, instead of a number of requests.
    ///
    /// A timed run's sales per second are taken over its steady window. `loadtest
    /// demo` times its throughput sections so: each of its rounds 0.5 s by default,
    /// 2.5 s with --full.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Requests in flight at once (closed loop), spread round-robin over the instances.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// An open loop instead: start this many requests per second.
    ///
    /// At most --concurrency are in flight.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Products per strategy (1 = one hot row).
    #[arg(long, default_value_t = 1)]
    pub products: usize,
    /// Units per item.
    #[arg(long, default_value_t = 1)]
    pub quantity: i64,
    /// Share of requests that order two products at once (0.0-1.0; needs products ≥ 2).
    #[arg(long, default_value_t = 0.0)]
    pub multi_item_share: f64,
    /// Warm-up requests per strategy on a product of their own, not counted.
    #[arg(long, default_value_t = 0)]
    pub warmup: usize,
    /// Only these strategies (comma-separated; default: every one the service lists).
    #[arg(long, value_delimiter = ',')]
    pub strategies: Vec<String>,
    /// How many times a 429 is sent again, at most.
    ///
    /// A 429 comes from past the instances' admission limit; it is sent again after
    /// its Retry-After, jittered 0.5-1.5x.
    #[arg(long, default_value_t = 3)]
    pub retries: u32,
    /// Read each product's stock every this many ms during the load.
    ///
    /// The reads (`GET /stock`) go into the history the checker judges.
    #[arg(long)]
    pub read_every_ms: Option<u64>,
    /// Restock every product during the load, once this many deductions were answered.
    ///
    /// Each product gets --restock-to units: a new epoch, in the history too. The
    /// deductions not yet sent by then wait for its answer.
    #[arg(long, requires = "restock_to")]
    pub restock_after: Option<u64>,
    /// The units of the restock during the load (with --restock-after).
    #[arg(long, requires = "restock_after")]
    pub restock_to: Option<i64>,
    /// Neither build, check nor write the runs' histories.
    ///
    /// The verdicts then come from the ledger alone. What recording costs is measured
    /// with and without it.
    #[arg(long)]
    pub no_history: bool,
    /// Write the JSON report here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub const ADMIN_TOKEN: &str = "demo-admin-token";

pub fn plan(
    section: Section,
    strategy: &str,
    first_product: i64,
    load: &LoadArgs,
    expect: Expect,
) -> Plan {
    Plan {
        section,
        strategy: strategy.into(),
        products: (0..load.products.max(1) as i64)
            .map(|i| first_product + i)
            .collect(),
        stock: load.stock,
        buckets: load.buckets,
        requests: match load.seconds {
            Some(_) => loadtest::plan::NEVER_SOLD_OUT as usize,
            None => load.requests,
        },
        duration: load.seconds.map(std::time::Duration::from_secs_f64),
        concurrency: load.concurrency,
        rate: load.rate,
        quantity: load.quantity,
        multi_item_share: load.multi_item_share,
        request_hold_ms: None,
        server_hold_ms: 0,
        warmup: load.warmup,
        retries: load.retries,
        read_every: load.read_every_ms.map(std::time::Duration::from_millis),
        restock_during: load.restock_after.zip(load.restock_to),
        expect,
    }
}

pub fn parameters(load: &LoadArgs, instances: usize, hold_ms: u64) -> serde_json::Value {
    json!({
        "stock": load.stock, "requests": load.requests, "seconds": load.seconds,
        "concurrency": load.concurrency,
        "rate": load.rate, "products": load.products, "quantity": load.quantity,
        "multi_item_share": load.multi_item_share, "warmup": load.warmup,
        "instances": instances, "hold_ms": hold_ms,
    })
}

/// Writes the JSON report to `json` (default `reports/<name>.json`) and the HTML
/// report next to it; prints the JSON's path and returns the HTML's.
pub fn write_reports(report: &Report, json: Option<&Path>, name: &str) -> anyhow::Result<PathBuf> {
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

/// The folder a command's histories go to, emptied: next to its JSON report
/// (`reports/demo.json` -> `reports/demo.history/`).
pub fn histories(json: Option<&Path>, name: &str) -> anyhow::Result<PathBuf> {
    let json_path = match json {
        Some(path) => path.to_path_buf(),
        None => Path::new("reports").join(format!("{name}.json")),
    };
    let dir = json_path.with_extension("history");
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("emptying {}", dir.display()))?
        }
        _ => {}
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

pub fn write_json(path: &Path, report: &Report) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_vec_pretty(report)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// A product id range of its own for each run, so runs never share stock.
pub fn first_product(section: usize, index: usize) -> i64 {
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64 % 1_000_000);
    base * 1_000 + (section as i64) * 100 + index as i64 * 10 + 1
}

pub async fn start_instance(
    client: &reqwest::Client,
    app_bin: &Path,
    env: &BTreeMap<&str, String>,
    name: &str,
    hold_ms: u64,
) -> anyhow::Result<Instance> {
    start_instance_with(
        client,
        app_bin,
        env,
        name,
        &["--hold-ms", &hold_ms.to_string()],
    )
    .await
}

/// [`start_instance`] with flags of its own (`--max-in-flight 32`, ...).
pub async fn start_instance_with(
    client: &reqwest::Client,
    app_bin: &Path,
    env: &BTreeMap<&str, String>,
    name: &str,
    flags: &[&str],
) -> anyhow::Result<Instance> {
    let mut args: Vec<String> = vec!["--admin-token".into(), ADMIN_TOKEN.into()];
    args.extend(flags.iter().map(|f| f.to_string()));
    let servers: Vec<(&str, String)> = env.iter().map(|(k, v)| (*k, v.clone())).collect();
    Instance::start(client, app_bin, name, &servers, &args).await
}

/// The versions of the servers the run used.
pub async fn server_versions(
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
    // etcd answers `GET /version` with {"etcdserver": "3.4.30", "etcdcluster": ...}.
    if let Some(endpoint) = env.get("ETCD_ENDPOINTS").and_then(|e| e.split(',').next())
        && let Ok(answer) = reqwest::get(format!("{endpoint}/version")).await
        && let Ok(body) = answer.json::<serde_json::Value>().await
        && let Some(v) = body["etcdserver"].as_str()
    {
        versions.insert("etcd".to_string(), v.to_string());
    }
    versions
}
