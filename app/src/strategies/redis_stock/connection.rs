//! Where `redis-stock`'s Redis is, and the connection to it: one server, with the
//! `redis` crate alone (through Sentinel: [`super::sentinel`]).

use async_trait::async_trait;
use redis::RedisError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::Arc;
use std::time::Duration;

/// Where the Redis is: what connects to its primary.
#[derive(Debug, Clone)]
pub struct Endpoint(Arc<dyn Connect>);

impl Endpoint {
    pub fn new(connect: impl Connect) -> Endpoint {
        Endpoint(Arc::new(connect))
    }

    /// One server, `redis://host:port`.
    pub fn url(url: impl Into<String>) -> Endpoint {
        Endpoint::new(Url(url.into()))
    }

    pub async fn connect(&self) -> Result<Box<dyn Primary>, RedisError> {
        self.0.connect().await
    }
}

/// How an [`Endpoint`] connects.
#[async_trait]
pub trait Connect: std::fmt::Debug + Send + Sync + 'static {
    async fn connect(&self) -> Result<Box<dyn Primary>, RedisError>;
}

/// The connection to the primary, and its generation (how often it moved).
#[async_trait]
pub trait Primary: Send + Sync {
    fn conn(&self) -> (ConnectionManager, u64);

    /// After `error` on the connection of `generation`: `true` when it moved to
    /// another server. One server never moves.
    async fn follow(&self, _error: &RedisError, _generation: u64) -> bool {
        false
    }
}

#[derive(Debug)]
struct Url(String);

#[async_trait]
impl Connect for Url {
    async fn connect(&self) -> Result<Box<dyn Primary>, RedisError> {
        let client = redis::Client::open(self.0.as_str())?;
        Ok(Box::new(Single(open(&client).await?)))
    }
}

struct Single(ConnectionManager);

impl Primary for Single {
    fn conn(&self) -> (ConnectionManager, u64) {
        (self.0.clone(), 0)
    }
}

/// A connection that gives up after 2 s (connect, answer) and retries twice.
pub async fn open(client: &redis::Client) -> Result<ConnectionManager, RedisError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)))
        .set_number_of_retries(2);
    ConnectionManager::new_with_config(client.clone(), config).await
}
