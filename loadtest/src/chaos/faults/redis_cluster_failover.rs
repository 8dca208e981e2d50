//! The Redis Cluster failover: scenario 15, without and with WAIT.
//!
//! The link of the master serving the cell's keys to its replica is blackholed, the
//! master killed and its replica promoted, then the old master rejoins; one injection
//! for both scenarios. Without WAIT the cluster loses locks (two holders) or, for a
//! strategy that records later, acknowledged sales; with WAIT nothing is granted or
//! acknowledged on the master alone.

use crate::chaos::{Cell, CellSpec, CellVerdict, Lab, Load, Scenario, Window, fmt_ms};
use anyhow::Context;
use std::time::Duration;
use stock_wire::Trait;
use testbed::proxy::ProxyMode;

impl Lab {
    /// Scenario 15 (Redis Cluster failover, with or without WAIT): the link of the
    /// master serving the cell's keys to its replica is blackholed, the master killed
    /// and its replica promoted; then the old master rejoins as its replica.
    ///
    /// What A holds when the master dies depends on the cell: a strategy that records
    /// later, its persister held before its COMMIT; with WAIT, nothing (no lock is
    /// granted); otherwise a lock only the master has.
    pub(in crate::chaos) async fn inject_redis_cluster_failover(
        &mut self,
        spec: &CellSpec,
        load: &Load,
        product: i64,
    ) -> anyhow::Result<Window> {
        let (master, key) = self.cluster_master(spec, product)?;
        let cluster = self.cluster.as_ref().context("no Redis Cluster")?;
        cluster
            .replication(master)
            .context("no replication link")?
            .set(ProxyMode::Blackhole);
        let wait = spec.scenario == Scenario::RedisClusterFailoverWait;
        let records_later = spec.has(Trait::RecordsLater);
        let fault = if records_later {
            // Sales on the master alone, none recorded: what its death takes.
            // A's persister held before its COMMIT holds the product's row
            // lock: B's waits behind it.
            self.pause_at(0, "before_commit").await?;
            let fault = load.now();
            tokio::time::sleep(Duration::from_millis(self.timing.lease_ms)).await;
            self.cluster_fail_over(master, load)?;
            self.release_at(0, "before_commit").await?;
            fault
        } else if wait {
            // No lock granted from here: no replica can acknowledge one.
            let fault = load.now();
            tokio::time::sleep(Duration::from_millis(self.timing.lease_ms)).await;
            self.cluster_fail_over(master, load)?;
            fault
        } else {
            // A request of A holds a lock only the master has.
            self.pause_a_holding_a_lock_not_on("the replica", async || {
                self.cluster_replica_has_a_lock(master, &key).await
            })
            .await?;
            let sold = self.ledger_rows(product).await?;
            let fault = self.cluster_fail_over(master, load)?;
            // B's buyers lock what A still believes it holds: once they sold
            // (their clients found the new master), A goes on.
            self.until_sold_after(product, sold, Duration::from_secs(20))
                .await?;
            tokio::time::sleep(Duration::from_millis(self.timing.lease_ms)).await;
            self.release_a("after_read").await?;
            fault
        };
        let healed = load.now();
        // The old master back, as its successor's replica (WAIT needs one).
        self.cluster_rejoin(master)?;
        Ok(Window::new(fault, healed))
    }

    /// Whether the replica of `master` has the lock the paused request of A holds
    /// there (its holder field; an earlier holder's, frozen there, does not count).
    async fn cluster_replica_has_a_lock(&self, master: u16, key: &str) -> anyhow::Result<bool> {
        let cluster = self.cluster.as_ref().context("no Redis Cluster")?;
        let replica = cluster.replica_of(master)?;
        let fields = async |port: u16| -> anyhow::Result<Vec<String>> {
            let url = format!("redis://127.0.0.1:{port}/");
            let mut conn = redis::Client::open(url)?
                .get_multiplexed_async_connection()
                .await?;
            // A replica answers reads only after READONLY (else MOVED to its master).
            let _: () = redis::cmd("READONLY").query_async(&mut conn).await?;
            Ok(redis::cmd("HKEYS").arg(key).query_async(&mut conn).await?)
        };
        let on_master = fields(master).await?;
        let holder = on_master
            .iter()
            .find(|f| !f.starts_with('#'))
            .context("A's lock is not on its master")?;
        Ok(fields(replica).await?.contains(holder))
    }

    /// Kills the cluster's master on `port` and waits for its replica to take over;
    /// returns when it died, in load time.
    fn cluster_fail_over(&mut self, port: u16, load: &Load) -> anyhow::Result<Duration> {
        let cluster = self.cluster.as_mut().context("no Redis Cluster")?;
        cluster
            .node_mut(port)
            .context("no such node")?
            .process()
            .kill();
        let fault = load.now();
        let promoted = tokio::task::block_in_place(|| {
            cluster.wait_for_promotion(port, Duration::from_secs(20))
        })?;
        eprintln!(
            "chaos:   the cluster promoted the replica (port {promoted}) {:.0} ms after the kill",
            crate::chaos::judge::ms(load.now() - fault)
        );
        Ok(fault)
    }

    /// Restarts the killed master: it rejoins as its successor's replica.
    fn cluster_rejoin(&mut self, port: u16) -> anyhow::Result<()> {
        let cluster = self.cluster.as_mut().context("no Redis Cluster")?;
        tokio::task::block_in_place(|| {
            cluster.node_mut(port).context("no such node")?.restart()?;
            cluster.wait_ready(Duration::from_secs(30))?;
            anyhow::Ok(())
        })
    }
}

/// Scenario 15 (Redis Cluster failover): the sales or the lock only the master had.
pub(in crate::chaos) fn why_redis_cluster_failover(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    let blocked = fmt_ms(c.blocked_ms);
    match c.verdict {
        Missing if c.has(Trait::RecordsLater) => Some(format!(
            "The master selling the product acknowledged sales its replica never got (replication held back, the persisters held behind a COMMIT); the master died, the cluster promoted the replica without them, and {} of {} acknowledged sales are missing from the ledger. Asynchronous replication loses what was acknowledged and not yet copied.",
            c.missing_acknowledged, c.succeeded
        )),
        Erased => Some(format!(
            "A held a lock only its master had (replication held back); the master died, the cluster promoted the replica, B's buyers took the same lock ({blocked} after the kill): two holders, and A's stale write erased {} sales. A cluster's failover loses locks as Sentinel's does.",
            c.lost_updates
        )),
        Refused => Some(format!(
            "The same two holders on the cluster, fenced: B's tokens came from the promoted replica's clock, newer than A's claim, so A's write was refused ({} x lock_lost) and nothing was lost. B sold {blocked} after the kill.",
            c.refused
        )),
        _ => None,
    }
}

/// Scenario 15 with WAIT: nothing granted or acknowledged on the master alone.
pub(in crate::chaos) fn why_redis_cluster_failover_wait(c: &Cell) -> Option<String> {
    match c.verdict {
        v if !v.is_loss() => Some(format!(
            "With WAIT for one replica nothing was granted or acknowledged on the master alone: while replication was held back and until the old master rejoined as the new one's replica, locks were refused and sales answered outcome_unknown ({} failed, {} unknown outcomes retried after the cell, {} of them already sold and answered as duplicates); no acknowledged sale or lock was lost. Sales back {} after the heal.",
            c.failed,
            c.retried_unknown,
            c.retried_duplicates,
            fmt_ms(c.recovery_ms)
        )),
        _ => None,
    }
}
