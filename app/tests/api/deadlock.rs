//! A real InnoDB deadlock, made on purpose and survived.

use crate::helpers::spawn_app;
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn deadlocks_so_far(app: &crate::helpers::TestApp) -> i64 {
    let (_, value): (String, String) = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
        .fetch_one(&app.db)
        .await
        .expect("MariaDB reports Innodb_deadlocks");
    value.parse().unwrap()
}

/// Two `pessimistic` orders over products 1 and 2 in opposite orders, with sorting
/// turned off (`unsorted` hook) and a barrier after each took its first row: A holds 1
/// and wants 2, B holds 2 and wants 1. InnoDB detects the cycle and rolls one back
/// (1213); the strategy retries it, and both orders succeed. The server's own
/// deadlock counter proves the deadlock really happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_deadlock_and_the_retry_resolves_it() {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    app.stock(2, 10).await;
    let before = deadlocks_so_far(&app).await;

    let order = |id: &str, first: i64, second: i64| {
        json!({
            "request_id": id,
            "items": [{"product_id": first}, {"product_id": second}],
            "unsorted": true,
            "barrier": {"name": "opposite", "parties": 2},
        })
    };
    let (order_a, order_b) = (order("a", 1, 2), order("b", 2, 1));
    let (a, b) = tokio::join!(
        app.deduct("pessimistic", &order_a),
        app.deduct("pessimistic", &order_b)
    );
    assert_eq!((a.status(), b.status()), (StatusCode::OK, StatusCode::OK));
    let a: Value = a.json().await.unwrap();
    let b: Value = b.json().await.unwrap();
    let mut attempts = [
        a["attempts"].as_u64().unwrap(),
        b["attempts"].as_u64().unwrap(),
    ];
    attempts.sort_unstable();
    assert_eq!(attempts, [1, 2], "the victim ran a second transaction");

    let after = deadlocks_so_far(&app).await;
    assert!(
        after > before,
        "InnoDB counted a deadlock ({before} -> {after})"
    );
    for product in [1, 2] {
        let state = app.db_state(product).await;
        assert_eq!(
            (state.remaining, state.ledger_sum, state.lost_updates()),
            (8, 2, 0),
            "{state:?}"
        );
    }
    app.stop().await;
}
