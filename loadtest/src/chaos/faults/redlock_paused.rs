//! RedLock with nodes frozen: scenario 5, 2 of 5 nodes (a minority) or 3 (a majority).
//!
//! The last two or three of RedLock's five nodes are frozen (SIGSTOP), then continued;
//! one injection for both scenarios. With a majority still answering, sales go on;
//! without one, every acquisition fails and nothing sells until the nodes are back.

use crate::chaos::{Cell, CellSpec, CellVerdict, Lab, Load, Scenario, Window, fmt_ms};
use std::time::Duration;

impl Lab {
    /// Scenario 5 (RedLock, 2 or 3 of 5 nodes paused): the last nodes frozen (SIGSTOP)
    /// for `freeze`, then continued.
    pub(in crate::chaos) async fn inject_redlock_paused(
        &self,
        spec: &CellSpec,
        load: &Load,
        freeze: Duration,
    ) -> anyhow::Result<Window> {
        let n = if spec.scenario == Scenario::RedlockMinorityPaused {
            2
        } else {
            3
        };
        // The last n: the first node also serves the single-node Redis lock, kept out of it.
        let paused: Vec<usize> = (5 - n..5).collect();
        for &i in &paused {
            self.stack.redis()[i].process_ref().pause()?;
        }
        let fault = load.now();
        tokio::time::sleep(freeze).await;
        for &i in &paused {
            self.stack.redis()[i].process_ref().resume()?;
        }
        Ok(Window::new(fault, load.now()))
    }
}

/// Scenario 5, 2 of 5 nodes paused, whatever the verdict: a majority still answered.
pub(in crate::chaos) fn why_redlock_minority_paused(c: &Cell) -> String {
    format!(
        "A majority (3 of 5) still answered: sales went on (longest gap {:.0} ms), nothing lost.",
        c.longest_gap_ms
    )
}

/// Scenario 5, 3 of 5 nodes paused: no majority, no sale.
pub(in crate::chaos) fn why_redlock_majority_paused(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Unavailable => Some(format!(
            "No majority: every acquisition failed ({} busy or unavailable), nothing was written; sales came back {} after the nodes were continued.",
            c.busy + c.failed,
            fmt_ms(c.recovery_ms)
        )),
        _ => None,
    }
}
