//! The admin's SQL: restock a product (optionally split into buckets), and read it
//! with what its ledger says was sold (`PUT` and `GET /stock/{product_id}`). The
//! deductions' SQL lives in each strategy's file.

use serde::Serialize;
use sqlx::MySqlPool;

/// The most buckets a product may be split into.
pub const MAX_BUCKETS: u16 = 1024;

/// A product's stock, plus what its ledger says was sold this epoch.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct StockView {
    pub product_id: i64,
    /// Units left to sell: the `stock` row plus the product's buckets.
    pub quantity: i32,
    pub version: i64,
    pub epoch: i32,
    pub initial_quantity: i32,
    /// Ledger sum for the current epoch. Equals `initial_quantity - quantity` unless
    /// updates were lost (the controls without a real lock).
    pub sold: i64,
    /// Units left in each bucket, when the product is split (the split rows).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<i32>,
    /// What strategies keep about the product outside the database, each its own
    /// fields (`Served::stock_view`; e.g. a Redis counter and the sales it made that
    /// the database has not recorded yet, `pending`).
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub elsewhere: serde_json::Map<String, serde_json::Value>,
}

/// Creates the product or restocks it: sets quantity and initial_quantity, starts a
/// new epoch (so the ledger of the previous one stays apart) and bumps the version
/// (so a compare-and-set writer that read the old row fails).
///
/// With `buckets` = K > 0 the units go into K rows of `stock_bucket` (sizes differ by
/// at most one) and the `stock` row keeps 0: only a strategy that sells from split rows
/// sells them. Without, the
/// product's buckets are removed. One transaction, at READ COMMITTED: at InnoDB's
/// default REPEATABLE READ, removing a product's buckets locks the gap around them,
/// and two restocks of neighbouring products that then insert into each other's gap
/// deadlock (a load test restocks its products several at a time). Restocks of one
/// product still queue on its `stock` row, locked first. A deadlock's victim all the
/// same is run again, after a jittered backoff.
pub async fn restock(
    pool: &MySqlPool,
    product_id: i64,
    quantity: i32,
    buckets: u16,
) -> sqlx::Result<StockView> {
    // Run to the end even when the caller goes away (actix drops a handler whose
    // client left): cut between the isolation level and BEGIN, the connection would
    // go back to the pool with READ COMMITTED waiting for its next user.
    let pool = pool.clone();
    let task =
        tokio::spawn(async move { restock_retried(&pool, product_id, quantity, buckets).await });
    match task.await {
        Ok(done) => done,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(sqlx::Error::PoolClosed),
    }
}

async fn restock_retried(
    pool: &MySqlPool,
    product_id: i64,
    quantity: i32,
    buckets: u16,
) -> sqlx::Result<StockView> {
    const ATTEMPTS: u32 = 5;
    let mut attempt = 1;
    loop {
        match restock_once(pool, product_id, quantity, buckets).await {
            Err(e)
                if attempt < ATTEMPTS
                    && crate::domain::error::mysql_error_number(&e) == Some(1213) =>
            {
                tokio::time::sleep(crate::strategies::retry::backoff(attempt)).await;
                attempt += 1;
            }
            done => return done,
        }
    }
}

async fn restock_once(
    pool: &MySqlPool,
    product_id: i64,
    quantity: i32,
    buckets: u16,
) -> sqlx::Result<StockView> {
    use sqlx::Connection;
    let mut conn = pool.acquire().await?;
    // The next transaction on this connection only.
    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut *conn)
        .await?;
    let mut tx = conn.begin().await?;
    let in_row = if buckets == 0 { quantity } else { 0 };
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
    .bind(in_row)
    .bind(quantity)
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM stock_bucket WHERE product_id = ?")
        .bind(product_id)
        .execute(&mut *tx)
        .await?;
    if buckets > 0 {
        let k = i32::from(buckets);
        let mut split =
            sqlx::QueryBuilder::new("INSERT INTO stock_bucket (product_id, bucket, quantity) ");
        split.push_values(0..k, |mut row, b| {
            let share = quantity / k + i32::from(b < quantity % k);
            row.push_bind(product_id).push_bind(b).push_bind(share);
        });
        split.build().execute(&mut *tx).await?;
    }
    tx.commit().await?;
    // The connection back to the pool before the read takes one (a pool of one).
    drop(conn);
    Ok(find(pool, product_id)
        .await?
        .expect("the row was just written"))
}

/// The product's stock and this epoch's ledger sum, or `None` if it was never stocked.
pub async fn find(pool: &MySqlPool, product_id: i64) -> sqlx::Result<Option<StockView>> {
    // What is left and what was sold come from one statement (one snapshot): read
    // apart, sales committing in between would make them disagree.
    let row: Option<(i64, i64, i32, i32, i64)> = sqlx::query_as(
        r#"
        SELECT CAST(s.quantity + COALESCE((SELECT SUM(b.quantity) FROM stock_bucket b
                                           WHERE b.product_id = s.product_id), 0) AS SIGNED),
               s.version, s.epoch, s.initial_quantity,
               CAST(COALESCE((SELECT SUM(l.quantity) FROM ledger l
                              WHERE l.product_id = s.product_id AND l.epoch = s.epoch), 0)
                    AS SIGNED)
        FROM stock s
        WHERE s.product_id = ?
        "#,
    )
    .bind(product_id)
    .fetch_optional(pool)
    .await?;
    let Some((quantity, version, epoch, initial_quantity, sold)) = row else {
        return Ok(None);
    };
    // The split, for the curious (a moment later than the total above).
    let buckets: Vec<i32> = sqlx::query_scalar(
        "SELECT quantity FROM stock_bucket WHERE product_id = ? ORDER BY bucket",
    )
    .bind(product_id)
    .fetch_all(pool)
    .await?;
    Ok(Some(StockView {
        product_id,
        quantity: quantity as i32,
        version,
        epoch,
        initial_quantity,
        sold,
        buckets,
        elsewhere: serde_json::Map::new(),
    }))
}
