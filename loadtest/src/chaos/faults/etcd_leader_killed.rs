//! The etcd leader killed: scenario 6, on etcd.
//!
//! The leader of a three-member cluster is killed, and restarted after the freeze. A
//! new leader is elected and leases carry over, so no second holder gets in: a gap
//! without a sale, nothing lost; a holder whose keep-alives failed past its lease is
//! refused.

use crate::chaos::{Cell, Lab, Load, Window};
use anyhow::Context;
use std::time::Duration;

impl Lab {
    /// Scenario 6 (etcd leader killed): the cluster's leader killed, and restarted
    /// after `freeze`.
    pub(in crate::chaos) async fn inject_etcd_leader_killed(
        &mut self,
        load: &Load,
        freeze: Duration,
    ) -> anyhow::Result<Window> {
        let etcd = self.stack.get_mut::<testbed::Etcd>().context("no etcd")?;
        let leader = etcd
            .nodes()
            .iter()
            .position(|n| n.is_leader() == Some(true))
            .context("no etcd leader (the scenario needs a cluster)")?;
        etcd.nodes_mut()[leader].process().kill();
        let fault = load.now();
        tokio::time::sleep(freeze).await;
        etcd.nodes_mut()[leader].restart()?;
        Ok(Window::new(fault, load.now()))
    }
}

/// Scenario 6, the etcd leader killed, whatever the verdict: a new leader elected,
/// leases carried over.
pub(in crate::chaos) fn why_etcd_leader_killed(c: &Cell) -> String {
    format!(
        "The cluster elected a new leader; leases and revisions carried over (etcd extends leases by the election time), so no second holder got in. Longest gap without a sale {:.0} ms (the election, then the lease of a holder cut off by it), nothing lost; {} holder(s) whose keep-alives failed past their lease were refused (lock_lost).",
        c.longest_gap_ms, c.refused
    )
}
