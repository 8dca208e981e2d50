//! The subcommands, one module each, and what they share: the report's parameters and
//! files, the servers' versions. (The load options, plans and service instances are
//! the library's: `loadtest::plan`, `loadtest::lab`.)

pub mod book;
pub mod chaos;
pub mod check;
pub mod demo;
pub mod run;
pub mod sweep;

use anyhow::Context;
use loadtest::plan::LoadArgs;
use loadtest::report::Report;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
    std::fs::write(&html_path, loadtest::page::render(report))?;
    println!("json: {}", json_path.display());
    Ok(html_path)
}

pub fn write_json(path: &Path, report: &Report) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_vec_pretty(report)?)
        .with_context(|| format!("writing {}", path.display()))
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
