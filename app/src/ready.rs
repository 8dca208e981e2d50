//! `/ready`: is every configured backend reachable right now?
//!
//! Checked concurrently, each with a short timeout, so one dead backend makes the
//! answer slower by at most that timeout. A backend that is not configured is listed
//! as such and does not make the service unready: the strategies that need it answer
//! 503 `backend_unavailable` on their own.

use crate::config::Settings;
use serde::Serialize;
use sqlx::MySqlPool;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BackendStatus {
    /// `database`, `redis-1` .. `redis-N`, `zookeeper`.
    pub backend: String,
    pub configured: bool,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// `GET /ready`'s 200 body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Readiness {
    pub ready: bool,
    pub backends: Vec<BackendStatus>,
}

fn status(backend: String, result: Result<String, String>) -> BackendStatus {
    let (ok, detail) = match result {
        Ok(detail) => (true, Some(detail)),
        Err(detail) => (false, Some(detail)),
    };
    BackendStatus {
        backend,
        configured: true,
        ok,
        detail,
    }
}

async fn bounded<F: Future<Output = Result<String, String>>>(f: F) -> Result<String, String> {
    timeout(CHECK_TIMEOUT, f)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {CHECK_TIMEOUT:?}")))
}

pub async fn check(pool: &MySqlPool, settings: &Settings) -> Readiness {
    let database = bounded(async {
        sqlx::query("SELECT 1")
            .execute(pool)
            .await
            .map(|_| "SELECT 1 answered".to_string())
            .map_err(|e| e.to_string())
    });
    let redis = futures::future::join_all(
        settings
            .redis_urls
            .iter()
            .map(|url| bounded(redis_ping(url))),
    );
    let zookeeper = async {
        match &settings.zk_connect {
            Some(connect) => Some(bounded(zookeeper_srvr(connect)).await),
            None => None,
        }
    };
    let (database, redis, zookeeper) = tokio::join!(database, redis, zookeeper);

    let mut backends = vec![status("database".into(), database)];
    if settings.redis_urls.is_empty() {
        backends.push(not_configured("redis", "REDIS_URLS is not set"));
    }
    for (i, result) in redis.into_iter().enumerate() {
        backends.push(status(format!("redis-{}", i + 1), result));
    }
    match zookeeper {
        Some(result) => backends.push(status("zookeeper".into(), result)),
        None => backends.push(not_configured("zookeeper", "ZK_CONNECT is not set")),
    }
    Readiness {
        ready: backends.iter().all(|b| !b.configured || b.ok),
        backends,
    }
}

fn not_configured(backend: &str, detail: &str) -> BackendStatus {
    BackendStatus {
        backend: backend.into(),
        configured: false,
        ok: false,
        detail: Some(detail.into()),
    }
}

async fn redis_ping(url: &str) -> Result<String, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let pong: String = redis::cmd("PING")
        .query_async(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    Ok(pong)
}

/// Asks each server of the connect string for `srvr` (the four-letter word allowed by
/// default, also in the official Docker image) and reports the first that serves.
async fn zookeeper_srvr(connect: &str) -> Result<String, String> {
    // A connect string may end with a chroot: host:port,host:port/path.
    let hosts = connect.split('/').next().unwrap_or_default();
    let mut errors = Vec::new();
    for host in hosts.split(',').filter(|h| !h.is_empty()) {
        match srvr(host).await {
            Ok(mode) => return Ok(format!("{host}: {mode}")),
            Err(e) => errors.push(format!("{host}: {e}")),
        }
    }
    Err(errors.join("; "))
}

async fn srvr(host: &str) -> Result<String, String> {
    let mut stream = tokio::net::TcpStream::connect(host)
        .await
        .map_err(|e| e.to_string())?;
    stream.write_all(b"srvr").await.map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    answer
        .lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|mode| format!("mode {}", mode.trim()))
        .ok_or_else(|| format!("not serving: {}", answer.trim()))
}
