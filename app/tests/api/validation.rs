//! Bad input: every case answers 4xx in the error shape and changes nothing.

use crate::helpers::{assert_error, each_strategy, spawn_app};
use reqwest::StatusCode;
use serde_json::{Value, json};

each_strategy! {
/// Each malformed deduction is refused with the right status and code, its detail
/// names the problem, and afterwards stock, orders and ledger are exactly as before.
async fn bad_deductions_are_refused_and_change_nothing(strategy: &str) {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    let before = app.db_state(1).await;

    for (what, body, word) in bad_json_bodies() {
        let response = app.deduct(strategy, &body).await;
        let error = assert_error(response, StatusCode::BAD_REQUEST, "invalid_request").await;
        let detail = error["detail"].as_str().unwrap();
        assert!(
            detail.contains(word),
            "{what}: `{detail}` does not mention `{word}`"
        );
    }

    for (what, content_type, body, status) in bad_raw_bodies() {
        let response = app.deduct_raw(strategy, content_type, body).await;
        let error = assert_error(response, status, "invalid_request").await;
        assert!(!error["detail"].as_str().unwrap().is_empty(), "{what}");
    }

    // Unknown product, alone and next to a known one (all-or-nothing).
    for body in [
        json!({"product_id": 999}),
        json!({"items": [{"product_id": 1, "quantity": 3}, {"product_id": 999}]}),
    ] {
        let response = app.deduct(strategy, &body).await;
        let error = assert_error(response, StatusCode::NOT_FOUND, "unknown_product").await;
        assert!(error["detail"].as_str().unwrap().contains("999"));
    }
    // Unknown strategy: 404 listing the ones that exist.
    let response = app.deduct("no-such-lock", &json!({"product_id": 1})).await;
    let error = assert_error(response, StatusCode::NOT_FOUND, "unknown_strategy").await;
    assert!(
        error["detail"].as_str().unwrap().contains("atomic-sql"),
        "{error}"
    );

    assert_eq!(app.db_state(1).await, before, "stock and ledger unchanged");
    assert_eq!(app.row_counts().await, (0, 0), "no orders, no ledger rows");
    let version: i64 = sqlx::query_scalar("SELECT version FROM stock WHERE product_id = 1")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(version, 0, "no write touched the row");
    app.stop().await;
}
}

/// Bodies that are JSON but not a deduction: (what, body, a word the detail must
/// contain). Each is answered 400 `invalid_request`.
fn bad_json_bodies() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        ("a JSON array", json!([1]), "object"),
        (
            "unknown field",
            json!({"product_id": 1, "colour": "red"}),
            "colour",
        ),
        ("missing product_id", json!({"quantity": 1}), "product_id"),
        (
            "quantity 0",
            json!({"product_id": 1, "quantity": 0}),
            "quantity",
        ),
        (
            "quantity -1",
            json!({"product_id": 1, "quantity": -1}),
            "quantity",
        ),
        (
            "quantity 2^31",
            json!({"product_id": 1, "quantity": 2147483648_i64}),
            "quantity",
        ),
        (
            "quantity 2^63",
            json!({"product_id": 1, "quantity": 9223372036854775808_u64}),
            "quantity",
        ),
        (
            "quantity \"1\"",
            json!({"product_id": 1, "quantity": "1"}),
            "quantity",
        ),
        (
            "quantity 1.5",
            json!({"product_id": 1, "quantity": 1.5}),
            "quantity",
        ),
        (
            "quantity null",
            json!({"product_id": 1, "quantity": null}),
            "null",
        ),
        ("product_id -1", json!({"product_id": -1}), "product_id"),
        ("product_id \"1\"", json!({"product_id": "1"}), "product_id"),
        ("empty items", json!({"items": []}), "items"),
        (
            "101 items",
            json!({ "items": (1..=101).map(|i| json!({ "product_id": i })).collect::<Vec<Value>>() }),
            "101",
        ),
        (
            "same product twice",
            json!({"items": [{"product_id": 1}, {"product_id": 1}]}),
            "twice",
        ),
        (
            "items and product_id",
            json!({"items": [{"product_id": 1}], "product_id": 1}),
            "not both",
        ),
        (
            "item with unknown field",
            json!({"items": [{"product_id": 1, "qty": 1}]}),
            "qty",
        ),
        (
            "request_id too long",
            json!({"product_id": 1, "request_id": "x".repeat(65)}),
            "request_id",
        ),
        (
            "request_id with a space",
            json!({"product_id": 1, "request_id": "a b"}),
            "request_id",
        ),
        (
            "request_id a number",
            json!({"product_id": 1, "request_id": 7}),
            "request_id",
        ),
    ]
}

/// Bodies that are not JSON, or too large: (what, content type, body, status).
fn bad_raw_bodies() -> Vec<(&'static str, &'static str, String, StatusCode)> {
    vec![
        (
            "malformed JSON",
            "application/json",
            r#"{"product_id": 1,"#.into(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "not JSON",
            "application/json",
            "hello".into(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "not JSON, text/plain",
            "text/plain",
            "hello".into(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "a body over the limit",
            "application/json",
            format!(
                r#"{{"product_id": 1, "request_id": "{}"}}"#,
                "a".repeat(70_000)
            ),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
    ]
}

/// The admin route refuses a missing or wrong token with 401 and bad bodies with 400,
/// and the stock stays as it was.
#[tokio::test]
async fn restock_needs_the_admin_token_and_a_valid_body() {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    let url = app.url("/stock/1");

    let no_token = app
        .client
        .put(&url)
        .json(&json!({"quantity": 99}))
        .send()
        .await
        .unwrap();
    assert_eq!(no_token.headers()["www-authenticate"], "Bearer");
    assert_error(no_token, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let wrong = app
        .client
        .put(&url)
        .bearer_auth("not-the-token")
        .json(&json!({"quantity": 99}))
        .send()
        .await
        .unwrap();
    assert_error(wrong, StatusCode::UNAUTHORIZED, "unauthorized").await;
    // Refused before the body is read: a malformed body without a token is still 401.
    let malformed = app
        .client
        .put(&url)
        .header("content-type", "application/json")
        .body("{")
        .send()
        .await
        .unwrap();
    assert_error(malformed, StatusCode::UNAUTHORIZED, "unauthorized").await;

    for (body, word) in [
        (json!({"quantity": -1}), "quantity"),
        (json!({"quantity": 2147483648_i64}), "quantity"),
        (json!({"quantity": "5"}), "quantity"),
        (json!({}), "quantity"),
        (json!({"quantity": 5, "price": 3}), "price"),
    ] {
        let response = app
            .client
            .put(&url)
            .bearer_auth(crate::helpers::ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        let error = assert_error(response, StatusCode::BAD_REQUEST, "invalid_request").await;
        assert!(
            error["detail"].as_str().unwrap().contains(word),
            "{body}: {error}"
        );
    }
    for path in ["/stock/0", "/stock/-3", "/stock/abc"] {
        let response = app
            .client
            .put(app.url(path))
            .bearer_auth(crate::helpers::ADMIN_TOKEN)
            .json(&json!({"quantity": 1}))
            .send()
            .await
            .unwrap();
        let error = assert_error(response, StatusCode::BAD_REQUEST, "invalid_request").await;
        assert!(
            error["detail"].as_str().unwrap().contains("product_id"),
            "{path}: {error}"
        );
    }

    let state = app.db_state(1).await;
    assert_eq!((state.initial, state.remaining), (10, 10));
    let epoch: i32 = sqlx::query_scalar("SELECT epoch FROM stock WHERE product_id = 1")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(epoch, 1, "no restock happened");
    app.stop().await;
}

/// A key given twice in one object, at any depth, is a 400 naming the key, for every
/// body the service reads (deductions of every strategy, restocks, hook settings); and
/// no error body repeats more than a bounded part of its input (a 10,000-character
/// strategy name, field name or product id). Nothing changes.
#[tokio::test]
async fn ambiguous_or_oversized_input_is_refused_briefly_and_changes_nothing() {
    let app = spawn_app().await;
    app.stock(7, 10).await;
    app.stock(8, 10).await;
    let before = (app.db_state(7).await, app.db_state(8).await);
    let strategies: Vec<String> = app
        .get("/strategies")
        .await
        .json::<Vec<Value>>()
        .await
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    let long = "x".repeat(10_000);

    // (a body, the key it repeats)
    let duplicated = [
        (
            r#"{"product_id": 7, "product_id": 8, "quantity": 1}"#,
            "product_id",
        ),
        (
            r#"{"product_id": 7, "quantity": 1, "quantity": 2}"#,
            "quantity",
        ),
        (
            r#"{"items": [{"product_id": 7, "quantity": 1, "quantity": 2}]}"#,
            "quantity",
        ),
        (
            r#"{"product_id": 7, "request_id": "a", "request_id": "b"}"#,
            "request_id",
        ),
    ];
    for strategy in &strategies {
        for (body, key) in duplicated {
            let response = app.deduct_raw(strategy, "application/json", body).await;
            let text = brief(response, StatusCode::BAD_REQUEST, "invalid_request").await;
            assert!(
                text.contains(&format!("`{key}`")) && text.contains("twice"),
                "{strategy} {body}: {text}"
            );
        }
        // A long field name is cut, not echoed.
        let body = format!(r#"{{"product_id": 7, "{long}": 1}}"#);
        let response = app.deduct_raw(strategy, "application/json", body).await;
        brief(response, StatusCode::BAD_REQUEST, "invalid_request").await;
    }
    let response = app.deduct(&long, &json!({"product_id": 7})).await;
    let text = brief(response, StatusCode::NOT_FOUND, "unknown_strategy").await;
    assert!(
        text.contains("atomic-sql"),
        "still lists the strategies: {text}"
    );
    let response = app.get(&format!("/{long}")).await;
    brief(response, StatusCode::NOT_FOUND, "not_found").await;
    let response = app.get(&format!("/stock/{long}")).await;
    brief(response, StatusCode::BAD_REQUEST, "invalid_request").await;

    let restock = |body: &'static str| {
        app.client
            .put(app.url("/stock/7"))
            .bearer_auth(crate::helpers::ADMIN_TOKEN)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let response = restock(r#"{"quantity": 1, "quantity": 1000}"#)
        .await
        .unwrap();
    let text = brief(response, StatusCode::BAD_REQUEST, "invalid_request").await;
    assert!(text.contains("`quantity`"), "{text}");
    let response = app
        .client
        .put(app.url("/hooks/after_read"))
        .header("content-type", "application/json")
        .body(r#"{"mode": "pause", "mode": "off"}"#)
        .send()
        .await
        .unwrap();
    let text = brief(response, StatusCode::BAD_REQUEST, "invalid_request").await;
    assert!(text.contains("`mode`"), "{text}");
    let hooks: Value = app.get("/hooks").await.json().await.unwrap();
    assert_eq!(hooks["failpoints"]["after_read"]["mode"], "off", "{hooks}");

    assert_eq!((app.db_state(7).await, app.db_state(8).await), before);
    assert_eq!(app.row_counts().await, (0, 0), "no orders, no ledger rows");
    app.stop().await;
}

/// Asserts an error answer and that its whole body is under 1 KB; returns the body.
async fn brief(response: reqwest::Response, status: StatusCode, code: &str) -> String {
    assert_eq!(response.status(), status);
    let text = response.text().await.unwrap();
    assert!(text.len() < 1024, "{} bytes: {}", text.len(), &text[..200]);
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"], code, "{text}");
    text
}
