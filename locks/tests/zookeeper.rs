//! The ZooKeeper lock's own promises, on the testbed's ZooKeeper: FIFO order, one
//! watcher per waiter (no herd), session expiry, and no node left behind by a
//! cancelled acquisition.

use locks::zookeeper::ZooKeeperLock;
use locks::{HolderId, LockOptions, Locker, LostReason};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::renewals::{told_of_removal, watched};
use support::retried;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use zookeeper_client as zk;

mod support;

const ROOT: &str = "/stock-locks-tests";

fn connect_string() -> String {
    std::env::var("ZK_CONNECT").expect("ZK_CONNECT: run under ./scripts/test")
}

async fn lock() -> Locker {
    let connect = connect_string();
    let backend = || ZooKeeperLock::connect(&connect, ROOT, Duration::from_secs(4));
    Locker::new(retried(backend, Duration::from_secs(30)).await)
}

/// The persistent parent of `key`'s lock nodes.
fn parent(key: &str) -> String {
    format!("{ROOT}/{key}")
}

fn key(name: &str) -> String {
    format!("{name}-{}", uuid::Uuid::new_v4().simple())
}

fn options() -> LockOptions {
    LockOptions {
        lease: Duration::from_millis(900),
        renew: true,
        max_hold: None,
        lock_delay: Duration::ZERO,
    }
}

/// Takes the lock on `key` for a new holder (the lock is free, or frees within 5 s).
async fn acquire(locker: &Locker, key: &str) -> locks::LockGuard {
    locker
        .acquire(key, &HolderId::random(), &options(), Duration::from_secs(5))
        .await
        .unwrap()
}

/// A waiter queued behind the current holder: acquires in a task of its own and
/// returns the guard and the moment it got it.
fn queued_waiter(
    locker: Locker,
    key: &str,
) -> tokio::task::JoinHandle<(Result<locks::LockGuard, locks::LockError>, Instant)> {
    let key = key.to_string();
    tokio::spawn(async move {
        let guard = locker
            .acquire(
                &key,
                &HolderId::random(),
                &options(),
                Duration::from_secs(20),
            )
            .await;
        (guard, Instant::now())
    })
}

async fn children(parent: &str) -> Vec<String> {
    let client = zk::Client::connect(&connect_string()).await.unwrap();
    client.list_children(parent).await.unwrap_or_default()
}

async fn wait_for_children(parent: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while children(parent).await.len() != count {
        assert!(
            Instant::now() < deadline,
            "{parent}: expected {count} nodes, have {:?}",
            children(parent).await
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A four-letter command to the first server of ZK_CONNECT.
async fn four_letter(command: &str) -> String {
    let host = connect_string().split(',').next().unwrap().to_string();
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    stream.write_all(command.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

/// The watched paths under `parent` and their watching sessions, from the server's
/// `wchp` (each watched path, then one indented line per watching session).
async fn watches_under(parent: &str) -> HashMap<String, usize> {
    let report = four_letter("wchp").await;
    let mut watchers: HashMap<String, usize> = HashMap::new();
    let mut current = None;
    for line in report.lines() {
        if line.starts_with('/') {
            current = Some(line.trim().to_string());
            watchers.entry(line.trim().to_string()).or_default();
        } else if !line.trim().is_empty()
            && let Some(path) = &current
        {
            *watchers.get_mut(path).unwrap() += 1;
        }
    }
    watchers.retain(|path, _| path.starts_with(parent));
    watchers
}

/// Ten waiters, enqueued one at a time behind a holder, get the lock in the order
/// they arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_acquire_in_arrival_order() {
    let locker = lock().await;
    let key = key("fifo");
    let parent = parent(&key);
    let holder = acquire(&locker, &key).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let (locker, key, order) = (locker.clone(), key.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let guard = locker
                .acquire(
                    &key,
                    &HolderId::random(),
                    &options(),
                    Duration::from_secs(30),
                )
                .await
                .unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            guard.release().await.unwrap();
        }));
        // Enqueued: its node exists before the next waiter starts.
        wait_for_children(&parent, i + 2).await;
    }
    holder.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..10).collect::<Vec<_>>());
    wait_for_children(&parent, 0).await;
}

/// With 20 waiters, every lock node has at most one watcher (its successor) and the
/// parent has none: a release wakes one waiter, not twenty (no herd effect). Read
/// from the server itself with the `wchp` four-letter command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_waiter_watches_only_its_predecessor() {
    let locker = lock().await;
    let key = key("herd");
    let parent = parent(&key);
    let holder = acquire(&locker, &key).await;
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (locker, key) = (locker.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let guard = locker
                .acquire(
                    &key,
                    &HolderId::random(),
                    &options(),
                    Duration::from_secs(30),
                )
                .await
                .unwrap();
            guard.release().await.unwrap();
        }));
    }
    wait_for_children(&parent, 21).await;
    // Every waiter has set its watch: 20 watched paths under the parent (or more, which
    // the assertions below name).
    let deadline = Instant::now() + Duration::from_secs(30);
    let ours = loop {
        let ours = watches_under(&parent).await;
        if ours.len() >= 20 || Instant::now() >= deadline {
            break ours;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    println!(
        "wchp under {parent}: {} watched paths, max watchers per path {:?}",
        ours.len(),
        ours.values().max()
    );
    assert!(
        !ours.contains_key(&parent),
        "someone watches the parent: {ours:?}"
    );
    assert_eq!(
        ours.len(),
        20,
        "each of the 20 waiters watches one node: {ours:?}"
    );
    assert!(
        ours.values().all(|n| *n == 1),
        "at most one watcher per node: {ours:?}"
    );

    holder.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
}

/// The holder's network goes silent (its connection runs through a proxy that
/// starts blackholing): the holder cannot know whether its session lives, so it counts
/// the lock as lost after its safety margin (the lease, 900 ms); the server expires
/// the session after its timeout (2 s), deletes the node, and the next waiter gets in.
/// The holder gives up **before** anyone else can get in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_holder_gives_up_before_its_session_expires() {
    let zk_port: u16 = connect_string()
        .split(',')
        .next()
        .unwrap()
        .rsplit_once(':')
        .unwrap()
        .1
        .parse()
        .unwrap();
    let proxy = testbed::proxy::Proxy::start(zk_port).unwrap();
    let holder_backend = ZooKeeperLock::connect(
        &format!("127.0.0.1:{}", proxy.port()),
        ROOT,
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    let holder_locker = Locker::new(holder_backend);
    let waiter_locker = lock().await;
    let key = key("partition");
    let holder = acquire(&holder_locker, &key).await;
    let waiter = queued_waiter(waiter_locker, &key);
    wait_for_children(&parent(&key), 2).await;

    let cut = Instant::now();
    proxy.set(testbed::proxy::ProxyMode::Blackhole);
    let reason = tokio::time::timeout(Duration::from_secs(5), holder.lost())
        .await
        .expect("the holder is told");
    let holder_gave_up = Instant::now();
    let (next, next_in) = waiter.await.unwrap();
    let next = next.expect("the waiter gets the lock once the session expired");
    println!(
        "partitioned holder: gave up after {:?} ({reason:?}); next holder in after {:?}",
        holder_gave_up - cut,
        next_in - cut
    );
    assert_eq!(reason, LostReason::Expired);
    assert!(
        holder_gave_up < next_in,
        "the old holder gave up before the new one got in"
    );
    next.release().await.unwrap();
    drop(holder);
}

/// What session expiry does to a holder's lock, without waiting for it: its node is
/// deleted. The next waiter gets in at once, and the holder's next check finds its node
/// gone and fires the signal. Counted in checks, not milliseconds: the holder's lease
/// (3 s, a check a second) gives a slow check 2 s to answer before the lease would run
/// out first (`Expired`, another signal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_session_node_fires_the_signal_and_lets_the_next_in() {
    let (holder_locker, mut renewals) = watched(&lock().await);
    let waiter_locker = lock().await;
    let key = key("expiry");
    let lease = LockOptions {
        lease: Duration::from_secs(3),
        ..options()
    };
    let holder = holder_locker
        .acquire(&key, &HolderId::random(), &lease, Duration::from_secs(5))
        .await
        .unwrap();
    let waiter = queued_waiter(waiter_locker, &key);
    let parent = parent(&key);
    wait_for_children(&parent, 2).await;
    // What session expiry does to the holder's node: ZooKeeper deletes it.
    let admin = zk::Client::connect(&connect_string()).await.unwrap();
    let mut nodes = admin.list_children(&parent).await.unwrap();
    nodes.sort_by(|a, b| a[a.len() - 10..].cmp(&b[b.len() - 10..]));
    let deleting = Instant::now();
    admin
        .delete(&format!("{parent}/{}", nodes[0]), None)
        .await
        .unwrap();
    let deleted = Instant::now();

    let (next, _) = waiter.await.unwrap();
    let next = next.expect("the waiter gets the lock");
    let removal = (deleting, deleted);
    let seen = told_of_removal(&holder, &mut renewals, removal, Duration::from_secs(30));
    println!("deleted session node: {}", seen.await.unwrap());
    next.release().await.unwrap();
}

/// An acquisition cancelled while it waits, or while its create is in flight, leaves
/// no node behind (found by its `_c_<uuid>` marker when the create's answer never came).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquisitions_leave_no_node() {
    let locker = lock().await;
    let key = key("cancel");
    let parent = parent(&key);
    let holder = acquire(&locker, &key).await;

    // Mid-wait: the waiter's node exists, then the waiter is dropped.
    let waiting = tokio::spawn({
        let (locker, key) = (locker.clone(), key.clone());
        async move {
            locker
                .acquire(
                    &key,
                    &HolderId::random(),
                    &options(),
                    Duration::from_secs(30),
                )
                .await
        }
    });
    wait_for_children(&parent, 2).await;
    waiting.abort();
    wait_for_children(&parent, 1).await;

    // Mid-create: cancelled a few hundred microseconds in, over and over.
    for i in 0..20 {
        let (holder, opts) = (HolderId::random(), options());
        let attempt = locker.acquire(&key, &holder, &opts, Duration::from_secs(30));
        let _ = tokio::time::timeout(Duration::from_micros(100 + 50 * i), attempt).await;
    }
    wait_for_children(&parent, 1).await;
    holder.release().await.unwrap();
    wait_for_children(&parent, 0).await;
}
