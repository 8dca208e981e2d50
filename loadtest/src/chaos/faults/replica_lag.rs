//! Replica lag: scenario 13, reads from the lagging replica or from the primary.
//!
//! The read replica's SQL thread stops for 3x the lease; one injection for both
//! scenarios. A compare-and-set reading its version from the replica stays safe but
//! stops selling; a lock over a stale read loses updates, fenced or not. Reading from
//! the primary is the control.

use crate::chaos::{Cell, CellVerdict, ChaosReport, Lab, Load, Scenario, Window};
use crate::claims::source;
use anyhow::Context;
use std::time::Duration;
use stock_wire::Trait;

impl Lab {
    /// Scenario 13 (replica lag, reads from the replica or from the primary): the read
    /// replica's SQL thread stopped for 3x the lease.
    pub(in crate::chaos) async fn inject_replica_lag(&self, load: &Load) -> anyhow::Result<Window> {
        let replica = self.replica.as_ref().context("no replica")?;
        tokio::task::block_in_place(|| replica.pause())?;
        let fault = load.now();
        tokio::time::sleep(Duration::from_millis(3 * self.timing.lease_ms)).await;
        let healed = load.now();
        let replica = self.replica.as_ref().context("no replica")?;
        tokio::task::block_in_place(|| replica.resume())?;
        Ok(Window::new(fault, healed))
    }
}

/// Scenario 13 (replica lag, reads from the replica or from the primary): a
/// compare-and-set that stops selling, or a lock over a stale read.
pub(in crate::chaos) fn why_replica_lag(c: &Cell) -> Option<String> {
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

/// The claim of the write-ups a replica-lag cell (reads from the replica) speaks to,
/// if any: a compare-and-set's, judged against its cell reading from the primary in
/// the same run; a fenced lock's.
pub(in crate::chaos) fn claim_replica_lag(
    report: &ChaosReport,
    c: &Cell,
) -> Option<(&'static str, &'static str, bool)> {
    if report.strategies.has(&c.strategy, Trait::CompareAndSet) {
        let control = report
            .cells
            .iter()
            .find(|o| o.scenario == Scenario::ReplicaLagPrimaryReads && o.strategy == c.strategy);
        Some((
            "Optimistic locking is unreliable behind read/write splitting (replication lag)",
            source::OVERSELL,
            c.lost_updates == 0
                && control
                    .is_none_or(|o| c.busy > o.busy || c.attempts_per_sale > o.attempts_per_sale),
        ))
    } else if c.fencing == Some(true) {
        Some((
            "A lock is only as good as the read under it: reading from a lagging replica loses updates even under a fenced lock",
            source::OVERSELL,
            c.lost_updates > 0,
        ))
    } else {
        None
    }
}
