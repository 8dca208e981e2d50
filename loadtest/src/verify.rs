//! The verdict, read from the database after every request has stopped: never from
//! what the clients were told.

use serde::Serialize;
use sqlx::MySqlPool;

/// What the database says about a run, summed over its products (current epochs).
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Verdict {
    /// Stock at the start of the epoch.
    pub initial: i64,
    pub remaining: i64,
    /// Ledger sum: units the service says it sold.
    pub sold: i64,
    /// Sales the stock never saw: ledger − (initial − remaining).
    pub lost_updates: i64,
    /// Units sold past the stock: max(0, ledger − initial), per product.
    pub beyond_stock: i64,
    /// Request ids answered 200 with no ledger row: must be 0.
    pub missing_acknowledged: u64,
    /// Request ids whose outcome the client does not know (counted apart).
    pub outcome_unknown: u64,
}

impl Verdict {
    /// No lost update, nothing sold beyond stock, every acknowledged sale recorded.
    pub fn is_clean(&self) -> bool {
        self.lost_updates == 0 && self.beyond_stock == 0 && self.missing_acknowledged == 0
    }
}

/// What the database says about `products` right now (initial, remaining, ledger sum,
/// lost updates, beyond stock): the verdict without the acknowledged ids' check. The
/// live page reads it while a run is under way.
pub async fn stock(db: &MySqlPool, products: &[i64]) -> sqlx::Result<Verdict> {
    let mut verdict = Verdict::default();
    for &product in products {
        // What is left counts a split product's buckets.
        let (initial, remaining, sold): (i32, i64, i64) = sqlx::query_as(
            r#"
            SELECT s.initial_quantity,
                   CAST(s.quantity + COALESCE((SELECT SUM(b.quantity) FROM stock_bucket b
                                               WHERE b.product_id = s.product_id), 0) AS SIGNED),
                   CAST(COALESCE((SELECT SUM(l.quantity) FROM ledger l
                                  WHERE l.product_id = s.product_id AND l.epoch = s.epoch), 0) AS SIGNED)
            FROM stock s WHERE s.product_id = ?
            "#,
        )
        .bind(product)
        .fetch_one(db)
        .await?;
        let initial = i64::from(initial);
        verdict.initial += initial;
        verdict.remaining += remaining;
        verdict.sold += sold;
        verdict.lost_updates += sold - (initial - remaining);
        verdict.beyond_stock += (sold - initial).max(0);
    }
    Ok(verdict)
}

/// Reads the verdict for `products` and checks every acknowledged request id.
pub async fn verify(
    db: &MySqlPool,
    products: &[i64],
    acknowledged: &[String],
    unknown: usize,
) -> sqlx::Result<Verdict> {
    let mut verdict = Verdict {
        outcome_unknown: unknown as u64,
        ..stock(db, products).await?
    };
    // Acknowledged ids with no ledger row, checked in batches.
    for chunk in acknowledged.chunks(500) {
        let mut query = sqlx::QueryBuilder::new(
            "SELECT COUNT(DISTINCT request_id) FROM ledger WHERE request_id IN (",
        );
        let mut ids = query.separated(", ");
        for id in chunk {
            ids.push_bind(id);
        }
        query.push(")");
        let found: i64 = query.build_query_scalar().fetch_one(db).await?;
        verdict.missing_acknowledged += chunk.len() as u64 - found as u64;
    }
    Ok(verdict)
}
