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
    let app = spawn_with(
        stock_app::config::Settings {
            ..test_settings(&url)
        }
        .with(|s| {
            s.shared.redis_urls = vec![redis.url()];
            s.shared.lock_lease_ms = lease.as_millis() as u64;
        }),
    )
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

/// A service whose `redis-lock` reaches Redis through the Sentinels of `ha`.
async fn through_sentinel(ha: &testbed::RedisHa, min_replicas: u32) -> crate::helpers::TestApp {
    let db = crate::helpers::fresh_database().await;
    let app = spawn_with(
        stock_app::config::Settings {
            ..test_settings(&db)
        }
        .with(|s| {
            s.shared.redis_sentinels = ha.sentinel_addrs();
            s.shared.redis_master_name = testbed::sentinel::MASTER_NAME.into();
            s.shared.redis_lock_min_replicas = min_replicas;
            s.shared.redis_lock_replica_timeout_ms = 200;
            s.shared.lock_lease_ms = 1000;
        }),
    )
    .await;
    app.stock(1, 10).await;
    app.stock(2, 10).await;
    app
}

/// Deducts through `strategy` until an answer is neither `backend_unavailable` nor
/// `outcome_unknown` (the service following the failover), for up to 10 s.
async fn deduct_through_failover(
    app: &crate::helpers::TestApp,
    strategy: &str,
    body: Value,
) -> (StatusCode, Value) {
    for _ in 0..200 {
        let response = app.deduct(strategy, &body).await;
        let status = response.status();
        let answer: Value = response.json().await.unwrap();
        // Unavailable, or sent to the dead primary with no answer (`outcome_unknown`):
        // asked again with the same request id, as the API says.
        if answer["error"] != "backend_unavailable" && answer["error"] != "outcome_unknown" {
            return (status, answer);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{strategy} did not follow the failover within 10 s");
}

/// The failover the write-ups warn about, for real: replication to the replica held
/// back (its link blackholed), A takes the lock of product 1 (unfenced) and of product
/// 2 (fenced) on the primary and pauses after its reads; the primary is killed and
/// Sentinel promotes the replica, which never saw A's locks. The service follows the
/// failover without a restart, and B takes both locks at once: two holders. Unfenced,
/// A's late write erases B's sale; fenced, A is refused (B's token, from the new
/// primary's clock, is newer than A's claim).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_failover_lets_a_second_holder_in() {
    let mut ha = testbed::RedisHa::start("app-failover").unwrap();
    let app = through_sentinel(&ha, 0).await;
    assert_eq!(
        app.deduct("redis-lock", &json!({"product_id": 1}))
            .await
            .status(),
        StatusCode::OK,
        "through Sentinel, before the fault"
    );
    ha.replication.set(testbed::proxy::ProxyMode::Blackhole);
    app.set_failpoint("after_read", json!({"mode": "pause", "count": 2}))
        .await;
    let send = |body| crate::helpers::deduct_in_background(&app, "redis-lock", body);
    let unfenced = send(json!({"product_id": 1, "request_id": "a-1", "fencing": false}));
    let fenced = send(json!({"product_id": 2, "request_id": "a-2", "fencing": true}));
    app.wait_paused("after_read", 2).await;

    ha.primary.process().kill();
    let started = std::time::Instant::now();
    let promoted = ha.wait_for_failover(Duration::from_secs(20)).unwrap();
    println!("failover to {promoted} in {:?}", started.elapsed());
    let b1 = deduct_through_failover(
        &app,
        "redis-lock",
        json!({"product_id": 1, "request_id": "b-1", "fencing": false}),
    )
    .await;
    let b2 = deduct_through_failover(
        &app,
        "redis-lock",
        json!({"product_id": 2, "request_id": "b-2", "fencing": true}),
    )
    .await;
    assert_eq!(
        (b1.0, b2.0),
        (StatusCode::OK, StatusCode::OK),
        "B holds both locks while A does: {b1:?} {b2:?}"
    );

    app.release("after_read").await;
    let (a1, a2) = (unfenced.await.unwrap(), fenced.await.unwrap());
    println!("A unfenced: {a1:?}\nA fenced: {a2:?}");
    assert_eq!(
        a1.0,
        StatusCode::OK,
        "unfenced, A trusts its lock and writes"
    );
    assert_eq!(
        a2.1["error"], "lock_lost",
        "fenced, A's token is older than B's claim"
    );
    let (one, two) = (app.db_state(1).await, app.db_state(2).await);
    assert_eq!(one.lost_updates(), 1, "A's write erased B's sale: {one:?}");
    assert_eq!(
        (two.remaining, two.ledger_sum, two.lost_updates()),
        (9, 1, 0),
        "only B sold: {two:?}"
    );
    app.stop().await;
}

/// The mitigation: with `--redis-lock-min-replicas 1` a lock counts only once the
/// replica acknowledged it (`WAIT`). While replication is held back no lock is granted
/// (503 backend_unavailable, nothing sold), so no lock can exist on the primary alone;
/// with the link back, locks are granted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_failover_mitigation_waits_for_the_replica() {
    let ha = testbed::RedisHa::start("app-wait").unwrap();
    let app = through_sentinel(&ha, 1).await;
    let ok = app.deduct("redis-lock", &json!({"product_id": 1})).await;
    assert_eq!(ok.status(), StatusCode::OK, "the replica acknowledges");
    ha.replication.set(testbed::proxy::ProxyMode::Blackhole);
    let refused = app.deduct("redis-lock", &json!({"product_id": 1})).await;
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "backend_unavailable", "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("replica"),
        "{body}"
    );
    let state = app.db_state(1).await;
    assert_eq!((state.remaining, state.ledger_sum), (9, 1), "{state:?}");
    // The lock was given back: with the link up again it is granted at once.
    ha.replication.set(testbed::proxy::ProxyMode::Pass);
    let again = app.deduct("redis-lock", &json!({"product_id": 1})).await;
    assert_eq!(again.status(), StatusCode::OK);
    app.stop().await;
}

/// Read/write splitting under replication lag (`--read-replica-url`, the replica's SQL
/// thread stopped): `optimistic` sells once, then every compare-and-set fails on a
/// stale version and the request runs out of tries (503 busy; nothing lost); a lock
/// strategy, fenced, sells twice from the same stale read: the second sale erases the
/// first. Caught up again, `optimistic` sells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_lag_makes_reads_stale() {
    let pair = testbed::replication::MariaDbReplicas::start().unwrap();
    let url = pair.primary.create_database("lag").unwrap();
    let app = spawn_with(
        stock_app::config::Settings {
            read_replica_url: Some(pair.replica.server.url("lag")),
            ..test_settings(&url)
        }
        .with(|s| {
            s.strategies.optimistic.optimistic_max_attempts = 5;
        }),
    )
    .await;
    app.stock(1, 10).await;
    app.stock(2, 10).await;
    let wait = Duration::from_secs(10);
    pair.replica.wait_caught_up(&pair.primary, wait).unwrap();
    pair.replica.pause().unwrap();

    let first = app.deduct("optimistic", &json!({"product_id": 1})).await;
    assert_eq!(
        first.status(),
        StatusCode::OK,
        "the replica is still current"
    );
    let second = app.deduct("optimistic", &json!({"product_id": 1})).await;
    let body: Value = second.json().await.unwrap();
    assert_eq!(
        body["error"], "busy",
        "every try read the old version: {body}"
    );

    for _ in 0..2 {
        let sold = app
            .deduct("redis-lock", &json!({"product_id": 2, "fencing": true}))
            .await;
        let body: Value = sold.json().await.unwrap();
        assert_eq!(
            body["items"][0]["remaining"], 9,
            "read 10 from the replica: {body}"
        );
    }
    let (one, two) = (app.db_state(1).await, app.db_state(2).await);
    assert_eq!((one.remaining, one.lost_updates()), (9, 0), "{one:?}");
    assert_eq!(
        (two.remaining, two.ledger_sum, two.lost_updates()),
        (9, 2, 1),
        "two sales under a fenced lock, one erased: {two:?}"
    );

    pair.replica.resume().unwrap();
    pair.replica.wait_caught_up(&pair.primary, wait).unwrap();
    let caught_up = app.deduct("optimistic", &json!({"product_id": 1})).await;
    assert_eq!(caught_up.status(), StatusCode::OK);
    app.stop().await;
}

/// Waits (up to 15 s) until the ledger holds `units` of `product`: `redis-stock`'s
/// persister has recorded its sales.
async fn wait_for_ledger(app: &crate::helpers::TestApp, product: i64, units: i64) {
    for _ in 0..300 {
        if crate::helpers::db_state(&app.db, product).await.ledger_sum >= units {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the ledger never reached {units} units of product {product}");
}

/// `redis-stock` through Sentinel too: it sells on the primary the Sentinels name,
/// follows a failover without a restart (the request that meets the dead primary
/// answers 503 and makes the service ask Sentinel again), and its persister, finding
/// a new `run_id`, reconciles: every acknowledged sale is in the ledger exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_failover_redis_stock_follows() {
    let mut ha = testbed::RedisHa::start("stock-failover").unwrap();
    let app = through_sentinel(&ha, 0).await;
    for n in 0..3 {
        let sold = app
            .deduct(
                "redis-stock",
                &json!({"product_id": 1, "request_id": format!("before-{n}")}),
            )
            .await;
        assert_eq!(sold.status(), StatusCode::OK);
    }
    wait_for_ledger(&app, 1, 3).await;

    ha.primary.process().kill();
    ha.wait_for_failover(Duration::from_secs(20)).unwrap();
    let (status, body) = deduct_through_failover(
        &app,
        "redis-stock",
        json!({"product_id": 1, "request_id": "after"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "sold on the new primary: {body}");
    wait_for_ledger(&app, 1, 4).await;
    let state = crate::helpers::db_state(&app.db, 1).await;
    assert_eq!(
        (state.remaining, state.ledger_sum, state.lost_updates()),
        (6, 4, 0),
        "{state:?}"
    );
    app.stop().await;
}
