//! `atomic-sql` under contention: exact counts, proven from the database.

use crate::helpers::{TestApp, fresh_database, spawn_app, spawn_app_on};
use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::json;

/// Fires `requests` single-unit deductions of `product_id` at once, spread
/// round-robin over `apps`; returns how many got each status.
async fn race(
    apps: &[&TestApp],
    product_id: i64,
    requests: usize,
) -> std::collections::BTreeMap<u16, usize> {
    let calls = (0..requests).map(|i| {
        let app = apps[i % apps.len()];
        async move {
            app.deduct(
                "atomic-sql",
                &json!({ "product_id": product_id, "request_id": format!("race-{i}") }),
            )
            .await
            .status()
            .as_u16()
        }
    });
    let mut counts = std::collections::BTreeMap::new();
    for status in join_all(calls).await {
        *counts.entry(status).or_insert(0) += 1;
    }
    counts
}

async fn assert_sold_exactly(
    app: &TestApp,
    product_id: i64,
    stock: i64,
    requests: usize,
    apps: &[&TestApp],
) {
    let counts = race(apps, product_id, requests).await;
    assert_eq!(
        counts.get(&200),
        Some(&(stock as usize)),
        "successes: {counts:?}"
    );
    assert_eq!(
        counts.get(&409),
        Some(&(requests - stock as usize)),
        "sold out: {counts:?}"
    );
    assert_eq!(counts.len(), 2, "no other status: {counts:?}");

    let state = app.db_state(product_id).await;
    assert_eq!(state.remaining, 0, "{state:?}");
    assert_eq!(state.ledger_sum, stock, "{state:?}");
    assert_eq!(state.lost_updates(), 0, "{state:?}");
    let (orders, ledger) = app.row_counts().await;
    assert_eq!(
        (orders, ledger),
        (stock, stock),
        "one orders row and one ledger row per sale"
    );
}

/// 200 concurrent single-unit deductions on stock 50: exactly 50 succeed, 150 are
/// told it is sold out, and the database agrees (remaining 0, ledger 50, 50 orders).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_buyers_fifty_units_one_instance() {
    let app = spawn_app().await;
    app.stock(1, 50).await;
    assert_sold_exactly(&app, 1, 50, 200, &[&app]).await;
    app.stop().await;
}

/// The same race spread over two service instances sharing one database: the row
/// lock is in the database, so a second process changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_buyers_fifty_units_two_instances() {
    let database = fresh_database().await;
    let first = spawn_app_on(&database).await;
    let second = spawn_app_on(&database).await;
    first.stock(1, 50).await;
    assert_sold_exactly(&first, 1, 50, 200, &[&first, &second]).await;
    first.stop().await;
    second.stop().await;
}

/// 100 concurrent two-item orders over the same two products, half of them listing
/// the products in the opposite order: no deadlock (rows are taken in product order),
/// no 500, every order all-or-nothing, and the ledger agrees with the stock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_item_orders_are_all_or_nothing() {
    let app = spawn_app().await;
    // 100 orders want 1 of product 10 and 2 of product 20: product 20 runs out
    // after 40 orders although product 10 could serve 60.
    app.stock(10, 60).await;
    app.stock(20, 80).await;
    let calls = (0..100).map(|i| {
        let app = &app;
        let items = if i % 2 == 0 {
            json!([{"product_id": 10, "quantity": 1}, {"product_id": 20, "quantity": 2}])
        } else {
            json!([{"product_id": 20, "quantity": 2}, {"product_id": 10, "quantity": 1}])
        };
        async move {
            let response = app
                .deduct(
                    "atomic-sql",
                    &json!({ "items": items, "request_id": format!("multi-{i}") }),
                )
                .await;
            let status = response.status();
            let body: serde_json::Value = response.json().await.unwrap();
            (status, body)
        }
    });
    let results = join_all(calls).await;
    let ok = results.iter().filter(|(s, _)| *s == StatusCode::OK).count();
    let sold_out = results
        .iter()
        .filter(|(s, _)| *s == StatusCode::CONFLICT)
        .count();
    assert_eq!(
        (ok, sold_out),
        (40, 60),
        "{:?}",
        results.iter().map(|r| r.0).collect::<Vec<_>>()
    );
    for (status, body) in results.iter().filter(|(s, _)| *s == StatusCode::OK) {
        assert_eq!(
            body["items"].as_array().map(Vec::len),
            Some(2),
            "{status}: {body}"
        );
    }

    let a = app.db_state(10).await;
    let b = app.db_state(20).await;
    assert_eq!(
        (a.remaining, a.ledger_sum, a.ledger_rows),
        (20, 40, 40),
        "{a:?}"
    );
    assert_eq!(
        (b.remaining, b.ledger_sum, b.ledger_rows),
        (0, 80, 40),
        "{b:?}"
    );
    // All-or-nothing: every order in the ledger has both of its lines.
    let half_orders: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT request_id FROM ledger GROUP BY request_id HAVING COUNT(*) <> 2) t",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(half_orders, 0);
    app.stop().await;
}

/// The response says what is left, and a refused order names the product.
#[tokio::test]
async fn responses_report_remaining_and_shortage() {
    let app = spawn_app().await;
    app.stock(5, 3).await;
    let response = app
        .deduct(
            "atomic-sql",
            &json!({"product_id": 5, "quantity": 2, "request_id": "a"}),
        )
        .await;
    assert_eq!(response.headers()["x-request-id"], "a");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["deducted"], true);
    assert_eq!(body["strategy"], "atomic-sql");
    assert_eq!(body["attempts"], 1);
    assert_eq!(
        body["items"],
        json!([{"product_id": 5, "quantity": 2, "remaining": 1}])
    );

    let refused = app
        .deduct(
            "atomic-sql",
            &json!({"product_id": 5, "quantity": 2, "request_id": "b"}),
        )
        .await;
    let body =
        crate::helpers::assert_error(refused, StatusCode::CONFLICT, "insufficient_stock").await;
    assert!(
        body["detail"].as_str().unwrap().contains("product 5"),
        "{body}"
    );
    assert_eq!(body["request_id"], "b");
    let state = app.db_state(5).await;
    assert_eq!((state.remaining, state.ledger_sum), (1, 2));
    app.stop().await;
}
