//! `fence-only`: the fence with no lock in front of it (a control for the chaos
//! experiments).
//!
//! # Algorithm
//! 1. Take a ticket: `SELECT NEXTVAL(fence_ticket)`, a strictly increasing number from
//!    a database sequence (one ticket for the whole order).
//! 2. For each product, in product_id order: **claim** it with the ticket, as its own
//!    committed statement (`UPDATE stock_fence SET token = :t WHERE ... AND token <
//!    :t`). No row: a request with a newer ticket claimed it first → 503 `lock_lost`.
//! 3. BEGIN; plain read, check (exactly what the lock strategies do under a lock).
//! 4. Write the computed quantity only `WHERE stock_fence.token = :t` still holds
//!    (0 rows: a newer ticket claimed the product since our claim → ROLLBACK → 503
//!    `lock_lost`). Ledger, orders, COMMIT.
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
//! product most requests are refused. This is the lesson of the chaos runner: with
//! fencing on, a lock strategy is exactly this plus a lock, and **the lock's job is
//! efficiency** (it queues requests so few are refused), while the fence does the
//! safety. Compare the `503 lock_lost` counts of this strategy and `redis-lock` in the
//! report. Even twins are refused: the same request sent to two instances at once
//! deducts once, but the twin whose ticket its own twin overtook answers `lock_lost`
//! rather than the stored response (a retry with the same request_id gets that).
//!
//! # When to use it
//! Not for stock: `atomic-sql` is a compare-and-set with no refusals. It is here to
//! separate what the fence guarantees from what the lock adds.

use super::distributed::read_check_write_fenced;
use super::{Applied, Cx, Held, HeldLock, Strategy, StrategyInfo, TxError};
use crate::error::AppError;
use crate::order::Order;
use crate::stock;
use async_trait::async_trait;
use sqlx::{MySqlConnection, MySqlPool};

/// The backend name of this strategy's rows in `stock_fence`.
const BACKEND: &str = "fence-only";

/// Ticket, claim, guarded write; no lock.
pub struct FenceOnly {
    /// For the tickets and claims (autocommit statements, outside the transaction).
    pub pool: MySqlPool,
}

static INFO: StrategyInfo = StrategyInfo {
    name: "fence-only",
    description: "No lock: a ticket from a database sequence, a claim on the product's fence row, a write guarded by the claim; overtaken requests are refused (lock_lost).",
    backend: "database",
    safe_across_instances: true,
    fencing: "token (ticket)",
};

/// A product claimed with a ticket: what a lock would hold, minus the lock.
struct Claim {
    product_id: i64,
    ticket: u64,
}

#[async_trait]
impl HeldLock for Claim {
    fn product_id(&self) -> Option<i64> {
        Some(self.product_id)
    }

    fn fence_token(&self) -> Option<u64> {
        Some(self.ticket)
    }

    /// Nothing to release: a claim is overtaken, never freed.
    async fn release(self: Box<Self>) {}
}

#[async_trait]
impl Strategy for FenceOnly {
    fn info(&self) -> &StrategyInfo {
        &INFO
    }

    async fn lock(&self, order: &Order) -> Result<Held, AppError> {
        let ticket = stock::next_ticket(&self.pool).await?;
        let mut held = Held::none();
        for item in order.by_product() {
            if !stock::claim_fence(&self.pool, item.product_id, BACKEND, ticket).await? {
                return Err(AppError::LockLost(format!(
                    "ticket {ticket} for product {} was overtaken by a newer request's claim",
                    item.product_id
                )));
            }
            held.push(Box::new(Claim {
                product_id: item.product_id,
                ticket,
            }));
        }
        Ok(held)
    }

    async fn apply(
        &self,
        cx: &Cx<'_>,
        tx: &mut MySqlConnection,
        order: &Order,
        held: &Held,
    ) -> Result<Vec<Applied>, TxError> {
        read_check_write_fenced(cx, tx, order, held, BACKEND, true).await
    }
}
