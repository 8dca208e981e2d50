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

/// `redis-stock`'s own settings, and where its Redis is.
#[derive(Debug, Clone)]
pub struct RedisStockSettings {
    /// Where its keys live in Redis (`<prefix>p:<id>` counters, `<prefix>sales` the
    /// stream, ...). Instances that share a database share it.
    pub prefix: String,
    /// How long Redis remembers a sold request id, in seconds. A retry within it is
    /// answered from Redis; later, the persister finds it in `orders`.
    pub id_ttl_secs: u64,
    /// The most stream entries one persister transaction carries (at least 1).
    pub batch: u64,
    /// How long an entry may sit unacknowledged with one persister (it may have
    /// crashed) before another claims it.
    pub claim_after: Duration,
    /// The Redis, from the shared settings ([`super::RedisEndpoint`]).
    pub endpoint: Option<Endpoint>,
    /// A shard's (which of how many): it starts with its part of the epoch's stock.
    pub shard: Option<(i32, i32)>,
}

impl Default for RedisStockSettings {
    fn default() -> Self {
        RedisStockSettings {
            prefix: "stock-locks:rs:".into(),
            id_ttl_secs: 86_400,
            batch: 500,
            claim_after: Duration::from_millis(5_000),
            endpoint: None,
            shard: None,
        }
    }
}

/// Where its keys live in Redis.
impl RedisStockSettings {
    pub fn counter(&self, product_id: i64) -> String {
        format!("{}p:{product_id}", self.prefix)
    }
    pub fn request(&self, request_id: &str) -> String {
        format!("{}req:{request_id}", self.prefix)
    }
    pub fn stream(&self) -> String {
        format!("{}sales", self.prefix)
    }
    pub fn reconciling(&self) -> String {
        format!("{}reconciling", self.prefix)
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
