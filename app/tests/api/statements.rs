//! How many statements each strategy sends to MariaDB per deduction, counted by the
//! server itself (`SHOW GLOBAL STATUS LIKE 'Questions'`), on a private MariaDB that
//! nothing else talks to.
//!
//! A count is deterministic where a time is not: this is how the lean path is held.
//! Every strategy is counted on 100 sequential successes and 100 sequential 409s,
//! after a warm-up (`mysql-lock` inserts its lock row once per key). A connection the
//! pool opens runs a `SET SESSION` once; those (`Com_set_option`) are not counted.

use crate::helpers::{TestApp, assert_error, spawn_with, test_settings};
use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::json;
use stock_app::Settings;

/// Requests counted per strategy and outcome.
const COUNTED: usize = 100;

// The most statements a strategy may send, success and 409, is declared on its card
// (`statements`, in its own file, `GET /strategies`). Before the strategies declared it on their cards,
// measured by this test: unsafe, local-mutex, pessimistic, optimistic 7 / 4;
// atomic-sql 7 / 5; fence-only 10 / 7; mysql-lock 11 / 8; redis-lock and zookeeper
// 9 / 6; redlock 8 / 5 (an up-front replay read, reads inside the transaction, a
// read-back, a two-statement claim). A 409 of `atomic-sql` and `pessimistic` is 4, not
// 3: BEGIN, the statement that refuses, ROLLBACK, and the one read a refusal makes to
// find a stored answer (a retry of a request that succeeded before the stock ran out
// gets that answer, not a 409).

/// Statements the server has run, less the session settings of new connections.
async fn questions(app: &TestApp) -> i64 {
    let rows: Vec<(String, String)> =
        sqlx::query_as("SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_set_option')")
            .fetch_all(&app.db)
            .await
            .unwrap();
    let value = |name: &str| -> i64 {
        let (_, v) = rows.iter().find(|(n, _)| n == name).expect(name);
        v.parse().unwrap()
    };
    value("Questions") - value("Com_set_option")
}

/// Statements per request over `COUNTED` requests, each expected to answer `status`.
async fn per_request(
    app: &TestApp,
    strategy: &str,
    product_id: i64,
    status: StatusCode,
    label: &str,
) -> f64 {
    let send = |i: usize| {
        let body =
            json!({"product_id": product_id, "request_id": format!("{strategy}-{label}-{i}")});
        async move {
            let response = app.deduct(strategy, &body).await;
            assert_eq!(response.status(), status, "{strategy} {label} {i}");
        }
    };
    for i in 0..10 {
        send(i).await; // warm-up
    }
    let before = questions(app).await;
    for i in 10..10 + COUNTED {
        send(i).await;
    }
    // redis-stock's persister writes after the answers: count it all.
    app.drained().await;
    let after = questions(app).await;
    // The second SHOW counts itself.
    (after - before - 1) as f64 / COUNTED as f64
}

/// Every strategy stays within its statement budget, success and 409, as MariaDB
/// counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_per_deduction_within_budget() {
    let db = testbed::MariaDb::start().expect("a private MariaDB");
    let url = db.create_database("statements").unwrap();
    let app = spawn_with(test_settings(&url)).await;
    let mut table = vec![format!(
        "{:<12} {:>8} {:>8}   (statements per request; limits in parentheses)",
        "strategy", "success", "409"
    )];
    let mut over = Vec::new();
    // Every strategy the service serves, held to what its card declares.
    let cards: Vec<serde_json::Value> = app.get("/strategies").await.json().await.unwrap();
    assert!(cards.len() >= 13, "{} strategies", cards.len());
    for (i, card) in cards.iter().enumerate() {
        let strategy = card["name"].as_str().unwrap();
        let success_limit = card["statements"]["sale"].as_f64().unwrap();
        let refused_limit = card["statements"]["refusal"].as_f64().unwrap();
        let product_id = i as i64 + 1;
        app.stock(product_id, 1000).await;
        let success = per_request(&app, strategy, product_id, StatusCode::OK, "ok").await;
        app.stock(product_id, 0).await;
        let refused = per_request(&app, strategy, product_id, StatusCode::CONFLICT, "no").await;
        table.push(format!(
            "{strategy:<12} {success:>8.2} {refused:>8.2}   ({success_limit} / {refused_limit})"
        ));
        if success > success_limit || refused > refused_limit {
            over.push(strategy);
        }
    }
    println!("{}", table.join("\n"));
    assert!(
        over.is_empty(),
        "over budget: {over:?}\n{}",
        table.join("\n")
    );
    app.stop().await;
}

/// A flood's refusals of a sold-out product past its pace, each held (`--reject-hold-ms`),
/// are read from `orders` together: far fewer statements than refusals. Among them a
/// retry of a request that succeeded still gets its stored answer, and another request
/// under that id its 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_sold_out_refusals_are_read_together() {
    let db = testbed::MariaDb::start().expect("a private MariaDB");
    let url = db.create_database("held_reads").unwrap();
    let app = spawn_with(Settings {
        reject_hold_ms: Some(50),
        // Marks outlast the test's refusals; a restock waits this long to answer.
        sold_out_cache_ms: 2_000,
        ..test_settings(&url)
    })
    .await;
    app.stock(1, 1).await;
    let early = json!({"product_id": 1, "request_id": "early"});
    let first = app.deduct("atomic-sql", &early).await;
    assert_eq!(first.status(), StatusCode::OK);
    let first: serde_json::Value = first.json().await.unwrap();
    let late = app
        .deduct(
            "atomic-sql",
            &json!({"product_id": 1, "request_id": "late"}),
        )
        .await;
    assert_eq!(late.status(), StatusCode::CONFLICT, "the product is marked");

    let before = questions(&app).await;
    let flood = (0..FLOODED).map(|i| {
        let body = json!({"product_id": 1, "request_id": format!("flood-{i}")});
        let app = &app;
        async move { app.deduct("atomic-sql", &body).await.status() }
    });
    // Sent just after the flood took the product's at-once answers: held with it.
    let retries = async {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let reused = json!({"product_id": 1, "quantity": 2, "request_id": "early"});
        tokio::join!(
            app.deduct("atomic-sql", &early),
            app.deduct("atomic-sql", &reused)
        )
    };
    let (statuses, (again, reused)) = tokio::join!(join_all(flood), retries);
    let after = questions(&app).await;

    assert!(
        statuses.iter().all(|s| *s == StatusCode::CONFLICT),
        "{statuses:?}"
    );
    assert_eq!(again.status(), StatusCode::OK);
    let again: serde_json::Value = again.json().await.unwrap();
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["items"], first["items"], "the stored answer");
    assert_error(
        reused,
        StatusCode::UNPROCESSABLE_ENTITY,
        "request_id_reused",
    )
    .await;
    // The second SHOW counts itself; the restock-free flood runs no strategy.
    let statements = after - before - 1;
    let refusals = FLOODED as i64 + 2;
    println!("{refusals} refusals of a sold-out product read in {statements} statements");
    assert!(
        statements * 2 <= refusals,
        "{statements} statements for {refusals} refusals"
    );
    let state = app.db_state(1).await;
    assert_eq!(
        (state.remaining, state.ledger_sum, state.ledger_rows),
        (0, 1, 1)
    );
    app.stop().await;
}

/// Concurrent buyers of the sold-out product in [`held_sold_out_refusals_are_read_together`].
const FLOODED: usize = 40;
