//! A RedLock node's clock jumps: scenario 12.
//!
//! A holds a bare majority (nodes 1-3) and the clock of node 3 jumps forward,
//! expiring A's key there; B's buyers take nodes 3, 4 and 5: two majorities at once.
//! Unfenced, A's stale write erases sales; with the resource's own check, it is
//! refused.

use crate::chaos::lab::redis_command;
use crate::chaos::{CLOCK_JUMP_MS, Cell, CellVerdict, JUMPING_NODE, Lab, Load, Window, fmt_ms};
use crate::claims::source;
use anyhow::Context;
use std::time::Duration;
use testbed::proxy::ProxyMode;

impl Lab {
    /// Scenario 12 (RedLock clock jump): A holds a bare majority (nodes 1-3, its links
    /// to 4 and 5 cut), and the clock of node 3 jumps forward [`CLOCK_JUMP_MS`].
    pub(in crate::chaos) async fn inject_redlock_clock_jump(
        &self,
        load: &Load,
        product: i64,
    ) -> anyhow::Result<Window> {
        // A reaches nodes 1-3 only: its locks are exactly a majority.
        for proxy in &self.proxies.proxies(&testbed::redis::KIND)[3..] {
            proxy.set(ProxyMode::Blackhole);
        }
        self.pause_a_holding_a_lock_not_on("nodes 4 and 5", async || {
            self.a_lock_on_nodes_4_and_5(product).await
        })
        .await?;
        let node = &self.stack.redis()[JUMPING_NODE];
        tokio::task::block_in_place(|| node.set_clock_offset(CLOCK_JUMP_MS))?;
        let fault = load.now();
        // B's buyers take nodes 3, 4 and 5: a second majority.
        tokio::time::sleep(Duration::from_millis(self.timing.lease_ms)).await;
        self.release_a("after_read").await?;
        let healed = load.now();
        let node = &self.stack.redis()[JUMPING_NODE];
        tokio::task::block_in_place(|| node.set_clock_offset(0))?;
        for proxy in &self.proxies.proxies(&testbed::redis::KIND)[3..] {
            proxy.set(ProxyMode::Pass);
        }
        Ok(Window::new(fault, healed))
    }

    /// Whether RedLock's nodes 4 and 5 also hold the lock that the paused request of
    /// A holds on node 1 (the same value: the holder id); a stale key of an earlier
    /// holder there does not count.
    async fn a_lock_on_nodes_4_and_5(&self, product: i64) -> anyhow::Result<bool> {
        let key = format!("redlock:stock:{product}");
        let holder = redis_command::<Option<String>>(&self.stack.redis()[0].url(), "GET", &key)
            .await?
            .context("A's lock is not on node 1")?;
        for node in &self.stack.redis()[3..] {
            let there = redis_command::<Option<String>>(&node.url(), "GET", &key).await?;
            if there.as_deref() == Some(holder.as_str()) {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// Scenario 12 (RedLock clock jump): two majorities at once, unfenced or fenced.
pub(in crate::chaos) fn why_redlock_clock_jump(c: &Cell) -> Option<String> {
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

/// The claim of the write-ups a RedLock clock-jump cell speaks to: unfenced, two
/// holders; fenced, the second stopped by the resource.
pub(in crate::chaos) fn claim_redlock_clock_jump(
    c: &Cell,
) -> Option<(&'static str, &'static str, bool)> {
    if c.fencing == Some(false) {
        Some((
            "RedLock fails when a node's clock jumps: two clients hold the lock",
            source::MYSQL_LOCKS,
            c.lost_updates > 0,
        ))
    } else {
        Some((
            "A check made by the resource stops the second RedLock holder",
            source::MYSQL_LOCKS,
            c.verdict == CellVerdict::Refused,
        ))
    }
}
