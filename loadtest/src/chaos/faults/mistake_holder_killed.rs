//! Locks nothing ends (scenario 10): SETNX then EXPIRE, a PERSISTENT ZooKeeper node.
//!
//! A is killed right after taking its lock; one injection for both mistakes. A key
//! with no TTL, or a node that outlives its session, is never released: nobody gets the
//! lock again, and the product sells nothing for the rest of the cell.

use crate::chaos::{Cell, CellVerdict, Lab, Load, Window};
use crate::claims::source;
use std::time::Duration;

impl Lab {
    /// Scenario 10, the mistakes that leave a lock nothing ends (SETNX then EXPIRE, a
    /// ZooKeeper lock on a PERSISTENT node): A is killed right after taking its lock.
    pub(in crate::chaos) async fn inject_mistake_holder_killed(
        &mut self,
        load: &Load,
        freeze: Duration,
    ) -> anyhow::Result<Window> {
        // Killed holding a lock that nothing ends.
        self.pause_a_at("after_lock").await?;
        self.instances[0].process.kill();
        let fault = load.now();
        tokio::time::sleep(freeze).await;
        Ok(Window::new(fault, load.now()))
    }
}

/// Scenario 10, SETNX then EXPIRE: a lock with no TTL that nobody got again.
pub(in crate::chaos) fn why_mistake_setnx_then_expire(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Unavailable => Some(format!(
            "A died between SETNX and EXPIRE: the key has no TTL, so nobody got the lock again ({} busy, no sale for the {:.0} ms after the kill, nor after). SET key value NX PX is one command.",
            c.busy, c.fault_ms
        )),
        _ => None,
    }
}

/// Scenario 10, a ZooKeeper lock on a PERSISTENT node: a node that outlived its holder.
pub(in crate::chaos) fn why_mistake_persistent_node(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Unavailable => Some(format!(
            "A died holding a PERSISTENT node: its session ended, the node stayed, and nobody got the lock again ({} busy, no sale for the {:.0} ms after the kill, nor after). An ephemeral node dies with its session.",
            c.busy, c.fault_ms
        )),
        _ => None,
    }
}

/// The claim of the write-ups a cell of SETNX then EXPIRE speaks to.
pub(in crate::chaos) fn claim_mistake_setnx_then_expire(
    c: &Cell,
) -> Option<(&'static str, &'static str, bool)> {
    Some((
        "SETNX then EXPIRE: a holder that dies between them leaves a lock that never expires",
        source::LOCKS,
        c.verdict == CellVerdict::Unavailable && c.recovery_ms.is_none(),
    ))
}

/// The claim of the write-ups a cell of the PERSISTENT node speaks to.
pub(in crate::chaos) fn claim_mistake_persistent_node(
    c: &Cell,
) -> Option<(&'static str, &'static str, bool)> {
    Some((
        "A ZooKeeper lock on a PERSISTENT node deadlocks when its holder dies",
        source::ZOOKEEPER,
        c.verdict == CellVerdict::Unavailable && c.recovery_ms.is_none(),
    ))
}
