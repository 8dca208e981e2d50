//! What the service shows of `redis-stock` beside its sales (the `service` feature):
//! its card, `pending` and the counter in `GET /stock/{id}`, the backlog in
//! `/metrics`. A copy may leave it out.
#![cfg(feature = "service")]

use super::stream::unavailable;
use super::{INFO, RedisStock};
use crate::domain::error::DeductError;
use crate::strategies::card::{Served, StrategyInfo};
use redis::AsyncCommands;
use std::collections::HashMap;
use std::time::Duration;

/// `stock_locks_redis_stock_backlog`: the sales Redis acknowledged that the database
/// has not recorded yet (the stream's length), read at each scrape.
pub(super) fn backlog() -> prometheus::IntGauge {
    prometheus::IntGauge::new(
        "stock_locks_redis_stock_backlog",
        "redis-stock's sales acknowledged by Redis and not yet recorded in the database.",
    )
    .expect("a valid metric")
}

#[async_trait::async_trait(?Send)]
impl Served for RedisStock {
    fn info(&self) -> &StrategyInfo {
        &INFO
    }

    /// `pending` (sold by Redis, not yet in the database; 0 when drained) and `redis`
    /// (the counter `{stock, pending, epoch}`, if there is one). Nothing without a
    /// Redis or when it does not answer.
    async fn stock_view(&self, product_id: i64) -> serde_json::Map<String, serde_json::Value> {
        let mut view = serde_json::Map::new();
        if self.settings.endpoint.is_none() {
            return view;
        }
        let counter = async {
            let key = self.settings.counter(product_id);
            let fields: HashMap<String, i64> =
                self.conn().await?.hgetall(key).await.map_err(unavailable)?;
            Ok::<_, DeductError>(fields)
        };
        match counter.await {
            Ok(fields) => {
                let pending = fields.get("pending").copied().unwrap_or(0);
                view.insert("pending".into(), pending.into());
                if !fields.is_empty() {
                    view.insert("redis".into(), serde_json::json!(fields));
                }
            }
            Err(e) => tracing::warn!(product_id, error = %e, "redis-stock counter unreadable"),
        }
        view
    }

    /// The backlog: sales in the stream no persister has recorded yet (`XLEN`), if
    /// Redis answers within 500 ms.
    async fn scrape(&self) {
        let length = async {
            let mut conn = self.conn().await.ok()?;
            conn.xlen(self.settings.stream()).await.ok()
        };
        if let Ok(Some(length)) = tokio::time::timeout(Duration::from_millis(500), length).await {
            self.backlog.set(length);
        }
    }
}
