//! Fast variants of the chaos scenarios 1 to 4 and 6 to 15 (3 and 8 also for the
//! flash-sale strategies: an instance killed mid-batch, a batch's COMMIT made
//! ambiguous), run by the chaos runner itself
//! against private servers and two real `stock-app` processes (short leases): the
//! verdicts the report shows, asserted.

mod support;

use loadtest::catalogue::Catalogue;
use loadtest::chaos::{Cell, CellSpec, CellVerdict, ChaosReport, Lab, Scenario, Timing};
use loadtest::history::Said;

/// The matrix's own cell, as the strategy declares it (so the test checks what the
/// runner expects).
fn spec(
    catalogue: &Catalogue,
    scenario: Scenario,
    strategy: &str,
    fencing: Option<bool>,
) -> CellSpec {
    loadtest::chaos::matrix(catalogue)
        .into_iter()
        .find(|c| c.scenario == scenario && c.strategy == strategy && c.fencing == fencing)
        .unwrap_or_else(|| panic!("no cell {scenario:?} / {strategy} / {fencing:?}"))
}

async fn run(lab: &mut Lab, spec: &CellSpec) -> Cell {
    let cell = lab.run_cell(spec).await.expect("the cell runs");
    println!(
        "{} / {} / {:?}: {} (sold {}, refused {}, lost {}, double {}, blocked {:?} ms, gap {:.0} ms): {}",
        spec.scenario.id(),
        spec.strategy,
        spec.fencing,
        cell.verdict.id(),
        cell.succeeded,
        cell.refused,
        cell.lost_updates,
        cell.double_deducted,
        cell.blocked_ms,
        cell.longest_gap_ms,
        cell.why
    );
    assert_eq!(cell.missing_acknowledged, 0, "{cell:?}");
    assert!(cell.as_expected, "unexpected verdict: {cell:?}");
    cell
}

async fn lab() -> Lab {
    Lab::start(support::app_bin(), Timing::quick(), 1)
        .await
        .expect("start the lab")
}

/// Scenario 1: a holder frozen (SIGSTOP) past its lease while between read and
/// write. Unfenced, its stale write loses updates; fenced, it is refused and nothing
/// is lost; with the row lock of `atomic-sql` the others wait; `optimistic` holds
/// nothing and retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_holder_loses_updates_unless_fenced() {
    let mut lab = lab().await;
    let cat = lab.catalogue.clone();

    let unfenced = run(
        &mut lab,
        &spec(&cat, Scenario::PausePastLease, "redis-lock", Some(false)),
    )
    .await;
    assert_eq!(unfenced.verdict, CellVerdict::Erased);
    assert!(unfenced.lost_updates >= 1);
    // Its history: the frozen holder still believed it held the lock while B's took
    // it, both wrote; the final read shows the units B sold put back, which no order
    // of the answers gives.
    let overlap = |cell: &loadtest::chaos::Cell, fenced: &str| {
        let history = cell.history.as_ref().expect("every cell is judged");
        let found = history
            .anomalies
            .iter()
            .find(|f| f.class == "lock overlap")
            .unwrap_or_else(|| panic!("no overlap seen: {history:?}"));
        assert!(found.says.contains(fenced), "{}", found.says);
        history.clone()
    };
    let seen = overlap(&unfenced, "in the ledger too: both wrote");
    assert!(
        seen.anomalies.iter().any(|f| f.class == "lost update"),
        "{seen:?}"
    );
    assert_eq!(seen.verdict, Said::NotLinearizable, "{seen:?}");
    assert!(unfenced.as_expected, "{unfenced:?}");

    let fenced = run(
        &mut lab,
        &spec(&cat, Scenario::PausePastLease, "redis-lock", Some(true)),
    )
    .await;
    assert_eq!(fenced.verdict, CellVerdict::Refused);
    assert_eq!((fenced.lost_updates, fenced.beyond_stock), (0, 0));
    assert!(fenced.refused >= 1);
    // The same overlap, the fence's refusal, and every answer explained, the final
    // read included.
    let seen = overlap(&fenced, "not in the ledger: it wrote nothing");
    assert_eq!(seen.verdict, Said::Linearizable, "{seen:?}");
    // B's buyers got the lock once the lease (400 ms) ran out, long before the
    // freeze (1200 ms) ended.
    let blocked = fenced.blocked_ms.expect("B sold during the freeze");
    assert!(blocked < 1200.0, "blocked {blocked} ms");

    let atomic = run(
        &mut lab,
        &spec(&cat, Scenario::PausePastLease, "atomic-sql", None),
    )
    .await;
    assert_eq!(atomic.verdict, CellVerdict::Unavailable);
    assert_eq!(atomic.lost_updates, 0);

    let optimistic = run(
        &mut lab,
        &spec(&cat, Scenario::PausePastLease, "optimistic", None),
    )
    .await;
    assert_eq!(optimistic.verdict, CellVerdict::Safe);
    lab.stop().await;
}

/// Scenario 14: Chubby's lock-delay (2x the lease). Frozen past the lease but within
/// lease + delay, the unfenced holder loses nothing (the lock sat out the delay: no
/// other holder, no sale meanwhile); frozen past lease + delay, it loses updates.
/// On the Redis lock and on etcd (whose leases are whole seconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_delay_narrows_the_window_only_fencing_closes_it() {
    let mut lab = lab().await;
    let cat = lab.catalogue.clone();
    for strategy in ["redis-lock", "etcd-lock"] {
        let short = run(
            &mut lab,
            &spec(&cat, Scenario::LockDelayShortPause, strategy, Some(false)),
        )
        .await;
        assert!(!short.verdict.is_loss(), "{short:?}");
        assert_eq!((short.lost_updates, short.refused), (0, 0), "{short:?}");

        let long = run(
            &mut lab,
            &spec(&cat, Scenario::LockDelayLongPause, strategy, Some(false)),
        )
        .await;
        assert_eq!(long.verdict, CellVerdict::Erased, "{long:?}");
        assert!(long.lost_updates >= 1, "{long:?}");
    }
    lab.stop().await;
}

/// etcd (scenarios 1, 6 and 7): Jepsen's pause and a holder cut off from etcd lose
/// updates unfenced and are refused fenced (the revision is the token); the leader
/// of a three-member cluster killed under load loses nothing, and sales resume after
/// the election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_pause_partition_and_leader_killed() {
    let mut lab = Lab::start(support::app_bin(), Timing::quick(), 3)
        .await
        .expect("start the lab");
    let cat = lab.catalogue.clone();
    for scenario in [Scenario::PausePastLease, Scenario::LockPartition] {
        let unfenced = run(&mut lab, &spec(&cat, scenario, "etcd-lock", Some(false))).await;
        assert_eq!(unfenced.verdict, CellVerdict::Erased, "{unfenced:?}");
        let fenced = run(&mut lab, &spec(&cat, scenario, "etcd-lock", Some(true))).await;
        assert_eq!(fenced.verdict, CellVerdict::Refused, "{fenced:?}");
        assert_eq!((fenced.lost_updates, fenced.beyond_stock), (0, 0));
    }
    let leader = run(
        &mut lab,
        &spec(&cat, Scenario::EtcdLeaderKilled, "etcd-lock", Some(true)),
    )
    .await;
    assert_eq!((leader.lost_updates, leader.double_deducted), (0, 0));
    assert!(
        leader.recovery_ms.is_some(),
        "no sale after the election: {leader:?}"
    );
    lab.stop().await;
}

/// Scenario 2: the fence with no lock in front of it: the same freeze, nothing lost,
/// and many requests refused (overtaken by a newer ticket) — the lock's job is
/// efficiency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_without_a_lock_is_safe_and_refuses() {
    let mut lab = lab().await;
    let cat = lab.catalogue.clone();
    let cell = run(
        &mut lab,
        &spec(&cat, Scenario::FenceAlone, "fence-only", None),
    )
    .await;
    assert_eq!(cell.verdict, CellVerdict::Refused);
    assert_eq!((cell.lost_updates, cell.beyond_stock), (0, 0));
    assert!(cell.succeeded > 0 && cell.refused > 1, "{cell:?}");
    lab.stop().await;

    // The chaos JSON report validates against the documented schema.
    let mut report = loadtest::report::Report::new(serde_json::json!({}), Vec::new());
    let faults = ChaosReport {
        timing: Timing::quick(),
        zk_nodes: 1,
        cells: vec![cell],
        scenarios: Vec::new(),
        seconds: 1.0,
        strategies: Default::default(),
    };
    report.parts.push(faults.part());
    support::assert_matches_schema(&report, "chaos report");
    assert!(loadtest::page::render(&report).contains("Faults: who stays safe"));
}

/// Scenario 4: the Redis of `redis-lock` restarted empty while a holder is paused.
/// Unfenced, the woken holder's stale write loses updates. Fenced, only that holder
/// is refused: the lock's tokens come from Redis's clock after the data loss, so B's
/// new holders are not refused by a fence that saw the old tokens (with a plain INCR
/// counter they were, hundreds of times, until the counter caught up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty_refuses_only_the_stale_holder() {
    let mut lab = lab().await;
    let cat = lab.catalogue.clone();
    let unfenced = run(
        &mut lab,
        &spec(&cat, Scenario::RedisRestart, "redis-lock", Some(false)),
    )
    .await;
    assert_eq!(unfenced.verdict, CellVerdict::Erased);
    let fenced = run(
        &mut lab,
        &spec(&cat, Scenario::RedisRestart, "redis-lock", Some(true)),
    )
    .await;
    assert_eq!(fenced.verdict, CellVerdict::Refused);
    assert_eq!((fenced.lost_updates, fenced.beyond_stock), (0, 0));
    // A's one paused request (it may also be told before its write); never B's.
    assert!((1..=2).contains(&fenced.refused), "{fenced:?}");
    lab.stop().await;
}

/// Scenario 3: the holder's instance killed (SIGKILL) between read and write:
/// nothing is lost, and the lock comes back after its lease (the database's row lock
/// at once, when the dead client's connection closes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_loses_nothing() {
    let mut lab = lab().await;
    let cat = lab.catalogue.clone();
    let lock = run(
        &mut lab,
        &spec(&cat, Scenario::HolderKilled, "redis-lock", Some(true)),
    )
    .await;
    assert_eq!((lock.lost_updates, lock.double_deducted), (0, 0));
    let back = lock.blocked_ms.expect("the lock came back");
    // At most one lease (400 ms) after the last renewal; generous bound.
    assert!(back < 2000.0, "lock back after {back} ms");

    let db = run(
        &mut lab,
        &spec(&cat, Scenario::HolderKilled, "pessimistic", None),
    )
    .await;
    assert_eq!((db.lost_updates, db.double_deducted), (0, 0));
    assert!(db.blocked_ms.is_some());

    // An instance killed mid-batch: the batch's transaction dies with its
    // connection, its members were never answered, nothing lost or doubled.
    // redis-stock: its persister stopped before COMMIT, then killed; B's persister
    // claims its entries.
    for strategy in ["batched", "bucketed", "redis-stock"] {
        let cell = run(
            &mut lab,
            &spec(&cat, Scenario::HolderKilled, strategy, None),
        )
        .await;
        assert_eq!(
            (cell.lost_updates, cell.double_deducted, cell.beyond_stock),
            (0, 0, 0),
            "{strategy}"
        );
        assert!(cell.succeeded > 0, "{strategy}: sales went on");
    }
    lab.stop().await;
}

/// Scenario 8: MariaDB killed as a COMMIT is sent, restarted; every request whose
/// outcome was unknown is retried with its request_id: nothing deducted twice. For
/// `batched` the COMMIT is a whole batch's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_commit_never_deducts_twice() {
    let mut lab = lab().await;
    let cat = lab.catalogue.clone();
    for strategy in ["atomic-sql", "batched"] {
        let cell = run(
            &mut lab,
            &spec(&cat, Scenario::AmbiguousCommit, strategy, None),
        )
        .await;
        assert_eq!(
            (cell.lost_updates, cell.double_deducted, cell.beyond_stock),
            (0, 0, 0),
            "{strategy}"
        );
        assert!(
            cell.recovery_ms.is_some(),
            "{strategy}: sales resumed after the restart"
        );
    }
    lab.stop().await;
}

/// Scenario 9: the Redis that sells for `redis-stock` killed under load. With its
/// append-only file fsynced before every reply, no acknowledged sale is missing from
/// the ledger afterwards; with no persistence, what Redis had not handed to the
/// persisters yet is gone, and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_loses_only_what_it_did_not_keep() {
    let mut lab = lab().await;
    let cat = lab.catalogue.clone();
    let always = run(
        &mut lab,
        &spec(&cat, Scenario::RedisKilledAlways, "redis-stock", None),
    )
    .await;
    assert_eq!((always.lost_updates, always.double_deducted), (0, 0));
    assert!(always.recovery_ms.is_some(), "sales resumed: {always:?}");

    let spec = spec(
        &cat,
        Scenario::RedisKilledNoPersistence,
        "redis-stock",
        None,
    );
    let none = lab.run_cell(&spec).await.expect("the cell runs");
    println!(
        "redis-killed-no-persistence: {} of {} acknowledged sales missing: {}",
        none.missing_acknowledged, none.succeeded, none.why
    );
    assert!(none.as_expected, "{none:?}");
    assert_eq!(
        (none.lost_updates, none.double_deducted, none.beyond_stock),
        (0, 0, 0)
    );
    lab.stop().await;
}

/// Scenario 10: the classic mistakes, each made by every request of its cell and made
/// to bite by a handshake: the two transaction-order mistakes and GET-then-DEL lose
/// updates, SETNX-then-EXPIRE and the PERSISTENT node leave a lock nobody gets again,
/// and without its guard atomic SQL is stopped by the CHECK constraint. Each is the
/// claim the report lists, confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_mistakes_fail_as_the_write_ups_say() {
    let mut lab = lab().await;
    let mut cells = Vec::new();
    for spec in lab
        .matrix()
        .into_iter()
        .filter(|c| c.scenario.number() == 10)
    {
        cells.push(run(&mut lab, &spec).await);
    }
    lab.stop().await;
    assert_eq!(cells.len(), 6);
    let report = ChaosReport {
        timing: Timing::quick(),
        zk_nodes: 1,
        cells,
        scenarios: Vec::new(),
        seconds: 1.0,
        strategies: Default::default(),
    };
    let claims = report.claims();
    assert_eq!(claims.len(), 6, "{claims:?}");
    for claim in &claims {
        assert_eq!(
            claim.verdict,
            loadtest::report::ClaimVerdict::Confirmed,
            "{claim:?}"
        );
    }
}

/// Scenario 11: a real Sentinel failover under load, replication to the replica held
/// back, a holder of instance A paused with a lock only the old primary had. Unfenced,
/// B's buyers take the same lock on the promoted replica and A's late write loses
/// updates; fenced, A is refused. (The WAIT mitigation: the app test
/// `faults::redis_failover_mitigation_waits_for_the_replica`, and the full run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_failover_loses_the_lock_unless_fenced() {
    let mut lab = lab().await;
    let cat = lab.catalogue.clone();
    let unfenced = run(
        &mut lab,
        &spec(&cat, Scenario::RedisFailover, "redis-lock", Some(false)),
    )
    .await;
    assert_eq!(unfenced.verdict, CellVerdict::Erased);
    let fenced = run(
        &mut lab,
        &spec(&cat, Scenario::RedisFailover, "redis-lock", Some(true)),
    )
    .await;
    assert_eq!(fenced.verdict, CellVerdict::Refused);
    assert_eq!((fenced.lost_updates, fenced.beyond_stock), (0, 0));
    lab.stop().await;
}

/// Scenario 15: `redis-stock` on a Redis Cluster of the lab's own. The master selling
/// the product dies while its replica's link is held back (A's persister held before
/// its COMMIT): the promoted replica lacks the last acknowledged sales, and they are
/// missing from the ledger, counted. With `WAIT` for one replica no sale is
/// acknowledged by the master alone: nothing acknowledged is missing. The product's
/// slot moved to another master under load: nothing lost or sold twice. (The lock on a
/// cluster: `locks/tests/redis_cluster.rs`, and the full run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_failover_loses_acknowledged_sales_unless_they_wait() {
    let mut lab = lab().await;
    let cat = lab.catalogue.clone();
    let failover = spec(&cat, Scenario::RedisClusterFailover, "redis-stock", None);
    let missing = lab.run_cell(&failover).await.expect("the cell runs");
    println!(
        "redis-cluster-failover: {} of {} acknowledged sales missing: {}",
        missing.missing_acknowledged, missing.succeeded, missing.why
    );
    assert!(missing.as_expected, "{missing:?}");
    assert_eq!(missing.verdict, CellVerdict::Missing, "{missing:?}");
    assert!(missing.missing_acknowledged > 0, "{missing:?}");
    assert_eq!(
        (
            missing.lost_updates,
            missing.double_deducted,
            missing.beyond_stock
        ),
        (0, 0, 0)
    );
    let wait = spec(
        &cat,
        Scenario::RedisClusterFailoverWait,
        "redis-stock",
        None,
    );
    let kept = run(&mut lab, &wait).await;
    assert_eq!((kept.lost_updates, kept.double_deducted), (0, 0));
    let reshard = spec(&cat, Scenario::RedisClusterReshard, "redis-stock", None);
    let moved = run(&mut lab, &reshard).await;
    assert_eq!((moved.lost_updates, moved.double_deducted), (0, 0));
    lab.stop().await;
}

/// Scenario 12: Kleppmann's objection to RedLock, for real. A holds a bare majority
/// (its links to two nodes cut); one node of that majority has its wall clock jumped
/// 30 s forward, so A's key there expires; B gets a second majority. Unfenced, A's
/// late write loses updates; fenced by owner tag, A is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_clock_jump_lets_a_second_majority_in() {
    let mut lab = lab().await;
    let cat = lab.catalogue.clone();
    let unfenced = run(
        &mut lab,
        &spec(&cat, Scenario::RedlockClockJump, "redlock", Some(false)),
    )
    .await;
    assert_eq!(unfenced.verdict, CellVerdict::Erased);
    let fenced = run(
        &mut lab,
        &spec(&cat, Scenario::RedlockClockJump, "redlock", Some(true)),
    )
    .await;
    assert_eq!(fenced.verdict, CellVerdict::Refused);
    assert_eq!((fenced.lost_updates, fenced.beyond_stock), (0, 0));
    lab.stop().await;
}

/// Scenario 13: read/write splitting under replication lag (the replica's SQL thread
/// stopped). `optimistic` reading from the replica loses nothing but stops selling
/// (its compare-and-set refuses every stale version), unlike reading from the
/// primary; `redis-lock` reading from the replica loses updates, fenced or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_lag_stalls_optimistic_and_breaks_locks() {
    let mut lab = lab().await;
    let cat = lab.catalogue.clone();
    let optimistic = run(
        &mut lab,
        &spec(&cat, Scenario::ReplicaLag, "optimistic", None),
    )
    .await;
    assert_eq!(optimistic.lost_updates, 0);
    let control = run(
        &mut lab,
        &spec(&cat, Scenario::ReplicaLagPrimaryReads, "optimistic", None),
    )
    .await;
    assert!(optimistic.busy > control.busy, "{optimistic:?} {control:?}");
    for fencing in [false, true] {
        let locked = run(
            &mut lab,
            &spec(&cat, Scenario::ReplicaLag, "redis-lock", Some(fencing)),
        )
        .await;
        assert_eq!(locked.verdict, CellVerdict::Erased);
    }
    lab.stop().await;
}
