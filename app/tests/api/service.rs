//! The service around the strategies: health, readiness, strategies, stock, routing,
//! admin, and the binary itself.

use crate::helpers::{
    assert_error, deduct_in_background, fresh_database, sample, sample_sum, spawn_app, spawn_with,
    test_settings,
};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use stock_app::Settings;

/// /health is up, says whether test hooks are on, and every response has an
/// X-Request-Id.
#[tokio::test]
async fn health_answers() {
    let app = spawn_app().await;
    let response = app.get("/health").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().contains_key("x-request-id"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "ok");
    assert_eq!(body["test_hooks"], true, "the test apps run with hooks on");
    assert_eq!(body["hold_ms"], 0);
    app.stop().await;
}

/// /strategies describes what the service serves.
#[tokio::test]
async fn strategies_are_listed() {
    let app = spawn_app().await;
    let list: Value = app.get("/strategies").await.json().await.unwrap();
    let atomic = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "atomic-sql")
        .expect("atomic-sql is listed");
    assert_eq!(atomic["safe_across_instances"], true);
    assert_eq!(atomic["backend"], "database");
    assert!(
        atomic["description"]
            .as_str()
            .is_some_and(|d| d.contains("UPDATE"))
    );
    app.stop().await;
}

/// Every strategy of the registry carries what a client needs to show it without a
/// list of its own: a family, one line on when to use it, a paragraph, its place in
/// the order (0, 1, 2, ... as served) and a colour no other strategy has. A strategy
/// added without them, or past the palette, fails here.
#[tokio::test]
async fn every_strategy_carries_its_card() {
    let app = spawn_app().await;
    let list: Vec<Value> = app.get("/strategies").await.json().await.unwrap();
    assert!(list.len() >= 13, "{} strategies", list.len());
    let mut colours = std::collections::HashSet::new();
    let families = ["control", "database", "hot-product", "distributed-lock"];
    for (i, card) in list.iter().enumerate() {
        let name = card["name"].as_str().unwrap();
        assert_eq!(card["order"], i, "{name}: order as served");
        assert!(
            families.contains(&card["family"].as_str().unwrap()),
            "{name}"
        );
        for field in ["description", "when_to_use", "explanation"] {
            let text = card[field].as_str().unwrap_or_default();
            assert!(text.len() > 20, "{name}: {field} `{text}`");
        }
        let colour = card["colour"].as_str().unwrap();
        assert!(
            colour.len() == 7 && colour.starts_with('#'),
            "{name}: {colour}"
        );
        assert!(
            colours.insert(colour.to_string()),
            "{name}: {colour} is taken"
        );
        // Where it lives, what a client may ask it for, and its fault experiments
        // (at least one: a strategy nobody subjects to a fault is a strategy whose
        // failure nobody has seen).
        let source = card["source"].as_str().unwrap();
        assert!(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join(source)
                .exists(),
            "{name}: {source}"
        );
        assert!(card["traits"].is_array(), "{name}: traits");
        let chaos = card["chaos"].as_array().unwrap();
        assert!(!chaos.is_empty(), "{name}: no chaos cell");
        for cell in chaos {
            let expect = cell["expect"].as_array().unwrap();
            assert!(!expect.is_empty(), "{name}: {cell}");
            for verdict in expect {
                let verdicts = ["safe", "refused", "unavailable", "erased", "missing"];
                assert!(
                    verdicts.contains(&verdict.as_str().unwrap()),
                    "{name}: {cell}"
                );
            }
        }
    }
    // Families come in teaching order: each starts after the previous one ended.
    let order: Vec<usize> = list
        .iter()
        .map(|c| families.iter().position(|f| c["family"] == *f).unwrap())
        .collect();
    let mut seen = Vec::new();
    for family in order {
        if seen.last() != Some(&family) {
            assert!(!seen.contains(&family), "a family split in two: {list:?}");
            seen.push(family);
        }
    }
    app.stop().await;
}

/// /ready checks every configured backend: the testbed's Redis, ZooKeeper and etcd
/// (a strategy's own flag) answer (200); a Redis or an etcd that is not there makes it
/// 503, naming that backend, with Retry-After and the error shape; an etcd not set is
/// listed as such and does not make it unready.
#[tokio::test]
async fn ready_names_each_backend() {
    let database = fresh_database().await;
    let redis_urls: Vec<String> = std::env::var("REDIS_URLS")
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    let zk_connect = std::env::var("ZK_CONNECT").ok();
    let etcd: Vec<String> = std::env::var("ETCD_ENDPOINTS")
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    assert!(
        !redis_urls.is_empty() && zk_connect.is_some() && !etcd.is_empty(),
        "run under testbed"
    );

    let healthy = spawn_with(
        Settings {
            ..Settings::for_database(&database)
        }
        .with(|s| {
            s.shared.redis_urls = redis_urls.clone();
            s.shared.zk_connect = zk_connect.clone();
            s.strategies.etcd_lock.etcd_endpoints = etcd.clone();
        }),
    )
    .await;
    let response = healthy.get("/ready").await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["ready"], true);
    let names: Vec<&str> = body["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["backend"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 3 + redis_urls.len(), "{names:?}");
    assert!(
        names.contains(&"database") && names.contains(&"zookeeper") && names.contains(&"etcd"),
        "{names:?}"
    );
    healthy.stop().await;

    // No etcd set: listed as not configured, still ready.
    let no_etcd = spawn_with(Settings::for_database(&database).with(|s| {
        s.shared.redis_urls = redis_urls.clone();
        s.shared.zk_connect = zk_connect.clone();
        s.strategies.etcd_lock.etcd_endpoints = Vec::new();
    }))
    .await;
    let response = no_etcd.get("/ready").await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    let etcd_row = body["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["backend"] == "etcd")
        .cloned();
    assert_eq!(
        etcd_row.as_ref().map(|b| (&b["configured"], &b["detail"])),
        Some((
            &Value::Bool(false),
            &Value::from("ETCD_ENDPOINTS is not set")
        )),
        "{body}"
    );
    no_etcd.stop().await;

    // A port with nobody behind it: bind, note the port, close.
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let broken = spawn_with(Settings::for_database(&database).with(|s| {
        s.shared.zk_connect = zk_connect;
        s.shared.redis_urls = vec![
            redis_urls[0].clone(),
            format!("redis://127.0.0.1:{dead_port}"),
        ];
        s.strategies.etcd_lock.etcd_endpoints = vec![format!("http://127.0.0.1:{dead_port}")];
    }))
    .await;
    let body = assert_error(
        broken.get("/ready").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "backend_unavailable",
    )
    .await;
    assert!(
        body["detail"].as_str().unwrap().contains("redis-2"),
        "{body}"
    );
    assert!(body["detail"].as_str().unwrap().contains("etcd"), "{body}");
    assert!(
        !body["detail"].as_str().unwrap().contains("redis-1"),
        "{body}"
    );
    broken.stop().await;
}

/// GET /stock reports the row and this epoch's sales; a restock starts a new epoch
/// whose sales count from zero, and an unknown product is a 404.
#[tokio::test]
async fn stock_view_and_epochs() {
    let app = spawn_app().await;
    assert_error(
        app.get("/stock/42").await,
        StatusCode::NOT_FOUND,
        "unknown_product",
    )
    .await;

    let created: Value = app.put_stock(42, 5).await.json().await.unwrap();
    assert_eq!(created["epoch"], 1);
    assert_eq!(created["initial_quantity"], 5);
    app.deduct("atomic-sql", &json!({"product_id": 42, "quantity": 2}))
        .await;
    let view: Value = app.get("/stock/42").await.json().await.unwrap();
    assert_eq!(
        (view["quantity"].as_i64(), view["sold"].as_i64()),
        (Some(3), Some(2))
    );

    let restocked: Value = app.put_stock(42, 7).await.json().await.unwrap();
    assert_eq!(restocked["epoch"], 2);
    assert_eq!(restocked["quantity"], 7);
    assert_eq!(restocked["sold"], 0, "the new epoch has sold nothing yet");
    let kept: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM ledger WHERE product_id = 42 AND epoch = 1")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(kept, 1, "the old epoch's ledger stays");
    app.stop().await;
}

/// Without ADMIN_TOKEN configured the admin route is closed to everyone (403).
#[tokio::test]
async fn admin_routes_are_closed_without_a_token() {
    let app = spawn_with(Settings::for_database(&fresh_database().await)).await;
    let response = app
        .client
        .put(app.url("/stock/1"))
        .bearer_auth("anything")
        .json(&json!({"quantity": 1}))
        .send()
        .await
        .unwrap();
    assert_error(response, StatusCode::FORBIDDEN, "admin_disabled").await;
    app.stop().await;
}

/// Unknown paths and wrong methods answer in the error shape too.
#[tokio::test]
async fn routing_errors_have_the_error_shape() {
    let app = spawn_app().await;
    assert_error(
        app.get("/nowhere").await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    assert_error(
        app.get("/deduct/atomic-sql").await,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    )
    .await;
    app.stop().await;
}

/// The binary starts with nothing but DATABASE_URL (no Redis, no ZooKeeper), says
/// where it listens, reports the missing backends as not configured, and serves
/// atomic-sql.
#[tokio::test]
async fn the_binary_runs_with_only_a_database() {
    let database = fresh_database().await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_stock-app"))
        .env_clear()
        .env("DATABASE_URL", &database)
        .env("BIND", "127.0.0.1:0")
        .env("ADMIN_TOKEN", crate::helpers::ADMIN_TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line
        .trim()
        .strip_prefix("stock-app listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_string();

    let client = reqwest::Client::new();
    let ready: Value = client
        .get(format!("{address}/ready"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["ready"], true, "{ready}");
    let unconfigured: Vec<&str> = ready["backends"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["configured"] == false)
        .map(|b| b["backend"].as_str().unwrap())
        .collect();
    assert_eq!(unconfigured, ["redis", "zookeeper", "etcd"]);

    let put = client
        .put(format!("{address}/stock/1"))
        .bearer_auth(crate::helpers::ADMIN_TOKEN)
        .json(&json!({"quantity": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::OK);
    let deduct = client
        .post(format!("{address}/deduct/atomic-sql"))
        .json(&json!({"product_id": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(deduct.status(), StatusCode::OK);
    let body: Value = deduct.json().await.unwrap();
    assert_eq!(body["items"][0]["remaining"], 1);

    child.kill().unwrap();
    child.wait().unwrap();
}

/// Two instances starting at the same moment on a fresh database both start: the
/// migrations are applied once, under the service's own lock (sqlx's lock is a no-op
/// on MariaDB, where this failed every time before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_starting_at_once_both_migrate() {
    for _ in 0..3 {
        let database = fresh_database().await;
        let settings = || Settings::for_database(&database);
        let (first, second) = tokio::join!(
            stock_app::Application::build(settings()),
            stock_app::Application::build(settings()),
        );
        let (first, second) = (first.expect("first"), second.expect("second"));
        let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
            .fetch_one(&first.state().service.pool)
            .await
            .unwrap();
        assert_eq!(applied, 3, "each migration recorded once");
        for app in [first, second] {
            let handle = app.handle();
            tokio::spawn(app.run_until_stopped());
            handle.stop(true).await;
        }
    }
}

/// The admission limit (`--max-in-flight 2`, no hold): with two deductions paused at a
/// failpoint, a third is answered 429 `overloaded` at once, with Retry-After, and
/// changes nothing (no stock, no ledger row, no order); `/health` still answers; once
/// the two finish, the next is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_admission_limit_a_deduction_is_refused_at_once() {
    let app = spawn_with(Settings {
        max_in_flight: 2,
        reject_hold_ms: Some(0),
        ..test_settings(&fresh_database().await)
    })
    .await;
    app.stock(1, 10).await;
    app.stock(2, 10).await;
    app.set_failpoint("after_read", json!({"mode": "pause"}))
        .await;
    let held: Vec<_> = (1..=2)
        .map(|i| {
            deduct_in_background(
                &app,
                "pessimistic",
                json!({"request_id": format!("held-{i}"), "product_id": i, "quantity": 1}),
            )
        })
        .collect();
    app.wait_paused("after_read", 2).await;
    let started = std::time::Instant::now();
    let refused = app
        .deduct(
            "atomic-sql",
            &json!({"request_id": "third", "product_id": 1, "quantity": 1}),
        )
        .await;
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap()),
        Some("1")
    );
    let body = assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "overloaded").await;
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("2 deductions in flight"),
        "{body}"
    );
    eprintln!("refused in {:?}", started.elapsed());
    assert_eq!(app.get("/health").await.status(), StatusCode::OK);
    assert_eq!(
        app.orders_like("third").await,
        0,
        "a refused deduction leaves no order"
    );
    app.set_failpoint("after_read", json!({"mode": "off"}))
        .await;
    app.release("after_read").await;
    for h in held {
        let (status, body) = h.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    for product in [1, 2] {
        let state = app.db_state(product).await;
        assert_eq!(
            (state.remaining, state.ledger_sum),
            (9, 1),
            "product {product}"
        );
    }
    let next = app
        .deduct(
            "atomic-sql",
            &json!({"request_id": "fourth", "product_id": 1, "quantity": 1}),
        )
        .await;
    assert_eq!(next.status(), StatusCode::OK);
    let state = app.db_state(1).await;
    assert_eq!((state.remaining, state.ledger_sum), (8, 2));
    app.stop().await;
}

/// An instance with an admission limit of one and a reject hold of `reject_hold_ms`,
/// its one place taken by a `pessimistic` deduction of product 1 (10 in stock) paused
/// at `after_read`: the next deduction is past the limit.
async fn limit_one_taken(
    reject_hold_ms: u64,
) -> (
    crate::helpers::TestApp,
    tokio::task::JoinHandle<(StatusCode, Value)>,
) {
    let app = spawn_with(Settings {
        max_in_flight: 1,
        reject_hold_ms: Some(reject_hold_ms),
        ..test_settings(&fresh_database().await)
    })
    .await;
    app.stock(1, 10).await;
    app.set_failpoint("after_read", json!({"mode": "pause"}))
        .await;
    let held = deduct_in_background(
        &app,
        "pessimistic",
        json!({"request_id": "held", "product_id": 1, "quantity": 1}),
    );
    app.wait_paused("after_read", 1).await;
    (app, held)
}

/// With `--reject-hold-ms`, a refused deduction waits out the hold before its 429 (a
/// client that does not back off sends its next request that much later), while the
/// instance keeps answering `/health` and the admitted deduction completes; the
/// refusal still changes nothing, and its Retry-After counts the hold as waited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_held_on_a_timer_still_changes_nothing_and_blocks_nobody() {
    let (app, held) = limit_one_taken(1_000).await;
    let started = std::time::Instant::now();
    let refused = tokio::spawn(
        app.client
            .post(app.url("/deduct/atomic-sql"))
            .json(&json!({"request_id": "refused", "product_id": 1, "quantity": 1}))
            .send(),
    );
    // The refusal is on its timer: the instance answers meanwhile.
    assert_eq!(app.get("/health").await.status(), StatusCode::OK);
    assert!(
        !refused.is_finished(),
        "the refusal was answered before /health, {:?} after it was sent",
        started.elapsed()
    );
    let refused = refused.await.unwrap().unwrap();
    let waited = started.elapsed();
    // Held at least half the hold (the jitter's floor): half a second or more, so
    // the Retry-After's second, less the wait, rounds to 0: retry now (the hold was
    // the backoff; a polite client that waited a second more would sell less than a
    // client that does not back off).
    assert!(
        waited >= std::time::Duration::from_millis(500),
        "{waited:?}"
    );
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap()),
        Some("0")
    );
    assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "overloaded").await;
    eprintln!("refused after {waited:?} (hold 1 s, jittered)");
    app.set_failpoint("after_read", json!({"mode": "off"}))
        .await;
    app.release("after_read").await;
    let (status, body) = held.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let state = app.db_state(1).await;
    assert_eq!((state.remaining, state.ledger_sum), (9, 1));
    assert_eq!(
        app.orders_like("refused").await,
        0,
        "a refused deduction leaves no order"
    );
    app.stop().await;
}

/// A refusal held shorter than half a second says to retry after the second's rest: its
/// Retry-After is 1, not 0 (whole seconds, to the nearest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_held_under_half_a_second_says_retry_after_one() {
    let (app, held) = limit_one_taken(100).await;
    let started = std::time::Instant::now();
    let refused = app
        .deduct(
            "atomic-sql",
            &json!({"request_id": "refused", "product_id": 1}),
        )
        .await;
    let waited = started.elapsed();
    // Held its jittered hold (50-150 ms), well under a second.
    assert!(waited >= std::time::Duration::from_millis(50), "{waited:?}");
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap()),
        Some("1"),
        "after {waited:?}"
    );
    assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "overloaded").await;
    app.set_failpoint("after_read", json!({"mode": "off"}))
        .await;
    app.release("after_read").await;
    let (status, body) = held.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(app.orders_like("refused").await, 0);
    app.stop().await;
}

/// A refusal costs no backend work: with the pool's only connection held by a paused
/// deduction that also holds the product's row lock, a deduction past the admission
/// limit, of that product with a lock strategy, is still answered 429. Had it asked
/// for a connection, a statement or the lock, it would be waiting for the paused one
/// (the pool's wait is a minute here), not answered; and nothing of it is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_needs_no_connection_no_statement_and_no_lock() {
    let app = spawn_with(Settings {
        db_pool_size: 1,
        db_acquire_timeout_ms: 60_000,
        max_in_flight: 1,
        reject_hold_ms: Some(0),
        ..test_settings(&fresh_database().await)
    })
    .await;
    app.stock(1, 10).await;
    app.set_failpoint("after_read", json!({"mode": "pause"}))
        .await;
    // `pessimistic` pauses after its SELECT ... FOR UPDATE: it holds the connection
    // and the row lock.
    let held = deduct_in_background(
        &app,
        "pessimistic",
        json!({"request_id": "held", "product_id": 1, "quantity": 1}),
    );
    app.wait_paused("after_read", 1).await;
    let in_use = r#"stock_locks_db_pool_connections{state="in_use"}"#;
    let before = app.get("/metrics").await.text().await.unwrap();
    assert_eq!(sample(&before, in_use), 1.0, "the paused one holds it");
    for strategy in ["mysql-lock", "pessimistic", "atomic-sql"] {
        let refused = app
            .deduct(
                strategy,
                &json!({"request_id": format!("refused-{strategy}"), "product_id": 1}),
            )
            .await;
        assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "overloaded").await;
    }
    let after = app.get("/metrics").await.text().await.unwrap();
    assert_eq!(sample(&after, in_use), 1.0);
    // No pool wait was timed for the refusals: only deductions that ran ask the pool.
    let waits = "stock_locks_db_pool_wait_seconds_count";
    assert_eq!(sample_sum(&after, waits), sample_sum(&before, waits));
    app.release("after_read").await;
    let (status, body) = held.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let state = app.db_state(1).await;
    assert_eq!((state.remaining, state.ledger_sum), (9, 1));
    assert_eq!(
        app.orders_like("refused-%").await,
        0,
        "a refused deduction leaves no order"
    );
    app.stop().await;
}

/// Deductions paused at a failpoint complete while a flood that never backs off (each
/// 429 followed at once by the next request) still runs against the instance, and
/// `/health` answers throughout; the ledger agrees with the stock. How long the
/// paused ones took once let go is reported, not asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_deductions_complete_while_a_flood_runs() {
    let app = spawn_with(Settings {
        max_in_flight: 4,
        reject_hold_ms: Some(100),
        ..test_settings(&fresh_database().await)
    })
    .await;
    app.stock(1, 1_000_000).await;
    app.stock(2, 10).await;
    app.stock(3, 10).await;
    app.set_failpoint("after_read", json!({"mode": "pause", "count": 2}))
        .await;
    let paused: Vec<_> = (1..=2)
        .map(|i| {
            deduct_in_background(
                &app,
                "pessimistic",
                json!({"request_id": format!("paused-{i}"), "product_id": 1 + i}),
            )
        })
        .collect();
    app.wait_paused("after_read", 2).await;
    // The flood: 32 clients, each sending the next request the moment it is answered.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood: Vec<_> = (0..32)
        .map(|client| {
            let request = app.client.clone();
            let url = app.url("/deduct/atomic-sql");
            let stop = stop.clone();
            tokio::spawn(async move {
                let (mut sold, mut refused, mut n) = (0u64, 0u64, 0u64);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let body =
                        json!({"request_id": format!("flood-{client}-{n}"), "product_id": 1});
                    match request
                        .post(&url)
                        .json(&body)
                        .send()
                        .await
                        .unwrap()
                        .status()
                    {
                        StatusCode::OK => sold += 1,
                        StatusCode::TOO_MANY_REQUESTS => refused += 1,
                        other => panic!("the flood got {other}"),
                    }
                }
                (sold, refused)
            })
        })
        .collect();
    // The flood is on: the two free places are taken and the rest is refused.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let metrics = app.get("/metrics").await.text().await.unwrap();
        if metrics.contains("outcome=\"overloaded\"") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no refusal in 30 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let released = std::time::Instant::now();
    app.release("after_read").await;
    for handle in paused {
        let (status, body) = handle.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    eprintln!(
        "the paused deductions completed {:?} after they were let go, during the flood",
        released.elapsed()
    );
    assert_eq!(app.get("/health").await.status(), StatusCode::OK);
    assert!(
        !flood.iter().any(|f| f.is_finished()),
        "the flood still runs"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut sold, mut refused) = (0, 0);
    for f in flood {
        let (s, r) = f.await.unwrap();
        sold += s;
        refused += r;
    }
    eprintln!("the flood: {sold} sold, {refused} refused");
    assert!(refused > 0, "the flood was refused");
    let flooded = app.db_state(1).await;
    assert_eq!(
        flooded.ledger_sum, sold as i64,
        "every sale the flood was told of"
    );
    assert_eq!(flooded.lost_updates(), 0);
    for product in [2, 3] {
        let state = app.db_state(product).await;
        assert_eq!(
            (state.remaining, state.ledger_sum),
            (9, 1),
            "product {product}"
        );
    }
    app.stop().await;
}
