//! `spawn_app()` and a `TestApp` with one method per endpoint.

use reqwest::{Response, StatusCode};
use serde_json::{Value, json};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{Connection, MySqlConnection, MySqlPool};
use stock_app::{Application, Settings};

pub const ADMIN_TOKEN: &str = "test-admin-token";

/// The shared MariaDB that `testbed run` exported.
pub fn server_url() -> String {
    std::env::var("DATABASE_URL").expect(
        "DATABASE_URL is not set: run the tests with ./scripts/test, \
         or `cargo run -p testbed -- run -- cargo nextest run`",
    )
}

/// A new, empty database on the shared server; returns its URL.
pub async fn fresh_database() -> String {
    let base = server_url();
    let (server, _db) = base
        .rsplit_once('/')
        .expect("DATABASE_URL has a database path");
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut conn = MySqlConnection::connect(&base)
        .await
        .expect("connect to DATABASE_URL");
    let create = format!("CREATE DATABASE `{name}`");
    sqlx::query(&create)
        .execute(&mut conn)
        .await
        .expect("create the test database");
    conn.close().await.ok();
    format!("{server}/{name}")
}

pub struct TestApp {
    pub address: String,
    /// A pool on the app's database, for reading it directly.
    pub db: MySqlPool,
    pub client: reqwest::Client,
    handle: actix_web::dev::ServerHandle,
    /// `redis-stock`'s Redis (one server, or a cluster's nodes) and key prefix, to
    /// wait for its persister.
    redis: Option<(Vec<String>, String)>,
}

/// A service on a fresh database, with the admin token set.
pub async fn spawn_app() -> TestApp {
    spawn_app_on(&fresh_database().await).await
}

/// A service on the given database (two of these on one database are two instances).
pub async fn spawn_app_on(database_url: &str) -> TestApp {
    spawn_with(test_settings(database_url)).await
}

/// The settings the tests use: admin token set, test hooks on, a short lock wait
/// timeout, and a generous optimistic retry budget (so races test correctness, not
/// the budget).
pub fn test_settings(database_url: &str) -> Settings {
    Settings {
        admin_token: Some(ADMIN_TOKEN.into()),
        workers: Some(2),
        enable_test_hooks: true,
        lock_wait_timeout_secs: 2,
        ..servers_from_env(database_url)
    }
    .with(|s| {
        // A ZooKeeper root of the test's own (the database name), so parallel tests
        // never queue on each other's lock nodes.
        s.shared.zk_root = format!(
            "/stock-locks-test/{}",
            database_url.rsplit('/').next().unwrap_or("db")
        );
        // redis-stock's keys of the test's own, so parallel tests never persist each
        // other's sales.
        s.strategies.redis_stock.redis_stock_prefix =
            format!("t:{}:rs:", database_url.rsplit('/').next().unwrap_or("db"));
        s.strategies.optimistic.optimistic_max_attempts = 1000;
        // Room for a loaded 2-core machine running tests in parallel.
        s.strategies.redlock.redlock_node_timeout_ms = 200;
        // etcd-lock's keys of the test's own.
        s.strategies.etcd_lock.etcd_prefix =
            format!("/t/{}/", database_url.rsplit('/').next().unwrap_or("db"));
    })
}

/// [`Settings::for_database`], except that the server flags read the testbed's
/// variables (`testbed::SERVER_VARIABLES`: `REDIS_URLS`, `ZK_CONNECT`,
/// `ETCD_ENDPOINTS`), as the binary's flags do: a strategy whose server is a flag of
/// its own gets it here with nothing to add. Nothing else is read from the
/// environment, nor `REDIS_CLUSTER_URLS`: `redis-lock` stays on the single Redis
/// unless a test puts it on the cluster ([`cluster_urls`]).
pub fn servers_from_env(database_url: &str) -> Settings {
    let cluster = testbed::redis_cluster::KIND.variable;
    Settings::for_database_reading(database_url, |var| {
        testbed::SERVER_VARIABLES.contains(&var) && var != cluster
    })
}

/// The testbed's Redis Cluster (`REDIS_CLUSTER_URLS`, set by `./scripts/test`).
pub fn cluster_urls() -> Vec<String> {
    let variable = testbed::redis_cluster::KIND.variable;
    let value = std::env::var(variable).unwrap_or_else(|_| {
        panic!("{variable}: run under ./scripts/test (testbed run --redis-cluster)")
    });
    value.split(',').map(str::to_string).collect()
}

/// Turns `async fn name(strategy: &str)` into that function plus one test per strategy,
/// `name::unsafe_control`, `name::atomic_sql`, ..., so every strategy runs the
/// same suite and each shows up on its own in the test report. The strategies come
/// from the service's registry (`stock_app::for_each_strategy!`): a strategy added
/// there is tested here with nothing to list.
macro_rules! each_strategy {
    ($(#[$meta:meta])* async fn $name:ident($strategy:ident: &str) $body:block) => {
        each_strategy!(@with ($) $(#[$meta])* async fn $name($strategy: &str) $body);
    };
    (@with ($d:tt) $(#[$meta:meta])* async fn $name:ident($strategy:ident: &str) $body:block) => {
        $(#[$meta])*
        async fn $name($strategy: &str) $body

        mod $name {
            macro_rules! one_test_each {
                ($d ($d field:ident),*) => {
                    $d (
                        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                        async fn $d field() {
                            let name = stock_app::strategies::name_of(stringify!($d field));
                            super::$name(name.expect("a registry line")).await
                        }
                    )*
                };
            }
            stock_app::for_each_strategy!(one_test_each);
        }
    };
}
pub(crate) use each_strategy;

pub async fn spawn_with(settings: Settings) -> TestApp {
    if std::env::var_os("TEST_LOG").is_some() {
        stock_app::telemetry::init("debug,sqlx=warn");
    }
    let database_url = settings.database_url.clone();
    let prefix = settings.strategies.redis_stock.redis_stock_prefix.clone();
    let redis = match &settings.shared.redis_cluster_urls {
        nodes if !nodes.is_empty() => Some((nodes.clone(), prefix)),
        _ => settings
            .shared
            .redis_urls
            .first()
            .map(|url| (vec![url.clone()], prefix)),
    };
    let app = Application::build(settings).await.expect("build the app");
    let address = format!("http://127.0.0.1:{}", app.port());
    let handle = app.handle();
    tokio::spawn(app.run_until_stopped());
    let db = MySqlPoolOptions::new()
        .max_connections(4)
        .connect(&database_url)
        .await
        .expect("connect to the test database");
    TestApp {
        address,
        db,
        client: reqwest::Client::new(),
        handle,
        redis,
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.address, path)
    }

    pub async fn get(&self, path: &str) -> Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("request sent")
    }

    pub async fn put_stock(&self, product_id: i64, quantity: i64) -> Response {
        self.client
            .put(self.url(&format!("/stock/{product_id}")))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({ "quantity": quantity }))
            .send()
            .await
            .expect("request sent")
    }

    /// Restocks a product split into `buckets` rows (`bucketed`), asserting it worked.
    pub async fn stock_split(&self, product_id: i64, quantity: i64, buckets: u16) {
        let response = self
            .client
            .put(self.url(&format!("/stock/{product_id}")))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({ "quantity": quantity, "buckets": buckets }))
            .send()
            .await
            .expect("request sent");
        assert_eq!(response.status(), StatusCode::OK, "restock {product_id}");
    }

    /// Creates or restocks a product, asserting it worked.
    pub async fn stock(&self, product_id: i64, quantity: i64) {
        let response = self.put_stock(product_id, quantity).await;
        assert_eq!(response.status(), StatusCode::OK, "restock {product_id}");
    }

    pub async fn deduct(&self, strategy: &str, body: &Value) -> Response {
        self.client
            .post(self.url(&format!("/deduct/{strategy}")))
            .json(body)
            .send()
            .await
            .expect("request sent")
    }

    /// Sends raw bytes with a content type (for malformed bodies).
    pub async fn deduct_raw(
        &self,
        strategy: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> Response {
        self.client
            .post(self.url(&format!("/deduct/{strategy}")))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("request sent")
    }

    /// Waits until `redis-stock`'s persister has written every sale Redis made into
    /// the database (its streams are empty: entries go when acknowledged after
    /// COMMIT; on a cluster, one stream per partition, `{PREFIX...}:sales`, read on
    /// every node); panics after 15 s.
    pub async fn drained(&self) {
        let Some((urls, prefix)) = &self.redis else {
            return;
        };
        let mut conns = Vec::new();
        for url in urls {
            let client = redis::Client::open(url.as_str()).expect("a Redis URL");
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .expect("connect");
            // A cluster's replica answers reads only after READONLY (else MOVED).
            if urls.len() > 1 {
                let _: () = redis::cmd("READONLY")
                    .query_async(&mut conn)
                    .await
                    .expect("READONLY");
            }
            conns.push(conn);
        }
        let streams = format!("*{prefix}*sales");
        for _ in 0..300 {
            let mut left = 0;
            for conn in &mut conns {
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(&streams)
                    .query_async(conn)
                    .await
                    .expect("KEYS");
                for key in keys {
                    let length: i64 = redis::cmd("XLEN")
                        .arg(&key)
                        .query_async(conn)
                        .await
                        .expect("XLEN");
                    left += length;
                }
            }
            if left == 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("redis-stock's persister did not drain {streams} within 15 s");
    }

    /// What the database says about a product, read directly (after `redis-stock`'s
    /// persister drained).
    pub async fn db_state(&self, product_id: i64) -> DbState {
        self.drained().await;
        db_state(&self.db, product_id).await
    }

    /// How many orders and ledger rows exist in all (after `redis-stock` drained).
    pub async fn row_counts(&self) -> (i64, i64) {
        self.drained().await;
        let orders: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders")
            .fetch_one(&self.db)
            .await
            .unwrap();
        let ledger: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ledger")
            .fetch_one(&self.db)
            .await
            .unwrap();
        (orders, ledger)
    }

    /// How many orders have a request id `LIKE` the pattern.
    pub async fn orders_like(&self, pattern: &str) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE request_id LIKE ?")
            .bind(pattern)
            .fetch_one(&self.db)
            .await
            .unwrap()
    }

    /// `PUT /hooks/{failpoint}` with a setting such as `{"mode": "pause", "count": 1}`.
    pub async fn set_failpoint(&self, failpoint: &str, setting: Value) {
        let response = self
            .client
            .put(self.url(&format!("/hooks/{failpoint}")))
            .json(&setting)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "set {failpoint}");
    }

    /// Returns once `count` requests are paused at `failpoint` (panics after 10 s).
    pub async fn wait_paused(&self, failpoint: &str, count: usize) {
        let response = self
            .get(&format!(
                "/hooks/{failpoint}/paused?at_least={count}&timeout_ms=10000"
            ))
            .await;
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "{count} paused at {failpoint}"
        );
    }

    /// Lets every request paused at `failpoint` go on.
    pub async fn release(&self, failpoint: &str) {
        let response = self
            .client
            .post(self.url(&format!("/hooks/{failpoint}/release")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }

    /// How many requests reached `failpoint` so far.
    pub async fn hits(&self, failpoint: &str) -> u64 {
        self.hits_of([failpoint]).await[0]
    }

    /// How often each of `failpoints` was passed, read at one moment (one `GET /hooks`).
    pub async fn hits_of<const N: usize>(&self, failpoints: [&str; N]) -> [u64; N] {
        let state: Value = self.get("/hooks").await.json().await.unwrap();
        failpoints.map(|f| state["failpoints"][f]["hits"].as_u64().unwrap())
    }

    pub async fn stop(self) {
        self.handle.stop(true).await;
        self.db.close().await;
    }
}

/// A product as the database has it, with the ledger's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct DbState {
    pub initial: i64,
    pub remaining: i64,
    /// Ledger sum for the current epoch.
    pub ledger_sum: i64,
    /// Ledger rows for the current epoch.
    pub ledger_rows: i64,
}

impl DbState {
    /// Units the ledger says were sold that the stock does not show as gone.
    pub fn lost_updates(&self) -> i64 {
        self.ledger_sum - (self.initial - self.remaining)
    }
}

/// The value of one sample line `name{labels} value` in a `/metrics` scrape (0 when
/// absent).
pub fn sample(scrape: &str, name_and_labels: &str) -> f64 {
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The sum of a metric's samples over all its labels in a `/metrics` scrape.
pub fn sample_sum(scrape: &str, name: &str) -> f64 {
    scrape
        .lines()
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix('{'))
        .filter_map(|rest| rest.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub async fn db_state(db: &MySqlPool, product_id: i64) -> DbState {
    let (initial, remaining, ledger_sum, ledger_rows): (i32, i64, i64, i64) = sqlx::query_as(
        r#"
        SELECT s.initial_quantity,
               CAST(s.quantity + COALESCE((SELECT SUM(b.quantity) FROM stock_bucket b
                                           WHERE b.product_id = s.product_id), 0) AS SIGNED),
               CAST(COALESCE(SUM(l.quantity), 0) AS SIGNED), COUNT(l.request_id)
        FROM stock s
        LEFT JOIN ledger l ON l.product_id = s.product_id AND l.epoch = s.epoch
        WHERE s.product_id = ?
        GROUP BY s.product_id
        "#,
    )
    .bind(product_id)
    .fetch_one(db)
    .await
    .expect("read the product");
    DbState {
        initial: initial.into(),
        remaining,
        ledger_sum,
        ledger_rows,
    }
}

/// Asserts an error answer: status, the error shape, the code, and X-Request-Id
/// equal to the body's request_id. Returns the body.
pub async fn assert_error(response: Response, status: StatusCode, code: &str) -> Value {
    assert_eq!(response.status(), status, "status");
    let header_id = response
        .headers()
        .get("x-request-id")
        .expect("X-Request-Id header")
        .to_str()
        .unwrap()
        .to_string();
    let retry_after = response.headers().get("retry-after").is_some();
    let body: Value = response.json().await.expect("a JSON error body");
    assert_eq!(body["error"], code, "error code in {body}");
    assert!(
        body["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "detail in {body}"
    );
    assert_eq!(
        body["request_id"],
        header_id.as_str(),
        "request_id matches X-Request-Id"
    );
    if status == StatusCode::SERVICE_UNAVAILABLE {
        assert!(retry_after, "a 503 carries Retry-After");
    }
    body
}

/// `POST /deduct/{strategy}` with `body`, in the background: the task yields the
/// answer's status and body (for a request that a test pauses at a failpoint).
pub fn deduct_in_background(
    app: &TestApp,
    strategy: &str,
    body: Value,
) -> tokio::task::JoinHandle<(StatusCode, Value)> {
    let request = app
        .client
        .post(app.url(&format!("/deduct/{strategy}")))
        .json(&body);
    tokio::spawn(async move {
        let response = request.send().await.unwrap();
        (response.status(), response.json().await.unwrap())
    })
}
