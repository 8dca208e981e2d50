//! Recording many sales in one transaction, and what to ask when one of them was
//! already recorded.

use super::contract::Deducted;
use sqlx::{MySql, MySqlConnection, MySqlPool, QueryBuilder};
use std::collections::HashMap;

/// One sale of a batch, to record with [`record_many`]: the answer its buyer gets
/// (stored in `orders`), the fingerprint a retry must match, and the epoch each of
/// the answer's items sold from.
pub struct Record<'a> {
    pub answer: &'a Deducted,
    pub fingerprint: &'a str,
    pub epochs: Vec<i32>,
}

/// [`super::txn::record`] for many sales at once (`batched`, `redis-stock`'s persister): one
/// multi-row INSERT of their `orders` rows, then one of their ledger rows. A request
/// id already in `orders` fails the first statement with 1062 before anything else is
/// written; [`recorded`] tells the caller which.
pub async fn record_many(
    tx: &mut MySqlConnection,
    strategy: &str,
    sales: &[Record<'_>],
) -> sqlx::Result<()> {
    let bodies: Vec<String> = sales
        .iter()
        .map(|s| serde_json::to_string(s.answer).expect("a response serializes"))
        .collect();
    let mut orders: QueryBuilder<MySql> =
        QueryBuilder::new("INSERT INTO orders (request_id, request_hash, strategy, response) ");
    orders.push_values(sales.iter().zip(&bodies), |mut row, (sale, body)| {
        row.push_bind(&sale.answer.request_id)
            .push_bind(sale.fingerprint)
            .push_bind(strategy)
            .push_bind(body);
    });
    orders.build().execute(&mut *tx).await?;
    let mut ledger: QueryBuilder<MySql> = QueryBuilder::new(
        "INSERT INTO ledger (request_id, product_id, quantity, epoch, strategy, fence_token) ",
    );
    let lines = sales.iter().flat_map(|sale| {
        sale.answer
            .items
            .iter()
            .zip(&sale.epochs)
            .map(move |(item, epoch)| (&sale.answer.request_id, item, *epoch))
    });
    ledger.push_values(lines, |mut row, (request_id, item, epoch)| {
        row.push_bind(request_id)
            .push_bind(item.product_id)
            .push_bind(item.quantity)
            .push_bind(epoch)
            .push_bind(strategy)
            .push_bind(None::<u64>);
    });
    ledger.build().execute(&mut *tx).await?;
    Ok(())
}

/// Which of `request_ids` are already in `orders`, with their stored answers (`None`
/// if unreadable): what a batch asks after [`record_many`] met a duplicate key.
pub async fn recorded<'a>(
    pool: &MySqlPool,
    request_ids: impl IntoIterator<Item = &'a str>,
) -> sqlx::Result<HashMap<String, Option<Deducted>>> {
    let mut query: QueryBuilder<MySql> = QueryBuilder::new(
        "SELECT CAST(request_id AS CHAR), CAST(response AS CHAR) FROM orders WHERE request_id IN (",
    );
    let mut ids = query.separated(", ");
    for id in request_ids {
        ids.push_bind(id);
    }
    query.push(")");
    let rows: Vec<(String, String)> = query.build_query_as().fetch_all(pool).await?;
    let answer = |stored: &str| serde_json::from_str(stored).ok();
    Ok(rows
        .into_iter()
        .map(|(id, stored)| (id, answer(&stored)))
        .collect())
}
