//! Test hooks are off unless the service starts with `--enable-test-hooks`.

use crate::helpers::{assert_error, fresh_database, spawn_app, spawn_with, test_settings};
use reqwest::StatusCode;
use serde_json::{Value, json};
use stock_app::Settings;

/// Without the flag: hook fields in a deduct body are a 400 (and change nothing),
/// the hooks endpoint is a 404, and /health says hooks are off.
#[tokio::test]
async fn hooks_are_off_by_default() {
    let app = spawn_with(Settings {
        enable_test_hooks: false,
        ..test_settings(&fresh_database().await)
    })
    .await;
    app.stock(1, 5).await;
    for body in [
        json!({"product_id": 1, "hold_ms": 10}),
        json!({"product_id": 1, "unsorted": true}),
        json!({"items": [{"product_id": 1}], "barrier": {"name": "b", "parties": 2}}),
        json!({"product_id": 1, "mistake": "no-guard"}),
    ] {
        let error = assert_error(
            app.deduct("unsafe", &body).await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        )
        .await;
        assert!(
            error["detail"]
                .as_str()
                .unwrap()
                .contains("--enable-test-hooks"),
            "{error}"
        );
    }
    assert_error(app.get("/hooks").await, StatusCode::NOT_FOUND, "not_found").await;
    let put = app
        .client
        .put(app.url("/hooks/after_read"))
        .json(&json!({"mode": "pause"}))
        .send()
        .await
        .unwrap();
    assert_error(put, StatusCode::NOT_FOUND, "not_found").await;
    let health: Value = app.get("/health").await.json().await.unwrap();
    assert_eq!(health["test_hooks"], false);
    let state = app.db_state(1).await;
    assert_eq!((state.remaining, state.ledger_sum), (5, 0));
    app.stop().await;
}

/// With the flag: the endpoint reports every failpoint, names an unknown one, and a
/// `sleep` failpoint limited by `count` applies to that many requests and then
/// switches itself off.
#[tokio::test]
async fn the_hooks_endpoint_sets_and_reports_failpoints() {
    let app = spawn_app().await;
    let health: Value = app.get("/health").await.json().await.unwrap();
    assert_eq!(health["test_hooks"], true);
    let state: Value = app.get("/hooks").await.json().await.unwrap();
    for point in [
        "after_lock",
        "after_read",
        "before_commit",
        "before_lock",
        "before_release",
    ] {
        assert_eq!(state["failpoints"][point]["mode"], "off", "{state}");
    }
    let unknown = app
        .client
        .put(app.url("/hooks/after_everything"))
        .json(&json!({"mode": "off"}))
        .send()
        .await
        .unwrap();
    assert_error(unknown, StatusCode::NOT_FOUND, "unknown_failpoint").await;
    let bad_mode = app
        .client
        .put(app.url("/hooks/after_read"))
        .json(&json!({"mode": "explode"}))
        .send()
        .await
        .unwrap();
    assert_error(bad_mode, StatusCode::BAD_REQUEST, "invalid_request").await;

    app.stock(1, 5).await;
    app.set_failpoint(
        "before_commit",
        json!({"mode": "sleep", "ms": 1, "count": 2}),
    )
    .await;
    for _ in 0..3 {
        assert_eq!(
            app.deduct("atomic-sql", &json!({"product_id": 1}))
                .await
                .status(),
            StatusCode::OK
        );
    }
    let state: Value = app.get("/hooks").await.json().await.unwrap();
    assert_eq!(state["failpoints"]["before_commit"]["hits"], 3);
    assert_eq!(
        state["failpoints"]["before_commit"]["mode"], "off",
        "count used up: {state}"
    );

    // Waiting for a paused request that never comes times out with 408.
    let waited = app
        .get("/hooks/after_read/paused?at_least=1&timeout_ms=50")
        .await;
    assert_error(waited, StatusCode::REQUEST_TIMEOUT, "hook_timeout").await;
    app.stop().await;
}
