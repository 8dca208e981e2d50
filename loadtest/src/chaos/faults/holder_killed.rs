//! The holder killed: scenario 3.
//!
//! A's request pauses holding its lock (a strategy that records later: its persister,
//! before its COMMIT), and A is killed with SIGKILL and left dead. A dead holder never
//! writes, so nothing is lost; it shows how long each lock takes to come back (a
//! session, a lease, a transaction rolled back), or how the persisters take over.

use crate::chaos::{Cell, CellSpec, Lab, Load, Timing, Window, fmt_ms};
use std::time::Duration;
use stock_wire::Trait;

impl Lab {
    /// Scenario 3 (holder killed): A's request pauses holding its lock (a strategy that
    /// records later: its persister, before its COMMIT), and A is killed with SIGKILL.
    pub(in crate::chaos) async fn inject_holder_killed(
        &mut self,
        spec: &CellSpec,
        load: &Load,
        freeze: Duration,
    ) -> anyhow::Result<Window> {
        // A strategy that records later holds nothing in its requests: its
        // persister is what dies between its writes and its COMMIT.
        let failpoint = if spec.has(Trait::RecordsLater) {
            "before_commit"
        } else {
            "after_read"
        };
        self.pause_a_at(failpoint).await?;
        self.instances[0].process.kill();
        let fault = load.now();
        // Not healed (A stays dead until the next cell): give the lock time
        // to come back before the after-window starts.
        tokio::time::sleep(freeze).await;
        Ok(Window::new(fault, fault))
    }
}

/// Scenario 3 (holder killed), whatever the verdict: a dead holder never writes; how
/// long its lock took to come back (or how the persisters took over).
pub(in crate::chaos) fn why_holder_killed(c: &Cell, timing: &Timing) -> String {
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
            } else if c.has(Trait::LeaseInWholeSeconds) {
                format!(
                    "the lease: {lease} ms asked, which the server keeps in whole seconds and no shorter than its minimum TTL"
                )
            } else if c.has(Trait::LeaseLock) {
                format!("the lease, {lease} ms")
            } else {
                "MariaDB rolled back the dead client's transaction when its connection closed"
                    .to_string()
            }
        )
    }
}
