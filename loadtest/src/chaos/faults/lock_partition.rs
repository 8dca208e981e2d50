//! The lock service partitioned from the holder: scenario 7.
//!
//! A's request pauses after its read, and A's connections to the lock servers are
//! blackholed while its database path stays up; the holder is let go while still
//! partitioned, then the partition heals. Unfenced, the holder that could not renew
//! writes its stale value anyway; fenced, its write is refused.

use crate::chaos::{Cell, CellVerdict, Lab, Load, Window, fmt_ms};
use std::time::Duration;
use testbed::proxy::ProxyMode;

impl Lab {
    /// Scenario 7 (lock partition): A's request pauses after its read, and A's
    /// connections to the lock servers are blackholed for `freeze`; the holder is let
    /// go while still partitioned, then the partition heals.
    pub(in crate::chaos) async fn inject_lock_partition(
        &self,
        load: &Load,
        freeze: Duration,
    ) -> anyhow::Result<Window> {
        self.pause_a_at("after_read").await?;
        self.set_proxies(ProxyMode::Blackhole);
        let fault = load.now();
        tokio::time::sleep(freeze).await;
        // The partitioned holder goes on and writes, while still partitioned.
        self.release_a("after_read").await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Heal: break the silent connections so clients reconnect at once.
        self.set_proxies(ProxyMode::Reset);
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.set_proxies(ProxyMode::Pass);
        Ok(Window::new(fault, load.now()))
    }
}

/// Scenario 7 (lock partition): a holder cut off from the lock service, unfenced or fenced.
pub(in crate::chaos) fn why_lock_partition(c: &Cell) -> Option<String> {
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
