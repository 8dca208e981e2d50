//! The classic mistakes (`distributed/mistakes.rs`, `atomic_sql.rs`), each made to fail on
//! purpose, deterministically: failpoints put the requests exactly where the mistake
//! bites, and the ledger (or the lock left behind) shows what it cost. Each test uses a
//! private Redis, so a lock that never expires stays this test's problem.

use crate::helpers::{
    TestApp, assert_error, deduct_in_background, fresh_database, spawn_with, test_settings,
};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;
use stock_app::Settings;

const LEASE_MS: u64 = 500;

/// A service on its own database and its own Redis (lease 500 ms, lock wait 300 ms).
async fn app_with_redis() -> (TestApp, testbed::Redis) {
    let redis = testbed::Redis::start("mistakes").unwrap();
    let app = spawn_with(
        Settings {
            ..test_settings(&fresh_database().await)
        }
        .with(|s| {
            s.shared.redis_urls = vec![redis.url()];
            s.shared.lock_lease_ms = LEASE_MS;
            s.shared.lock_wait_ms = 300;
        }),
    )
    .await;
    app.stock(1, 10).await;
    (app, redis)
}

async fn redis_conn(redis: &testbed::Redis) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// `lock-inside-transaction`: B begins its transaction and reads while A holds the
/// lock; A commits and releases; B locks, reads again, and REPEATABLE READ answers from
/// B's snapshot, older than A's COMMIT. B writes 10 - 1 over A's 9: A's sale is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_inside_transaction_reads_a_stale_snapshot() {
    let (app, _redis) = app_with_redis().await;
    app.set_failpoint("after_read", json!({"mode": "pause", "count": 1}))
        .await;
    let a = deduct_in_background(
        &app,
        "redis-lock",
        json!({"product_id": 1, "request_id": "a", "fencing": false}),
    );
    app.wait_paused("after_read", 1).await;
    app.set_failpoint("before_lock", json!({"mode": "pause", "count": 1}))
        .await;
    let b = deduct_in_background(
        &app,
        "redis-lock",
        json!({"product_id": 1, "request_id": "b", "mistake": "lock-inside-transaction"}),
    );
    // B has begun and read: its snapshot is fixed, A has not written yet.
    app.wait_paused("before_lock", 1).await;
    app.release("before_lock").await;
    app.release("after_read").await;
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!((a.0, b.0), (StatusCode::OK, StatusCode::OK), "{a:?} {b:?}");
    assert_eq!(
        b.1["items"][0]["remaining"], 9,
        "B read 10 under the lock: {b:?}"
    );
    let state = app.db_state(1).await;
    assert_eq!(
        (state.remaining, state.ledger_sum, state.lost_updates()),
        (9, 2, 1),
        "two sales, one unit gone from the stock: {state:?}"
    );
    app.stop().await;
}

/// `release-before-commit`: A writes, releases its lock and pauses before COMMIT. B
/// takes the lock and reads 10 (A's write is not visible yet). A commits 9; B writes
/// 9 too: A's sale is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_before_commit_lets_the_next_holder_read_old_stock() {
    let (app, _redis) = app_with_redis().await;
    let mistake =
        |id: &str| json!({"product_id": 1, "request_id": id, "mistake": "release-before-commit"});
    app.set_failpoint("before_commit", json!({"mode": "pause", "count": 1}))
        .await;
    let a = deduct_in_background(&app, "redis-lock", mistake("a"));
    app.wait_paused("before_commit", 1).await;
    app.set_failpoint("after_read", json!({"mode": "pause", "count": 1}))
        .await;
    let b = deduct_in_background(&app, "redis-lock", mistake("b"));
    // B holds the lock A released, and has read.
    app.wait_paused("after_read", 1).await;
    app.release("before_commit").await;
    let a = a.await.unwrap();
    app.release("after_read").await;
    let b = b.await.unwrap();
    assert_eq!((a.0, b.0), (StatusCode::OK, StatusCode::OK), "{a:?} {b:?}");
    let state = app.db_state(1).await;
    assert_eq!(
        (state.remaining, state.ledger_sum, state.lost_updates()),
        (9, 2, 1),
        "{state:?}"
    );
    app.stop().await;
}

/// `setnx-then-expire`: A's SETNX succeeds, and A dies before its EXPIRE (the
/// failpoint between the two set to `crash`). The key has no TTL: three leases later
/// every buyer is still turned away (503 busy), and nothing was sold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setnx_then_expire_crash_leaves_a_lock_that_never_expires() {
    let (app, redis) = app_with_redis().await;
    let mistake =
        |id: &str| json!({"product_id": 1, "request_id": id, "mistake": "setnx-then-expire"});
    app.set_failpoint("after_lock", json!({"mode": "crash", "count": 1}))
        .await;
    let crashed = app.deduct("redis-lock", &mistake("a")).await;
    assert_error(crashed, StatusCode::INTERNAL_SERVER_ERROR, "internal").await;
    let mut conn = redis_conn(&redis).await;
    let pttl: i64 = redis::cmd("PTTL")
        .arg("mistake:stock:1")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(pttl, -1, "the key exists and never expires");

    tokio::time::sleep(Duration::from_millis(3 * LEASE_MS)).await;
    let error = assert_error(
        app.deduct("redis-lock", &mistake("b")).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "busy",
    )
    .await;
    println!("3 leases after the crash: {error}");
    let state = app.db_state(1).await;
    assert_eq!((state.remaining, state.ledger_rows), (10, 0), "{state:?}");
    app.stop().await;
}

/// `get-then-del`: A sells, GETs its key (still its own) and pauses before the DEL.
/// Its lease runs out; B takes the lock, reads 9 and pauses. A's DEL deletes B's lock;
/// C takes it at once and sells (8 left); B writes 9 - 1 = 8 over it: C's sale is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_then_del_deletes_the_next_holders_lock() {
    let (app, redis) = app_with_redis().await;
    let mistake = |id: &str| json!({"product_id": 1, "request_id": id, "mistake": "get-then-del"});
    let mut conn = redis_conn(&redis).await;
    let owner = async |conn: &mut redis::aio::MultiplexedConnection| -> Option<String> {
        redis::cmd("GET")
            .arg("mistake:stock:1")
            .query_async(conn)
            .await
            .unwrap()
    };
    app.set_failpoint("before_release", json!({"mode": "pause", "count": 1}))
        .await;
    let a = deduct_in_background(&app, "redis-lock", mistake("a"));
    app.wait_paused("before_release", 1).await;
    // A's lease runs out while it sits between its GET and its DEL.
    for _ in 0..100 {
        if owner(&mut conn).await.is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(owner(&mut conn).await, None, "A's lease ended");
    app.set_failpoint("after_read", json!({"mode": "pause", "count": 1}))
        .await;
    let b = deduct_in_background(&app, "redis-lock", mistake("b"));
    app.wait_paused("after_read", 1).await;
    assert_eq!(
        owner(&mut conn).await.as_deref(),
        Some("b"),
        "B holds the lock"
    );
    app.release("before_release").await;
    assert_eq!(a.await.unwrap().0, StatusCode::OK);
    assert_eq!(owner(&mut conn).await, None, "A deleted B's lock");
    let (c, c_body) = {
        let response = app.deduct("redis-lock", &mistake("c")).await;
        (response.status(), response.json::<Value>().await.unwrap())
    };
    assert_eq!(c, StatusCode::OK, "C got the lock B still holds: {c_body}");
    app.release("after_read").await;
    assert_eq!(b.await.unwrap().0, StatusCode::OK);
    let state = app.db_state(1).await;
    assert_eq!(
        (state.remaining, state.ledger_sum, state.lost_updates()),
        (8, 3, 1),
        "{state:?}"
    );
    app.stop().await;
}

/// `persistent-node`: A creates its lock node PERSISTENT and dies (`crash` right
/// after; its ZooKeeper session ends with it). The node outlives the session: every later
/// buyer waits it out and is turned away, and the node has no ephemeral owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_node_blocks_every_buyer_after_its_holder_dies() {
    let settings = Settings {
        ..test_settings(&fresh_database().await)
    }
    .with(|s| {
        s.shared.zk_session_timeout_ms = 1000;
        s.shared.lock_wait_ms = 300;
    });
    let root = settings.shared.zk_root.clone();
    let connect = settings
        .shared
        .zk_connect
        .clone()
        .expect("ZK_CONNECT (run under testbed)");
    let app = spawn_with(settings).await;
    app.stock(1, 10).await;
    let mistake =
        |id: &str| json!({"product_id": 1, "request_id": id, "mistake": "persistent-node"});
    app.set_failpoint("after_lock", json!({"mode": "crash", "count": 1}))
        .await;
    let crashed = app.deduct("zookeeper", &mistake("a")).await;
    assert_error(crashed, StatusCode::INTERNAL_SERVER_ERROR, "internal").await;

    // Two session timeouts: an ephemeral node would be gone by now.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let zk = zookeeper_client::Client::connect(&connect).await.unwrap();
    let path = format!("{root}/mistake-persistent/mistake-stock-1");
    let (data, stat) = zk.get_data(&path).await.expect("the node is still there");
    assert_eq!(data, b"a", "A's node");
    assert_eq!(
        stat.ephemeral_owner, 0,
        "no session owns it: it stays for good"
    );
    assert_error(
        app.deduct("zookeeper", &mistake("b")).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "busy",
    )
    .await;
    let state = app.db_state(1).await;
    assert_eq!((state.remaining, state.ledger_rows), (10, 0), "{state:?}");
    app.stop().await;
}

/// `no-guard`: `quantity = quantity - 1` with no `quantity >= 1`. The last unit sells;
/// the next UPDATE would leave -1 and the CHECK constraint refuses it (error 4025),
/// the last net under a missing guard. Nothing oversold, and the answer says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_guard_is_caught_by_the_check_constraint() {
    let app = spawn_with(test_settings(&fresh_database().await)).await;
    app.stock(1, 1).await;
    let mistake = json!({"product_id": 1, "mistake": "no-guard"});
    let sold = app.deduct("atomic-sql", &mistake).await;
    assert_eq!(sold.status(), StatusCode::OK);
    let error = assert_error(
        app.deduct("atomic-sql", &mistake).await,
        StatusCode::CONFLICT,
        "insufficient_stock",
    )
    .await;
    let detail = error["detail"].as_str().unwrap();
    assert!(
        detail.contains("CHECK constraint") && detail.contains("4025"),
        "{detail}"
    );
    let state = app.db_state(1).await;
    assert_eq!((state.remaining, state.ledger_sum), (0, 1), "{state:?}");
    app.stop().await;
}

/// A mistake is made in one strategy only; elsewhere, or unknown, it is a 400 that
/// changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mistake_belongs_to_its_strategy() {
    let app = spawn_with(test_settings(&fresh_database().await)).await;
    app.stock(1, 5).await;
    let wrong = assert_error(
        app.deduct(
            "pessimistic",
            &json!({"product_id": 1, "mistake": "no-guard"}),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
    )
    .await;
    assert!(
        wrong["detail"].as_str().unwrap().contains("atomic-sql"),
        "{wrong}"
    );
    let unknown = assert_error(
        app.deduct("atomic-sql", &json!({"product_id": 1, "mistake": "typo"}))
            .await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
    )
    .await;
    assert!(
        unknown["detail"].as_str().unwrap().contains("no-guard"),
        "{unknown}"
    );
    let state = app.db_state(1).await;
    assert_eq!((state.remaining, state.ledger_rows), (5, 0), "{state:?}");
    app.stop().await;
}
