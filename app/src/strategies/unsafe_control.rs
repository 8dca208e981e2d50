//! `unsafe`: no lock at all. The control group: it **must** oversell.
//!
//! # Algorithm
//! The code is [`plain::read_check_write`] (`local-mutex` and the lock strategies run
//! it under their locks):
//! 1. Plain read of each item's row (`SELECT quantity ...`, no lock, no transaction
//!    yet: a refusal opens none).
//! 2. Check: enough left? (409 if not.)
//! 3. BEGIN; write the value computed from the read: `SET quantity = <read − requested>`.
//! 4. Orders and ledger rows ([`super::txn::record`]), COMMIT.
//!
//! Six statements for a sale (SELECT, BEGIN, UPDATE, two INSERTs, COMMIT), two for a
//! refusal (the SELECT, and the read every refusal makes in [`super::idempotency`]).
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
//! not help: the read is a snapshot and the UPDATE sets a constant. It happens
//! whenever two requests interleave between read and write, so it gets worse the
//! longer that window is (`--hold-ms`, a slow business step) and the more concurrent
//! the buyers.
//!
//! The race is made deterministic in the tests with the `after_read` failpoint:
//! request 1 pauses after its read, request 2 completes, request 1 resumes.
//!
//! # When to use it
//! Never; it is here so every experiment has something that visibly breaks.

use super::contract::{Deducted, Deduction, Strategy};
use super::plain;
use crate::domain::error::DeductError;
use async_trait::async_trait;

/// How the service registers it: its card for the catalogue
/// (`unsafe_control/served.rs`; a copy leaves it out).
#[cfg(feature = "service")]
mod served;

const NAME: &str = "unsafe";

/// Where this strategy is written, from the repository's root (its card's `source`).
pub const SOURCE: &str = file!();

/// Read, check, write; no concurrency control. Stateless.
pub struct Unsafe;

impl<S> super::contract::Declare<S> for Unsafe {
    type Settings = super::contract::NoSettings;

    fn build(
        _: &super::contract::NoSettings,
        _: &super::contract::Context<'_, S>,
    ) -> std::sync::Arc<dyn Strategy> {
        std::sync::Arc::new(Unsafe)
    }
}

#[async_trait(?Send)]
impl Strategy for Unsafe {
    fn name(&self) -> &'static str {
        NAME
    }

    // ANCHOR: deduct
    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        plain::read_check_write(d).await
    }
    // ANCHOR_END: deduct
}
