//! What the service shows of `redis-stock` beside its sales (the `service` feature):
//! its card, `pending` and the counters in `GET /stock/{id}`, the backlog in
//! `/metrics`. A copy may leave it out.
#![cfg(feature = "service")]

use super::RedisStock;
use super::stream::{NAME, unavailable};
use crate::domain::error::DeductError;
use crate::domain::probe::Probe;
use crate::strategies::card::{ChaosCell, Family, Served, Statements, StrategyInfo, Trait};
use redis::AsyncCommands;
use std::collections::HashMap;
use std::time::Duration;

/// A Redis crash without `appendfsync always` may lose acknowledged sales: missing
/// from the ledger.
const MAY_LOSE: &[&str] = &["safe", "refused", "unavailable", "missing"];

pub(super) static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    // Its file is the folder's `mod.rs` (this card is the service's).
    source: "app/src/strategies/redis_stock/mod.rs",
    description: "Redis in front: one Lua script checks the request id, decrements the counter and appends the sale to a stream; a persister writes the stream into MariaDB in batches (orders, ledger, stock), acknowledging after COMMIT.",
    family: Family::HotProduct,
    when_to_use: "The hottest sales, where answering fast matters more than every sale being on disk before the buyer hears of it.",
    explanation: "Redis in front, the database as the record: one Lua script checks the request id, decrements the product's counter and appends the sale to a stream; a persister in each instance writes the stream into MariaDB in batches and acknowledges after COMMIT. Answers before the sale is durable: GET /stock shows what is pending, and what a Redis crash loses depends on Redis's persistence.",
    backend: "redis",
    safe_across_instances: true,
    fencing: "not needed",
    // Its persister's (a batch of one per sequential request); a 409 reads once.
    statements: Statements {
        sale: 6,
        refusal: 1,
    },
    traits: &[Trait::RecordsLater],
    chaos: &[
        // Its holder is its persister, paused before its COMMIT: another instance's
        // persister claims its entries.
        ChaosCell::new("holder-killed", None, ChaosCell::NO_LOSS),
        ChaosCell::new("redis-killed-everysec", None, MAY_LOSE),
        ChaosCell::new("redis-killed-always", None, ChaosCell::NO_LOSS),
        ChaosCell::new("redis-killed-no-persistence", None, MAY_LOSE),
        ChaosCell::new("ambiguous-commit", None, &["safe", "unavailable"]),
        // On a Redis Cluster: the selling master dies with sales its replica lacks
        // (missing from the ledger), the same with WAIT (nothing acknowledged is lost: sales stop while no
        // replica confirms), and the product's slot moved under load.
        ChaosCell::new("redis-cluster-failover", None, &["missing"]),
        ChaosCell::new(
            "redis-cluster-failover-wait",
            None,
            &["unavailable", "refused"],
        ),
        ChaosCell::new("redis-cluster-reshard", None, &["safe"]),
    ],
};

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

    /// The backlog gauge.
    fn register(&self, registry: &prometheus::Registry, _: &std::sync::Arc<dyn Probe>) {
        let registered = registry.register(Box::new(self.backlog.clone()));
        registered.expect("registered once");
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
            let mut conn = self.primary().await?.conn().0;
            let fields: HashMap<String, i64> = conn.hgetall(key).await.map_err(unavailable)?;
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
            let mut conn = self.primary().await.ok()?.conn().0;
            conn.xlen(self.settings.stream()).await.ok()
        };
        if let Ok(Some(length)) = tokio::time::timeout(Duration::from_millis(500), length).await {
            self.backlog.set(length);
        }
    }
}
