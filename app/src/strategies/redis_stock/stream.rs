//! What the request path (`super`) and the persister share.

use super::connection::Endpoint;
use crate::domain::error::DeductError;
use crate::strategies::contract::{Deducted, Deduction, ItemResult};
use redis::streams::StreamId;
use std::time::Duration;

/// The strategy's name, in its answers and its rows.
pub const NAME: &str = "redis-stock";

/// The consumer group of the persisters.
pub const GROUP: &str = "persisters";

/// `redis-stock`'s flags (named as their fields are), and where its Redis is.
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct RedisStockSettings {
    /// Where its keys live in Redis (`<prefix>p:<id>` counters, `<prefix>sales` the
    /// stream, ...). Instances that share a database share it.
    #[arg(long, env, default_value = "stock-locks:rs:")]
    pub redis_stock_prefix: String,

    /// How long Redis remembers a sold request id (a retry within it is answered from
    /// Redis; later, the persister finds it in `orders`), in seconds.
    #[arg(long, env, default_value_t = 86_400)]
    pub redis_stock_id_ttl_secs: u64,

    /// The most stream entries one persister transaction carries.
    #[arg(long, env, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    pub redis_stock_batch: u64,

    /// How long an entry may sit unacknowledged with one persister (it may have
    /// crashed) before another claims it, in milliseconds.
    #[arg(long, env, default_value_t = 5_000)]
    pub redis_stock_claim_ms: u64,

    /// The Redis, from the shared settings ([`super::RedisEndpoint`]).
    #[arg(skip)]
    pub endpoint: Option<Endpoint>,

    /// A shard's (which of how many): it starts with its part of the epoch's stock.
    #[arg(skip)]
    pub shard: Option<(i32, i32)>,
}

/// Where its keys live in Redis.
impl RedisStockSettings {
    pub fn counter(&self, product_id: i64) -> String {
        format!("{}p:{product_id}", self.redis_stock_prefix)
    }
    pub fn request(&self, request_id: &str) -> String {
        format!("{}req:{request_id}", self.redis_stock_prefix)
    }
    pub fn stream(&self) -> String {
        format!("{}sales", self.redis_stock_prefix)
    }
    pub fn reconciling(&self) -> String {
        format!("{}reconciling", self.redis_stock_prefix)
    }
    pub fn claim_after(&self) -> Duration {
        Duration::from_millis(self.redis_stock_claim_ms)
    }
}

/// One line of a sale as the stream carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub product_id: i64,
    pub quantity: i32,
    /// What the counter had left after this sale.
    pub left: i64,
    pub epoch: i32,
}

/// A sale as the stream carries it.
#[derive(Debug, Clone)]
pub struct Sale {
    pub entry: String,
    pub request_id: String,
    pub fingerprint: String,
    pub lines: Vec<Line>,
}

/// `p:q:left:epoch,...` (what the script writes).
pub fn parse_lines(text: &str) -> Option<Vec<Line>> {
    text.split(',')
        .map(|line| {
            let mut parts = line.split(':');
            let line = Line {
                product_id: parts.next()?.parse().ok()?,
                quantity: parts.next()?.parse().ok()?,
                left: parts.next()?.parse().ok()?,
                epoch: parts.next()?.parse().ok()?,
            };
            parts.next().is_none().then_some(line)
        })
        .collect()
}

impl Sale {
    /// The answer to the buyer, and what `orders.response` stores: the same for the
    /// request path and the persister, so a retry gets what the buyer got.
    pub fn answer(&self) -> Deducted {
        Deducted {
            deducted: true,
            request_id: self.request_id.clone(),
            strategy: NAME.to_string(),
            items: self
                .lines
                .iter()
                .map(|l| ItemResult {
                    product_id: l.product_id,
                    quantity: l.quantity,
                    remaining: l.left.clamp(0, i64::from(i32::MAX)) as i32,
                })
                .collect(),
            attempts: 1,
            stream_entry: Some(self.entry.clone()),
            ..Deducted::default()
        }
    }

    /// The sale the script made (or stored) for this request: `entry`, and `lines` as
    /// the script wrote them.
    pub fn read(d: &Deduction<'_>, entry: &str, lines: &str) -> Result<Sale, DeductError> {
        Ok(Sale {
            entry: entry.to_string(),
            request_id: d.order.request_id.clone(),
            fingerprint: d.fingerprint.clone(),
            lines: parse_lines(lines).ok_or_else(|| {
                DeductError::Unexpected(anyhow::anyhow!("unreadable sale {lines:?}"))
            })?,
        })
    }

    pub fn from_entry(entry: &StreamId) -> Option<Sale> {
        Some(Sale {
            entry: entry.id.clone(),
            request_id: entry.get("request_id")?,
            fingerprint: entry.get("hash")?,
            lines: parse_lines(&entry.get::<String>("items")?)?,
        })
    }
}

/// Redis failed: 503 `backend_unavailable`, its error kept as the source.
pub fn unavailable(e: redis::RedisError) -> DeductError {
    DeductError::unavailable("redis", e.to_string()).caused_by(e)
}
