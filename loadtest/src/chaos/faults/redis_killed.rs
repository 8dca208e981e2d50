//! Redis killed under load, however persisted: scenario 9, three cells.
//!
//! The Redis that sells is given the cell's persistence (fsync every second, on every
//! write, or none), killed under load and restarted from its append-only file (or
//! empty); one injection for the three scenarios. It shows the acknowledged sales Redis
//! lost (not yet in its file, or no file at all) before the persisters recorded them.

use crate::chaos::{Cell, CellSpec, Lab, Load, Scenario, Window};
use std::time::Duration;
use testbed::Persistence;

impl Lab {
    /// Scenario 9 (Redis killed, fsynced every second, on every write, or not
    /// persisted): the Redis that sells killed under load and restarted from its
    /// append-only file (or empty).
    pub(in crate::chaos) async fn inject_redis_killed(
        &mut self,
        spec: &CellSpec,
        load: &Load,
    ) -> anyhow::Result<Window> {
        let persistence = match spec.scenario {
            Scenario::RedisKilledAlways => Persistence::AofAlways,
            Scenario::RedisKilledEverySec => Persistence::AofEverySec,
            _ => Persistence::None,
        };
        let redis = &mut self.stack.redis_mut()[0];
        redis.set_persistence(persistence)?;
        // Sales go on, written to the file, before the crash.
        tokio::time::sleep(Duration::from_millis(self.timing.warm_ms)).await;
        redis.process().kill();
        let fault = load.now();
        tokio::time::sleep(Duration::from_millis(300)).await;
        redis.restart()?;
        // Back to the testbed's default for the cells after this one.
        redis.set_persistence(Persistence::None)?;
        Ok(Window::new(fault, load.now()))
    }
}

/// Scenario 9 (Redis killed, however persisted), whatever the verdict: the
/// acknowledged sales Redis lost.
pub(in crate::chaos) fn why_redis_killed(c: &Cell) -> String {
    format!(
        "{} of {} acknowledged sales are missing from the ledger after the restart (verdict: {}): what Redis acknowledged and had not kept (not yet in its file, or no file at all) before the persisters recorded it. The counters were reconciled from the database; no sale for {:.0} ms.",
        c.missing_acknowledged,
        c.succeeded,
        c.verdict.id(),
        c.longest_gap_ms
    )
}
