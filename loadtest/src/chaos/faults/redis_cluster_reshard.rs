//! The Redis Cluster reshard: scenario 15.
//!
//! The slot of the cell's key moves to another master under load (MIGRATE in batches,
//! clients redirected by ASK and MOVED): sales go on through the moving slot, nothing
//! is lost or sold twice, and some requests are answered 503 while it moves.

use crate::chaos::{Cell, CellSpec, Lab, Load, Window};
use anyhow::Context;
use std::time::Duration;

impl Lab {
    /// Scenario 15 (Redis Cluster reshard): the slot of the cell's key moved to another
    /// master under load.
    pub(in crate::chaos) async fn inject_redis_cluster_reshard(
        &self,
        spec: &CellSpec,
        load: &Load,
        product: i64,
    ) -> anyhow::Result<Window> {
        let (master, key) = self.cluster_master(spec, product)?;
        let cluster = self.cluster.as_ref().context("no Redis Cluster")?;
        let slot = cluster.slot_of(&key)?;
        let to = cluster
            .topology()?
            .into_iter()
            .find(|n| n.port != master && n.master_id.is_none() && !n.failing)
            .context("no other master")?
            .port;
        let fault = load.now();
        let moved = tokio::task::block_in_place(|| {
            cluster.move_slot(slot, to, 10, Duration::from_millis(20))
        })?;
        eprintln!(
            "chaos:   slot {slot} moved from port {master} to {to}: {moved} keys in {:.0} ms",
            crate::chaos::judge::ms(load.now() - fault)
        );
        Ok(Window::new(fault, load.now()))
    }
}

/// Scenario 15 (Redis Cluster reshard): sales through a moving slot, nothing lost.
pub(in crate::chaos) fn why_redis_cluster_reshard(c: &Cell) -> Option<String> {
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
