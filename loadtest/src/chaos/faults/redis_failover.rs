//! The Redis failover through Sentinel: scenario 11, without and with WAIT.
//!
//! Replication to the replica is held back and the primary killed; Sentinel promotes
//! the replica. Without WAIT, A holds a lock only the primary had, and B's buyers take
//! the same lock on the new primary: two holders (unfenced, A's stale write erases
//! sales; fenced, it is refused). With WAIT no lock is granted on one server only, at
//! availability's cost. One fault, two injections (what A holds differs), with the
//! helpers they share.

use crate::chaos::lab::redis_command;
use crate::chaos::{Cell, CellVerdict, Lab, Load, Window, fmt_ms};
use crate::claims::source;
use anyhow::Context;
use std::time::Duration;
use testbed::proxy::ProxyMode;

impl Lab {
    /// Scenario 11 (Redis failover): replication held back, A holds a lock only the
    /// primary has, the primary is killed and Sentinel promotes the replica; A is let
    /// go once B's buyers sold through the new primary.
    pub(in crate::chaos) async fn inject_redis_failover(
        &mut self,
        load: &Load,
        product: i64,
    ) -> anyhow::Result<Window> {
        self.hold_back_replication()?;
        // A request of A holds a lock only the primary has: taken after the
        // blackhole (checked on the replica; else let it go and catch the next).
        self.pause_a_holding_a_lock_not_on("the replica", async || {
            self.replica_has_a_lock(product).await
        })
        .await?;
        let sold = self.ledger_rows(product).await?;
        let fault = self.fail_over(load)?;
        // B's buyers follow the failover and lock what A still believes it
        // holds: once they sold (their clients found the new primary, however
        // long a busy machine made that), A goes on.
        self.until_sold_after(product, sold, Duration::from_secs(20))
            .await?;
        tokio::time::sleep(Duration::from_millis(self.timing.lease_ms)).await;
        self.release_a("after_read").await?;
        Ok(Window::new(fault, load.now()))
    }

    /// Scenario 11 with WAIT (Redis failover, a lock granted only once a replica has
    /// it): replication held back, the primary killed after a lease, and the old
    /// primary rejoined as the new one's replica.
    pub(in crate::chaos) async fn inject_redis_failover_wait(
        &mut self,
        load: &Load,
    ) -> anyhow::Result<Window> {
        // Unavailable from here: no replica can acknowledge a lock.
        self.hold_back_replication()?;
        let fault = load.now();
        tokio::time::sleep(Duration::from_millis(self.timing.lease_ms)).await;
        self.fail_over(load)?;
        // The new primary has no replica: no lock until the old one rejoins
        // (restarted now; Sentinel makes it a replica on its next look).
        let healed = load.now();
        let ha = self.ha.as_mut().context("no Redis HA")?;
        tokio::task::block_in_place(|| ha.rejoin_old_primary(Duration::from_secs(30)))?;
        Ok(Window::new(fault, healed))
    }

    /// Blackholes the replica's link to the primary: what the primary acknowledges from
    /// now on stays on the primary.
    fn hold_back_replication(&self) -> anyhow::Result<()> {
        let ha = self.ha.as_ref().context("no Redis HA")?;
        ha.replication.set(ProxyMode::Blackhole);
        Ok(())
    }

    /// Kills the primary and waits for Sentinel to promote the replica; returns when
    /// the primary died, in load time.
    fn fail_over(&mut self, load: &Load) -> anyhow::Result<Duration> {
        let ha = self.ha.as_mut().context("no Redis HA")?;
        ha.primary.process().kill();
        let fault = load.now();
        // A blocking wait: the load's tasks move to the other worker meanwhile.
        let promoted =
            tokio::task::block_in_place(|| ha.wait_for_failover(Duration::from_secs(20)))?;
        eprintln!(
            "chaos:   Sentinel promoted the replica (port {promoted}) {:.0} ms after the kill",
            crate::chaos::judge::ms(load.now() - fault)
        );
        Ok(fault)
    }

    /// Whether the replica has the lock that the paused request of A holds on the
    /// primary (its holder field); an earlier holder's state frozen there by the
    /// blackhole does not count.
    async fn replica_has_a_lock(&self, product: i64) -> anyhow::Result<bool> {
        let ha = self.ha.as_ref().context("no Redis HA")?;
        let key = format!("stock:{product}");
        let on_primary: Vec<String> = redis_command(&ha.primary.url(), "HKEYS", &key).await?;
        let on_replica: Vec<String> = redis_command(&ha.replica.url(), "HKEYS", &key).await?;
        let holder = on_primary
            .iter()
            .find(|f| !f.starts_with('#'))
            .context("A's lock is not on the primary")?;
        Ok(on_replica.contains(holder))
    }
}

/// Scenario 11 (Redis failover): two holders of one lock, unfenced or fenced.
pub(in crate::chaos) fn why_redis_failover(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    let blocked = fmt_ms(c.blocked_ms);
    match c.verdict {
        Erased => Some(format!(
            "A held a lock only the primary had (replication held back); Sentinel promoted the replica, B's buyers followed and took the same lock ({blocked} after the kill): two holders, and A's stale write erased {} sales. Asynchronous replication loses locks.",
            c.lost_updates
        )),
        Refused => Some(format!(
            "The same two holders, fenced: B's tokens came from the new primary's clock, newer than A's claim, so A's write was refused ({} x lock_lost) and nothing was lost. B sold {blocked} after the kill.",
            c.refused
        )),
        _ => None,
    }
}

/// Scenario 11 with WAIT: no lock granted on one server only, at availability's cost.
pub(in crate::chaos) fn why_redis_failover_wait(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Unavailable => Some(format!(
            "With WAIT for one replica no lock was granted while replication was held back, nor after the failover until the old primary, restarted, had rejoined as the new one's replica ({} answered backend_unavailable; sales back {} after the restart): no lock existed on one server only, so no second holder. Consistency paid for with availability.",
            c.failed,
            fmt_ms(c.recovery_ms)
        )),
        _ => None,
    }
}

/// The claim of the write-ups a Redis failover cell speaks to: unfenced, the lock
/// lost; fenced, the loss made safe.
pub(in crate::chaos) fn claim_redis_failover(
    c: &Cell,
) -> Option<(&'static str, &'static str, bool)> {
    if c.fencing == Some(false) {
        Some((
            "A Redis lock is lost when the primary fails over to a replica that had not received it",
            source::INTERVIEW,
            c.lost_updates > 0,
        ))
    } else {
        Some((
            "Fencing makes a lock lost in a failover safe",
            source::MYSQL_LOCKS,
            c.verdict == CellVerdict::Refused,
        ))
    }
}

/// The claim of the write-ups a Redis failover cell with WAIT speaks to.
pub(in crate::chaos) fn claim_redis_failover_wait(
    c: &Cell,
) -> Option<(&'static str, &'static str, bool)> {
    Some((
        "Waiting for a replica to acknowledge the lock (WAIT) prevents the second holder, at the cost of availability",
        source::MYSQL_LOCKS,
        c.lost_updates == 0 && c.beyond_stock == 0 && c.verdict == CellVerdict::Unavailable,
    ))
}
