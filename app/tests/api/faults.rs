//! The service under database faults, on a private MariaDB it can kill.

use crate::helpers::{spawn_with, test_settings};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

/// Pauses request `request_id` before its COMMIT, kills MariaDB (before or right
/// after letting the COMMIT go), restarts it, retries with the same request_id, and
/// checks the unit was deducted exactly once. Returns what the first attempt heard.
async fn ambiguous_commit(
    db: &mut testbed::MariaDb,
    app: &crate::helpers::TestApp,
    request_id: &str,
    kill_first: bool,
) -> (StatusCode, Value) {
    let before = app.db_state(1).await;
    let body = json!({"product_id": 1, "request_id": request_id});
    app.set_failpoint("before_commit", json!({"mode": "pause", "count": 1}))
        .await;
    let request = app.client.post(app.url("/deduct/atomic-sql")).json(&body);
    let first = tokio::spawn(async move {
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json::<Value>().await.unwrap())
    });
    app.wait_paused("before_commit", 1).await;
    if kill_first {
        db.process().kill();
        app.release("before_commit").await;
    } else {
        app.release("before_commit").await;
        db.process().kill();
    }
    let (status, answer) = first.await.unwrap();
    println!(
        "{request_id} (kill {}): first attempt {status} {answer}",
        if kill_first {
            "before COMMIT"
        } else {
            "racing COMMIT"
        }
    );
    assert!(
        status == StatusCode::OK || answer["error"] == "outcome_unknown",
        "{status} {answer}"
    );

    db.restart().unwrap();
    // The pool's old connections are dead; the retry may need a moment for new ones.
    let mut retried = None;
    for _ in 0..50 {
        let response = app.deduct("atomic-sql", &body).await;
        if response.status() == StatusCode::OK {
            retried = Some(response.json::<Value>().await.unwrap());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let retried = retried.expect("the retry succeeds once MariaDB is back");
    println!("{request_id}: retry {retried}");
    let after = app.db_state(1).await;
    assert_eq!(
        after.remaining,
        before.remaining - 1,
        "deducted exactly once: {after:?}"
    );
    assert_eq!(
        after.ledger_rows,
        before.ledger_rows + 1,
        "one ledger row: {after:?}"
    );
    (status, answer)
}

/// An ambiguous commit is never applied twice. Killed before the COMMIT could reach
/// it, MariaDB rolls the transaction back: the client heard `outcome_unknown`, the retry
/// deducts for real. Killed racing the COMMIT, either may have happened: the retry is
/// answered from `orders` (duplicate) or deducts; never both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_commit_is_never_applied_twice() {
    let mut db = testbed::MariaDb::start().unwrap();
    let url = db.create_database("faults").unwrap();
    let app = spawn_with(test_settings(&url)).await;
    app.stock(1, 10).await;

    let (status, answer) = ambiguous_commit(&mut db, &app, "killed-first", true).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer["error"], "outcome_unknown", "{answer}");
    ambiguous_commit(&mut db, &app, "racing", false).await;

    let state = app.db_state(1).await;
    assert_eq!(
        (state.remaining, state.ledger_sum, state.lost_updates()),
        (8, 2, 0),
        "{state:?}"
    );
    app.stop().await;
}

/// The defect this guards against: Redis restarted empty used to restart the token
/// counter at 1, so every later holder of `redis-lock` was refused by a fence that had
/// seen the old tokens (in production, with tokens in the millions, for good). The fence
/// here is raised to the last token Redis handed out (at least 10^12) before Redis is
/// killed and restarted empty; the first deduction that reaches Redis afterwards
/// succeeds, within one lease, with a token above the fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_keeps_tokens_ahead_of_the_fence() {
    let mut redis = testbed::Redis::start("token-restart").unwrap();
    let db = testbed::MariaDb::start().unwrap();
    let url = db.create_database("tokens").unwrap();
    let lease = Duration::from_millis(1000);
    let app = spawn_with(stock_app::config::Settings {
        redis_urls: vec![redis.url()],
        lock_lease_ms: lease.as_millis() as u64,
        ..test_settings(&url)
    })
    .await;
    app.stock(1, 10).await;

    let mut before = 0;
    for n in 0..3 {
        let response = app
            .deduct(
                "redis-lock",
                &json!({"product_id": 1, "request_id": format!("before-{n}")}),
            )
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        let token = response.json::<Value>().await.unwrap()["fence_token"]
            .as_u64()
            .expect("a fenced deduction answers its token");
        assert!(token > before, "tokens increase: {token} after {before}");
        before = token;
    }
    sqlx::query("UPDATE stock_fence SET token = GREATEST(token, 1000000000000) WHERE product_id = 1 AND backend = 'redis'")
        .execute(&app.db)
        .await
        .unwrap();
    let fence: u64 = sqlx::query_scalar(
        "SELECT token FROM stock_fence WHERE product_id = 1 AND backend = 'redis'",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert!(fence >= 1_000_000_000_000, "fence {fence}");

    redis.restart().unwrap();
    let restarted = tokio::time::Instant::now();
    // Until the connection manager has reconnected a request may find Redis
    // unreachable (503 backend_unavailable); what must never come is lock_lost.
    let (token, attempts) = loop {
        let response = app.deduct("redis-lock", &json!({"product_id": 1})).await;
        let status = response.status();
        let body = response.json::<Value>().await.unwrap();
        if status == StatusCode::OK {
            break (body["fence_token"].as_u64().unwrap(), body);
        }
        assert_eq!(body["error"], "backend_unavailable", "{status} {body}");
        assert!(
            restarted.elapsed() < lease,
            "no sale within one lease: {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let took = restarted.elapsed();
    println!("first sale {took:?} after the restart, token {token} > fence {fence}: {attempts}");
    assert!(took < lease, "first sale after {took:?}, lease {lease:?}");
    assert!(token > fence, "token {token} is above the fence {fence}");
    let state = app.db_state(1).await;
    assert_eq!((state.remaining, state.lost_updates()), (6, 0), "{state:?}");
    app.stop().await;
}
