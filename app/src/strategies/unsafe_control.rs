//! `unsafe`: no lock at all. The control group: it **must** oversell.
//!
//! # Algorithm
//! 1. BEGIN.
//! 2. Plain read of each item's row (`SELECT quantity ...`, no lock).
//! 3. Check: enough left? (409 if not.)
//! 4. Write the value computed from the read: `SET quantity = <read − requested>`.
//! 5. Ledger, orders, COMMIT.
//!
//! # How it fails
//! Two buyers of the last unit, A and B:
//!
//! ```text
//! A: read quantity = 1          B: read quantity = 1
//! A: 1 >= 1, write 0            B: 1 >= 1, write 0
//! A: ledger +1, COMMIT          B: ledger +1, COMMIT   -> one unit sold twice
//! ```
//!
//! B's UPDATE waits for A's row lock, then overwrites A's 0 with its own 0: the stock
//! row looks right and the ledger shows two sales of one unit (a *lost update*; with
//! initial S, remaining R and ledger sum L, lost = L − (S − R)). REPEATABLE READ does
//! not help: the reads are snapshot reads and the UPDATE sets a constant. It happens
//! whenever two requests interleave between read and write, so it gets worse the
//! longer that window is (`--hold-ms`, a slow business step) and the more concurrent
//! the buyers.
//!
//! The race is made deterministic in the tests with the `after_read` failpoint:
//! request 1 pauses after its read, request 2 completes, request 1 resumes.
//!
//! # When to use it
//! Never; it is here so every experiment has something that visibly breaks.

use super::{Applied, Cx, Held, Strategy, StrategyInfo, TxError, read_check_write};
use crate::order::Order;
use async_trait::async_trait;
use sqlx::MySqlConnection;

/// Read, check, write; no concurrency control. Stateless.
pub struct Unsafe;

static INFO: StrategyInfo = StrategyInfo {
    name: "unsafe",
    description: "No lock: plain read, check, write the computed value. The control group; it oversells.",
    backend: "database",
    safe_across_instances: false,
    fencing: "none",
};

#[async_trait]
impl Strategy for Unsafe {
    fn info(&self) -> &StrategyInfo {
        &INFO
    }

    async fn apply(
        &self,
        cx: &Cx<'_>,
        tx: &mut MySqlConnection,
        order: &Order,
        _held: &Held,
    ) -> Result<Vec<Applied>, TxError> {
        read_check_write(cx, tx, order).await
    }
}
