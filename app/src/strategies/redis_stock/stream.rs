//! What the request path and the persister share: where the keys live in Redis,
//! the settings, and a sale as the stream carries it. Uses the strategies'
//! contract; the request path (`super`) and the persister use it.

use crate::domain::error::DeductError;
use crate::strategies::contract::{Deducted, ItemResult};
use locks::redis_sentinel::Endpoint;
use redis::streams::StreamId;
use std::time::Duration;

/// The strategy's name, in its answers and its rows.
pub const NAME: &str = "redis-stock";

/// The consumer group of the persisters.
pub const GROUP: &str = "persisters";

/// Where this service's keys live in Redis: `<prefix>p:<id>` (counters),
/// `<prefix>req:<request_id>`, `<prefix>sales` (the stream), `<prefix>reconciling`.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.to_string(),
        }
    }
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
    /// The pattern every counter key matches (`SCAN`).
    pub fn counters(&self) -> String {
        format!("{}p:*", self.prefix)
    }
}

/// The settings of `redis-stock` and its persister.
#[derive(Debug, Clone)]
pub struct RedisStockConfig {
    /// The Redis (the first of `REDIS_URLS`, or the primary of `REDIS_SENTINELS`).
    pub endpoint: Option<Endpoint>,
    pub keys: Keys,
    /// How long a request key answers retries from Redis.
    pub id_ttl_secs: u64,
    /// Entries one persister transaction carries at most.
    pub batch: usize,
    /// How long an entry may sit unacknowledged with a consumer before another claims it.
    pub claim_after: Duration,
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
            fence_token: None,
            lock_lost_after_commit: false,
            duplicate: false,
            batch_size: None,
            stream_entry: Some(self.entry.clone()),
        }
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

pub fn unavailable(e: impl std::fmt::Display) -> DeductError {
    DeductError::BackendUnavailable {
        backend: "redis".into(),
        detail: e.to_string(),
    }
}
