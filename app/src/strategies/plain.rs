//! The plain read-check-write: `unsafe`'s whole algorithm, and what `local-mutex` and
//! the lock strategies run under their locks (the fenced ones with [`super::fencing`]'s
//! guarded write instead of [`write()`]). Uses the transaction helpers and the domain.
//! Why it loses updates with no lock around it: [`super::unsafe_control`].

use super::contract::{Deducted, Deduction};
use super::txn::{self, Sold, check_enough};
use crate::domain::error::DeductError;
use sqlx::MySqlConnection;

// ANCHOR: read_check_write
/// The whole algorithm: what `unsafe` runs with no lock, and what `local-mutex` runs
/// under its mutex.
pub async fn read_check_write(d: &Deduction<'_>) -> Result<Deducted, DeductError> {
    let sold = read_and_check(d).await?;
    d.probe.after_read(d.knobs).await;
    let mut tx = d.begin().await?;
    for s in &sold {
        write(&mut tx, s).await?;
    }
    let done = txn::record(&mut tx, d, &sold, 1, None).await?;
    txn::commit(tx, d.probe).await?;
    Ok(done)
}
// ANCHOR_END: read_check_write

/// Step 1: a plain read of each item (in product order), checked: 404 for a product
/// never stocked, 409 for too few units. Returns what each item would leave. The lock
/// strategies read exactly this way under their locks.
pub async fn read_and_check(d: &Deduction<'_>) -> Result<Vec<Sold>, DeductError> {
    let mut sold = Vec::with_capacity(d.order.items.len());
    for item in d.order.by_product() {
        let quantity: i32 = sqlx::query_scalar("SELECT quantity FROM stock WHERE product_id = ?")
            .bind(item.product_id)
            .fetch_optional(d.reads)
            .await?
            .ok_or(DeductError::UnknownProduct(item.product_id))?;
        check_enough(item, quantity)?;
        sold.push(Sold {
            item,
            remaining: quantity - item.quantity,
        });
    }
    Ok(sold)
}

/// Step 3: writes the quantity the application computed (`SET quantity = :new`),
/// unconditionally: **not** `quantity - ?`. If another request wrote the row after our
/// read, its write is silently overwritten: a lost update, which the ledger exposes.
/// `version` is bumped by every writer so `optimistic`'s compare-and-set stays sound
/// when strategies are mixed on one product.
pub async fn write(tx: &mut MySqlConnection, sold: &Sold) -> sqlx::Result<()> {
    sqlx::query("UPDATE stock SET quantity = ?, version = version + 1 WHERE product_id = ?")
        .bind(sold.remaining)
        .bind(sold.item.product_id)
        .execute(tx)
        .await?;
    Ok(())
}
