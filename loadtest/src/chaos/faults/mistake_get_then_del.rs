//! Unlock by GET then DEL (scenario 10).
//!
//! A's request is held before its release until its lease ran out, and its DEL lands
//! while a buyer of B holds the lock: A deletes another holder's lock, a third buyer
//! takes it while the second still works, and sales are erased. Compare and delete in
//! one script.

use crate::chaos::{Cell, CellVerdict, Lab, Load, Window};
use crate::claims::source;
use std::time::Duration;

impl Lab {
    /// Scenario 10, unlock by GET then DEL: A's request is held before its release
    /// until its lease ran out, and its DEL lands while a buyer of B holds the lock.
    pub(in crate::chaos) async fn inject_mistake_get_then_del(
        &self,
        load: &Load,
    ) -> anyhow::Result<Window> {
        self.pause_a_at("before_release").await?;
        let fault = load.now();
        // A's lease runs out; B's buyers take the lock.
        tokio::time::sleep(Duration::from_millis(self.timing.lease_ms * 3 / 2)).await;
        self.pause_at(1, "after_read").await?;
        // A's DEL deletes the lock B's paused buyer holds; another takes it.
        self.release_a("before_release").await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.release_at(1, "after_read").await?;
        Ok(Window::new(fault, load.now()))
    }
}

/// Scenario 10, unlock by GET then DEL: A's DEL deleted the lock of B's buyer.
pub(in crate::chaos) fn why_mistake_get_then_del(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Erased => Some(format!(
            "A's GET saw its own lock; its lease ran out before its DEL, which then deleted the lock of B's buyer; another buyer took it while the first still worked, and {} sales were erased. Compare and delete in one script.",
            c.lost_updates
        )),
        _ => None,
    }
}

/// The claim of the write-ups a cell of unlock by GET then DEL speaks to.
pub(in crate::chaos) fn claim_mistake_get_then_del(
    c: &Cell,
) -> Option<(&'static str, &'static str, bool)> {
    Some((
        "Unlock by GET then DEL deletes another holder's lock",
        source::LOCKS,
        c.lost_updates > 0,
    ))
}
