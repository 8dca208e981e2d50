//! The ambiguous commit: scenario 8.
//!
//! A's request paused before its COMMIT is let go and MariaDB is killed at once, then
//! restarted: the client cannot know whether the COMMIT landed. Retried with the same
//! `request_id`, the requests that had committed are answered as duplicates: no
//! deduction is applied twice.

use crate::chaos::{Cell, Lab, Load, Window};
use anyhow::Context;
use std::time::Duration;

impl Lab {
    /// Scenario 8 (ambiguous commit): A's request paused before its COMMIT is let go,
    /// and MariaDB is killed at once, then restarted.
    pub(in crate::chaos) async fn inject_ambiguous_commit(
        &mut self,
        load: &Load,
    ) -> anyhow::Result<Window> {
        self.pause_a_at("before_commit").await?;
        self.release_a("before_commit").await?;
        let db = self
            .stack
            .get_mut::<testbed::MariaDb>()
            .context("no MariaDB")?;
        db.process().kill();
        let fault = load.now();
        tokio::time::sleep(Duration::from_millis(300)).await;
        db.restart()?;
        Ok(Window::new(fault, load.now()))
    }
}

/// Scenario 8 (ambiguous commit), whatever the verdict: the unknown outcomes settled
/// by their retries.
pub(in crate::chaos) fn why_ambiguous_commit(c: &Cell) -> String {
    format!(
        "{} requests had an unknown outcome; retried with the same request_id after the restart, {} turned out committed and were answered as duplicates: 0 double deductions. No sale for {:.0} ms.",
        c.retried_unknown, c.retried_duplicates, c.longest_gap_ms
    )
}
