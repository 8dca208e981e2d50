//! How the service registers `redis-stock` and what it shows of it beside its sales:
//! its card and flags, `pending` and the counters in `GET /stock/{id}`, the backlog
//! in `/metrics`. A copy of the strategy leaves this file out.

use super::stream::{NAME, RedisStockSettings, unavailable};
use super::{RedisStock, SOURCE};
use crate::domain::error::DeductError;
use crate::domain::probe::Probe;
use crate::strategies::card::{
    CellVerdict, ChaosCell, Family, Scenario, Served, Statements, StrategyInfo, Trait,
};
use crate::strategies::registered::Registered;
use redis::AsyncCommands;
use std::collections::HashMap;
use std::time::Duration;

/// A Redis crash without `appendfsync always` may lose acknowledged sales: missing
/// from the ledger.
const MAY_LOSE: &[CellVerdict] = &[
    CellVerdict::Safe,
    CellVerdict::Refused,
    CellVerdict::Unavailable,
    CellVerdict::Missing,
];

static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: SOURCE,
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
        ChaosCell::new(Scenario::HolderKilled, None, ChaosCell::NO_LOSS),
        ChaosCell::new(Scenario::RedisKilledEverySec, None, MAY_LOSE),
        ChaosCell::new(Scenario::RedisKilledAlways, None, ChaosCell::NO_LOSS),
        ChaosCell::new(Scenario::RedisKilledNoPersistence, None, MAY_LOSE),
        ChaosCell::new(
            Scenario::AmbiguousCommit,
            None,
            &[CellVerdict::Safe, CellVerdict::Unavailable],
        ),
        // On a Redis Cluster: the selling master dies with sales its replica lacks
        // (missing from the ledger), the same with WAIT (nothing acknowledged is lost: sales stop while no
        // replica confirms), and the product's slot moved under load.
        ChaosCell::new(
            Scenario::RedisClusterFailover,
            None,
            &[CellVerdict::Missing],
        ),
        ChaosCell::new(
            Scenario::RedisClusterFailoverWait,
            None,
            &[CellVerdict::Unavailable, CellVerdict::Refused],
        ),
        ChaosCell::new(Scenario::RedisClusterReshard, None, &[CellVerdict::Safe]),
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

/// Its flags (named as their fields are).
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct Flags {
    /// Where its keys live in Redis (`<prefix>p:<id>` counters, `<prefix>sales` the
    /// stream, ...). Instances that share a database share it.
    #[arg(long, env, default_value_t = RedisStockSettings::default().prefix)]
    pub redis_stock_prefix: String,

    /// How long Redis remembers a sold request id (a retry within it is answered from
    /// Redis; later, the persister finds it in `orders`), in seconds.
    #[arg(long, env, default_value_t = RedisStockSettings::default().id_ttl_secs)]
    pub redis_stock_id_ttl_secs: u64,

    /// The most stream entries one persister transaction carries.
    #[arg(long, env, default_value_t = RedisStockSettings::default().batch, value_parser = clap::value_parser!(u64).range(1..))]
    pub redis_stock_batch: u64,

    /// How long an entry may sit unacknowledged with one persister (it may have
    /// crashed) before another claims it, in milliseconds.
    #[arg(long, env, default_value_t = RedisStockSettings::default().claim_after.as_millis() as u64)]
    pub redis_stock_claim_ms: u64,
}

/// The settings its flags make; its Redis comes from the shared settings at build.
impl Registered for RedisStock {
    type Flags = Flags;

    fn card() -> &'static StrategyInfo {
        &INFO
    }

    fn settings(flags: &Flags) -> RedisStockSettings {
        RedisStockSettings {
            prefix: flags.redis_stock_prefix.clone(),
            id_ttl_secs: flags.redis_stock_id_ttl_secs,
            batch: flags.redis_stock_batch,
            claim_after: Duration::from_millis(flags.redis_stock_claim_ms),
            ..RedisStockSettings::default()
        }
    }
}

#[async_trait::async_trait(?Send)]
impl Served for RedisStock {
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
