//! The Redis lock on a private Redis Cluster while the lock's slot moves to another
//! master (a reshard): the lock moves with it, its holder keeps it, and its waiters,
//! whose sharded subscription Redis drops with the slot, are subscribed again on the
//! new master and woken by the release there, not by the lease's end.

use locks::redis::RedisLock;
use locks::{HolderId, LockOptions, Locker};
use std::time::Duration;
use tokio::time::Instant;

/// `PUBSUB SHARDNUMSUB channel` on the server at `port`: its subscribers there.
async fn subscribers(port: u16, channel: &str) -> i64 {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (_, count): (String, i64) = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query_async(&mut conn)
        .await
        .unwrap();
    count
}

/// Polls `done` every 20 ms for up to `limit`.
async fn within(limit: Duration, what: &str, mut done: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !done().await {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_moved_under_a_held_lock_keeps_it_and_still_wakes_its_waiters() {
    const WAITERS: usize = 3;
    let cluster = testbed::RedisCluster::start("cluster-reshard", 6).unwrap();
    let locker = Locker::new(RedisLock::connect_cluster(&cluster.urls()).await.unwrap());
    let (key, channel) = ("stock:reshard", "lock-released:{stock:reshard}");
    // A lease far longer than the test: a waiter woken by it would show.
    let options = LockOptions {
        lease: Duration::from_secs(30),
        renew: true,
        max_hold: None,
        lock_delay: Duration::ZERO,
    };
    let holder = HolderId::random();
    let guard = locker
        .try_acquire(key, &holder, &options)
        .await
        .unwrap()
        .unwrap();
    let first_token = guard.token().unwrap();

    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let (locker, options) = (locker.clone(), options.clone());
            tokio::spawn(async move {
                let guard = locker
                    .acquire(key, &HolderId::random(), &options, Duration::from_secs(20))
                    .await
                    .unwrap();
                let (token, at) = (guard.token().unwrap(), Instant::now());
                guard.release().await.unwrap();
                (token, at)
            })
        })
        .collect();
    let slot = cluster.slot_of(key).unwrap();
    let from = cluster.master_of(slot).unwrap();
    within(
        Duration::from_secs(5),
        "the waiters subscribe",
        async || subscribers(from, channel).await == 1,
    )
    .await;

    // The slot moves to another master, one key per batch (the lock hash and its
    // token counter), with a pause between: the waiters' subscription is dropped.
    let nodes = cluster.topology().unwrap();
    let to = nodes
        .iter()
        .find(|n| n.master_id.is_none() && !n.slots.is_empty() && n.port != from)
        .unwrap()
        .port;
    let moved =
        tokio::task::block_in_place(|| cluster.move_slot(slot, to, 1, Duration::from_millis(100)))
            .unwrap();
    assert_eq!(moved, 2, "the lock hash and its token counter");
    assert_eq!(subscribers(from, channel).await, 0);
    within(
        Duration::from_secs(5),
        "the waiters subscribe on the new master",
        async || subscribers(to, channel).await == 1,
    )
    .await;

    // The holder still holds it, on the new master: nobody else gets it.
    assert!(!guard.is_lost());
    let other = locker
        .try_acquire(key, &HolderId::random(), &options)
        .await
        .unwrap();
    assert!(other.is_none(), "a second holder after the move");
    let released = Instant::now();
    guard.release().await.unwrap();
    let mut tokens = vec![first_token];
    for waiter in waiters {
        let (token, at) = waiter.await.unwrap();
        tokens.push(token);
        assert!(
            at - released < Duration::from_secs(5),
            "a waiter waited {:?} after the release: woken by the lease, not the release",
            at - released
        );
    }
    let mut sorted = tokens[1..].to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        WAITERS,
        "each holder its own token: {tokens:?}"
    );
    assert!(
        sorted[0] > first_token,
        "tokens grow across the move: {tokens:?}"
    );
}

/// A cluster, the master and replica serving `key`, and options with a lease far
/// longer than a failover takes (the lease does not end the lock; the failover does),
/// renewed every 10 s: the first renewal comes after the failover.
fn cluster_for(name: &str, key: &str) -> (testbed::RedisCluster, u16, u16, LockOptions) {
    let cluster = testbed::RedisCluster::start(name, 6).unwrap();
    let master = cluster.master_of(cluster.slot_of(key).unwrap()).unwrap();
    let replica = cluster.replica_of(master).unwrap();
    let options = LockOptions {
        lease: Duration::from_secs(30),
        renew: true,
        max_hold: None,
        lock_delay: Duration::ZERO,
    };
    (cluster, master, replica, options)
}

/// Kills the master on `port` and waits (off the runtime's threads) for its replica.
fn fail_over(cluster: &mut testbed::RedisCluster, port: u16) -> u16 {
    tokio::task::block_in_place(|| {
        cluster.node_mut(port).unwrap().process().kill();
        cluster
            .wait_for_promotion(port, Duration::from_secs(20))
            .unwrap()
    })
}

/// The failover the source articles warn about, made to happen: the lock's master
/// acknowledges it, its replica never gets it (the replication link held back, and
/// checked: the key is on the master, not on the replica), the master dies, the
/// replica is promoted without it, and a second holder acquires while the first still
/// believes it holds the lock. Its token is newer, so a fenced resource refuses the
/// first; the first is told at its next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_that_lost_the_lock_lets_a_second_holder_in_with_a_newer_token() {
    let key = "stock:failover";
    let (mut cluster, master, replica, options) = cluster_for("cluster-failover", key);
    cluster
        .replication(master)
        .unwrap()
        .set(testbed::proxy::ProxyMode::Blackhole);
    let first = Locker::new(RedisLock::connect_cluster(&cluster.urls()).await.unwrap());
    let guard = (first
        .try_acquire(key, &HolderId::random(), &options)
        .await
        .unwrap())
    .unwrap();
    // Longer than replication takes when the link is up.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        cluster.has_key(master, key).unwrap(),
        "the lock is on the master"
    );
    assert!(
        !cluster.has_key(replica, key).unwrap(),
        "and not on the replica"
    );

    let promoted = fail_over(&mut cluster, master);
    assert_eq!(promoted, replica);
    let second = Locker::new(RedisLock::connect_cluster(&cluster.urls()).await.unwrap());
    let other = second
        .acquire(key, &HolderId::random(), &options, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(
        !guard.is_lost(),
        "the first holder still believes it holds: two holders"
    );
    assert!(
        other.token().unwrap() > guard.token().unwrap(),
        "a fence refuses the first holder: tokens {:?} then {:?}",
        guard.token(),
        other.token()
    );
    within(
        Duration::from_secs(30),
        "the first holder learns it lost the lock",
        async || guard.is_lost(),
    )
    .await;
    other.release().await.unwrap();
}

/// The same failover with `WAIT` with each attempt (`with_min_replicas(1)`, as Redisson
/// does by default): while the replica's link is held back, no lock is granted (the
/// acquisition fails and leaves nothing); with the link up, a granted lock is on the
/// replica before the holder hears of it, and survives the master's death.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_a_failover_keeps_the_lock() {
    let key = "stock:failover-wait";
    let (mut cluster, master, replica, options) = cluster_for("cluster-failover-wait", key);
    let replicated =
        |lock: RedisLock| Locker::new(lock.with_min_replicas(1, Duration::from_millis(300)));
    let first = replicated(RedisLock::connect_cluster(&cluster.urls()).await.unwrap());
    let link = cluster.replication(master).unwrap();
    link.set(testbed::proxy::ProxyMode::Blackhole);
    let refused = first.try_acquire(key, &HolderId::random(), &options).await;
    let error = refused.err().expect("no lock granted without a replica");
    println!("refused while the replica's link is held back: {error}");
    assert!(
        !cluster.has_key(master, key).unwrap(),
        "given back on the master"
    );
    link.set(testbed::proxy::ProxyMode::Pass);

    // The link comes back by itself (the replica reconnects); then a grant is on both.
    let holder = HolderId::random();
    let since = Instant::now();
    let guard = loop {
        match first.try_acquire(key, &holder, &options).await {
            Ok(Some(guard)) => break guard,
            other => {
                let waited = since.elapsed();
                let why = other.err();
                assert!(
                    waited < Duration::from_secs(20),
                    "no grant {waited:?} after: {why:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await
            }
        }
    };
    assert!(
        cluster.has_key(replica, key).unwrap(),
        "on the replica when granted"
    );
    assert_eq!(fail_over(&mut cluster, master), replica);
    let second = Locker::new(RedisLock::connect_cluster(&cluster.urls()).await.unwrap());
    let other = second
        .try_acquire(key, &HolderId::random(), &options)
        .await
        .unwrap();
    assert!(other.is_none(), "a second holder after the failover");
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
}
