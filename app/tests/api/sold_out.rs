//! The sold-out fast path (`--sold-out-cache-ms`, on by default): a product a strategy
//! found with nothing left is refused on that instance without running the strategy,
//! and a restock reopens it on every instance before it answers.

use crate::helpers::{
    TestApp, assert_error, each_strategy, fresh_database, sample, spawn_app_on, spawn_with,
    test_settings,
};
use reqwest::StatusCode;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// `stock_locks_sold_out_fast_total` for `strategy` on `app`.
async fn fast_refusals(app: &TestApp, strategy: &str) -> u64 {
    let text = app.get("/metrics").await.text().await.unwrap();
    let name = format!("stock_locks_sold_out_fast_total{{strategy=\"{strategy}\"}}");
    sample(&text, &name) as u64
}

each_strategy! {
/// Two instances on one database. Only a refusal that saw nothing left marks the
/// product (asking for more than is left does not), each instance learns it from its
/// own refusal, and then refuses without the strategy. A restock racing a stream of
/// refusals on both instances: once it has answered, a deduction on either instance
/// gets a unit, three rounds running.
async fn the_sold_out_fast_path_refuses_only_what_is_gone(strategy: &str) {
    let database = fresh_database().await;
    // A mark that outlives three refusals on a busy machine: with the default 100 ms,
    // a slow scheduler lets it expire between them, and the strategy runs again.
    let marked_for = |s: &mut stock_app::Settings| s.sold_out_cache_ms = 1_000;
    let a = spawn_with(test_settings(&database).with(marked_for)).await;
    let b = spawn_with(test_settings(&database).with(marked_for)).await;
    a.stock(1, 2).await;
    let deduct = |app: &TestApp, id: String, quantity: i64| {
        let body = json!({"product_id": 1, "quantity": quantity, "request_id": id});
        let request = app.client.post(app.url(&format!("/deduct/{strategy}"))).json(&body);
        async move { request.send().await.unwrap() }
    };
    // Asking for 3 of 2 is refused by the strategy, and marks nothing.
    assert_error(deduct(&a, "too-many".into(), 3).await, StatusCode::CONFLICT, "insufficient_stock").await;
    assert_eq!(deduct(&a, "one".into(), 1).await.status(), StatusCode::OK);
    assert_eq!(deduct(&a, "two".into(), 1).await.status(), StatusCode::OK);
    assert_eq!(fast_refusals(&a, strategy).await, 0);
    for (k, app) in [&a, &b].into_iter().enumerate() {
        for i in 0..3 {
            let refused = deduct(app, format!("late-{k}-{i}"), 1).await;
            assert_error(refused, StatusCode::CONFLICT, "insufficient_stock").await;
        }
        // The first refusal ran the strategy and saw 0 left; the next two did not.
        assert_eq!(fast_refusals(app, strategy).await, 2, "{}", app.address);
    }
    // A retry of a sale is still answered from `orders`, not refused.
    let again = deduct(&b, "one".into(), 1).await;
    assert_eq!(again.status(), StatusCode::OK);

    let a = Arc::new(a);
    let b = Arc::new(b);
    for round in 0..3 {
        // Sold out again (a restock to 0), and each instance learns it.
        a.stock(1, 0).await;
        for (k, app) in [&a, &b].into_iter().enumerate() {
            let refused = deduct(app, format!("mark-{round}-{k}"), 1).await;
            assert_eq!(refused.status(), StatusCode::CONFLICT);
        }
        // Refusals on both instances, without pause, while the restock happens.
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let hammers: Vec<_> = [a.clone(), b.clone()]
            .into_iter()
            .map(|app| {
                let (stop, sent) = (stop.clone(), sent.clone());
                let url = app.url(&format!("/deduct/{strategy}"));
                let client = app.client.clone();
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let n = sent.fetch_add(1, Ordering::Relaxed);
                        let body = json!({"product_id": 1, "request_id": format!("h-{round}-{n}")});
                        let _ = client.post(&url).json(&body).send().await;
                    }
                })
            })
            .collect();
        // The fast path is refusing right now: its count grows (held refusals answer
        // at the admission's pace, so this waits for one rather than a fixed time).
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        let first = fast_refusals(&a, strategy).await + fast_refusals(&b, strategy).await;
        let mut before = first;
        for _ in 0..500 {
            if before > first {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            before = fast_refusals(&a, strategy).await + fast_refusals(&b, strategy).await;
        }
        assert!(before > first && first > 0, "round {round}: the fast path was not refusing before the restock ({first}, {before})");
        // More units than the refusals could buy while the restock waits out the marks.
        a.stock(1, 100_000).await;
        // The restock has answered: no instance refuses as sold out (a strategy that
        // refuses under contention, 503, is not saying the units are gone).
        for (k, app) in [&a, &b].into_iter().enumerate() {
            let answer = deduct(app, format!("after-{round}-{k}"), 1).await;
            assert_ne!(
                answer.status(),
                StatusCode::CONFLICT,
                "round {round}, instance {k}: {}",
                answer.text().await.unwrap()
            );
        }
        stop.store(true, Ordering::Relaxed);
        for h in hammers {
            h.await.unwrap();
        }
        let left: serde_json::Value = a.get("/stock/1").await.json().await.unwrap();
        assert!(left["quantity"].as_i64().unwrap() > 0, "{left}");
    }
}
}

each_strategy! {
/// A mark that a restock on another instance has outdated is not believed: here it
/// would last a minute (so the restock answers while it lasts), yet after the restock
/// the instance sells, because the fast path's own read of the database found units
/// left. (A refusal from it would be a buyer told "sold out" after the stock came
/// back: the history checker's false sold-out.)
async fn a_mark_outdated_by_a_restock_elsewhere_is_not_believed(strategy: &str) {
    let database = fresh_database().await;
    let a = spawn_app_on(&database).await;
    let b = spawn_with(test_settings(&database).with(|s| s.sold_out_cache_ms = 60_000)).await;
    a.stock(1, 1).await;
    let deduct = |id: &str| {
        let body = json!({"product_id": 1, "quantity": 1, "request_id": id});
        b.client.post(b.url(&format!("/deduct/{strategy}"))).json(&body).send()
    };
    assert_eq!(deduct("one").await.unwrap().status(), StatusCode::OK);
    // The fast path's refusal stands only when the database has nothing left: a
    // strategy that records later must have written the sale first (on a busy machine
    // its persister can lag behind the next two requests).
    b.drained().await;
    // The strategy sees nothing left and marks the product; the next refusal is the
    // fast path's.
    for id in ["marks", "fast"] {
        let refused = deduct(id).await.unwrap();
        assert_error(refused, StatusCode::CONFLICT, "insufficient_stock").await;
    }
    assert_eq!(fast_refusals(&b, strategy).await, 1);

    a.stock(1, 5).await;
    let sold = deduct("after").await.unwrap();
    assert_eq!(sold.status(), StatusCode::OK, "{}", sold.text().await.unwrap());
    assert_eq!(fast_refusals(&b, strategy).await, 1, "no refusal from the old mark");
}
}
