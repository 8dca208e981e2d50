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
    let guard = (locker.try_acquire(key, &holder, &options).await.unwrap()).unwrap();
    let first_token = guard.token().unwrap();

    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let (locker, options) = (locker.clone(), options.clone());
            tokio::spawn(async move {
                let guard =
                    (locker.acquire(key, &HolderId::random(), &options, Duration::from_secs(20)))
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
    let to = (nodes.iter())
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
