//! The lock's scope wrong (scenario 10): taken inside the transaction, released before COMMIT.
//!
//! A's request is held where the mistake bites (after its read, or before its COMMIT)
//! while B's buyers go ahead; one injection for both mistakes. Their reads are older
//! than A's COMMIT, and their writes erase sales: lock first, then BEGIN; COMMIT first,
//! then release.

use crate::chaos::{Cell, CellSpec, CellVerdict, Lab, Load, MISTAKE_HOLD, Scenario, Window};
use crate::claims::source;

impl Lab {
    /// Scenario 10, the mistakes of the lock's scope (lock taken inside the
    /// transaction, lock released before COMMIT): A's request is held where the
    /// mistake bites (after its read, or before its COMMIT) for [`MISTAKE_HOLD`].
    pub(in crate::chaos) async fn inject_mistake_lock_scope(
        &self,
        spec: &CellSpec,
        load: &Load,
    ) -> anyhow::Result<Window> {
        // A holds the lock (or, released, its uncommitted write) for a while
        // B's buyers go ahead: their reads are older than A's COMMIT.
        let failpoint = if spec.scenario == Scenario::MistakeLockInsideTransaction {
            "after_read"
        } else {
            "before_commit"
        };
        self.pause_a_at(failpoint).await?;
        let fault = load.now();
        tokio::time::sleep(MISTAKE_HOLD).await;
        self.release_a(failpoint).await?;
        Ok(Window::new(fault, load.now()))
    }
}

/// Scenario 10, lock taken inside the transaction: the stale snapshots that erased sales.
pub(in crate::chaos) fn why_mistake_lock_inside_transaction(c: &Cell) -> Option<String> {
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
pub(in crate::chaos) fn why_mistake_release_before_commit(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Erased => Some(format!(
            "A released its lock before its COMMIT: B's buyer took the lock and read the stock without A's write, waited on A's row lock, and wrote over A's sale once A committed: {} sales erased. COMMIT first, then release.",
            c.lost_updates
        )),
        _ => None,
    }
}

/// The claim of the write-ups a cell of the lock taken inside the transaction speaks to.
pub(in crate::chaos) fn claim_mistake_lock_inside_transaction(
    c: &Cell,
) -> Option<(&'static str, &'static str, bool)> {
    Some((
        "A lock taken inside the transaction reads a stale snapshot: lost updates",
        source::OVERSELL,
        c.lost_updates > 0,
    ))
}

/// The claim of the write-ups a cell of the lock released before COMMIT speaks to.
pub(in crate::chaos) fn claim_mistake_release_before_commit(
    c: &Cell,
) -> Option<(&'static str, &'static str, bool)> {
    Some((
        "A lock released before COMMIT lets the next holder read old stock: lost updates",
        source::OVERSELL,
        c.lost_updates > 0,
    ))
}
