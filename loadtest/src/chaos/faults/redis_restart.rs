//! Redis restarted empty under a paused holder: scenario 4.
//!
//! A's request pauses after its read, and the Redis node its lock lives on restarts
//! with no persistence: the lock is gone while its holder works. Unfenced, B takes the
//! lock and the woken holder's stale write erases sales; fenced, B's token (from
//! Redis's clock) is already newer, and the old holder's write is refused.

use crate::chaos::{Cell, CellVerdict, Lab, Load, Window, fmt_ms};
use std::time::Duration;

impl Lab {
    /// Scenario 4 (Redis restart): A's request pauses after its read, and the Redis
    /// node its lock lives on is restarted empty (no persistence).
    pub(in crate::chaos) async fn inject_redis_restart(
        &mut self,
        load: &Load,
        freeze: Duration,
    ) -> anyhow::Result<Window> {
        self.pause_a_at("after_read").await?;
        self.stack.redis_mut()[0].restart()?;
        let fault = load.now();
        tokio::time::sleep(freeze).await;
        self.release_a("after_read").await?;
        Ok(Window::new(fault, load.now()))
    }
}

/// Scenario 4 (Redis restart): the lock gone while its holder worked.
pub(in crate::chaos) fn why_redis_restart(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    let blocked = fmt_ms(c.blocked_ms);
    match c.verdict {
        Erased => Some(format!(
            "Redis came back empty: the lock was gone while its holder worked, B took it at once and sold, and the unfenced holder's stale write erased {} sales.",
            c.lost_updates
        )),
        Refused => Some(format!(
            "Redis came back empty, the lock and its last token too; B's next token came from Redis's clock (microseconds), already past every token handed out before, so B sold {blocked} after the restart while the woken holder's old token was refused ({} x lock_lost).",
            c.refused
        )),
        _ => None,
    }
}
