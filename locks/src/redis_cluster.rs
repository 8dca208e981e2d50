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
//! share its slot. A key with braces in it is taken as it is: it must hold a
//! non-empty tag (`{stock}:42`) before any other brace, or its three names fall in
//! different slots and the cluster answers `CROSSSLOT`.
//!
//! # Waking waiters: sharded pub/sub
//! On one server, each process keeps one pattern subscription to every release. In a
//! cluster a plain `PUBLISH` goes to every node (the whole cluster carries every
//! release), and there is no sharded pattern subscription; so, as Redisson does, the
//! release is announced with `SPUBLISH` on the lock's channel, which only the lock's
//! master carries, and a waiter subscribes to that channel (`SSUBSCRIBE`, once per
//! lock and process, [`Connection::watch`]) before its next attempt. When a slot moves
//! to another master in a reshard, Redis drops its sharded subscribers with a
//! `sunsubscribe`, and this file subscribes them again, on the slot's new master;
//! after a failover or a reconnection the `redis` crate subscribes again by itself. A
//! release announced in between reaches nobody, so each new subscription also wakes a
//! waiter of its lock, which tries again (a spare attempt, never a missed release).
//! Until then waiters fall back to the holder's lease (`PTTL`), as on one server.
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
//! second holder gets it. `WAIT` with each attempt ([`RedisLock::with_min_replicas`];
//! script and `WAIT` in one pipeline, which goes to the master of the key's slot and is
//! redirected or retried as one) narrows that window, at a replica's acknowledgement
//! per attempt. It does not close it: renewals are not waited for, and the cluster may
//! promote a replica that had not acknowledged. Fencing the writes makes a second
//! holder harmless.

use crate::lock::LockError;
use crate::redis::{Connection, RedisLock, Wakeups, backend};
use async_trait::async_trait;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, RedisError, ScriptInvocation, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot::Sender;

/// Past this many lock channels subscribed by one process, those no waiter asked for
/// in [`IDLE`] are dropped (a waiter asks each time it goes back to sleep, and sleeps
/// at most its wait, or the holder's lease when no release comes).
const MAX_WATCHED: usize = 1024;

/// How long a subscription may go without a waiter asking for it before it may go.
const IDLE: Duration = Duration::from_secs(120);

/// A cluster connection (RESP3: sharded subscriptions share it) and the lock
/// channels this process listens on, each with when a waiter last asked for it.
pub struct Cluster {
    client: ClusterClient,
    conn: ClusterConnection,
    /// The attempts that wait for replicas (opened on the first): see
    /// [`Connection::run_then`].
    waits: OnceCell<ClusterConnection>,
    // A std mutex: held to look up, insert or take, never across an `.await`.
    watched: Mutex<HashMap<String, Instant>>,
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
            client,
            waits: OnceCell::new(),
            watched: Mutex::new(HashMap::new()),
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

    /// The pipeline goes where the script's first key lives (`then`, `WAIT`, names
    /// no key: sent alone, the client would send it to every master).
    async fn run_then(
        &self,
        _key: &str,
        script: &ScriptInvocation<'_>,
        then: &redis::Cmd,
    ) -> Result<(Value, Value), RedisError> {
        let connect = || self.client.get_async_connection();
        let waits = self.waits.get_or_try_init(connect).await?;
        crate::redis::pipelined(&mut waits.clone(), script, then).await
    }

    /// Wakes a waiter on each `smessage`, and on each new subscription of a channel
    /// (a release may have gone unheard before it); subscribes again to a channel Redis
    /// dropped (its slot moved) while this process still listens on it.
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
            let watched = self.watched.lock().expect("watched").contains_key(&channel);
            match push.kind {
                PushKind::SMessage => wakeups.released(&channel),
                PushKind::SSubscribe if watched => wakeups.released(&channel),
                PushKind::SUnsubscribe if watched => {
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
        let now = Instant::now();
        let idle = {
            let mut watched = self.watched.lock().expect("watched poisoned");
            if watched.insert(channel.to_string(), now).is_some() {
                return false;
            }
            let mut idle = Vec::new();
            if watched.len() > MAX_WATCHED {
                watched.retain(|c, asked| {
                    let keep = now.duration_since(*asked) < IDLE;
                    if !keep {
                        idle.push(c.clone());
                    }
                    keep
                });
            }
            idle
        };
        if !idle.is_empty() {
            let mut conn = self.conn.clone();
            tokio::spawn(async move { conn.sunsubscribe(idle).await });
        }
        match self.conn.clone().ssubscribe(channel).await {
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
