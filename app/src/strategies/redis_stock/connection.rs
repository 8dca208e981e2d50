//! Where `redis-stock`'s Redis is, and the connection to it: one server, with the `redis`
//! crate alone (through Sentinel: [`super::sentinel`]; a Redis Cluster: [`super::cluster`]).

use super::RedisStock;
use crate::strategies::contract::Strategy;
use async_trait::async_trait;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};
use std::sync::Arc;
use std::time::Duration;

/// Where the Redis is: what connects to its primary.
#[derive(Debug, Clone)]
pub struct Endpoint(pub Arc<dyn Connect>);

impl Endpoint {
    pub fn new(connect: impl Connect) -> Endpoint {
        Endpoint(Arc::new(connect))
    }

    /// One server, `redis://host:port`.
    pub fn url(url: impl Into<String>) -> Endpoint {
        Endpoint::new(Url(url.into()))
    }
}

/// How an [`Endpoint`] connects.
#[async_trait]
pub trait Connect: std::fmt::Debug + Send + Sync + 'static {
    async fn connect(&self) -> Result<Box<dyn Primary>, RedisError>;

    /// `stock` itself, unless this Redis needs more of it (a cluster: shards).
    fn strategy(&self, stock: RedisStock) -> Arc<dyn Strategy> {
        Arc::new(stock)
    }
}

/// A connection of any kind the `redis` crate has (to one server, or to a cluster).
pub struct Conn(pub Box<dyn ConnectionLike + Send + Sync>);

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.0.req_packed_command(cmd)
    }
    fn req_packed_commands<'a>(
        &'a mut self,
        p: &'a Pipeline,
        at: usize,
        n: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(p, at, n)
    }
    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

/// The connection to the primary, and its generation (how often it moved).
#[async_trait]
pub trait Primary: Send + Sync {
    fn conn(&self) -> (Conn, u64);

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
    fn conn(&self) -> (Conn, u64) {
        (Conn(Box::new(self.0.clone())), 0)
    }
}

/// A connection that gives up after 2 s (connect, answer) and retries twice.
///
/// The same settings as the Redis lock's connection (`locks::redis::open`), kept here
/// on purpose: a copy of this strategy takes no lock crate, and the counter's
/// timeouts may one day differ from a lock's.
pub async fn open(client: &redis::Client) -> Result<ConnectionManager, RedisError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)))
        .set_number_of_retries(2);
    ConnectionManager::new_with_config(client.clone(), config).await
}
