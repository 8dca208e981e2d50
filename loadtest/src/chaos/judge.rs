//! The judge: a cell's verdict from the ledger and the samples, and why.

use super::*;

pub(super) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The cell's numbers, verdict and sentence.
pub(super) fn judge(
    spec: &CellSpec,
    samples: &[Sample],
    window: &Window,
    verdict: &verify::Verdict,
    retried: u64,
    duplicates: u64,
    timing: &Timing,
) -> Cell {
    let live: Vec<&Sample> = samples.iter().filter(|s| !s.retried).collect();
    let count = |outcome: Outcome| live.iter().filter(|s| s.outcome == outcome).count() as u64;
    let succeeded = count(Outcome::Sold);
    let sold_out = count(Outcome::SoldOut);
    let refused = count(Outcome::lock_lost());
    let busy = count(Outcome::busy());
    let requests = live.len() as u64;
    let failed = requests - succeeded - sold_out - refused - busy;
    // The timeline of sales, as the buyers saw them (retries after the run excluded).
    let sales: Vec<&Sample> = live
        .iter()
        .copied()
        .filter(|s| s.outcome == Outcome::Sold)
        .collect();
    let attempts_per_sale = if sales.is_empty() {
        0.0
    } else {
        sales.iter().map(|s| s.attempts).sum::<u64>() as f64 / sales.len() as f64
    };
    let end = live.last().map_or(Duration::ZERO, |s| s.at);
    let longest_gap = sales
        .windows(2)
        .map(|w| w[1].at.saturating_sub(w[0].at))
        .chain(sales.last().map(|last| end.saturating_sub(last.at)))
        .max()
        .unwrap_or(end);
    // A request already in flight when the fault came may finish under a lock taken
    // before it: the fault's effect is on the requests sent after it.
    let blocked = sales
        .iter()
        .find(|s| s.sent >= window.fault)
        .map(|s| ms(s.at - window.fault));
    let recovery = sales
        .iter()
        .find(|s| s.at > window.healed)
        .map(|s| ms(s.at - window.healed));
    let during_fault = sales
        .iter()
        .any(|s| s.sent >= window.fault && s.at < window.healed);
    let (lost, double) = if verdict.lost_updates >= 0 {
        (verdict.lost_updates, 0)
    } else {
        (0, -verdict.lost_updates)
    };
    let fault_ms = ms(window.healed - window.fault);
    // The ledger short of sales (answered sold, or taken from the stock) wins over the
    // stock row short of them: a buyer was told "sold" and nothing records it.
    let cell_verdict = if verdict.missing_acknowledged > 0 || double > 0 {
        CellVerdict::Missing
    } else if lost > 0 || verdict.beyond_stock > 0 {
        CellVerdict::Erased
    } else if fault_ms > 0.0 && !during_fault {
        CellVerdict::Unavailable
    } else if refused > 0 {
        CellVerdict::Refused
    } else {
        CellVerdict::Safe
    };
    let mut cell = Cell {
        scenario: spec.scenario,
        scenario_number: spec.scenario.number(),
        strategy: spec.strategy.to_string(),
        fencing: spec.fencing,
        requests,
        succeeded,
        sold_out,
        refused,
        busy,
        failed,
        retried_unknown: retried,
        retried_duplicates: duplicates,
        sold: verdict.sold,
        attempts_per_sale,
        lost_updates: lost,
        beyond_stock: verdict.beyond_stock,
        double_deducted: double,
        missing_acknowledged: verdict.missing_acknowledged,
        fault_ms,
        blocked_ms: blocked,
        longest_gap_ms: ms(longest_gap),
        recovery_ms: recovery,
        verdict: cell_verdict,
        expected: spec.expect.to_vec(),
        expected_history: CellVerdict::expected_history(&spec.expect, cell_verdict),
        as_expected: false,
        why: String::new(),
        history: None,
        traits: spec.traits.clone(),
    };
    cell.as_expected = cell.judged_as_expected();
    cell.why = why(&cell, timing);
    cell
}

/// `fenced`, `unfenced`, or empty for a strategy with no fencing switch.
pub fn fencing_label(fencing: Option<bool>) -> &'static str {
    match fencing {
        Some(true) => "fenced",
        Some(false) => "unfenced",
        None => "",
    }
}

/// `name (fenced)`, `name`: a cell's strategy and fencing mode.
pub fn cell_name(strategy: &str, fencing: Option<bool>) -> String {
    match fencing_label(fencing) {
        "" => strategy.to_string(),
        label => format!("{strategy} ({label})"),
    }
}

/// Whole milliseconds, or `-` when there are none (no sale after the fault).
pub fn fmt_opt_ms(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.0}"))
}

pub(super) fn fmt_ms(v: Option<f64>) -> String {
    v.map_or("never (within the run)".to_string(), |v| {
        format!("{v:.0} ms")
    })
}

/// One sentence on why a cell came out as it did, from its own numbers.
///
/// A deduction applied twice is said first, whatever the scenario; then the
/// scenario's own sentence for the verdict, where it has one. Acknowledged sales
/// missing from the ledger come before the sentences of the scenarios listed after
/// that arm; a cell its scenario does not explain gets [`why_otherwise`].
pub(super) fn why(c: &Cell, timing: &Timing) -> String {
    if c.verdict == CellVerdict::Missing && c.double_deducted > 0 {
        return why_double_deducted(c);
    }
    let said = match c.scenario {
        Scenario::RedisKilledEverySec
        | Scenario::RedisKilledAlways
        | Scenario::RedisKilledNoPersistence => Some(faults::redis_killed::why_redis_killed(c)),
        Scenario::MistakeLockInsideTransaction => {
            faults::mistake_lock_scope::why_mistake_lock_inside_transaction(c)
        }
        Scenario::MistakeReleaseBeforeCommit => {
            faults::mistake_lock_scope::why_mistake_release_before_commit(c)
        }
        Scenario::MistakeSetnxThenExpire => {
            faults::mistake_holder_killed::why_mistake_setnx_then_expire(c)
        }
        Scenario::MistakeGetThenDel => faults::mistake_get_then_del::why_mistake_get_then_del(c),
        Scenario::MistakePersistentNode => {
            faults::mistake_holder_killed::why_mistake_persistent_node(c)
        }
        Scenario::RedisFailover => faults::redis_failover::why_redis_failover(c),
        Scenario::RedisFailoverWait => faults::redis_failover::why_redis_failover_wait(c),
        Scenario::RedisClusterFailover => {
            faults::redis_cluster_failover::why_redis_cluster_failover(c)
        }
        Scenario::RedisClusterFailoverWait => {
            faults::redis_cluster_failover::why_redis_cluster_failover_wait(c)
        }
        Scenario::RedisClusterReshard => {
            faults::redis_cluster_reshard::why_redis_cluster_reshard(c)
        }
        Scenario::RedlockClockJump => faults::redlock_clock_jump::why_redlock_clock_jump(c),
        Scenario::ReplicaLag | Scenario::ReplicaLagPrimaryReads => {
            faults::replica_lag::why_replica_lag(c)
        }
        Scenario::MistakeNoGuard => faults::mistake_no_guard::why_mistake_no_guard(c),
        // Acknowledged sales missing from the ledger: said before what the scenarios
        // below would say.
        _ if c.verdict == CellVerdict::Missing => None,
        Scenario::LockDelayShortPause => {
            faults::pause_past_lease::why_lock_delay_short_pause(c, timing)
        }
        Scenario::LockDelayLongPause => {
            faults::pause_past_lease::why_lock_delay_long_pause(c, timing)
        }
        Scenario::PausePastLease => faults::pause_past_lease::why_pause_past_lease(c, timing),
        Scenario::FenceAlone => faults::pause_past_lease::why_fence_alone(c),
        Scenario::HolderKilled => Some(faults::holder_killed::why_holder_killed(c, timing)),
        Scenario::RedisRestart => faults::redis_restart::why_redis_restart(c),
        Scenario::RedlockMinorityPaused => {
            Some(faults::redlock_paused::why_redlock_minority_paused(c))
        }
        Scenario::RedlockMajorityPaused => faults::redlock_paused::why_redlock_majority_paused(c),
        Scenario::ZkLeaderKilled => Some(faults::zk_leader_killed::why_zk_leader_killed(c)),
        Scenario::EtcdLeaderKilled => Some(faults::etcd_leader_killed::why_etcd_leader_killed(c)),
        Scenario::LockPartition => faults::lock_partition::why_lock_partition(c),
        Scenario::AmbiguousCommit => Some(faults::ambiguous_commit::why_ambiguous_commit(c)),
    };
    said.unwrap_or_else(|| why_otherwise(c))
}

/// Any scenario, units gone from the stock with no ledger row: a deduction applied twice.
fn why_double_deducted(c: &Cell) -> String {
    format!(
        "{} units left the stock with no ledger row: a deduction was applied twice.",
        c.double_deducted
    )
}

/// A cell its scenario does not explain: its acknowledged sales missing from the
/// ledger, or else its numbers.
fn why_otherwise(c: &Cell) -> String {
    use CellVerdict::*;
    let blocked = fmt_ms(c.blocked_ms);
    match c.verdict {
        Missing => format!(
            "{} acknowledged sales have no ledger row.",
            c.missing_acknowledged
        ),
        v => format!(
            "{}: {} sold, {} refused, {} busy, {} failed; first sale {blocked} after the fault.",
            v.id(),
            c.succeeded,
            c.refused,
            c.busy,
            c.failed
        ),
    }
}
