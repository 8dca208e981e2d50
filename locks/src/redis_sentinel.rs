//! The primary that Redis Sentinel names, followed across failovers: for the Redis
//! lock ([`RedisLock::connect_to`]) and for any other Redis user of the same
//! deployment (the service's `redis-stock`). Optional when copying `redis.rs`: take
//! this file too only if you run Sentinel (with the `redis` crate's `sentinel`
//! feature).
//!
//! # What it does not fix
//! [`RedisLock::connect_to`] with [`Endpoint::Sentinel`] asks the Sentinels which server
//! is the primary, and asks again when a command fails the way a dead or demoted
//! primary fails (connection refused or dropped, a timeout, `READONLY`): after a
//! failover the next command goes to the new primary, and the failed one is retried
//! there once. That keeps the lock *available*. It does not keep it *safe*: replication
//! is asynchronous, so a lock the old primary granted and had not yet sent to the
//! replica is simply not on the new primary, and a second holder gets it (the chaos
//! scenario `redis-failover` makes exactly that happen).
//!
//! The usual mitigation is [`RedisLock::with_min_replicas`]: each attempt to take the
//! lock goes with `WAIT n timeout`, and a lock fewer than `n` replicas acknowledged in
//! time is given back (an error). A lock is then granted only once a replica has it,
//! so a failover to that replica keeps it. The two go in one pipeline, on one
//! connection: `WAIT` counts the replicas that have every write of *its own*
//! connection, so a `WAIT` sent after a reconnection, or after this file followed a
//! failover, would vouch for writes that are not the lock. It costs the replica's
//! acknowledgement per attempt, and it trades availability for it: with fewer than `n`
//! replicas reachable nobody gets the lock. It is not consensus either: Sentinel may
//! still promote a replica that had not acknowledged (with several replicas), and a
//! replica that restarts empty forgets. For a guarantee, fence the writes.

use crate::lock::LockError;
use crate::redis::{Connection, RedisLock, Wakeups, open, pipelined, subscribe};
use async_trait::async_trait;
use redis::aio::ConnectionManager;
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{ErrorKind, RedisError, ScriptInvocation, ServerErrorKind, Value};
use std::sync::{Arc, Mutex};

/// Where the lock's Redis is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// One server, `redis://host:port`.
    Url(String),
    /// The primary the Sentinels (`host:port` each) name for `master`, followed across
    /// failovers.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
    },
}

/// The connection to the primary: one server, or the one the Sentinels name, moved to
/// the new primary after a failover (`generation` counts the moves). Public so that
/// other Redis users of the same deployment (the service's `redis-stock`) follow a
/// failover the same way.
pub struct Primary {
    sentinel: Option<tokio::sync::Mutex<SentinelClient>>,
    // A std mutex: held to clone or replace the connection, never across an `.await`.
    current: Mutex<Current>,
}

struct Current {
    client: redis::Client,
    conn: ConnectionManager,
    /// The lock's attempts that wait for replicas: see [`Connection::run_then`].
    waits: ConnectionManager,
    generation: u64,
}

impl Primary {
    /// Connects (through Sentinel: to the primary it names now).
    pub async fn connect(endpoint: &Endpoint) -> Result<Primary, RedisError> {
        let (sentinel, client) = match endpoint {
            Endpoint::Url(url) => (None, redis::Client::open(url.as_str())?),
            Endpoint::Sentinel { sentinels, master } => {
                let urls: Vec<String> = sentinels.iter().map(|s| format!("redis://{s}")).collect();
                let mut sentinel =
                    SentinelClient::build(urls, master.clone(), None, SentinelServerType::Master)?;
                let client = sentinel.async_get_client().await?;
                (Some(tokio::sync::Mutex::new(sentinel)), client)
            }
        };
        let (conn, waits) = (open(&client).await?, open(&client).await?);
        Ok(Primary {
            sentinel,
            current: Mutex::new(Current {
                client,
                conn,
                waits,
                generation: 0,
            }),
        })
    }
}

#[async_trait]
impl Connection for Primary {
    /// Runs a script on the primary; after a failover, once more on the new one.
    async fn run(&self, _key: &str, script: &ScriptInvocation<'_>) -> Result<Value, RedisError> {
        let (mut conn, generation) = self.conn();
        match script.invoke_async(&mut conn).await {
            Err(e) if self.follow(&e, generation).await => {
                script.invoke_async(&mut self.conn().0).await
            }
            answer => answer,
        }
    }

    /// Runs a script and `then` on the primary; after a failover, once more on the
    /// new one (the two together: `then` is `WAIT`, which speaks for its connection).
    async fn run_then(
        &self,
        _key: &str,
        script: &ScriptInvocation<'_>,
        then: &redis::Cmd,
    ) -> Result<(Value, Value), RedisError> {
        let (mut waits, generation) = self.waits();
        match pipelined(&mut waits, script, then).await {
            Err(e) if self.follow(&e, generation).await => {
                pipelined(&mut self.waits().0, script, then).await
            }
            answer => answer,
        }
    }

    async fn subscribe(
        self: Arc<Self>,
        wakeups: Arc<Wakeups>,
        ready: tokio::sync::oneshot::Sender<()>,
    ) {
        subscribe(|| self.client(), wakeups, ready).await
    }
}

impl Primary {
    /// The connection now, and its generation (pass it to [`Primary::follow`]).
    pub fn conn(&self) -> (ConnectionManager, u64) {
        let current = self.current.lock().expect("primary poisoned");
        (current.conn.clone(), current.generation)
    }

    /// The connection of the lock's attempts that wait for replicas, and its
    /// generation.
    fn waits(&self) -> (ConnectionManager, u64) {
        let current = self.current.lock().expect("primary poisoned");
        (current.waits.clone(), current.generation)
    }

    /// A client for the primary of now (the release subscription opens its own).
    pub fn client(&self) -> redis::Client {
        self.current
            .lock()
            .expect("primary poisoned")
            .client
            .clone()
    }

    /// After `error` on the connection of `generation`: `true` when it moved to
    /// another server (retry there, once). With Sentinel, and an error a dead or
    /// demoted primary gives, asks which server is the primary now and moves there.
    pub async fn follow(&self, error: &RedisError, generation: u64) -> bool {
        let Some(sentinel) = &self.sentinel else {
            return false;
        };
        let gone = error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.is_timeout()
            || error.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly);
        if !gone {
            return false;
        }
        // One question to Sentinel at a time; whoever waited finds the move made.
        let mut sentinel = sentinel.lock().await;
        if self.conn().1 != generation {
            return true;
        }
        let Ok(client) = sentinel.async_get_client().await else {
            return false;
        };
        let same = {
            let current = self.current.lock().expect("primary poisoned");
            client.get_connection_info().addr() == current.client.get_connection_info().addr()
        };
        // Sentinel still names the failed server: it has not failed over (yet).
        if same {
            return false;
        }
        let (Ok(conn), Ok(waits)) = (open(&client).await, open(&client).await) else {
            return false;
        };
        tracing::warn!(primary = %client.get_connection_info().addr(), "redis lock: following a failover to the new primary");
        let mut current = self.current.lock().expect("primary poisoned");
        *current = Current {
            client,
            conn,
            waits,
            generation: generation + 1,
        };
        true
    }
}

impl RedisLock {
    /// Connects (through Sentinel: to the primary it names, followed across
    /// failovers); see [`RedisLock::on`].
    pub async fn connect_to(endpoint: &Endpoint) -> Result<RedisLock, LockError> {
        let primary = Primary::connect(endpoint)
            .await
            .map_err(crate::redis::backend)?;
        Ok(RedisLock::on(Arc::new(primary)).await)
    }
}
