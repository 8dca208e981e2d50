//! `GET /metrics`: the Prometheus text format, counters that agree with the ledger,
//! and output that Prometheus' own `promtool` accepts.

use crate::helpers::{TestApp, deduct_in_background, fresh_database, sample, spawn_app_on};
use reqwest::StatusCode;
use serde_json::json;

async fn scrape(app: &crate::helpers::TestApp) -> String {
    let response = app.get("/metrics").await;
    assert_eq!(response.status(), StatusCode::OK);
    let kind = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    response.text().await.unwrap()
}

/// The traffic [`counters_equal_the_ledger`] counts: three sales of atomic-sql and a
/// retry of the first; two sales of pessimistic, a refusal (sold out), a bad quantity
/// and a malformed body; one sale of batched.
async fn sell_retry_and_refuse(app: &TestApp) {
    app.stock(1, 5).await;
    for n in 0..3 {
        let body = json!({"product_id": 1, "request_id": format!("a-{n}")});
        assert_eq!(
            app.deduct("atomic-sql", &body).await.status(),
            StatusCode::OK
        );
    }
    let retry = json!({"product_id": 1, "request_id": "a-0"});
    assert_eq!(
        app.deduct("atomic-sql", &retry).await.status(),
        StatusCode::OK
    );
    for n in 0..2 {
        let body = json!({"product_id": 1, "request_id": format!("p-{n}")});
        assert_eq!(
            app.deduct("pessimistic", &body).await.status(),
            StatusCode::OK
        );
    }
    let sold_out = app.deduct("pessimistic", &json!({"product_id": 1})).await;
    assert_eq!(sold_out.status(), StatusCode::CONFLICT);
    let bad = app
        .deduct("pessimistic", &json!({"product_id": 1, "quantity": 0}))
        .await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let malformed = app
        .client
        .post(app.url("/deduct/pessimistic"))
        .header("content-type", "application/json")
        .body("{\"product_id\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
    app.stock(2, 5).await;
    let batched = app.deduct("batched", &json!({"product_id": 2})).await;
    assert_eq!(batched.status(), StatusCode::OK);
}

/// After N sales, retries and refusals on two strategies, the counters say exactly
/// what the ledger and the answers say: `deducted` equals the ledger's rows per
/// strategy, a retry counts as `duplicate`, a refusal by its code, bad input as
/// `invalid_request`; the histogram counted every one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_equal_the_ledger() {
    let app = spawn_app_on(&fresh_database().await).await;
    sell_retry_and_refuse(&app).await;

    let metrics = scrape(&app).await;
    let ledger: Vec<(String, i64)> = sqlx::query_as(
        "SELECT CAST(strategy AS CHAR), COUNT(*) FROM ledger GROUP BY strategy ORDER BY strategy",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(
        ledger,
        vec![
            ("atomic-sql".into(), 3),
            ("batched".into(), 1),
            ("pessimistic".into(), 2)
        ]
    );
    for (strategy, rows) in &ledger {
        let counted = sample(
            &metrics,
            &format!(
                "stock_locks_deductions_total{{outcome=\"deducted\",strategy=\"{strategy}\"}}"
            ),
        );
        assert_eq!(counted, *rows as f64, "{strategy}:\n{metrics}");
    }
    let of = |outcome: &str, strategy: &str| {
        sample(
            &metrics,
            &format!(
                "stock_locks_deductions_total{{outcome=\"{outcome}\",strategy=\"{strategy}\"}}"
            ),
        )
    };
    assert_eq!(of("duplicate", "atomic-sql"), 1.0);
    // One transaction per sale here (no retries), the duplicate none; the batch of one.
    assert_eq!(
        sample(
            &metrics,
            "stock_locks_transactions_total{strategy=\"atomic-sql\"}"
        ),
        3.0
    );
    assert_eq!(
        sample(
            &metrics,
            "stock_locks_batch_size_count{strategy=\"batched\"}"
        ),
        1.0
    );
    assert_eq!(
        sample(&metrics, "stock_locks_batch_size_sum{strategy=\"batched\"}"),
        1.0
    );
    assert_eq!(of("insufficient_stock", "pessimistic"), 1.0);
    // The bad quantity and the malformed body (answered before the handler).
    assert_eq!(of("invalid_request", "pessimistic"), 2.0);
    assert_eq!(
        sample(
            &metrics,
            "stock_locks_deduction_duration_seconds_count{strategy=\"atomic-sql\"}"
        ),
        4.0
    );
    assert_eq!(
        sample(
            &metrics,
            "stock_locks_deduction_duration_seconds_count{strategy=\"pessimistic\"}"
        ),
        4.0
    );
    // The sales alone: the duplicate is timed above, not here.
    assert_eq!(
        sample(
            &metrics,
            "stock_locks_sale_duration_seconds_count{strategy=\"atomic-sql\"}"
        ),
        3.0
    );
    app.stop().await;
}

/// `promtool check metrics` (Prometheus' own linter, Debian's `prometheus` package,
/// installed by `scripts/install-deps`) finds nothing wrong in a real scrape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_accepts_the_scrape() {
    let app = spawn_app_on(&fresh_database().await).await;
    app.stock(1, 5).await;
    // Every metric family in the scrape: a sale, a refusal, a lock, a batch.
    app.deduct("atomic-sql", &json!({"product_id": 1})).await;
    app.deduct("optimistic", &json!({"product_id": 9})).await;
    app.deduct("redis-lock", &json!({"product_id": 1})).await;
    app.deduct("batched", &json!({"product_id": 1})).await;
    // A redis-stock sale whose persister is stopped before its COMMIT: acknowledged,
    // not recorded, so the backlog is 1; then it drains to 0.
    app.set_failpoint("before_commit", json!({"mode": "pause", "count": 1}))
        .await;
    let sold = app.deduct("redis-stock", &json!({"product_id": 1})).await;
    assert_eq!(sold.status(), StatusCode::OK);
    app.wait_paused("before_commit", 1).await;
    let waiting = scrape(&app).await;
    assert_eq!(
        sample(&waiting, "stock_locks_redis_stock_backlog"),
        1.0,
        "{waiting}"
    );
    app.release("before_commit").await;
    app.drained().await;
    let metrics = scrape(&app).await;
    for family in [
        "stock_locks_deductions_total",
        "stock_locks_deduction_duration_seconds",
        "stock_locks_sale_duration_seconds",
        "stock_locks_phase_seconds",
        "stock_locks_db_pool_wait_seconds",
        "stock_locks_transactions_total",
        "stock_locks_batch_size",
        "stock_locks_lock_renewals_total",
        "stock_locks_locks_lost_total",
        "stock_locks_db_pool_connections",
        "stock_locks_db_pool_max_connections",
        "stock_locks_redis_stock_backlog",
    ] {
        assert!(
            metrics.contains(&format!("# TYPE {family} ")),
            "{family} missing:
{metrics}"
        );
    }
    // Read at the scrape: the pool as configured, redis-stock drained.
    let max = stock_app::Settings::for_database("mysql://x/y").db_pool_size;
    assert_eq!(
        sample(&metrics, "stock_locks_db_pool_max_connections"),
        f64::from(max)
    );
    assert!(sample(&metrics, "stock_locks_db_pool_connections{state=\"idle\"}") >= 1.0);
    assert_eq!(sample(&metrics, "stock_locks_redis_stock_backlog"), 0.0);
    app.stop().await;

    let promtool = ["/usr/bin/promtool", "/usr/local/bin/promtool"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("promtool is missing: ./scripts/install-deps installs Debian's prometheus package");
    let mut child = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(metrics.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("promtool: {said:?}\n{metrics}");
    assert!(output.status.success(), "promtool: {said}\n{metrics}");
    assert!(said.trim().is_empty(), "promtool found problems: {said}");
}

/// A deducts `product` and pauses after its read (holding what `strategy` holds
/// there) for 300 ms, while B deducts the same product; both sell.
async fn b_waits_for_a(app: &crate::helpers::TestApp, strategy: &str, product: i64) {
    app.set_failpoint("after_read", json!({"mode": "pause", "count": 1}))
        .await;
    let a = deduct_in_background(app, strategy, json!({"product_id": product}));
    app.wait_paused("after_read", 1).await;
    let b = deduct_in_background(app, strategy, json!({"product_id": product}));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    app.release("after_read").await;
    assert_eq!(
        (a.await.unwrap().0, b.await.unwrap().0),
        (StatusCode::OK, StatusCode::OK)
    );
}

/// Where the time goes: the lock strategies report their lock, transaction and
/// release times, `pessimistic` its `FOR UPDATE` wait as the lock, `atomic-sql` (no
/// lock) its whole work as the transaction; and a request that waited for a held
/// lock shows the wait in `lock`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phases_show_where_the_time_went() {
    let app = spawn_app_on(&fresh_database().await).await;
    app.stock(1, 50).await;
    for strategy in ["local-mutex", "pessimistic", "atomic-sql", "redis-lock"] {
        let sold = app.deduct(strategy, &json!({"product_id": 1})).await;
        assert_eq!(sold.status(), StatusCode::OK, "{strategy}");
    }
    // A holds redis-lock's lock for 300 ms; B waits for it.
    b_waits_for_a(&app, "redis-lock", 1).await;

    let metrics = scrape(&app).await;
    let count = |strategy: &str, phase: &str| {
        sample(
            &metrics,
            &format!(
                "stock_locks_phase_seconds_count{{phase=\"{phase}\",strategy=\"{strategy}\"}}"
            ),
        )
    };
    for phase in ["lock", "transaction", "release"] {
        assert_eq!(
            count("redis-lock", phase),
            3.0,
            "redis-lock {phase}:\n{metrics}"
        );
    }
    assert_eq!(count("local-mutex", "lock"), 1.0);
    assert_eq!(count("local-mutex", "transaction"), 1.0);
    assert_eq!(count("pessimistic", "lock"), 1.0);
    assert_eq!(count("pessimistic", "transaction"), 1.0);
    assert_eq!(
        count("pessimistic", "release"),
        0.0,
        "COMMIT releases the row lock"
    );
    assert_eq!(count("atomic-sql", "lock"), 0.0, "atomic-sql has no lock");
    assert_eq!(count("atomic-sql", "transaction"), 1.0);
    assert_eq!(count("atomic-sql", "release"), 0.0);
    let waited = sample(
        &metrics,
        "stock_locks_phase_seconds_sum{phase=\"lock\",strategy=\"redis-lock\"}",
    );
    assert!(
        waited >= 0.25,
        "B's wait for A's lock is in `lock`: {waited} s"
    );
    app.stop().await;
}

/// A deduction that finds every pooled connection in use waits for one, and the wait
/// shows in `stock_locks_db_pool_wait_seconds`: a pool of one connection, A holding
/// it 300 ms in its transaction, B waiting for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_waits_are_timed() {
    let app = crate::helpers::spawn_with(stock_app::Settings {
        db_pool_size: 1,
        ..crate::helpers::test_settings(&fresh_database().await)
    })
    .await;
    app.stock(5, 10).await;
    b_waits_for_a(&app, "atomic-sql", 5).await;

    let metrics = scrape(&app).await;
    let waits = |suffix: &str| {
        sample(
            &metrics,
            &format!("stock_locks_db_pool_wait_seconds_{suffix}{{strategy=\"atomic-sql\"}}"),
        )
    };
    assert_eq!(waits("count"), 2.0, "{metrics}");
    assert!(
        waits("sum") >= 0.25,
        "B waited for A's connection: {} s",
        waits("sum")
    );
    app.stop().await;
}

/// The lock watchdogs' work shows: a request held 250 ms under a 300 ms lease is
/// renewed (every 100 ms), and one held past the maximum hold time loses its lock
/// (`max_hold`), answering `lock_lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_renewals_and_losses_are_counted() {
    let app = crate::helpers::spawn_with(
        stock_app::Settings {
            ..crate::helpers::test_settings(&fresh_database().await)
        }
        .with(|s| {
            s.shared.lock_lease_ms = 300;
            s.shared.lock_max_hold_ms = 500;
        }),
    )
    .await;
    app.stock(77, 10).await;
    let held = app
        .deduct("redis-lock", &json!({"product_id": 77, "hold_ms": 250}))
        .await;
    assert_eq!(held.status(), StatusCode::OK);
    let too_long = app
        .deduct("redis-lock", &json!({"product_id": 77, "hold_ms": 1000}))
        .await;
    let body: serde_json::Value = too_long.json().await.unwrap();
    assert_eq!(body["error"], "lock_lost", "{body}");

    let metrics = scrape(&app).await;
    let renewals = sample(
        &metrics,
        "stock_locks_lock_renewals_total{backend=\"redis\"}",
    );
    assert!(renewals >= 2.0, "renewals {renewals}:\n{metrics}");
    assert_eq!(
        sample(
            &metrics,
            "stock_locks_locks_lost_total{backend=\"redis\",reason=\"max_hold\"}"
        ),
        1.0,
        "{metrics}"
    );
    // A second scrape does not count again.
    let again = scrape(&app).await;
    assert_eq!(
        sample(
            &again,
            "stock_locks_locks_lost_total{backend=\"redis\",reason=\"max_hold\"}"
        ),
        1.0
    );
    app.stop().await;
}
