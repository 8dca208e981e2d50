//! The admin's SQL: restock a product, and read it with what its ledger says was
//! sold (`PUT` and `GET /stock/{product_id}`). The deductions' SQL lives in each
//! strategy's file.

use serde::Serialize;
use sqlx::MySqlPool;

/// A product's stock row, plus what its ledger says was sold this epoch.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct StockView {
    pub product_id: i64,
    pub quantity: i32,
    pub version: i64,
    pub epoch: i32,
    pub initial_quantity: i32,
    /// Ledger sum for the current epoch. Equals `initial_quantity - quantity` unless
    /// updates were lost (the unsafe strategies).
    pub sold: i64,
}

/// Creates the product or restocks it: sets quantity and initial_quantity, starts a
/// new epoch (so the ledger of the previous one stays apart) and bumps the version
/// (so an optimistic writer that read the old row fails its compare-and-set).
pub async fn restock(pool: &MySqlPool, product_id: i64, quantity: i32) -> sqlx::Result<StockView> {
    sqlx::query(
        r#"
        INSERT INTO stock (product_id, quantity, version, epoch, initial_quantity)
        VALUES (?, ?, 0, 1, ?)
        ON DUPLICATE KEY UPDATE
            quantity = VALUES(quantity),
            initial_quantity = VALUES(initial_quantity),
            epoch = epoch + 1,
            version = version + 1
        "#,
    )
    .bind(product_id)
    .bind(quantity)
    .bind(quantity)
    .execute(pool)
    .await?;
    Ok(find(pool, product_id)
        .await?
        .expect("the row was just written"))
}

/// The product's row and this epoch's ledger sum, or `None` if it was never stocked.
pub async fn find(pool: &MySqlPool, product_id: i64) -> sqlx::Result<Option<StockView>> {
    sqlx::query_as(
        r#"
        SELECT s.product_id, s.quantity, s.version, s.epoch, s.initial_quantity,
               CAST(COALESCE((SELECT SUM(l.quantity) FROM ledger l
                              WHERE l.product_id = s.product_id AND l.epoch = s.epoch), 0)
                    AS SIGNED) AS sold
        FROM stock s
        WHERE s.product_id = ?
        "#,
    )
    .bind(product_id)
    .fetch_optional(pool)
    .await
}
