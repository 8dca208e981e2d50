//! Waiting for a Redis lock costs a small constant number of lock-script calls per
//! acquisition: waiters sleep until a release is announced (pub/sub) instead of
//! polling. Counted by Redis itself (`INFO commandstats`) on a private server, and on
//! a private Redis Cluster (sharded pub/sub, counted on the key's master).

use locks::redis::RedisLock;
use locks::{HolderId, LockOptions, Locker};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// `calls=` of one command in `INFO commandstats`.
fn calls(info: &str, command: &str) -> u64 {
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// 1 holder and 20 waiters in one process, 100 hand-offs. Every acquisition and
/// release runs one script (EVALSHA); releases are counted exactly, so the lock-script
/// calls are the rest. Waiting on the release channel costs one successful attempt
/// per acquisition, one failed first attempt per waiter, and one failed attempt when
/// a woken waiter loses the race to a task that re-acquires right after releasing:
/// at most 1 + 1 + waiters/acquisitions ≈ 2.2 per acquisition here; the test allows 3.
/// Polling every 1-20 ms would cost hundreds per hand-off.
///
/// On a cluster each waiter also subscribes to the lock's channel after its first
/// failed attempt (once per process and lock) and tries once more: one more attempt
/// per waiter, within the same bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_sleep_until_a_release_wakes_one() {
    let server = testbed::Redis::start("redis-wakeup").unwrap();
    let locker = Locker::new(RedisLock::connect(&server.url()).await.unwrap());
    hand_offs(locker, &server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_waiters_sleep_until_a_release_wakes_one() {
    let cluster = testbed::RedisCluster::start("cluster-wakeup", 6).unwrap();
    let locker = Locker::new(RedisLock::connect_cluster(&cluster.urls()).await.unwrap());
    let master = cluster.master_of(cluster.slot_of(KEY).unwrap()).unwrap();
    hand_offs(locker, &format!("redis://127.0.0.1:{master}")).await;
}

const KEY: &str = "stock:wakeup";

/// The hand-offs through `locker`, counted on the Redis at `stats` (the key's).
async fn hand_offs(locker: Locker, stats: &str) {
    const WAITERS: usize = 20;
    const HANDOFFS: usize = 100;
    let client = redis::Client::open(stats).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let key = KEY;
    // A long lease: no renewals, and a waiter that missed a release would sit out the
    // whole PTTL (and the test would take minutes), so timely hand-offs prove wake-ups.
    let options = LockOptions {
        lease: Duration::from_secs(30),
        renew: true,
        max_hold: None,
        lock_delay: Duration::ZERO,
    };

    let first = locker
        .try_acquire(key, &HolderId::random(), &options)
        .await
        .unwrap()
        .unwrap();
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut admin)
        .await
        .unwrap();

    let acquired = Arc::new(AtomicUsize::new(0));
    let started = tokio::time::Instant::now();
    let tasks: Vec<_> = (0..WAITERS)
        .map(|_| {
            let (locker, options, acquired) = (locker.clone(), options.clone(), acquired.clone());
            tokio::spawn(async move {
                let holder = HolderId::random();
                for _ in 0..HANDOFFS / WAITERS {
                    let guard = locker
                        .acquire(key, &holder, &options, Duration::from_secs(20))
                        .await
                        .unwrap();
                    acquired.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    // Every waiter has made its first (failed) attempt, counted by Redis, before the
    // first holder releases.
    let waited = tokio::time::Instant::now();
    loop {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut admin)
            .await
            .unwrap();
        if calls(&info, "evalsha") + calls(&info, "eval") >= WAITERS as u64 {
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "every waiter tries once"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();

    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut admin)
        .await
        .unwrap();
    let scripts = calls(&info, "evalsha") + calls(&info, "eval");
    let releases = HANDOFFS as u64 + 1;
    let lock_calls = scripts - releases;
    let per_acquisition = lock_calls as f64 / HANDOFFS as f64;
    println!(
        "{HANDOFFS} hand-offs among {WAITERS} waiters in {elapsed:?}: {scripts} script calls, \
         {lock_calls} lock attempts = {per_acquisition:.2} per acquisition \
         (floor: {HANDOFFS} successes + {WAITERS} first attempts = {:.2})",
        (HANDOFFS + WAITERS) as f64 / HANDOFFS as f64
    );
    assert_eq!(acquired.load(Ordering::SeqCst), HANDOFFS);
    assert!(
        lock_calls <= 3 * HANDOFFS as u64,
        "{lock_calls} lock attempts for {HANDOFFS} acquisitions: waiters are polling"
    );
    assert!(
        elapsed < Duration::from_secs(15),
        "hand-offs waited for the PTTL: a release was missed"
    );
}
