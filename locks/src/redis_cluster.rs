//! The Redis lock ([`RedisLock`]) on a Redis Cluster: what many people run (managed
//! Redis in cluster mode), and where a lock script written for one server fails.
//! Optional when copying `redis.rs`: take this file too only if you run a cluster
//! (with the `redis` crate's `cluster-async` feature).
//!
//! # One slot per lock
//! A cluster splits the keys over 16,384 slots, each served by one master; a script
//! may touch only keys of one slot, or it answers `CROSSSLOT`. The lock script touches
//! the lock hash and its token counter, and announces a release on a channel: all
//! three carry the same **hash tag** (the part in braces decides the slot), so they
//! live together. `redis.rs` does it for every key: `stock:42` becomes the hash
//! `stock:42`, the counter `{stock:42}:fence` and the channel
//! `lock-released:{stock:42}`; a key without braces hashes like its tag, so the three
//! share its slot. (A key of your own with braces in it must hold a whole tag.)
//!
//! # Waking waiters: sharded pub/sub
//! On one server, each process keeps one pattern subscription to every release. In a
//! cluster a plain `PUBLISH` goes to every node (the whole cluster carries every
//! release), and there is no sharded pattern subscription; so, as Redisson does, the
//! release is announced with `SPUBLISH` on the lock's channel, which only the lock's
//! master carries, and a waiter subscribes to that channel (`SSUBSCRIBE`, once per
//! lock and process, [`Connection::watch`]) before its next attempt. When a slot moves
//! to another master (a reshard, a failover), Redis drops its sharded subscribers with
//! a `sunsubscribe`; this file subscribes them again, on the slot's new master. Until
//! it has, waiters fall back to the holder's lease (`PTTL`), as on one server.
//!
//! # Moves and redirections
//! The `redis` crate's cluster client routes each script by its first key, follows
//! `MOVED` (the slot has a new master: it reloads the slot map), `ASK` (the slot is
//! being moved and the key is already on the target) and retries `TRYAGAIN` (a script
//! whose keys are half moved). Nothing to do here but to let it.
//!
//! # What a failover loses
//! Replication is asynchronous, here as with Sentinel: a lock the master granted and
//! had not yet sent to its replica is not on the replica promoted in its place, and a
//! second holder gets it. `WAIT` after acquiring
//! ([`RedisLock::with_min_replicas`](crate::redis_sentinel), `redis_sentinel.rs`; the
//! `WAIT` goes to the key's master) makes that window close, at a round trip and a
//! replica's acknowledgement per acquisition; fencing the writes makes it harmless.

use crate::lock::LockError;
use crate::redis::{Connection, RedisLock, Wakeups, backend};
use async_trait::async_trait;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{PushInfo, PushKind, RedisError, ScriptInvocation, Value};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot::Sender;

/// At most this many lock channels subscribed per process; past it, all are dropped
/// and waiters subscribe again as they wait.
const MAX_WATCHED: usize = 1024;

/// A cluster connection (RESP3: sharded subscriptions share it) and the lock
/// channels this process listens on.
pub struct Cluster {
    conn: ClusterConnection,
    // A std mutex: held to look up, insert or take, never across an `.await`.
    watched: Mutex<HashSet<String>>,
    pushes: Mutex<Option<UnboundedReceiver<PushInfo>>>,
}

impl Cluster {
    /// Connects to the cluster that `nodes` (`redis://host:port/`, any of its nodes)
    /// belong to; commands give up after 2 s.
    pub async fn connect(nodes: &[String]) -> Result<Cluster, RedisError> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let client = ClusterClientBuilder::new(nodes.to_vec())
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(tx)
            .connection_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2))
            .build()?;
        Ok(Cluster {
            conn: client.get_async_connection().await?,
            watched: Mutex::new(HashSet::new()),
            pushes: Mutex::new(Some(rx)),
        })
    }

    /// The cluster connection (the service's `redis-stock` shares it).
    pub fn connection(&self) -> ClusterConnection {
        self.conn.clone()
    }
}

#[async_trait]
impl Connection for Cluster {
    /// The client sends a script where its first key lives.
    async fn run(&self, _key: &str, script: &ScriptInvocation<'_>) -> Result<Value, RedisError> {
        script.invoke_async(&mut self.conn.clone()).await
    }

    /// `cmd` (`WAIT`, which names no key) goes to `key`'s master.
    async fn query(&self, key: &str, cmd: &redis::Cmd) -> Result<Value, RedisError> {
        let route = Route::with_key(key, SlotAddr::Master);
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
        self.conn.clone().route_command(cmd.clone(), routing).await
    }

    /// Wakes waiters on each `smessage`; subscribes again to a channel Redis dropped
    /// (its slot moved) while this process still listens on it.
    async fn subscribe(self: Arc<Self>, wakeups: Arc<Wakeups>, ready: Sender<()>) {
        let Some(mut pushes) = self.pushes.lock().expect("pushes poisoned").take() else {
            return;
        };
        let _ = ready.send(());
        while let Some(push) = pushes.recv().await {
            let channel = match push.data.first() {
                Some(Value::BulkString(name)) => String::from_utf8_lossy(name).into_owned(),
                _ => continue,
            };
            match push.kind {
                PushKind::SMessage => wakeups.released(&channel),
                PushKind::SUnsubscribe
                    if self.watched.lock().expect("watched").contains(&channel) =>
                {
                    tracing::debug!(%channel, "redis lock: a lock's slot moved; subscribing again");
                    let mut conn = self.conn.clone();
                    let this = self.clone();
                    tokio::spawn(async move {
                        if conn.ssubscribe(&channel).await.is_err() {
                            // The next waiter subscribes again.
                            this.watched.lock().expect("watched").remove(&channel);
                        }
                    });
                }
                _ => {}
            }
        }
    }

    // ANCHOR: watch
    /// Subscribes to `channel` (`SSUBSCRIBE`, on the lock's master) the first time a
    /// waiter of this process waits on it.
    async fn watch(&self, channel: &str) -> bool {
        let dropped = {
            let mut watched = self.watched.lock().expect("watched poisoned");
            if !watched.insert(channel.to_string()) {
                return false;
            }
            if watched.len() > MAX_WATCHED {
                let all: Vec<String> = watched.drain().filter(|c| c != channel).collect();
                watched.insert(channel.to_string());
                all
            } else {
                Vec::new()
            }
        };
        let mut conn = self.conn.clone();
        for old in dropped {
            let _ = conn.sunsubscribe(&old).await;
        }
        match conn.ssubscribe(channel).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "redis lock: SSUBSCRIBE failed; waiting on PTTL");
                self.watched.lock().expect("watched").remove(channel);
                false
            }
        }
    }
    // ANCHOR_END: watch

    fn publish(&self) -> &'static str {
        "spublish"
    }
}

impl RedisLock {
    /// The lock on the Redis Cluster `nodes` belong to; see [`RedisLock::on`].
    pub async fn connect_cluster(nodes: &[String]) -> Result<RedisLock, LockError> {
        let cluster = Cluster::connect(nodes).await.map_err(backend)?;
        Ok(RedisLock::on(Arc::new(cluster)).await)
    }
}
