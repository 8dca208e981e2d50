//! The ZooKeeper leader killed: scenario 6, on ZooKeeper.
//!
//! The leader of a three-node ensemble is killed, and restarted after the freeze. The
//! ensemble elects a new leader and sessions move to the survivors: a gap without a
//! sale, nothing lost.

use crate::chaos::{Cell, Lab, Load, Window};
use anyhow::Context;
use std::time::Duration;

impl Lab {
    /// Scenario 6 (ZooKeeper leader killed): the ensemble's leader killed, and
    /// restarted after `freeze`.
    pub(in crate::chaos) async fn inject_zk_leader_killed(
        &mut self,
        load: &Load,
        freeze: Duration,
    ) -> anyhow::Result<Window> {
        let zk = self
            .stack
            .get_mut::<testbed::ZooKeeper>()
            .context("no ZooKeeper")?;
        let leader = zk
            .nodes()
            .iter()
            .position(|n| n.mode().as_deref() == Some("leader"))
            .context("no ZooKeeper leader (the scenario needs an ensemble)")?;
        zk.nodes_mut()[leader].process().kill();
        let fault = load.now();
        tokio::time::sleep(freeze).await;
        zk.nodes_mut()[leader].restart()?;
        Ok(Window::new(fault, load.now()))
    }
}

/// Scenario 6, the ZooKeeper leader killed, whatever the verdict: a new leader elected.
pub(in crate::chaos) fn why_zk_leader_killed(c: &Cell) -> String {
    format!(
        "The ensemble elected a new leader; sessions moved to the survivors. Longest gap without a sale {:.0} ms, nothing lost.",
        c.longest_gap_ms
    )
}
