//! The ZooKeeper lock on a private 3-node ensemble whose leader is killed with SIGKILL
//! in the middle of 200 lock hand-offs: never two holders, and the work resumes.

use locks::zookeeper::ZooKeeperLock;
use locks::{HolderId, LockOptions, Locker};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use testbed::ZooKeeper;
use tokio::time::Instant;

/// The acquisitions the tasks make in all before they stop.
const HANDOFFS: usize = 200;

/// What the tasks taking turns count together: acquisitions, tasks inside the critical
/// section now, overlaps seen, failed attempts, and when each acquisition came.
#[derive(Default)]
struct Turns {
    acquired: AtomicUsize,
    inside: AtomicUsize,
    overlaps: AtomicUsize,
    errors: AtomicUsize,
    times: Mutex<Vec<Instant>>,
}

/// 4 tasks take turns on one lock until 200 acquisitions; after 50, the leader is
/// killed. Each critical section checks that nobody else is inside. Requests during
/// the election fail and are retried; what matters is that no two tasks are ever inside
/// together, that all 200 hand-offs happen, and how long the longest pause was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_during_handoffs() {
    let mut ensemble = ZooKeeper::start_ensemble(3).unwrap();
    let backend = ZooKeeperLock::connect(
        &ensemble.connect_string(),
        "/ensemble-test",
        Duration::from_secs(4),
    )
    .await
    .unwrap();
    let locker = Locker::new(backend);
    let options = LockOptions {
        lease: Duration::from_millis(2_500),
        renew: true,
        max_hold: None,
        lock_delay: Duration::ZERO,
    };

    let turns = Arc::new(Turns::default());
    let started = Instant::now();
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (locker, options, turns) = (locker.clone(), options.clone(), turns.clone());
            tokio::spawn(take_turns(locker, options, turns))
        })
        .collect();

    while turns.acquired.load(Ordering::SeqCst) < 50 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let leader = ensemble
        .nodes()
        .iter()
        .position(|n| n.mode().as_deref() == Some("leader"))
        .expect("a leader");
    let killed_at = Instant::now();
    ensemble.nodes_mut()[leader].process().kill();

    for task in tasks {
        let done = tokio::time::timeout(Duration::from_secs(120), task).await;
        let (acquired, errors) = (
            turns.acquired.load(Ordering::SeqCst),
            turns.errors.load(Ordering::SeqCst),
        );
        assert!(
            done.is_ok(),
            "work did not resume: {acquired} acquisitions, {errors} failed attempts"
        );
    }
    let times = turns.times.lock().unwrap();
    let gap = times.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    let new_leader = ensemble
        .nodes()
        .iter()
        .position(|n| n.mode().as_deref() == Some("leader"));
    println!(
        "{} hand-offs in {:.2} s; leader (node {}) killed at {:.2} s; longest pause between acquisitions {gap:?}; \
         {} failed attempts retried; overlaps {}; new leader: node {new_leader:?}",
        times.len(),
        started.elapsed().as_secs_f64(),
        leader + 1,
        (killed_at - started).as_secs_f64(),
        turns.errors.load(Ordering::SeqCst),
        turns.overlaps.load(Ordering::SeqCst),
    );
    assert_eq!(
        turns.overlaps.load(Ordering::SeqCst),
        0,
        "two holders at once"
    );
    assert!(times.len() >= HANDOFFS);
}

/// One task's turns on the lock, as its own holder, until [`HANDOFFS`] acquisitions in
/// all: each acquisition counted in `turns`, a short critical section, a release.
///
/// A failed acquisition or release is counted (the first few printed) and the task
/// goes on; one found with another task inside counts an overlap.
async fn take_turns(locker: Locker, options: LockOptions, turns: Arc<Turns>) {
    let Turns {
        acquired,
        inside,
        overlaps,
        errors,
        times,
    } = &*turns;
    let holder = HolderId::random();
    while acquired.load(Ordering::SeqCst) < HANDOFFS {
        let guard = match locker
            .acquire("stock/1", &holder, &options, Duration::from_secs(20))
            .await
        {
            Ok(guard) => guard,
            Err(e) => {
                if errors.fetch_add(1, Ordering::SeqCst) < 5 {
                    eprintln!("acquire failed: {e}");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if inside.fetch_add(1, Ordering::SeqCst) != 0 {
            overlaps.fetch_add(1, Ordering::SeqCst);
        }
        times.lock().unwrap().push(Instant::now());
        acquired.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(2)).await;
        inside.fetch_sub(1, Ordering::SeqCst);
        let released = tokio::time::timeout(Duration::from_secs(15), guard.release()).await;
        if !matches!(released, Ok(Ok(()))) && errors.fetch_add(1, Ordering::SeqCst) < 5 {
            eprintln!("release failed: {released:?}");
        }
    }
}
