//! `fence-only`: the fence with no lock in front of it (a control for the chaos
//! experiments).
//!
//! # Algorithm
//! 1. Take a ticket: `SELECT NEXTVAL(fence_ticket)`, a strictly increasing number from
//!    a database sequence (one ticket for the whole order).
//! 2. For each product, in product_id order: **claim** it with the ticket, as its own
//!    committed statement (`UPDATE stock_fence SET token = :t WHERE ... AND token <
//!    :t`). No row: a request with a newer ticket claimed it first → 503 `lock_lost`.
//! 3. Plain read, check (exactly what the lock strategies do under a lock).
//! 4. BEGIN; write the computed quantity only `WHERE stock_fence.token = :t` still
//!    holds (0 rows: a newer ticket claimed the product since our claim → ROLLBACK →
//!    503 `lock_lost`). Orders and ledger rows, COMMIT.
//!
//! Steps 2-4 are [`fencing`]'s, shared with the lock strategies. Eight statements for
//! a sale (NEXTVAL, the claim, SELECT, BEGIN, the guarded UPDATE, two INSERTs,
//! COMMIT), four for a 409 (NEXTVAL, claim, SELECT, the refusal's read).
//!
//! # Guarantees
//! No lost update and no oversell, across any number of instances, with no lock at
//! all: the claim and the guarded write together are a compare-and-set on the
//! product's fence row. Of two requests that read the same quantity, at most one
//! still holds the newest claim when it writes. A request paused for minutes can
//! only be refused, never overwrite a newer sale.
//!
//! # What it costs
//! Every request that is overtaken (a newer ticket claimed the product between its
//! claim and its write) is refused, although stock is left. Under contention on one
//! product nearly every request is overtaken, and with enough in flight none sells:
//! a livelock, safe and useless. This is the lesson of the chaos runner: with
//! fencing on, a lock strategy is exactly this plus a lock; the fence does the
//! safety, and **the lock's job is efficiency**, which on a hot product means
//! progress at all (it queues requests, so each writes before the next claims). Compare the `503 lock_lost` counts of this strategy and `redis-lock` in the
//! report. Even twins are refused: the same request sent to two instances at once
//! deducts once, but the twin whose ticket its own twin overtook answers `lock_lost`
//! rather than the stored response (a retry with the same request_id gets that).
//!
//! # When to use it
//! Not for stock: `atomic-sql` is a compare-and-set with no refusals. It is here to
//! separate what the fence guarantees from what the lock adds.

use super::contract::{Deducted, Deduction, Strategy};
use super::fencing::{self, Claim, Fence};
use crate::domain::error::DeductError;
use crate::domain::probe::Failpoint;
use async_trait::async_trait;

/// How the service registers it: its card for the catalogue
/// (`fence_only/served.rs`; a copy leaves it out).
#[cfg(feature = "service")]
mod served;

const NAME: &str = "fence-only";

/// Where this strategy is written, from the repository's root (its card's `source`).
pub const SOURCE: &str = file!();

/// The backend name of this strategy's rows in `stock_fence`.
const BACKEND: &str = "fence-only";

/// Ticket, claim, guarded write; no lock. Stateless.
pub struct FenceOnly;

impl<S> super::contract::Declare<S> for FenceOnly {
    type Settings = super::contract::NoSettings;

    fn build(
        _: &super::contract::NoSettings,
        _: &super::contract::Context<'_, S>,
    ) -> std::sync::Arc<dyn Strategy> {
        std::sync::Arc::new(FenceOnly)
    }
}

#[async_trait(?Send)]
impl Strategy for FenceOnly {
    fn name(&self) -> &'static str {
        NAME
    }

    // ANCHOR: deduct
    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        let ticket = fencing::next_ticket(d.pool).await?;
        let mut claims = Vec::with_capacity(d.order.items.len());
        for item in d.order.by_product() {
            let fence = Fence::Token(ticket);
            fencing::claim(d.pool, BACKEND, item.product_id, fence).await?;
            claims.push(Claim {
                product_id: item.product_id,
                fence,
            });
        }
        d.probe.at(Failpoint::AfterLock).await;
        // Nothing to release: a claim is overtaken, never freed.
        fencing::read_check_write(d, BACKEND, Some(&claims), Some(ticket), || true).await
    }
    // ANCHOR_END: deduct
}
