//! The judge: a cell's verdict from the ledger and the samples, and why.

use super::*;
use stock_wire::Trait;

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
        | Scenario::RedisKilledNoPersistence => Some(why_redis_killed(c)),
        Scenario::MistakeLockInsideTransaction => why_mistake_lock_inside_transaction(c),
        Scenario::MistakeReleaseBeforeCommit => why_mistake_release_before_commit(c),
        Scenario::MistakeSetnxThenExpire => why_mistake_setnx_then_expire(c),
        Scenario::MistakeGetThenDel => why_mistake_get_then_del(c),
        Scenario::MistakePersistentNode => why_mistake_persistent_node(c),
        Scenario::RedisFailover => why_redis_failover(c),
        Scenario::RedisFailoverWait => why_redis_failover_wait(c),
        Scenario::RedisClusterFailover => why_redis_cluster_failover(c),
        Scenario::RedisClusterFailoverWait => why_redis_cluster_failover_wait(c),
        Scenario::RedisClusterReshard => why_redis_cluster_reshard(c),
        Scenario::RedlockClockJump => why_redlock_clock_jump(c),
        Scenario::ReplicaLag | Scenario::ReplicaLagPrimaryReads => why_replica_lag(c),
        Scenario::MistakeNoGuard => why_mistake_no_guard(c),
        // Acknowledged sales missing from the ledger: said before what the scenarios
        // below would say.
        _ if c.verdict == CellVerdict::Missing => None,
        Scenario::LockDelayShortPause => why_lock_delay_short_pause(c, timing),
        Scenario::LockDelayLongPause => why_lock_delay_long_pause(c, timing),
        Scenario::PausePastLease => why_pause_past_lease(c, timing),
        Scenario::FenceAlone => why_fence_alone(c),
        Scenario::HolderKilled => Some(why_holder_killed(c, timing)),
        Scenario::RedisRestart => why_redis_restart(c),
        Scenario::RedlockMinorityPaused => Some(why_redlock_minority_paused(c)),
        Scenario::RedlockMajorityPaused => why_redlock_majority_paused(c),
        Scenario::ZkLeaderKilled => Some(why_zk_leader_killed(c)),
        Scenario::EtcdLeaderKilled => Some(why_etcd_leader_killed(c)),
        Scenario::LockPartition => why_lock_partition(c),
        Scenario::AmbiguousCommit => Some(why_ambiguous_commit(c)),
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

/// Scenario 9 (Redis killed, however persisted), whatever the verdict: the
/// acknowledged sales Redis lost.
fn why_redis_killed(c: &Cell) -> String {
    format!(
        "{} of {} acknowledged sales are missing from the ledger after the restart (verdict: {}): what Redis acknowledged and had not kept (not yet in its file, or no file at all) before the persisters recorded it. The counters were reconciled from the database; no sale for {:.0} ms.",
        c.missing_acknowledged,
        c.succeeded,
        c.verdict.id(),
        c.longest_gap_ms
    )
}

/// Scenario 10, lock taken inside the transaction: the stale snapshots that erased sales.
fn why_mistake_lock_inside_transaction(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Erased => Some(format!(
            "B's buyers began their transactions and read while A held the lock; REPEATABLE READ answered their reads under the lock from those snapshots, older than A's COMMIT, and their writes erased {} sales. Lock first, then BEGIN.",
            c.lost_updates
        )),
        _ => None,
    }
}

/// Scenario 10, lock released before COMMIT: B's buyer wrote over A's sale.
fn why_mistake_release_before_commit(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Erased => Some(format!(
            "A released its lock before its COMMIT: B's buyer took the lock and read the stock without A's write, waited on A's row lock, and wrote over A's sale once A committed: {} sales erased. COMMIT first, then release.",
            c.lost_updates
        )),
        _ => None,
    }
}

/// Scenario 10, SETNX then EXPIRE: a lock with no TTL that nobody got again.
fn why_mistake_setnx_then_expire(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Unavailable => Some(format!(
            "A died between SETNX and EXPIRE: the key has no TTL, so nobody got the lock again ({} busy, no sale for the {:.0} ms after the kill, nor after). SET key value NX PX is one command.",
            c.busy, c.fault_ms
        )),
        _ => None,
    }
}

/// Scenario 10, unlock by GET then DEL: A's DEL deleted the lock of B's buyer.
fn why_mistake_get_then_del(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Erased => Some(format!(
            "A's GET saw its own lock; its lease ran out before its DEL, which then deleted the lock of B's buyer; another buyer took it while the first still worked, and {} sales were erased. Compare and delete in one script.",
            c.lost_updates
        )),
        _ => None,
    }
}

/// Scenario 10, a ZooKeeper lock on a PERSISTENT node: a node that outlived its holder.
fn why_mistake_persistent_node(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Unavailable => Some(format!(
            "A died holding a PERSISTENT node: its session ended, the node stayed, and nobody got the lock again ({} busy, no sale for the {:.0} ms after the kill, nor after). An ephemeral node dies with its session.",
            c.busy, c.fault_ms
        )),
        _ => None,
    }
}

/// Scenario 11 (Redis failover): two holders of one lock, unfenced or fenced.
fn why_redis_failover(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    let blocked = fmt_ms(c.blocked_ms);
    match c.verdict {
        Erased => Some(format!(
            "A held a lock only the primary had (replication held back); Sentinel promoted the replica, B's buyers followed and took the same lock ({blocked} after the kill): two holders, and A's stale write erased {} sales. Asynchronous replication loses locks.",
            c.lost_updates
        )),
        Refused => Some(format!(
            "The same two holders, fenced: B's tokens came from the new primary's clock, newer than A's claim, so A's write was refused ({} x lock_lost) and nothing was lost. B sold {blocked} after the kill.",
            c.refused
        )),
        _ => None,
    }
}

/// Scenario 11 with WAIT: no lock granted on one server only, at availability's cost.
fn why_redis_failover_wait(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Unavailable => Some(format!(
            "With WAIT for one replica no lock was granted while replication was held back, nor after the failover until the old primary, restarted, had rejoined as the new one's replica ({} answered backend_unavailable; sales back {} after the restart): no lock existed on one server only, so no second holder. Consistency paid for with availability.",
            c.failed,
            fmt_ms(c.recovery_ms)
        )),
        _ => None,
    }
}

/// Scenario 15 (Redis Cluster failover): the sales or the lock only the master had.
fn why_redis_cluster_failover(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    let blocked = fmt_ms(c.blocked_ms);
    match c.verdict {
        Missing if c.has(Trait::RecordsLater) => Some(format!(
            "The master selling the product acknowledged sales its replica never got (replication held back, the persisters held behind a COMMIT); the master died, the cluster promoted the replica without them, and {} of {} acknowledged sales are missing from the ledger. Asynchronous replication loses what was acknowledged and not yet copied.",
            c.missing_acknowledged, c.succeeded
        )),
        Erased => Some(format!(
            "A held a lock only its master had (replication held back); the master died, the cluster promoted the replica, B's buyers took the same lock ({blocked} after the kill): two holders, and A's stale write erased {} sales. A cluster's failover loses locks as Sentinel's does.",
            c.lost_updates
        )),
        Refused => Some(format!(
            "The same two holders on the cluster, fenced: B's tokens came from the promoted replica's clock, newer than A's claim, so A's write was refused ({} x lock_lost) and nothing was lost. B sold {blocked} after the kill.",
            c.refused
        )),
        _ => None,
    }
}

/// Scenario 15 with WAIT: nothing granted or acknowledged on the master alone.
fn why_redis_cluster_failover_wait(c: &Cell) -> Option<String> {
    match c.verdict {
        v if !v.is_loss() => Some(format!(
            "With WAIT for one replica nothing was granted or acknowledged on the master alone: while replication was held back and until the old master rejoined as the new one's replica, locks were refused and sales answered outcome_unknown ({} failed, {} unknown outcomes retried after the cell, {} of them already sold and answered as duplicates); no acknowledged sale or lock was lost. Sales back {} after the heal.",
            c.failed,
            c.retried_unknown,
            c.retried_duplicates,
            fmt_ms(c.recovery_ms)
        )),
        _ => None,
    }
}

/// Scenario 15 (Redis Cluster reshard): sales through a moving slot, nothing lost.
fn why_redis_cluster_reshard(c: &Cell) -> Option<String> {
    match c.verdict {
        v if !v.is_loss() => Some(format!(
            "The slot moved to another master under load (MIGRATE in batches, clients redirected by ASK and MOVED, scripts over a half-moved slot retried on TRYAGAIN): {} sold, nothing lost or sold twice, {} answered 503 (retryable) while the slot moved{}; longest gap without a sale {:.0} ms (a script over keys on both sides of the move waits for the slot).",
            c.sold,
            c.failed,
            if c.refused > 0 {
                format!(
                    ", {} refused (lock_lost: a holder whose renewal met the half-moved slot was told its lock was lost)",
                    c.refused
                )
            } else {
                String::new()
            },
            c.longest_gap_ms
        )),
        _ => None,
    }
}

/// Scenario 12 (RedLock clock jump): two majorities at once, unfenced or fenced.
fn why_redlock_clock_jump(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    let blocked = fmt_ms(c.blocked_ms);
    match c.verdict {
        Erased => Some(format!(
            "A held nodes 1-3, a bare majority; node 3's clock jumped 30 s and expired A's key there; B's buyers got nodes 3, 4, 5 ({blocked} after the jump): two majorities at once, and A's stale write erased {} sales. RedLock's safety rests on the clocks.",
            c.lost_updates
        )),
        Refused => Some(format!(
            "The same two majorities; B claimed the product with its owner tag, so A's write (its tag no longer the last claim) was refused ({} x lock_lost): the resource's check, not the quorum, kept the stock right.",
            c.refused
        )),
        _ => None,
    }
}

/// Scenario 13 (replica lag, reads from the replica or from the primary): a
/// compare-and-set that stops selling, or a lock over a stale read.
fn why_replica_lag(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match (c.scenario, c.verdict) {
        (_, v) if c.has(Trait::CompareAndSet) => {
            if c.scenario == Scenario::ReplicaLag {
                Some(format!(
                    "The version came from a replica that applied nothing for {:.0} ms: each compare-and-set after the first sale of the lag found a newer version on the primary and failed, so {} requests ran out of tries (503 busy) and a sale took {:.2} transactions on average; {} sales were lost ({}). Behind read/write splitting a compare-and-set stays safe; 'unreliable' means it stops selling.",
                    c.fault_ms,
                    c.busy,
                    c.attempts_per_sale,
                    c.lost_updates,
                    v.id()
                ))
            } else {
                Some(format!(
                    "Reading from the primary, the replica's lag changes nothing: {} sold, {:.2} transactions per sale, {} busy.",
                    c.succeeded, c.attempts_per_sale, c.busy
                ))
            }
        }
        (Scenario::ReplicaLag, Erased) => Some(format!(
            "Under a correct lock, every holder read the stock from the lagging replica (frozen for {:.0} ms) and wrote that stale quantity minus one: {} sales erased.{}",
            c.fault_ms,
            c.lost_updates,
            if c.fencing == Some(true) {
                " Fencing did not help: each holder's token was the newest, only its data was old. A lock is only as good as the read under it."
            } else {
                ""
            }
        )),
        _ => None,
    }
}

/// Scenario 10, atomic SQL without the guard: the CHECK constraint as the last net.
fn why_mistake_no_guard(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Safe => Some(format!(
            "Without `quantity >= ?` the UPDATE tried to go below zero once the {} units were sold; the CHECK constraint refused it (error 4025) for {} buyers, so nothing was oversold: the constraint is the last net, and the buyers got its error instead of a clean 0-rows refusal.",
            c.sold, c.sold_out
        )),
        _ => None,
    }
}

/// Scenario 14, the short pause: A frozen past its lease, within lease + lock-delay.
fn why_lock_delay_short_pause(c: &Cell, timing: &Timing) -> Option<String> {
    use CellVerdict::*;
    let blocked = fmt_ms(c.blocked_ms);
    let lease = timing.lease_ms;
    match c.verdict {
        Unavailable | Safe => Some(format!(
            "No update lost without fencing: A was frozen past its lease ({lease} ms) but within lease + lock-delay ({} ms), and the lock server kept the lock for it, so no other holder got in; A woke and wrote under a lock that was still its own. The price is availability: the product sold nothing while the vanished holder's lock sat out its delay (first sale {blocked} after the freeze). Lock-delay narrows the window; it does not close it (the next cell).",
            lease + timing.lock_delay_ms()
        )),
        _ => None,
    }
}

/// Scenario 14, the long pause: A frozen past lease + lock-delay.
fn why_lock_delay_long_pause(c: &Cell, timing: &Timing) -> Option<String> {
    use CellVerdict::*;
    let lease = timing.lease_ms;
    match c.verdict {
        Erased => Some(format!(
            "The same lock-delay, a longer pause: once lease + delay ({} ms) ran out B's buyers took the lock and sold; A woke and wrote its stale quantity: {} sale(s) lost. A pause can always outlast a delay (GC, SIGSTOP, a VM migration): lock-delay narrows the window, only fencing closes it.",
            lease + timing.lock_delay_ms(),
            c.lost_updates
        )),
        _ => None,
    }
}

/// Scenario 1 (pause past lease): what the frozen holder's write did, by how the
/// strategy holds (a lock it trusts, a fence, a row lock, or nothing).
fn why_pause_past_lease(c: &Cell, timing: &Timing) -> Option<String> {
    use CellVerdict::*;
    let blocked = fmt_ms(c.blocked_ms);
    let lease = timing.lease_ms;
    let session = timing.zk_session_ms;
    let holder_survives = if c.has(Trait::SessionLock) {
        format!("its session ({session} ms)")
    } else {
        format!("its lease ({lease} ms)")
    };
    match c.verdict {
        Erased if c.has(Trait::LeaseLock) || c.has(Trait::SessionLock) => Some(format!(
            "Unfenced, the lock is trusted: after {holder_survives} ran out B's buyers took the lock and sold; the frozen holder woke and wrote the quantity it had computed before, while B held the lock: {} sale(s) vanished from the stock (B's, or its own when B's next write landed on top of it).",
            c.lost_updates
        )),
        Erased => Some(format!(
            "No lock across instances: B sold while A's request was frozen between read and write, and A's stale write erased {} sales.",
            c.lost_updates
        )),
        Refused => Some(format!(
            "B's next holder claimed the product with a newer token after {holder_survives} ran out (first sale {blocked} after the freeze); the frozen holder's write was refused ({} x lock_lost): the fence, not the lock, kept the stock right.",
            c.refused
        )),
        Unavailable => Some(format!(
            "Safe: the frozen request held the row lock, so every other buyer waited for it; no sale for {blocked}, as long as the freeze."
        )),
        Safe => Some(format!(
            "Nothing was held while frozen: B kept selling (first sale {blocked} after the freeze), and nothing was lost. (The frozen request's own answer is not recorded; by the code, its compare-and-set finds the version moved when it wakes, and it goes again.)"
        )),
        _ => None,
    }
}

/// Scenario 2 (fence alone): no lock, no loss, the refusals as the price.
fn why_fence_alone(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Refused => Some(format!(
            "No lock, still no loss: every write is guarded by the newest claim. The price: {} of {} requests were refused (lock_lost) because a newer ticket overtook them, with or without a fault. A lock strategy with fencing is this plus a queue in front.",
            c.refused, c.requests
        )),
        _ => None,
    }
}

/// Scenario 3 (holder killed), whatever the verdict: a dead holder never writes; how
/// long its lock took to come back (or how the persisters took over).
fn why_holder_killed(c: &Cell, timing: &Timing) -> String {
    let blocked = fmt_ms(c.blocked_ms);
    let lease = timing.lease_ms;
    let session = timing.zk_session_ms;
    if c.has(Trait::RecordsLater) {
        format!(
            "Redis kept selling while A's persister was stopped before its COMMIT and then killed: its entries stayed unacknowledged, B's persister claimed them after about a lease ({lease} ms) and recorded each once: {} sold, nothing lost or doubled.",
            c.sold
        )
    } else {
        format!(
            "A dead holder never writes, so nothing can be lost; B's buyers waited {blocked} for the lock to come back ({}).",
            if c.has(Trait::SessionLock) {
                format!("the session timeout, {session} ms")
            } else if c.has(Trait::LeaseLock) {
                format!("the lease, {lease} ms")
            } else {
                "MariaDB rolled back the dead client's transaction when its connection closed"
                    .to_string()
            }
        )
    }
}

/// Scenario 4 (Redis restart): the lock gone while its holder worked.
fn why_redis_restart(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    let blocked = fmt_ms(c.blocked_ms);
    match c.verdict {
        Erased => Some(format!(
            "Redis came back empty: the lock was gone while its holder worked, B took it at once and sold, and the unfenced holder's stale write erased {} sales.",
            c.lost_updates
        )),
        Refused => Some(format!(
            "Redis came back empty, the lock and its last token too; B's next token came from Redis's clock (microseconds), already past every token handed out before, so B sold {blocked} after the restart while the woken holder's old token was refused ({} x lock_lost).",
            c.refused
        )),
        _ => None,
    }
}

/// Scenario 5, 2 of 5 nodes paused, whatever the verdict: a majority still answered.
fn why_redlock_minority_paused(c: &Cell) -> String {
    format!(
        "A majority (3 of 5) still answered: sales went on (longest gap {:.0} ms), nothing lost.",
        c.longest_gap_ms
    )
}

/// Scenario 5, 3 of 5 nodes paused: no majority, no sale.
fn why_redlock_majority_paused(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Unavailable => Some(format!(
            "No majority: every acquisition failed ({} busy or unavailable), nothing was written; sales came back {} after the nodes were continued.",
            c.busy + c.failed,
            fmt_ms(c.recovery_ms)
        )),
        _ => None,
    }
}

/// Scenario 6, the ZooKeeper leader killed, whatever the verdict: a new leader elected.
fn why_zk_leader_killed(c: &Cell) -> String {
    format!(
        "The ensemble elected a new leader; sessions moved to the survivors. Longest gap without a sale {:.0} ms, nothing lost.",
        c.longest_gap_ms
    )
}

/// Scenario 6, the etcd leader killed, whatever the verdict: a new leader elected,
/// leases carried over.
fn why_etcd_leader_killed(c: &Cell) -> String {
    format!(
        "The cluster elected a new leader; leases and revisions carried over (etcd extends leases by the election time), so no second holder got in. Longest gap without a sale {:.0} ms (the election, then the lease of a holder cut off by it), nothing lost; {} holder(s) whose keep-alives failed past their lease were refused (lock_lost).",
        c.longest_gap_ms, c.refused
    )
}

/// Scenario 7 (lock partition): a holder cut off from the lock service, unfenced or fenced.
fn why_lock_partition(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    let blocked = fmt_ms(c.blocked_ms);
    match c.verdict {
        Erased => Some(format!(
            "Cut off from the lock service but not from the database, the unfenced holder could not renew, lost the lock to B, and still wrote its stale value: {} sales erased.",
            c.lost_updates
        )),
        Refused => Some(format!(
            "The partitioned holder lost the lock to B ({blocked} to B's first sale); its write was refused ({} x lock_lost) because B's claim was newer, or because it knew its lock was lost before COMMIT.",
            c.refused
        )),
        _ => None,
    }
}

/// Scenario 8 (ambiguous commit), whatever the verdict: the unknown outcomes settled
/// by their retries.
fn why_ambiguous_commit(c: &Cell) -> String {
    format!(
        "{} requests had an unknown outcome; retried with the same request_id after the restart, {} turned out committed and were answered as duplicates: 0 double deductions. No sale for {:.0} ms.",
        c.retried_unknown, c.retried_duplicates, c.longest_gap_ms
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
