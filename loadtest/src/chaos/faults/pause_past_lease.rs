//! The holder frozen past its lease: scenarios 1, 2 and 14.
//!
//! A's request pauses after its read, holding its lock, and A is frozen (SIGSTOP) past
//! what its lock survives, then woken to write. It shows which strategies trust a lock
//! that expired under a frozen holder (its stale write erases sales) and which are kept
//! right by a fence, a row lock, or by holding nothing. The same freeze meets the fence
//! alone, with no lock (scenario 2: no loss, refusals as the price), and Chubby's
//! lock-delay (scenario 14: a pause within lease + delay costs availability, a longer
//! one still erases sales).

use crate::chaos::{Cell, CellVerdict, Lab, Load, Timing, Window, fmt_ms};
use std::time::Duration;
use stock_wire::Trait;

impl Lab {
    /// Scenarios 1, 2 and 14 (pause past lease, fence alone, and both lock-delay
    /// pauses): A's request pauses after its read, holding its lock, and A is frozen
    /// (SIGSTOP) for `freeze`, then continued and its request let go.
    pub(in crate::chaos) async fn inject_pause_past_lease(
        &self,
        load: &Load,
        freeze: Duration,
    ) -> anyhow::Result<Window> {
        self.pause_a_at("after_read").await?;
        let a = &self.instances[0];
        a.process.pause()?;
        let fault = load.now();
        tokio::time::sleep(freeze).await;
        a.process.resume()?;
        self.release_a("after_read").await?;
        Ok(Window::new(fault, load.now()))
    }
}

/// Scenario 14, the short pause: A frozen past its lease, within lease + lock-delay.
pub(in crate::chaos) fn why_lock_delay_short_pause(c: &Cell, timing: &Timing) -> Option<String> {
    use CellVerdict::*;
    let blocked = fmt_ms(c.blocked_ms);
    let lease = timing.lease_ms;
    match c.verdict {
        Unavailable | Safe => Some(format!(
            "No update lost without fencing: A was frozen past its lease ({lease} ms) but within lease + lock-delay ({} ms), and the lock server kept the lock for it, so no other holder got in; A woke and wrote under a lock that was still its own. The price is availability: the product sold nothing while the vanished holder's lock sat out its delay (first sale {blocked} after the freeze). Lock-delay narrows the window; it does not close it (the next cell).",
            lease + timing.lock_delay_ms()
        )),
        _ => None,
    }
}

/// Scenario 14, the long pause: A frozen past lease + lock-delay.
pub(in crate::chaos) fn why_lock_delay_long_pause(c: &Cell, timing: &Timing) -> Option<String> {
    use CellVerdict::*;
    let lease = timing.lease_ms;
    match c.verdict {
        Erased => Some(format!(
            "The same lock-delay, a longer pause: once lease + delay ({} ms) ran out B's buyers took the lock and sold; A woke and wrote its stale quantity: {} sale(s) lost. A pause can always outlast a delay (GC, SIGSTOP, a VM migration): lock-delay narrows the window, only fencing closes it.",
            lease + timing.lock_delay_ms(),
            c.lost_updates
        )),
        _ => None,
    }
}

/// Scenario 1 (pause past lease): what the frozen holder's write did, by how the
/// strategy holds (a lock it trusts, a fence, a row lock, or nothing).
pub(in crate::chaos) fn why_pause_past_lease(c: &Cell, timing: &Timing) -> Option<String> {
    use CellVerdict::*;
    let blocked = fmt_ms(c.blocked_ms);
    let lease = timing.lease_ms;
    let session = timing.zk_session_ms;
    let holder_survives = if c.has(Trait::SessionLock) {
        format!("its session ({session} ms)")
    } else {
        format!("its lease ({lease} ms)")
    };
    match c.verdict {
        Erased if c.has(Trait::LeaseLock) || c.has(Trait::SessionLock) => Some(format!(
            "Unfenced, the lock is trusted: after {holder_survives} ran out B's buyers took the lock and sold; the frozen holder woke and wrote the quantity it had computed before, while B held the lock: {} sale(s) vanished from the stock (B's, or its own when B's next write landed on top of it).",
            c.lost_updates
        )),
        Erased => Some(format!(
            "No lock across instances: B sold while A's request was frozen between read and write, and A's stale write erased {} sales.",
            c.lost_updates
        )),
        Refused => Some(format!(
            "B's next holder claimed the product with a newer token after {holder_survives} ran out (first sale {blocked} after the freeze); the frozen holder's write was refused ({} x lock_lost): the fence, not the lock, kept the stock right.",
            c.refused
        )),
        Unavailable => Some(format!(
            "Safe: the frozen request held the row lock, so every other buyer waited for it; no sale for {blocked}, as long as the freeze."
        )),
        Safe => Some(format!(
            "Nothing was held while frozen: B kept selling (first sale {blocked} after the freeze), and nothing was lost. (The frozen request's own answer is not recorded; by the code, its compare-and-set finds the version moved when it wakes, and it goes again.)"
        )),
        _ => None,
    }
}

/// Scenario 2 (fence alone): no lock, no loss, the refusals as the price.
pub(in crate::chaos) fn why_fence_alone(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Refused => Some(format!(
            "No lock, still no loss: every write is guarded by the newest claim. The price: {} of {} requests were refused (lock_lost) because a newer ticket overtook them, with or without a fault. A lock strategy with fencing is this plus a queue in front.",
            c.refused, c.requests
        )),
        _ => None,
    }
}
