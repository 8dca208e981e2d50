//! Fencing: the resource's side of a lease lock, in one file.
//!
//! A lease lock cannot stop a holder that pauses past its lease (GC, SIGSTOP, swap):
//! it wakes up after another holder took the lock and wrote, and writes a value
//! computed from its old read. Only the resource can refuse that write. A fenced
//! deduction, here:
//! 1. **Claim** the product with the acquisition's token, as its own committed
//!    statement, outside the stock transaction ([`claim`]):
//!    `UPDATE stock_fence SET token = :t WHERE product_id = ? AND backend = ? AND
//!    token < :t`. No row: a newer holder claimed it → 503 `lock_lost`. The first
//!    claim of a product by a backend creates its row (`INSERT IGNORE ... token 0`,
//!    once per product, ever) and claims again. A separate statement so that a paused
//!    holder sits on no row lock: inside the stock transaction the claim would lock
//!    the row and turn every lock strategy into `pessimistic`.
//! 2. Plain read and check, as `unsafe` does ([`super::plain::read_and_check`]);
//!    the claim comes first, so a holder that claims after a stale holder's write
//!    reads that write.
//! 3. BEGIN; the **guarded write** ([`guarded_write`]): the stock row changes only if
//!    the claim is still the newest (`UPDATE stock JOIN stock_fence ... WHERE
//!    stock_fence.token = :t`); no row → ROLLBACK → `lock_lost`. Orders and ledger
//!    rows (with the token), COMMIT.
//!
//! The claim and the guarded write together are a compare-and-set on the product's
//! fence row: safe with no lock at all (`fence-only` shows it). With fencing on, the
//! lock's job is efficiency, not safety: it lines the requests up, so that on a hot
//! product they are not all overtaken and refused.
//!
//! # What each backend's token is
//! Tokens of different backends are never compared (`stock_fence` has a row per
//! product and backend).
//!
//! | backend | token | survives |
//! |---|---|---|
//! | `mysql` (lock table) | the lock row's `fence_token`, + 1 per new holder | everything the database survives (the row is never deleted) |
//! | `redis` | `max(last + 1, Redis's clock in µs)` in the lock script | restarts and failovers that lose the last token (the clock is past it), unless Redis's clock went back meanwhile |
//! | `zookeeper` | the lock node's czxid (global, increasing) | the ensemble |
//! | `redlock` | none: its random value is an **owner tag** (`SET owner = :v`, last claim wins) | n/a |
//! | `fence-only` | a ticket from the `fence_ticket` sequence | the database |
//!
//! An owner tag is antirez's check-and-set: safe, but tags have no order, so a stale
//! holder that claims late takes the product over from a live one (which is then
//! refused) instead of being refused itself.

use super::contract::{Deducted, Deduction};
use super::plain;
use super::txn::{self, Sold};
use crate::domain::error::DeductError;
use sqlx::{MySqlConnection, MySqlPool};

/// What a claim and a guarded write carry: a token, or (RedLock) an owner tag.
#[derive(Debug, Clone, Copy)]
pub enum Fence<'a> {
    Token(u64),
    Owner(&'a str),
}

/// A product claimed for this deduction.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    pub product_id: i64,
    pub fence: Fence<'a>,
}

/// Step 1: claims `product_id` for `fence`. `lock_lost` when a newer token holds it.
pub async fn claim(
    pool: &MySqlPool,
    backend: &str,
    product_id: i64,
    fence: Fence<'_>,
) -> Result<(), DeductError> {
    let token = match fence {
        Fence::Token(token) => token,
        Fence::Owner(owner) => {
            // No order between owners: the latest claim wins.
            sqlx::query(
                "INSERT INTO stock_fence (product_id, backend, token, owner) VALUES (?, ?, 0, ?) \
                 ON DUPLICATE KEY UPDATE owner = VALUES(owner)",
            )
            .bind(product_id)
            .bind(backend)
            .bind(owner)
            .execute(pool)
            .await?;
            return Ok(());
        }
    };
    let raise = async || -> sqlx::Result<bool> {
        let raised = sqlx::query(
            "UPDATE stock_fence SET token = ? WHERE product_id = ? AND backend = ? AND token < ?",
        )
        .bind(token)
        .bind(product_id)
        .bind(backend)
        .bind(token)
        .execute(pool)
        .await?;
        Ok(raised.rows_affected() == 1)
    };
    if raise().await? {
        return Ok(());
    }
    // Nothing raised: a newer token, or no row yet for this product and backend
    // (create it, then try once more; a racer may have created it first).
    sqlx::query("INSERT IGNORE INTO stock_fence (product_id, backend, token) VALUES (?, ?, 0)")
        .bind(product_id)
        .bind(backend)
        .execute(pool)
        .await?;
    if raise().await? {
        return Ok(());
    }
    Err(DeductError::LockLost(format!(
        "fencing token {token} for product {product_id} is older than a newer holder's"
    )))
}

/// Step 3: writes the computed quantity only while this deduction's claim is still the
/// newest on the product. `false` (nothing written): a newer holder claimed it since.
pub async fn guarded_write(
    tx: &mut MySqlConnection,
    backend: &str,
    sold: &Sold,
    fence: Fence<'_>,
) -> sqlx::Result<bool> {
    let query = match fence {
        Fence::Token(_) => {
            "UPDATE stock s JOIN stock_fence f ON f.product_id = s.product_id AND f.backend = ? \
             SET s.quantity = ?, s.version = s.version + 1 WHERE s.product_id = ? AND f.token = ?"
        }
        Fence::Owner(_) => {
            "UPDATE stock s JOIN stock_fence f ON f.product_id = s.product_id AND f.backend = ? \
             SET s.quantity = ?, s.version = s.version + 1 WHERE s.product_id = ? AND f.owner = ?"
        }
    };
    let query = sqlx::query(query)
        .bind(backend)
        .bind(sold.remaining)
        .bind(sold.item.product_id);
    let query = match fence {
        Fence::Token(token) => query.bind(token),
        Fence::Owner(owner) => query.bind(owner),
    };
    Ok(query.execute(tx).await?.rows_affected() >= 1)
}

/// Steps 2 and 3 after the claims: `unsafe`'s plain read and check, BEGIN, each
/// write guarded by its product's claim (`claims`: `None` writes unguarded, the
/// unfenced experiment), orders and ledger rows with `fence_token`, COMMIT.
/// `still_held` is asked right before COMMIT: `false` rolls back with `lock_lost`.
pub async fn read_check_write(
    d: &Deduction<'_>,
    backend: &str,
    claims: Option<&[Claim<'_>]>,
    fence_token: Option<u64>,
    still_held: impl Fn() -> bool,
) -> Result<Deducted, DeductError> {
    let sold = plain::read_and_check(d).await?;
    d.probe.after_read(d.knobs).await;
    let mut tx = d.begin().await?;
    for s in &sold {
        let Some(claims) = claims else {
            plain::write(&mut tx, s).await?;
            continue;
        };
        let product_id = s.item.product_id;
        let claim = claims
            .iter()
            .find(|c| c.product_id == product_id)
            .expect("every product was claimed");
        if !guarded_write(&mut tx, backend, s, claim.fence).await? {
            tx.rollback().await?;
            return Err(DeductError::LockLost(format!(
                "product {product_id}: this request's claim is no longer the newest; \
                 a newer holder claimed it since (this one was paused, or overtaken)"
            )));
        }
    }
    let done = txn::record(&mut tx, d, &sold, 1, fence_token).await?;
    if !still_held() {
        tx.rollback().await?;
        return Err(DeductError::LockLost(
            "the lock was lost before COMMIT; nothing was written".into(),
        ));
    }
    txn::commit(tx, d.probe).await?;
    Ok(done)
}

/// The next ticket of `fence-only`: a strictly increasing number from a database
/// sequence (one round trip, autocommit; never handed out twice).
pub async fn next_ticket(pool: &MySqlPool) -> sqlx::Result<u64> {
    let ticket: i64 = sqlx::query_scalar("SELECT NEXTVAL(fence_ticket)")
        .fetch_one(pool)
        .await?;
    Ok(ticket as u64)
}
