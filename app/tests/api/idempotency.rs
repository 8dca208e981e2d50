//! A request_id deducts at most once, however often and wherever it is sent.

use crate::helpers::{assert_error, each_strategy, fresh_database, spawn_app, spawn_app_on};
use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{Value, json};

each_strategy! {
/// Sent twice in a row: one deduction; the repeat gets the stored answer with
/// `duplicate: true`.
async fn a_repeat_gets_the_stored_answer(strategy: &str) {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    let body = json!({"product_id": 1, "quantity": 3, "request_id": "order-1"});
    let first: Value = app.deduct(strategy, &body).await.json().await.unwrap();
    let again = app.deduct(strategy, &body).await;
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(again.headers()["x-request-id"], "order-1");
    let again: Value = again.json().await.unwrap();
    assert_eq!(first.get("duplicate"), None);
    assert_eq!(again["duplicate"], true);
    assert_eq!(
        again["items"], first["items"],
        "the stored answer, not a new one"
    );

    let state = app.db_state(1).await;
    assert_eq!(
        (state.remaining, state.ledger_sum, state.ledger_rows),
        (7, 3, 1)
    );
    app.stop().await;
}
}

each_strategy! {
/// A retry of a request that succeeded gets its stored answer even when the stock ran
/// out since: a refusal looks for the stored answer before it is sent (the common path
/// reads nothing up front, so this is where a late retry is caught).
async fn a_retry_after_the_sell_out_gets_the_stored_answer(strategy: &str) {
    let app = spawn_app().await;
    app.stock(1, 2).await;
    let body = json!({"product_id": 1, "quantity": 2, "request_id": "early-bird"});
    let first = app.deduct(strategy, &body).await;
    assert_eq!(first.status(), StatusCode::OK);
    let first: Value = first.json().await.unwrap();
    let late = app.deduct(strategy, &json!({"product_id": 1, "request_id": "late"})).await;
    assert_error(late, StatusCode::CONFLICT, "insufficient_stock").await;

    let again = app.deduct(strategy, &body).await;
    assert_eq!(again.status(), StatusCode::OK);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["items"], first["items"]);
    // Another request under the same id is still refused as a reuse, not as 409.
    let other = app
        .deduct(strategy, &json!({"product_id": 1, "quantity": 1, "request_id": "early-bird"}))
        .await;
    assert_error(other, StatusCode::UNPROCESSABLE_ENTITY, "request_id_reused").await;
    let state = app.db_state(1).await;
    assert_eq!((state.remaining, state.ledger_sum, state.ledger_rows), (0, 2, 1));
    app.stop().await;
}
}

async fn sixteen_at_once(strategy: &str, apps: &[&crate::helpers::TestApp]) {
    let body = json!({"product_id": 1, "request_id": "same-id"});
    let calls = (0..16).map(|i| {
        let app = apps[i % apps.len()];
        let body = body.clone();
        async move {
            let response = app.deduct(strategy, &body).await;
            let status = response.status();
            let answer = response.json::<Value>().await.unwrap();
            // `fence-only` queues nobody: a twin on the other instance whose ticket
            // was overtaken by its own twin's is refused (nothing changed; the
            // contract lets it retry with the same id and get the stored answer).
            if strategy == "fence-only" && status == StatusCode::SERVICE_UNAVAILABLE {
                assert_eq!(answer["error"], "lock_lost", "{answer}");
                return None;
            }
            assert_eq!(status, StatusCode::OK, "{answer}");
            Some(answer)
        }
    });
    let answers: Vec<Value> = join_all(calls).await.into_iter().flatten().collect();
    let originals = answers
        .iter()
        .filter(|a| a.get("duplicate").is_none())
        .count();
    assert_eq!(
        originals, 1,
        "exactly one answer is the original: {answers:?}"
    );
    for answer in &answers {
        assert_eq!(answer["items"][0]["remaining"], 9);
    }
    let state = apps[0].db_state(1).await;
    assert_eq!(
        (state.remaining, state.ledger_sum, state.ledger_rows),
        (9, 1, 1)
    );
    assert_eq!(apps[0].row_counts().await, (1, 1));
}

each_strategy! {
/// The same request 16 times concurrently on one instance: one deduction.
async fn sixteen_concurrent_twins_deduct_once(strategy: &str) {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    sixteen_at_once(strategy, &[&app]).await;
    app.stop().await;
}
}

each_strategy! {
/// The same request 16 times concurrently over two instances: the in-process wait
/// cannot help across processes, so this exercises the database's guard (the orders
/// primary key; the loser rolls back and answers with the winner's response).
async fn concurrent_twins_on_two_instances_deduct_once(strategy: &str) {
    let database = fresh_database().await;
    let first = spawn_app_on(&database).await;
    let second = spawn_app_on(&database).await;
    first.stock(1, 10).await;
    sixteen_at_once(strategy, &[&first, &second]).await;
    first.stop().await;
    second.stop().await;
}
}

each_strategy! {
/// Reusing a request_id for a different request is a 422 and deducts nothing.
async fn a_reused_id_with_another_body_is_refused(strategy: &str) {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    app.stock(2, 10).await;
    let ok = app
        .deduct(strategy, &json!({"product_id": 1, "request_id": "r"}))
        .await;
    assert_eq!(ok.status(), StatusCode::OK);
    for other in [
        json!({"product_id": 1, "quantity": 2, "request_id": "r"}),
        json!({"product_id": 2, "request_id": "r"}),
        json!({"items": [{"product_id": 1}, {"product_id": 2}], "request_id": "r"}),
    ] {
        let response = app.deduct(strategy, &other).await;
        let error = assert_error(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "request_id_reused",
        )
        .await;
        assert_eq!(error["request_id"], "r");
    }
    // The same request in another spelling is the same request.
    let same = app
        .deduct(
            strategy,
            &json!({"items": [{"product_id": 1, "quantity": 1}], "request_id": "r"}),
        )
        .await;
    assert_eq!(same.status(), StatusCode::OK);
    assert_eq!(app.db_state(1).await.ledger_sum, 1);
    assert_eq!(app.db_state(2).await.ledger_sum, 0);
    // The same id on another strategy is another request.
    let other_strategy = if strategy == "atomic-sql" { "optimistic" } else { "atomic-sql" };
    let response = app.deduct(other_strategy, &json!({"product_id": 1, "request_id": "r"})).await;
    assert_error(response, StatusCode::UNPROCESSABLE_ENTITY, "request_id_reused").await;
    app.stop().await;
}
}

each_strategy! {
/// Only successes are stored: after a 409 the same id may be retried and succeed.
async fn a_refused_request_can_be_retried(strategy: &str) {
    let app = spawn_app().await;
    app.stock(1, 1).await;
    let body = json!({"product_id": 1, "quantity": 2, "request_id": "retry-me"});
    assert_error(
        app.deduct(strategy, &body).await,
        StatusCode::CONFLICT,
        "insufficient_stock",
    )
    .await;
    app.stock(1, 5).await;
    let response = app.deduct(strategy, &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body.get("duplicate"), None);
    assert_eq!(body["items"][0]["remaining"], 3);
    app.stop().await;
}
}

/// Without a request_id the service makes one, returns it in the body and in
/// X-Request-Id; a client's X-Request-Id header is used when it is valid.
#[tokio::test]
async fn a_missing_request_id_is_generated() {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    let response = app.deduct("atomic-sql", &json!({"product_id": 1})).await;
    let header = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["request_id"], header.as_str());
    assert_eq!(header.len(), 36, "a UUID: {header}");

    let with_header = app
        .client
        .post(app.url("/deduct/atomic-sql"))
        .header("x-request-id", "from-header-1")
        .json(&json!({"product_id": 1}))
        .send()
        .await
        .unwrap();
    let body: Value = with_header.json().await.unwrap();
    assert_eq!(body["request_id"], "from-header-1");
    app.stop().await;
}
