//! `redis-stock` through Redis Sentinel: the primary the Sentinels name, followed
//! across failovers by the `locks` crate's [`locks::redis_sentinel::Primary`] (the
//! one the Redis lock follows). Optional in a copy: take it, with the `locks` files
//! `redis_sentinel.rs` needs and the `redis` crate's `sentinel` feature, only if you
//! run Sentinel.

use super::connection::{Conn, Connect, Endpoint, Primary};
use async_trait::async_trait;
use locks::redis_sentinel;
use redis::RedisError;

/// `redis-stock`'s endpoint for the shared settings' Redis: one server, or the
/// primary of a Sentinel deployment.
pub fn endpoint(shared: redis_sentinel::Endpoint) -> Endpoint {
    match shared {
        redis_sentinel::Endpoint::Url(url) => Endpoint::url(url),
        sentinel => Endpoint::new(Sentinel(sentinel)),
    }
}

#[derive(Debug)]
struct Sentinel(redis_sentinel::Endpoint);

#[async_trait]
impl Connect for Sentinel {
    async fn connect(&self) -> Result<Box<dyn Primary>, RedisError> {
        Ok(Box::new(redis_sentinel::Primary::connect(&self.0).await?))
    }
}

#[async_trait]
impl Primary for redis_sentinel::Primary {
    fn conn(&self) -> (Conn, u64) {
        let (conn, generation) = redis_sentinel::Primary::conn(self);
        (Conn(Box::new(conn)), generation)
    }

    async fn follow(&self, error: &RedisError, generation: u64) -> bool {
        redis_sentinel::Primary::follow(self, error, generation).await
    }
}
