//! The lock strategies in the service: races over two instances, fencing
//! against a holder that outlives its lease, and backends that are not there.

use crate::helpers::{
    TestApp, assert_error, cluster_urls, deduct_in_background, fresh_database, spawn_with,
    test_settings,
};
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// `requests` single-unit deductions at `concurrency` in flight, round-robin over two
/// instances, stock 50: exactly 50 sell, the rest are 409 (or 503 busy), each answered
/// within 30 s, and the database agrees.
async fn race(strategy: &str, requests: usize, concurrency: usize) {
    let database = fresh_database().await;
    // The race is about exclusion, not RedLock's per-node wait: a second for each node
    // to answer, so a busy machine's slow scheduling is not a quorum lost (503
    // backend_unavailable).
    let patient =
        |s: &mut stock_app::Settings| s.strategies.redlock.redlock_node_timeout_ms = 1_000;
    let apps = [
        spawn_with(test_settings(&database).with(patient)).await,
        spawn_with(test_settings(&database).with(patient)).await,
    ];
    race_on(&apps, 1, strategy, requests, concurrency).await;
    for app in apps {
        app.stop().await;
    }
}

/// The race on `apps`, selling product `product`.
async fn race_on(
    apps: &[TestApp; 2],
    product: i64,
    strategy: &str,
    requests: usize,
    concurrency: usize,
) {
    apps[0].stock(product, 50).await;
    let started = Instant::now();
    let answers: Vec<(u16, Duration)> = futures::stream::iter(0..requests)
        .map(|i| {
            let app = &apps[i % 2];
            async move {
                let sent = Instant::now();
                let response = app
                    .deduct(
                        strategy,
                        &json!({"product_id": product, "request_id": format!("r{i}")}),
                    )
                    .await;
                let status = response.status().as_u16();
                if status == 503 {
                    let body: Value = response.json().await.unwrap();
                    assert_eq!(body["error"], "busy", "{strategy}: {body}");
                }
                (status, sent.elapsed())
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let mut counts: BTreeMap<u16, usize> = BTreeMap::new();
    for (status, _) in &answers {
        *counts.entry(*status).or_default() += 1;
    }
    let slowest = answers.iter().map(|(_, d)| *d).max().unwrap();
    println!(
        "{strategy}: {requests} requests at concurrency {concurrency} over 2 instances in {:.2} s: {counts:?}, slowest {slowest:?}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        counts.get(&200),
        Some(&50),
        "{strategy}: exactly 50 sold: {counts:?}"
    );
    assert!(
        counts.keys().all(|s| [200, 409, 503].contains(s)),
        "{strategy}: {counts:?}"
    );
    assert!(
        slowest < Duration::from_secs(30),
        "{strategy}: a request took {slowest:?}"
    );
    let state = apps[0].db_state(product).await;
    assert_eq!(
        (state.remaining, state.ledger_sum, state.lost_updates()),
        (0, 50, 0),
        "{strategy}: {state:?}"
    );
    // RedLock has no token (it fences by owner tag); the others record theirs.
    let fenced: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM ledger WHERE fence_token IS NOT NULL")
            .fetch_one(&apps[0].db)
            .await
            .unwrap();
    let expected = if strategy == "redlock" { 0 } else { 50 };
    assert_eq!(fenced, expected, "{strategy}: fencing tokens in the ledger");
}

/// `mysql-lock`, 200 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_lock_200_requests_two_instances() {
    race("mysql-lock", 200, 64).await;
}

/// `mysql-lock`, 400 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_lock_400_requests_two_instances() {
    race("mysql-lock", 400, 64).await;
}

/// `redlock`, 200 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_200_requests_two_instances() {
    race("redlock", 200, 64).await;
}

/// `redlock`, 400 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_400_requests_two_instances() {
    race("redlock", 400, 64).await;
}

/// `zookeeper`, 200 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_200_requests_two_instances() {
    race("zookeeper", 200, 64).await;
}

/// `zookeeper`, 400 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_400_requests_two_instances() {
    race("zookeeper", 400, 64).await;
}

/// `etcd-lock`, 200 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_lock_200_requests_two_instances() {
    race("etcd-lock", 200, 64).await;
}

/// `etcd-lock`, 400 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_lock_400_requests_two_instances() {
    race("etcd-lock", 400, 64).await;
}

/// `redis-lock`, 200 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lock_200_requests_two_instances() {
    race("redis-lock", 200, 64).await;
}

/// `redis-lock` on the testbed's Redis Cluster, 400 requests over two instances: the
/// same exact sale, and the locks were the cluster's: its token counter for the
/// product (`{stock:ID}:fence`, in the lock's slot) is at or past the last token the
/// ledger recorded, the single Redis has none, and `/ready` names the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lock_on_a_cluster_400_requests_two_instances() {
    let database = fresh_database().await;
    let settings =
        || test_settings(&database).with(|s| s.shared.redis_cluster_urls = cluster_urls());
    let apps = [spawn_with(settings()).await, spawn_with(settings()).await];
    // A product of its own: no other test locks it on the shared cluster.
    let product = 7_401;
    race_on(&apps, product, "redis-lock", 400, 64).await;
    let last: u64 = sqlx::query_scalar("SELECT MAX(fence_token) FROM ledger WHERE product_id = ?")
        .bind(product)
        .fetch_one(&apps[0].db)
        .await
        .unwrap();
    let client = redis::cluster::ClusterClient::new(cluster_urls()).unwrap();
    let mut conn = client.get_async_connection().await.unwrap();
    let counter: u64 = redis::cmd("GET")
        .arg(format!("{{stock:{product}}}:fence"))
        .query_async(&mut conn)
        .await
        .unwrap();
    // Refusals take the lock too, after the last sale: its token or a later one.
    assert!(
        counter >= last,
        "the cluster issued the ledger's tokens: {counter} < {last}"
    );
    let single = redis::Client::open(
        crate::helpers::servers_from_env(&database)
            .shared
            .redis_urls[0]
            .as_str(),
    )
    .unwrap();
    let mut single = single.get_multiplexed_async_connection().await.unwrap();
    let elsewhere: bool = redis::cmd("EXISTS")
        .arg(format!("{{stock:{product}}}:fence"))
        .query_async(&mut single)
        .await
        .unwrap();
    assert!(!elsewhere, "no lock of this product on the single Redis");
    let ready: Value = apps[0].get("/ready").await.json().await.unwrap();
    assert!(ready.to_string().contains("redis-cluster"), "{ready}");
    for app in apps {
        app.stop().await;
    }
}

/// `redis-lock`, 400 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lock_400_requests_two_instances() {
    race("redis-lock", 400, 64).await;
}

/// A holder outlives its lock: request 1 reads the last unit and pauses after its read
/// (failpoint); its lock ends (a maximum hold time of 300 ms, shorter than the pause);
/// request 2, on the other instance, takes the lock and sells the unit; request 1
/// resumes. Fenced, its write is refused (`lock_lost`) and nothing is oversold.
/// Unfenced, it writes its stale value: the unit is sold twice, every run.
async fn holder_outlives_its_lock(strategy: &str, fencing: bool) {
    let database = fresh_database().await;
    let short_locks = |url: &str| {
        test_settings(url).with(|s| {
            s.shared.fencing = fencing;
            s.shared.lock_lease_ms = 300;
            s.shared.lock_max_hold_ms = 300;
        })
    };
    let first = spawn_with(short_locks(&database)).await;
    let second = spawn_with(short_locks(&database)).await;
    first.stock(1, 1).await;

    first
        .set_failpoint("after_read", json!({"mode": "pause", "count": 1}))
        .await;
    let request_1 = deduct_in_background(
        &first,
        strategy,
        json!({"product_id": 1, "request_id": "stale-holder"}),
    );
    first.wait_paused("after_read", 1).await;
    // Past the maximum hold time and the lease: the lock is free for anyone.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (status_2, body_2) = deduct_in_background(
        &second,
        strategy,
        json!({"product_id": 1, "request_id": "new-holder"}),
    )
    .await
    .unwrap();
    assert_eq!(
        status_2,
        StatusCode::OK,
        "{strategy}: the new holder sells: {body_2}"
    );
    first.release("after_read").await;
    let (status_1, body_1) = request_1.await.unwrap();

    let state = first.db_state(1).await;
    println!(
        "{strategy}, fencing {fencing}: stale holder {status_1} {body_1}; new holder token {}; {state:?}",
        body_2["fence_token"]
    );
    if fencing {
        assert_eq!(status_1, StatusCode::SERVICE_UNAVAILABLE, "{body_1}");
        assert_eq!(body_1["error"], "lock_lost", "{body_1}");
        assert_eq!(
            (state.remaining, state.ledger_sum, state.lost_updates()),
            (0, 1, 0),
            "{state:?}"
        );
    } else {
        assert_eq!(status_1, StatusCode::OK, "{body_1}");
        assert_eq!(
            body_1["lock_lost_after_commit"], true,
            "the service learns it only afterwards: {body_1}"
        );
        assert_eq!(
            (state.remaining, state.ledger_sum, state.lost_updates()),
            (0, 2, 1),
            "{state:?}"
        );
    }
    first.stop().await;
    second.stop().await;
}

/// `mysql-lock`, fenced: the stale holder is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_lock_fenced_refuses_the_stale_holder() {
    holder_outlives_its_lock("mysql-lock", true).await;
}

/// `mysql-lock`, unfenced: the stale holder's write is a lost update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_lock_unfenced_loses_an_update() {
    holder_outlives_its_lock("mysql-lock", false).await;
}

/// `redis-lock`, fenced: the stale holder is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lock_fenced_refuses_the_stale_holder() {
    holder_outlives_its_lock("redis-lock", true).await;
}

/// `redis-lock`, unfenced: the stale holder's write is a lost update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lock_unfenced_loses_an_update() {
    holder_outlives_its_lock("redis-lock", false).await;
}

/// `redlock`, fenced by owner tag: the stale holder is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_fenced_refuses_the_stale_holder() {
    holder_outlives_its_lock("redlock", true).await;
}

/// `redlock`, unfenced: the stale holder's write is a lost update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_unfenced_loses_an_update() {
    holder_outlives_its_lock("redlock", false).await;
}

/// `etcd-lock`, fenced by the revision: Jepsen's pause. etcd keeps the lease for
/// at least its minimum TTL (2 s here), so the new holder waits for it, then sells;
/// the stale holder is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_lock_fenced_refuses_the_stale_holder() {
    holder_outlives_its_lock("etcd-lock", true).await;
}

/// `etcd-lock`, unfenced: the stale holder's write is a lost update (what Jepsen's
/// etcd 3.4.3 analysis found: two holders of one etcd lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_lock_unfenced_loses_an_update() {
    holder_outlives_its_lock("etcd-lock", false).await;
}

/// ZooKeeper has sessions, not leases: the way a holder outlives its lock is a
/// partition. Instance 1 reaches ZooKeeper through a proxy; request 1 pauses after its
/// read; the proxy goes silent; the session expires (2 s) and ZooKeeper deletes the
/// node; request 2, on instance 2, takes the lock and sells the last unit; the
/// partition heals and request 1 resumes. Fenced (czxid), it is refused; unfenced, the
/// unit is sold twice.
async fn zookeeper_partitioned_holder(fencing: bool) {
    let database = fresh_database().await;
    let zk_port: u16 = std::env::var("ZK_CONNECT")
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .rsplit_once(':')
        .unwrap()
        .1
        .parse()
        .unwrap();
    let proxy = testbed::proxy::Proxy::start(zk_port).unwrap();
    let settings = |zk: String| {
        test_settings(&database).with(|s| {
            s.shared.fencing = fencing;
            s.shared.zk_connect = Some(zk);
            s.shared.zk_session_timeout_ms = 2_000;
        })
    };
    let first = spawn_with(settings(format!("127.0.0.1:{}", proxy.port()))).await;
    let second = spawn_with(settings(std::env::var("ZK_CONNECT").unwrap())).await;
    first.stock(1, 1).await;

    first
        .set_failpoint("after_read", json!({"mode": "pause", "count": 1}))
        .await;
    let request_1 = deduct_in_background(
        &first,
        "zookeeper",
        json!({"product_id": 1, "request_id": "partitioned"}),
    );
    first.wait_paused("after_read", 1).await;
    proxy.set(testbed::proxy::ProxyMode::Blackhole);
    let (status_2, body_2) = deduct_in_background(
        &second,
        "zookeeper",
        json!({"product_id": 1, "request_id": "new-holder"}),
    )
    .await
    .unwrap();
    assert_eq!(
        status_2,
        StatusCode::OK,
        "the new holder sells once the session expired: {body_2}"
    );
    proxy.set(testbed::proxy::ProxyMode::Pass);
    first.release("after_read").await;
    let (status_1, body_1) = request_1.await.unwrap();
    let state = first.db_state(1).await;
    println!("zookeeper, fencing {fencing}: partitioned holder {status_1} {body_1}; {state:?}");
    if fencing {
        assert_eq!(body_1["error"], "lock_lost", "{body_1}");
        assert_eq!(
            (state.remaining, state.ledger_sum, state.lost_updates()),
            (0, 1, 0),
            "{state:?}"
        );
    } else {
        assert_eq!(status_1, StatusCode::OK, "{body_1}");
        assert_eq!(
            (state.remaining, state.ledger_sum, state.lost_updates()),
            (0, 2, 1),
            "{state:?}"
        );
    }
    first.stop().await;
    second.stop().await;
}

/// `zookeeper`, fenced by czxid: the partitioned holder is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_fenced_refuses_the_partitioned_holder() {
    zookeeper_partitioned_holder(true).await;
}

/// `zookeeper`, unfenced: the partitioned holder's write is a lost update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_unfenced_loses_an_update() {
    zookeeper_partitioned_holder(false).await;
}

/// Fencing can be turned off per request (a test hook), and the ledger shows which
/// sales were fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_per_request() {
    let app = crate::helpers::spawn_app().await;
    app.stock(1, 5).await;
    let fenced: Value = app
        .deduct("redis-lock", &json!({"product_id": 1}))
        .await
        .json()
        .await
        .unwrap();
    let unfenced = app
        .deduct("redis-lock", &json!({"product_id": 1, "fencing": false}))
        .await;
    assert_eq!(unfenced.status(), StatusCode::OK);
    assert!(fenced["fence_token"].as_u64().is_some(), "{fenced}");
    let claimed: u64 = sqlx::query_scalar(
        "SELECT token FROM stock_fence WHERE product_id = 1 AND backend = 'redis'",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(
        claimed,
        fenced["fence_token"].as_u64().unwrap(),
        "only the fenced sale claimed"
    );
    app.stop().await;
}

/// With one Redis URL and no ZooKeeper the service starts, serves the database
/// strategies and `redis-lock`; with no Redis at all, `redis-lock` answers 503
/// `backend_unavailable` naming Redis, and the rest still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_backends_that_are_there_and_not() {
    let database = fresh_database().await;
    let mut settings = test_settings(&database);
    settings.shared.redis_urls.truncate(1);
    settings.shared.zk_connect = None;
    let one_redis = spawn_with(settings.clone()).await;
    one_redis.stock(1, 10).await;
    for strategy in ["atomic-sql", "pessimistic", "mysql-lock", "redis-lock"] {
        let response = one_redis.deduct(strategy, &json!({"product_id": 1})).await;
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "{strategy} with one Redis"
        );
    }
    // RedLock needs at least 3 nodes: with one it answers 503, naming why.
    let body = assert_error(
        one_redis.deduct("redlock", &json!({"product_id": 1})).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "backend_unavailable",
    )
    .await;
    assert!(
        body["detail"].as_str().unwrap().contains("at least 3"),
        "{body}"
    );
    one_redis.stop().await;

    settings.shared.redis_urls.clear();
    let no_redis = spawn_with(settings).await;
    let body = assert_error(
        no_redis
            .deduct("zookeeper", &json!({"product_id": 1}))
            .await,
        StatusCode::SERVICE_UNAVAILABLE,
        "backend_unavailable",
    )
    .await;
    assert!(
        body["detail"].as_str().unwrap().contains("ZK_CONNECT"),
        "{body}"
    );
    let body = assert_error(
        no_redis
            .deduct("redis-lock", &json!({"product_id": 1}))
            .await,
        StatusCode::SERVICE_UNAVAILABLE,
        "backend_unavailable",
    )
    .await;
    assert!(body["detail"].as_str().unwrap().contains("redis"), "{body}");
    assert_eq!(
        no_redis
            .deduct("mysql-lock", &json!({"product_id": 1}))
            .await
            .status(),
        StatusCode::OK
    );
    let state = no_redis.db_state(1).await;
    assert_eq!(
        (state.remaining, state.ledger_sum),
        (5, 5),
        "the refused request changed nothing"
    );
    no_redis.stop().await;
}
