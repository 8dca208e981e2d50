//! The flash-sale strategies: `batched` (request coalescing), `bucketed` (the hot
//! row split) and `redis-stock` (a Redis counter in front, a persister behind). Safety under a race on one and two instances, judged from the ledger;
//! what a batch does with arrival order, with a member that already committed, and
//! when its transaction fails; how buckets serve multi-unit requests and sell out
//! exactly.

use crate::helpers::{
    TestApp, cluster_urls, fresh_database, spawn_app, spawn_app_on, spawn_with, test_settings,
};
use crate::races::{self, race, race_split};
use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;
use stock_app::Settings;

/// The largest `batch_size` among the successful answers.
fn largest_batch(answers: &[(StatusCode, Value)]) -> u64 {
    answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::OK)
        .map(|(_, body)| {
            body["batch_size"]
                .as_u64()
                .expect("batched answers say their batch size")
        })
        .max()
        .unwrap_or(0)
}

/// `batched`, 200 buyers for 50 units on one instance: exactly 50 sold, 150 refused,
/// the ledger agrees, and the buyers really shared transactions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_one_instance() {
    let app = spawn_app().await;
    let answers = race("batched", &[&app]).await;
    assert!(
        largest_batch(&answers) > 1,
        "some buyers shared a transaction"
    );
    app.stop().await;
}

/// `batched` over two instances: their batches queue on the same row lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_two_instances() {
    let database = fresh_database().await;
    let first = spawn_app_on(&database).await;
    let second = spawn_app_on(&database).await;
    let answers = race("batched", &[&first, &second]).await;
    assert!(
        largest_batch(&answers) > 1,
        "some buyers shared a transaction"
    );
    first.stop().await;
    second.stop().await;
}

/// Multi-item orders with `batched`: each is a batch of its own, all or nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_multi_item() {
    races::multi_item_orders_are_all_or_nothing("batched").await;
}

/// Sends a `batched` deduction in the background.
fn buy(
    app: &TestApp,
    request_id: &str,
    quantity: i64,
) -> tokio::task::JoinHandle<(StatusCode, Value)> {
    let client = app.client.clone();
    let url = app.url("/deduct/batched");
    let body = json!({"product_id": 1, "quantity": quantity, "request_id": request_id});
    tokio::spawn(async move {
        let response = client.post(url).json(&body).send().await.unwrap();
        (response.status(), response.json().await.unwrap())
    })
}

/// Holds the product's batch task at `after_read` (its first batch: `first`), lets
/// `then` join the queue in that order, and returns the running requests. The next
/// batch will carry exactly `then`.
async fn queue_behind_a_paused_batch(
    app: &TestApp,
    first: &str,
    then: &[(&str, i64)],
    pauses: u32,
) -> (
    tokio::task::JoinHandle<(StatusCode, Value)>,
    Vec<tokio::task::JoinHandle<(StatusCode, Value)>>,
) {
    app.set_failpoint("after_read", json!({"mode": "pause", "count": pauses}))
        .await;
    let first = buy(app, first, 1);
    app.wait_paused("after_read", 1).await;
    let mut queued = Vec::new();
    for (id, quantity) in then {
        queued.push(buy(app, id, *quantity));
        // Arrival order is the order of these sends (a generous gap: the suite runs
        // many tests at once on two cores).
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    (first, queued)
}

/// Units go in arrival order within a batch: a request that no longer fits is
/// refused, and a later, smaller one still gets the last unit, in the same
/// transaction as the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_allocates_in_arrival_order() {
    let app = spawn_app().await;
    app.stock(1, 5).await;
    let (first, queued) =
        queue_behind_a_paused_batch(&app, "a", &[("b", 3), ("c", 3), ("d", 1)], 1).await;
    app.release("after_read").await;
    let (status, body) = first.await.unwrap();
    assert_eq!(
        (status, body["batch_size"].as_u64()),
        (StatusCode::OK, Some(1))
    );
    let answers: Vec<(StatusCode, Value)> = join_all(queued)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let statuses: Vec<StatusCode> = answers.iter().map(|a| a.0).collect();
    assert_eq!(
        statuses,
        [StatusCode::OK, StatusCode::CONFLICT, StatusCode::OK],
        "{answers:?}"
    );
    assert_eq!(answers[0].1["items"][0]["remaining"], 1);
    assert_eq!(answers[0].1["batch_size"], 2);
    assert_eq!(answers[1].1["error"], "insufficient_stock");
    assert_eq!(answers[2].1["items"][0]["remaining"], 0);
    assert_eq!(answers[2].1["batch_size"], 2);
    let state = app.db_state(1).await;
    assert_eq!(
        (state.remaining, state.ledger_sum, state.lost_updates()),
        (0, 5, 0)
    );
    app.stop().await;
}

/// A batch member whose request id committed before (a client's retry) makes the
/// batch's orders INSERT hit the primary key: the batch rolls back, that member gets
/// its stored answer, and the others sell in the batch's second transaction. Nothing
/// is deducted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_member_is_answered_from_orders_and_the_rest_sell() {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    let (status, earlier) = buy(&app, "x", 1).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    let (first, queued) =
        queue_behind_a_paused_batch(&app, "a", &[("c", 1), ("x", 1), ("d", 1)], 1).await;
    app.release("after_read").await;
    assert_eq!(first.await.unwrap().0, StatusCode::OK);
    let answers: Vec<(StatusCode, Value)> = join_all(queued)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(answers.iter().all(|a| a.0 == StatusCode::OK), "{answers:?}");
    let (c, x, d) = (&answers[0].1, &answers[1].1, &answers[2].1);
    assert_eq!(x["duplicate"], true);
    assert_eq!(x["items"], earlier["items"], "the stored answer");
    for sold in [c, d] {
        assert_eq!(
            (sold["attempts"].as_u64(), sold["batch_size"].as_u64()),
            (Some(2), Some(2)),
            "{sold}"
        );
    }
    let state = app.db_state(1).await;
    assert_eq!(
        (state.remaining, state.ledger_rows, state.lost_updates()),
        (6, 4, 0)
    );
    app.stop().await;
}

/// Kills the database connection of the product's second batch while it is paused
/// at `failpoint`, then lets it go on. Returns the answers of its three members.
async fn kill_the_second_batch(app: &TestApp, failpoint: &str) -> Vec<(StatusCode, Value)> {
    app.stock(1, 10).await;
    app.set_failpoint(failpoint, json!({"mode": "pause", "count": 2}))
        .await;
    let first = buy(app, "a", 1);
    app.wait_paused(failpoint, 1).await;
    let mut queued = Vec::new();
    for id in ["b", "c", "d"] {
        queued.push(buy(app, id, 1));
    }
    // Time for all three to join the queue behind the paused batch.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    app.release(failpoint).await;
    assert_eq!(first.await.unwrap().0, StatusCode::OK);
    // The second batch (b, c, d) is now paused at the failpoint, inside its
    // transaction: the only open transaction on this database.
    for _ in 0..100 {
        let state: Value = app.get("/hooks").await.json().await.unwrap();
        if state["failpoints"][failpoint]["hits"] == 2
            && state["failpoints"][failpoint]["paused"] == 1
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let connection: i64 = sqlx::query_scalar(
        r#"
        SELECT p.ID FROM information_schema.PROCESSLIST p
        JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID
        WHERE p.DB = DATABASE()
        "#,
    )
    .fetch_one(&app.db)
    .await
    .expect("the paused batch's transaction");
    sqlx::query(&format!("KILL CONNECTION {connection}"))
        .execute(&app.db)
        .await
        .unwrap();
    app.release(failpoint).await;
    join_all(queued)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

/// A batch whose transaction fails (its connection killed before it wrote) answers
/// every member with the same error and changes nothing; the members may retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_batch_answers_every_member_and_changes_nothing() {
    let app = spawn_app().await;
    let answers = kill_the_second_batch(&app, "after_read").await;
    for (status, body) in &answers {
        assert_eq!(
            (*status, &body["error"]),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                &json!("backend_unavailable")
            ),
            "{answers:?}"
        );
    }
    let state = app.db_state(1).await;
    assert_eq!((state.remaining, state.ledger_rows), (9, 1), "only a sold");
    assert_eq!(app.row_counts().await, (1, 1));
    for id in ["b", "c", "d"] {
        assert_eq!(buy(&app, id, 1).await.unwrap().0, StatusCode::OK);
    }
    assert_eq!(app.db_state(1).await.remaining, 6);
    app.stop().await;
}

/// A batch whose COMMIT gets no reply answers `outcome_unknown` to each member; a
/// retry with the same request_id resolves it, and nothing is deducted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_batch_commit_is_resolved_by_request_id() {
    let app = spawn_app().await;
    let answers = kill_the_second_batch(&app, "before_commit").await;
    for (status, body) in answers {
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["error"], "outcome_unknown", "{body}");
    }
    for id in ["b", "c", "d"] {
        let response = app
            .deduct("batched", &json!({"product_id": 1, "request_id": id}))
            .await;
        assert_eq!(response.status(), StatusCode::OK, "the retry of {id}");
    }
    let state = app.db_state(1).await;
    assert_eq!(
        (state.remaining, state.ledger_rows, state.lost_updates()),
        (6, 4, 0)
    );
    let again = app
        .deduct("batched", &json!({"product_id": 1, "request_id": "b"}))
        .await;
    let body: Value = again.json().await.unwrap();
    assert_eq!(body["duplicate"], true);
    app.stop().await;
}

/// `bucketed`, 200 buyers for 50 units split over 8 buckets, one instance: exactly
/// 50 sold (buckets drain unevenly; step 2 finds the last units), 150 refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucketed_one_instance() {
    let app = spawn_app().await;
    race_split("bucketed", &[&app], 8).await;
    let view: Value = app.get("/stock/1").await.json().await.unwrap();
    assert_eq!(view["quantity"], 0);
    assert_eq!(view["buckets"], json!([0, 0, 0, 0, 0, 0, 0, 0]));
    app.stop().await;
}

/// `bucketed` over two instances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucketed_two_instances() {
    let database = fresh_database().await;
    let first = spawn_app_on(&database).await;
    let second = spawn_app_on(&database).await;
    race_split("bucketed", &[&first, &second], 8).await;
    first.stop().await;
    second.stop().await;
}

/// Multi-item orders with `bucketed` (each product gathered, in product order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucketed_multi_item() {
    races::multi_item_orders_are_all_or_nothing("bucketed").await;
}

/// A restock splits the units evenly; a request bigger than any one bucket is
/// gathered from several; the last units sell however they are spread; a request
/// is refused only when all the buckets together hold too few.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_serve_multi_unit_requests_and_sell_out_exactly() {
    let app = spawn_app().await;
    app.stock_split(1, 10, 4).await;
    let view: Value = app.get("/stock/1").await.json().await.unwrap();
    assert_eq!(
        (view["quantity"].clone(), view["buckets"].clone()),
        (json!(10), json!([3, 3, 2, 2]))
    );

    let sell = |id: &'static str, quantity: i64| {
        let app = &app;
        async move {
            let body = json!({"product_id": 1, "quantity": quantity, "request_id": id});
            let response = app.deduct("bucketed", &body).await;
            (response.status(), response.json::<Value>().await.unwrap())
        }
    };
    // 7 > 3, the fullest bucket: gathered from three buckets.
    assert_eq!(sell("seven", 7).await.0, StatusCode::OK);
    let view: Value = app.get("/stock/1").await.json().await.unwrap();
    assert_eq!(view["quantity"], 3);
    // 4 > 3 left in all: refused, and the refusal says what is left.
    let (status, body) = sell("four", 4).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::CONFLICT, Some("insufficient_stock"))
    );
    assert!(
        body["detail"].as_str().unwrap().contains("3 available"),
        "{body}"
    );
    // The last three, one by one, wherever they are.
    for id in ["a", "b", "c"] {
        assert_eq!(sell(id, 1).await.0, StatusCode::OK, "{id}");
    }
    assert_eq!(sell("d", 1).await.0, StatusCode::CONFLICT);
    let state = app.db_state(1).await;
    assert_eq!(
        (state.remaining, state.ledger_sum, state.lost_updates()),
        (0, 10, 0)
    );
    app.stop().await;
}

/// 120 buyers of 1 to 3 units at once over 6 buckets of 100 units in all: no unit
/// lost or sold twice, and nobody refused while enough units remained (the final
/// stock is below the smallest refused request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucketed_multi_unit_race_refuses_only_when_short() {
    let app = spawn_app().await;
    app.stock_split(1, 100, 6).await;
    let calls = (0..120).map(|i| {
        let app = &app;
        let quantity = i % 3 + 1;
        async move {
            let body =
                json!({"product_id": 1, "quantity": quantity, "request_id": format!("m-{i}")});
            let response = app.deduct("bucketed", &body).await;
            (response.status(), quantity)
        }
    });
    let answers = join_all(calls).await;
    let sold: i64 = answers
        .iter()
        .filter(|a| a.0 == StatusCode::OK)
        .map(|a| a.1)
        .sum();
    let smallest_refused = answers
        .iter()
        .filter(|a| a.0 == StatusCode::CONFLICT)
        .map(|a| a.1)
        .min()
        .unwrap_or(i64::MAX);
    assert!(
        answers
            .iter()
            .all(|a| a.0 == StatusCode::OK || a.0 == StatusCode::CONFLICT),
        "only 200 and 409"
    );
    let state = app.db_state(1).await;
    assert_eq!(
        (state.ledger_sum, state.lost_updates()),
        (sold, 0),
        "{state:?}"
    );
    assert_eq!(state.remaining, 100 - sold);
    assert!(
        state.remaining < smallest_refused,
        "{} left, yet a request for {smallest_refused} was refused",
        state.remaining
    );
    app.stop().await;
}

/// Neighbouring products restocked at once, split and unsplit: each removal of a
/// product's buckets locks the gap its neighbour inserts into, and InnoDB answers
/// some of them with a deadlock; the service runs the restock again, so every one
/// answers 200 with its own split.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neighbours_restocked_at_once_all_succeed() {
    let app = spawn_app().await;
    for round in 0..4u16 {
        let buckets: u16 = if round % 2 == 0 { 4 } else { 0 };
        let restocks = (1..=24i64).map(|product| {
            let app = &app;
            async move {
                let response = app
                    .client
                    .put(app.url(&format!("/stock/{product}")))
                    .bearer_auth(crate::helpers::ADMIN_TOKEN)
                    .json(&json!({"quantity": 10 + product, "buckets": buckets}))
                    .send()
                    .await
                    .unwrap();
                (product, response.status(), response.text().await.unwrap())
            }
        });
        for (product, status, body) in futures::future::join_all(restocks).await {
            assert_eq!(
                status,
                StatusCode::OK,
                "round {round}, product {product}: {body}"
            );
            let view: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(view["quantity"], json!(10 + product), "{view}");
            let split = view.get("buckets").and_then(Value::as_array).map(Vec::len);
            assert_eq!(split.unwrap_or(0), usize::from(buckets), "{view}");
        }
    }
    app.stop().await;
}

/// A restock without `buckets` removes the split; an out-of-range `buckets` is a
/// 400 that changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restock_splits_and_unsplits() {
    let app = spawn_app().await;
    app.stock_split(1, 5, 2).await;
    app.stock(1, 7).await;
    let view: Value = app.get("/stock/1").await.json().await.unwrap();
    assert_eq!(view["quantity"], 7);
    assert!(view.get("buckets").is_none(), "{view}");
    for bad in [json!(-1), json!(1025), json!("4"), json!(1.5)] {
        let response = app
            .client
            .put(app.url("/stock/1"))
            .bearer_auth(crate::helpers::ADMIN_TOKEN)
            .json(&json!({"quantity": 9, "buckets": bad}))
            .send()
            .await
            .unwrap();
        let body =
            crate::helpers::assert_error(response, StatusCode::BAD_REQUEST, "invalid_request")
                .await;
        assert!(
            body["detail"].as_str().unwrap().contains("buckets"),
            "{body}"
        );
    }
    let view: Value = app.get("/stock/1").await.json().await.unwrap();
    assert_eq!(
        (view["quantity"].clone(), view["epoch"].clone()),
        (json!(7), json!(2))
    );
    // Split, the other strategies do not see the units: they refuse, nothing sold twice.
    app.stock_split(1, 4, 2).await;
    let response = app.deduct("atomic-sql", &json!({"product_id": 1})).await;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let response = app.deduct("bucketed", &json!({"product_id": 1})).await;
    assert_eq!(response.status(), StatusCode::OK);
    app.stop().await;
}

/// `redis-stock`, 200 buyers for 50 units on one instance: Redis sells exactly 50,
/// and once the persister drained, the ledger and the stock row agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stock_one_instance() {
    let app = spawn_app().await;
    let answers = race("redis-stock", &[&app]).await;
    assert!(
        answers
            .iter()
            .filter(|(s, _)| *s == StatusCode::OK)
            .all(|(_, body)| body["stream_entry"].is_string()),
        "every sale names its stream entry"
    );
    app.stop().await;
}

/// `redis-stock` over two instances: one counter, two persisters in one group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stock_two_instances() {
    let database = fresh_database().await;
    let first = spawn_app_on(&database).await;
    let second = spawn_app_on(&database).await;
    race("redis-stock", &[&first, &second]).await;
    first.stop().await;
    second.stop().await;
}

/// Settings for `redis-stock` on the testbed's Redis Cluster, each product in
/// `shards` counters.
fn on_the_cluster(database: &str, shards: u32) -> Settings {
    test_settings(database).with(|s| {
        s.shared.redis_cluster_urls = cluster_urls();
        s.shared.redis_stock_shards = shards;
    })
}

/// `redis-stock` on the Redis Cluster, one hot product split into three shards, two
/// instances, 200 buyers for 50 units: exactly 50 sold (the race's checks, the
/// ledger read once both persisters drained every partition's stream), `GET /stock`
/// sums three shards, each shard's counter is on a different master, and the single
/// Redis holds none of the test's keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stock_on_a_cluster_three_shards_two_instances() {
    let database = fresh_database().await;
    let first = spawn_with(on_the_cluster(&database, 3)).await;
    let second = spawn_with(on_the_cluster(&database, 3)).await;
    race("redis-stock", &[&first, &second]).await;
    let view = stock_view(&first).await;
    assert_eq!(
        (
            &view["redis"]["stock"],
            &view["redis"]["shards"],
            &view["pending"]
        ),
        (&json!(0), &json!(3), &json!(0)),
        "{view}"
    );
    let prefix = on_the_cluster(&database, 3)
        .strategies
        .redis_stock
        .redis_stock_prefix;
    let mut masters_with_a_shard = 0;
    for url in cluster_urls() {
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut conn).await.unwrap();
        let master = redis::from_redis_value_ref::<String>(&role[0]).unwrap() == "master";
        let counters: Vec<String> = redis::cmd("KEYS")
            .arg(format!("*{prefix}*:p:1"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            counters.len() <= 1,
            "one shard per master at most: {counters:?}"
        );
        masters_with_a_shard += usize::from(master && counters.len() == 1);
    }
    assert_eq!(masters_with_a_shard, 3, "the three shards on three masters");
    let single = crate::helpers::servers_from_env(&database)
        .shared
        .redis_urls[0]
        .clone();
    let single = redis::Client::open(single.as_str()).unwrap();
    let mut single = single.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*{prefix}*"))
        .query_async(&mut single)
        .await
        .unwrap();
    assert!(keys.is_empty(), "nothing on the single Redis: {keys:?}");
    first.stop().await;
    second.stop().await;
}

/// On the cluster with three shards (10 units: 4, 3 and 3), a request no shard can
/// fill alone is served by a merge: 5 sold, the view then sums 5, a retry of it is
/// answered as a duplicate, 6 are refused (5 left, said so), 5 more sold, then a
/// buyer of one is refused; an order of two products is refused with a 400 naming
/// the reason, and changes nothing; once drained, the ledger holds 10 and the row
/// says 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stock_on_a_cluster_merges_shards_for_a_large_request() {
    let database = fresh_database().await;
    let app = spawn_with(on_the_cluster(&database, 3)).await;
    app.stock(1, 10).await;
    app.stock(2, 10).await;
    app.stock(3, 10).await;
    let buy = async |id: &str, quantity: i64| {
        let body = json!({"product_id": 1, "quantity": quantity, "request_id": id});
        let response = app.deduct("redis-stock", &body).await;
        (response.status(), response.json::<Value>().await.unwrap())
    };
    let (status, body) = buy("large-1", 5).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let view = stock_view(&app).await;
    assert_eq!(view["redis"]["stock"], 5, "{view}");
    let (status, body) = buy("large-1", 5).await;
    assert_eq!(
        (status, &body["duplicate"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    let (status, body) = buy("large-2", 6).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("5 available"),
        "{body}"
    );
    let (status, body) = buy("large-3", 5).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = buy("small", 1).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let two = json!({"items": [{"product_id": 2}, {"product_id": 3}], "request_id": "two"});
    let response = app.deduct("redis-stock", &two).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["detail"].as_str().unwrap().contains("partition"),
        "{body}"
    );
    let state = app.db_state(1).await;
    assert_eq!(
        (state.ledger_sum, state.remaining, state.lost_updates()),
        (10, 0, 0),
        "{state:?}"
    );
    assert_eq!(db_state_of(&app, 2).await, (0, 10));
    assert_eq!(db_state_of(&app, 3).await, (0, 10));
    app.stop().await;
}

/// (ledger sum, remaining) of a product, once drained.
async fn db_state_of(app: &TestApp, product_id: i64) -> (i64, i64) {
    let state = app.db_state(product_id).await;
    (state.ledger_sum, state.remaining)
}

/// Multi-item orders with `redis-stock`: the script checks every item first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stock_multi_item() {
    races::multi_item_orders_are_all_or_nothing("redis-stock").await;
}

async fn stock_view(app: &TestApp) -> Value {
    app.get("/stock/1").await.json().await.unwrap()
}

/// `GET /stock` says what Redis sold that the database has not recorded yet: with the
/// persister held before its COMMIT, three sales are pending and the stock row still
/// says 10; once it commits, pending is 0 and the row says 7.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_counts_sales_not_yet_in_the_database() {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    app.set_failpoint("before_commit", json!({"mode": "pause"}))
        .await;
    for id in ["a", "b", "c"] {
        assert_eq!(buy_from(&app, "redis-stock", id).await, StatusCode::OK);
    }
    app.wait_paused("before_commit", 1).await;
    let view = stock_view(&app).await;
    assert_eq!(view["pending"], 3, "{view}");
    assert_eq!(view["redis"]["stock"], 7, "{view}");
    let (in_row,): (i32,) = sqlx::query_as("SELECT quantity FROM stock WHERE product_id = 1")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(in_row, 10, "nothing in the database yet");
    app.set_failpoint("before_commit", json!({"mode": "off"}))
        .await;
    let state = app.db_state(1).await;
    assert_eq!(
        (state.remaining, state.ledger_rows, state.lost_updates()),
        (7, 3, 0)
    );
    let view = stock_view(&app).await;
    assert_eq!(
        (view["pending"].clone(), view["quantity"].clone()),
        (json!(0), json!(7))
    );
    app.stop().await;
}

async fn buy_from(app: &TestApp, strategy: &str, request_id: &str) -> StatusCode {
    app.deduct(
        strategy,
        &json!({"product_id": 1, "request_id": request_id}),
    )
    .await
    .status()
}

/// A persister stopped between its writes and its COMMIT (its instance stopped) never
/// acknowledged its entries: another instance's persister claims them once they sat
/// idle past `--redis-stock-claim-ms`, and writes each exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_persisters_entries_are_claimed_by_another() {
    let database = fresh_database().await;
    let settings = || {
        Settings {
            ..test_settings(&database)
        }
        .with(|s| {
            s.strategies.redis_stock.redis_stock_claim_ms = 300;
        })
    };
    let first = spawn_with(settings()).await;
    first.stock(1, 10).await;
    first
        .set_failpoint("before_commit", json!({"mode": "pause"}))
        .await;
    for id in ["a", "b"] {
        assert_eq!(buy_from(&first, "redis-stock", id).await, StatusCode::OK);
    }
    first.wait_paused("before_commit", 1).await;
    first.stop().await;
    let second = spawn_with(settings()).await;
    let state = second.db_state(1).await;
    assert_eq!(
        (state.remaining, state.ledger_rows, state.lost_updates()),
        (8, 2, 0)
    );
    assert_eq!(second.row_counts().await, (2, 2));
    second.stop().await;
}

/// A retry after its request key expired is sold again by Redis; the persister finds
/// the request id in `orders`, records nothing twice, and gives the units back to the
/// counter, so Redis and the database agree again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_request_key_expired_is_caught_by_the_database() {
    let database = fresh_database().await;
    let app = spawn_with(
        Settings {
            ..test_settings(&database)
        }
        .with(|s| {
            s.strategies.redis_stock.redis_stock_id_ttl_secs = 1;
        }),
    )
    .await;
    app.stock(1, 10).await;
    assert_eq!(buy_from(&app, "redis-stock", "x").await, StatusCode::OK);
    app.drained().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(buy_from(&app, "redis-stock", "x").await, StatusCode::OK);
    let state = app.db_state(1).await;
    assert_eq!((state.remaining, state.ledger_rows), (9, 1), "{state:?}");
    let view = stock_view(&app).await;
    assert_eq!(view["redis"]["stock"], 9, "the unit went back: {view}");
    assert_eq!(view["pending"], 0);
    app.stop().await;
}

/// A restock forgets the counter; the next sale starts it from the database's new
/// epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restock_restarts_the_counter_from_the_database() {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    for id in ["a", "b"] {
        assert_eq!(buy_from(&app, "redis-stock", id).await, StatusCode::OK);
    }
    app.drained().await;
    app.stock(1, 5).await;
    assert_eq!(buy_from(&app, "redis-stock", "c").await, StatusCode::OK);
    let state = app.db_state(1).await;
    assert_eq!(
        (state.initial, state.remaining, state.ledger_rows),
        (5, 4, 1)
    );
    let view = stock_view(&app).await;
    assert_eq!(view["redis"], json!({"stock": 4, "pending": 0, "epoch": 2}));
    app.stop().await;
}

/// `redis-stock` has no step between read and write: a request's `hold_ms` is a 400
/// naming why, and nothing is sold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stock_refuses_a_hold_it_cannot_honour() {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    let response = app
        .deduct("redis-stock", &json!({"product_id": 1, "hold_ms": 5}))
        .await;
    let body =
        crate::helpers::assert_error(response, StatusCode::BAD_REQUEST, "invalid_request").await;
    assert!(
        body["detail"].as_str().unwrap().contains("hold_ms"),
        "{body}"
    );
    let view = stock_view(&app).await;
    assert_eq!(
        (view["quantity"].clone(), view["pending"].clone()),
        (json!(10), json!(0))
    );
    app.stop().await;
}
