//! `redis-stock` on a Redis Cluster. Optional in a copy: take it (with
//! `lua/redis_stock_shard.lua` and the `redis` crate's `cluster-async` feature) only
//! if you run a cluster.
//!
//! # Partitions: one slot for each script
//! A script may only touch keys of one slot (else `CROSSSLOT`), and the sale script
//! touches a counter, the request's key, the stream and the reconciling flag. So the
//! keys are split into `--redis-stock-partitions` partitions, each a prefix holding a
//! **hash tag** (`{stock-locks:rs:1.4}:`): a partition's keys share one slot, and
//! partition `j`'s tag is the first whose slot lies in the `j`-th equal part of the
//! 16,384 slots, so partitions fall on different masters of an evenly split cluster
//! (a pure function: every instance finds the same tags). Each partition has its own
//! stream and its own persister (on its own connection, pinned to the partition's
//! master), which reconciles its partition when that master's `run_id` changes.
//!
//! # Shards: one hot product on several masters
//! With `--redis-stock-shards K` (it must divide the partitions), a product's stock
//! is split into K counters in K partitions `P/K` apart (on different masters): shard
//! `i` starts with its part of the epoch's `initial_quantity` (never of `quantity`,
//! which the persister lowers meanwhile). A request sells in its **home** shard (its
//! request id's hash), where its request key is kept, else:
//! 1. **Read every shard** (this file's script, `read`): a shard that holds the
//!    request's key already sold it (a retry): it answers the duplicate. Then the
//!    first shard that can fill the request sells it.
//! 2. **No shard can, and together they hold less**: the shards are read a second
//!    time, and if no shard changed its `gen` in between, the request is refused
//!    (409). Exact: between two merges a shard only shrinks, and a merge (below)
//!    changes every shard's `gen`; so at the last read of the first round every shard
//!    held at most what was read, together less than asked: a "sold out" true at that
//!    moment, which the history checker can judge.
//! 3. **No shard can, but together they can** (a request for more than one shard
//!    holds): a **merge**. Every shard is frozen (`freeze`: its units set aside, `gen`
//!    made odd; a frozen shard sells nothing and is waited for), then the other
//!    shards are thawed empty, then the home shard is thawed with all the units, and
//!    the request sells there. A freeze lasts at most 2 s: a shard whose merger died
//!    takes its units back at its next read. Thawing the others first means a merger
//!    that dies midway loses their units (sold nowhere: an undersell the history
//!    checker reports as a false sold-out) rather than selling them twice.
//!
//! An order of several products runs in one script, so it needs its products in one
//! partition: with shards, or with products in different partitions, it is refused
//! with a 400 naming the reason.
//!
//! # What it does not cover
//! - A master lost without its replica having a shard (see the book's failover
//!   chapter): the shard starts again from its part of `initial_quantity`, and what it
//!   had sold and recorded sells again in Redis; the database's `CHECK` refuses the
//!   excess, which stays `pending` (as after a restore from an old snapshot). The
//!   reconciliation after a failover only ever lowers a counter: it cannot tell a
//!   shard's part of the product from the rest.
//! - A retry whose first sale was in another shard than its home sells again in Redis
//!   when its home has units again (a restock, a merge, a merge given back, an expired
//!   freeze), and is answered as a new sale, not as a duplicate; the persister finds
//!   its id in `orders` and gives the units back (step 4 of `super`), so the database
//!   records it once, as for a late retry. (The persister tells the two sales apart
//!   by their stream entry ids, which two partitions' streams could share.)
//! - A late duplicate's units given back by the persister grow a shard without moving
//!   its `gen`: a refusal racing that give-back may come early by those units; given
//!   back while the shard is frozen, they are lost with the thaw. A thaw retried by the
//!   cluster client after a lost answer answers "lost", and the merge drops those
//!   units. Each undersells, never oversells.
//! - Waits: with `--redis-stock-min-replicas`, every script of the sale path and of a
//!   merge is followed by `WAIT` ([`Waiting`]), which holds up that master's
//!   connection of this process until the replicas answer.

use super::RedisStock;
use super::connection::{Conn, Connect, Endpoint, Primary};
use super::persister::persist_forever;
use super::stream::{NAME, RedisStockSettings, unavailable};
use crate::domain::error::DeductError;
use crate::strategies::contract::{Deducted, Deduction, Started, Strategy};
use anyhow::Context;
use async_trait::async_trait;
use redis::aio::ConnectionLike;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{AsyncCommands, Cmd, Pipeline, RedisError, RedisFuture, Script, Value};
use sqlx::MySqlPool;
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

static SHARD: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/redis_stock_shard.lua")));

/// How long a merge may keep the shards frozen.
const FREEZE_MS: u64 = 2_000;

/// Rounds of selling, reading and merging before answering 503 `busy`.
const ROUNDS: usize = 8;

/// How `redis-stock` lays its keys out on a cluster, and what a sale waits for.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// Partitions (hash tags) the keys are spread over.
    pub partitions: u32,
    /// Counters each product's stock is split into (it must divide `partitions`).
    pub shards: u32,
    /// Replicas that must have a sale before the buyer hears of it (0: none).
    pub min_replicas: u32,
    /// How long a sale waits for them.
    pub replica_timeout: Duration,
}

impl Layout {
    /// The shards must divide the partitions (a product's shards `P/K` apart).
    fn check(&self) -> Result<(), String> {
        let Layout {
            partitions, shards, ..
        } = *self;
        match partitions.is_multiple_of(shards) {
            true => Ok(()),
            false => Err(format!(
                "--redis-stock-shards ({shards}) must divide --redis-stock-partitions ({partitions})"
            )),
        }
    }
}

/// `redis-stock`'s endpoint on the cluster `nodes` (`redis://host:port/`) belong to.
pub fn endpoint(nodes: Vec<String>, layout: Layout) -> Endpoint {
    Endpoint::new(Nodes {
        nodes,
        layout,
        pin: None,
    })
}

#[derive(Debug, Clone)]
struct Nodes {
    nodes: Vec<String>,
    layout: Layout,
    /// A partition's persister: every command goes to this key's master (`INFO` and
    /// `SCAN` too, which name no key).
    pin: Option<String>,
}

#[async_trait]
impl Connect for Nodes {
    async fn connect(&self) -> Result<Box<dyn Primary>, RedisError> {
        if let Err(detail) = self.layout.check() {
            return Err((
                redis::ErrorKind::InvalidClientConfig,
                "misconfigured",
                detail,
            )
                .into());
        }
        let pin = self.pin.as_deref().map(to_master_of);
        Ok(Box::new(Cluster {
            conn: self.cluster().await?,
            pin,
            wait: None,
        }))
    }

    /// The strategy with its partitions (each pinned for its persister) and shards.
    fn strategy(&self, stock: RedisStock) -> Arc<dyn Strategy> {
        let partitions = partitions(&stock.settings, self.layout.partitions)
            .into_iter()
            .map(|partition| {
                let pin = Some(partition.stream());
                let endpoint = Endpoint::new(Nodes {
                    pin,
                    ..self.clone()
                });
                RedisStockSettings {
                    endpoint: Some(endpoint),
                    ..partition
                }
            })
            .collect();
        Arc::new(Sharded {
            stock,
            partitions,
            layout: self.layout,
            nodes: self.clone(),
            cluster: tokio::sync::OnceCell::new(),
            pool: OnceLock::new(),
        })
    }
}

impl Nodes {
    /// A connection to the cluster; commands give up after 2 s.
    async fn cluster(&self) -> Result<ClusterConnection, RedisError> {
        let client = ClusterClientBuilder::new(self.nodes.clone())
            .connection_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2))
            .build()?;
        client.get_async_connection().await
    }
}

/// A command's route to the master serving `key`'s slot.
fn to_master_of(key: &str) -> RoutingInfo {
    let route = Route::with_key(key, SlotAddr::Master);
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route))
}

/// The settings of each of `count` partitions: the prefix with its hash tag.
fn partitions(settings: &RedisStockSettings, count: u32) -> Vec<RedisStockSettings> {
    let slot = |key: &str| {
        let slot = Slot::for_key(key);
        (0..16_384_u32).find(|n| Slot::new(*n as u16) == Some(slot))
    };
    (0..count)
        .map(|j| {
            let part = j * 16_384 / count..(j + 1) * 16_384 / count;
            let tag = (0..)
                .map(|n| format!("{}{j}.{n}", settings.prefix))
                .find(|tag| slot(tag).is_some_and(|s| part.contains(&s)))
                .expect("every part of the slots has a tag");
            RedisStockSettings {
                prefix: format!("{{{tag}}}:"),
                ..settings.clone()
            }
        })
        .collect()
}

/// A request's home shard: a hash of its id (the same in every instance).
fn home(request_id: &str, shards: usize) -> usize {
    let hash = request_id
        .bytes()
        .fold(0_u64, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
    (hash % shards as u64) as usize
}

struct Cluster {
    conn: ClusterConnection,
    pin: Option<RoutingInfo>,
    /// The sale path's: each script followed by `WAIT` for this many replicas.
    wait: Option<(u32, Duration)>,
}

impl Primary for Cluster {
    /// Without a pin, the client sends each command where its first key lives.
    fn conn(&self) -> (Conn, u64) {
        let conn = self.conn.clone();
        match (self.pin.clone(), self.wait) {
            (Some(routing), _) => (Conn(Box::new(Pinned(conn, routing))), 0),
            (None, Some((replicas, timeout))) => {
                let waiting = Waiting {
                    conn,
                    replicas,
                    timeout,
                };
                (Conn(Box::new(waiting)), 0)
            }
            (None, None) => (Conn(Box::new(conn)), 0),
        }
    }
}

/// A cluster connection that sends every command to one master (a pipeline goes
/// where its keys say: the persister's one, joining the reconciling flag, has only
/// the flag's key, which lives on that master).
struct Pinned(ClusterConnection, RoutingInfo);

impl ConnectionLike for Pinned {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.0.route_command(cmd.clone(), self.1.clone()))
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
        0
    }
}

/// The sale path's connection with `--redis-stock-min-replicas`: each script goes
/// with a `WAIT` in one pipeline, routed by the script's key, so the `WAIT` runs on the
/// node and the connection that ran the script, right after it, and a redirection or
/// a retry moves the two together. (`WAIT` counts the replicas that have every write
/// of its own connection: sent on its own, it has no key, and the cluster client sends
/// it to every master, where other connections of this client may have written
/// nothing.) Fewer replicas within the timeout: an I/O error, which the sale answers
/// `outcome_unknown` (the sale is on the master; a failover may lose it).
struct Waiting {
    conn: ClusterConnection,
    replicas: u32,
    timeout: Duration,
}

impl ConnectionLike for Waiting {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            // A command with no key (`SCRIPT LOAD`) goes as the cluster client sends it.
            let script = matches!(cmd.args_iter().next(), Some(redis::Arg::Simple(name))
                if name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL"));
            if !script {
                return self.conn.req_packed_command(cmd).await;
            }
            let mut pipeline = redis::pipe();
            let ms = self.timeout.as_millis() as u64;
            pipeline
                .add_command(cmd.clone())
                .cmd("WAIT")
                .arg(self.replicas)
                .arg(ms);
            let mut values: Vec<Value> = pipeline.query_async(&mut self.conn).await?;
            let acked = values
                .get(1)
                .and_then(|v| redis::from_redis_value_ref::<u32>(v).ok());
            if acked.unwrap_or(0) < self.replicas {
                let detail = format!(
                    "the script ran on the master, acknowledged by {} of the {} replica(s) required within {:?}; a failover may lose it",
                    acked.unwrap_or(0),
                    self.replicas,
                    self.timeout
                );
                return Err(std::io::Error::other(detail).into());
            }
            Ok(values.swap_remove(0))
        })
    }
    fn req_packed_commands<'a>(
        &'a mut self,
        p: &'a Pipeline,
        at: usize,
        n: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.conn.req_packed_commands(p, at, n)
    }
    fn get_db(&self) -> i64 {
        0
    }
}

/// `redis-stock` on a cluster: [`RedisStock`]'s sale in partitions and shards.
struct Sharded {
    stock: RedisStock,
    partitions: Vec<RedisStockSettings>,
    layout: Layout,
    nodes: Nodes,
    /// The connection of the sales and of their `WAIT` (which counts the replicas
    /// that have every write this connection sent to the master).
    cluster: tokio::sync::OnceCell<ClusterConnection>,
    /// For `GET /stock`, which creates missing shards as a sale would.
    pool: OnceLock<MySqlPool>,
}

/// A shard as `read` saw it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    stock: i64,
    pending: i64,
    generation: i64,
    epoch: i64,
}

/// What reading a shard found.
enum Read {
    Seen(Seen),
    /// Its partition holds the request's key: it sold this request already.
    Sold,
}

#[async_trait(?Send)]
impl Strategy for Sharded {
    fn name(&self) -> &'static str {
        NAME
    }

    /// A persister per partition, each on its own connection to its master.
    fn start(&self, started: &Started<'_>) -> Option<tokio::task::JoinHandle<()>> {
        let _ = self.pool.set(started.pool.clone());
        let (pool, probe) = (started.pool.clone(), started.probe.clone());
        let persisters: Vec<_> = self
            .partitions
            .iter()
            .cloned()
            .map(|settings| persist_forever(settings, pool.clone(), probe.clone()))
            .collect();
        Some(tokio::spawn(async move {
            futures::future::join_all(persisters).await;
        }))
    }

    /// Every shard of an older epoch than the database's goes (best effort, as on one
    /// server): the next sale makes it anew. Compared in the script: a shard a sale
    /// already made in the new epoch stays (deleted, it would sell its part twice).
    async fn restocked(&self, product_id: i64) {
        let retired = async {
            let pool = self.pool.get().context("not started")?;
            let epoch: i32 = sqlx::query_scalar("SELECT epoch FROM stock WHERE product_id = ?")
                .bind(product_id)
                .fetch_one(pool)
                .await?;
            self.retire(product_id, epoch.into()).await?;
            anyhow::Ok(())
        };
        if let Err(e) = retired.await {
            tracing::warn!(product_id, error = %e, "redis-stock: shards not reset after a restock");
        }
    }

    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        let stock = &self.stock;
        if d.knobs.hold_ms.is_some() {
            return stock.deduct(d).await; // Its 400.
        }
        self.cluster().await?;
        let items = &d.order.items;
        let shards = self.shards(items[0].product_id);
        let partition = |product_id| self.shards(product_id)[0].prefix.clone();
        let apart = items
            .iter()
            .any(|i| partition(i.product_id) != shards[0].prefix);
        if items.len() > 1 && (shards.len() > 1 || apart) {
            return Err(DeductError::InvalidRequest(
                "items: on a Redis Cluster redis-stock sells an order in one script, so its products must share a partition (and not be split into shards); send one product per order".into(),
            ));
        }
        if shards.len() == 1 {
            return self.sell(&shards[0], d).await;
        }
        // ANCHOR: sharded
        let (item, request) = (items[0], d.order.request_id.as_str());
        let h = home(request, shards.len());
        let wanted = i64::from(item.quantity);
        for round in 0..ROUNDS {
            // Most sales end here: the home shard, one script.
            match self.sell(&shards[h], d).await {
                Err(DeductError::InsufficientStock { .. }) => {}
                sold_or_failed => return sold_or_failed,
            }
            // 1. Every shard (a retry finds its first sale's shard here).
            let first = match self.read(&shards, d.pool, item.product_id, request).await? {
                Ok(first) => first,
                Err(sold) => return self.sell(&shards[sold], d).await,
            };
            let settled = first
                .iter()
                .all(|s| s.generation % 2 == 0 && s.epoch == first[0].epoch);
            if !settled {
                // A shard of an older epoch: a restock that did not reach it (its
                // delete is best effort). It goes; the next read makes it anew.
                let newest = first.iter().map(|s| s.epoch).max().unwrap_or_default();
                if first.iter().all(|s| s.generation % 2 == 0) {
                    self.retire(item.product_id, newest).await?;
                }
                tokio::time::sleep(Duration::from_millis(1 << round.min(5))).await;
                continue;
            }
            if let Some(j) = first.iter().position(|s| s.stock >= wanted) {
                match self.sell(&shards[j], d).await {
                    Err(DeductError::InsufficientStock { .. }) => continue,
                    sold_or_failed => return sold_or_failed,
                }
            }
            // 3. Together they can: merge them into the home shard, and sell there.
            let total: i64 = first.iter().map(|s| s.stock).sum();
            if total >= wanted {
                self.merge(&shards, h, item.product_id, first[0].epoch)
                    .await?;
                continue;
            }
            // 2. Together they cannot: refused if no shard's `gen` moved meanwhile.
            let again = self.read(&shards, d.pool, item.product_id, request).await?;
            if again.is_ok_and(|again| {
                again
                    .iter()
                    .zip(&first)
                    .all(|(a, f)| a.generation == f.generation && a.epoch == f.epoch)
            }) {
                return Err(DeductError::InsufficientStock {
                    product_id: item.product_id,
                    requested: wanted,
                    available: Some(total),
                });
            }
        }
        Err(DeductError::Busy(format!(
            "redis-stock: the shards of product {} kept changing ({ROUNDS} rounds)",
            item.product_id
        )))
        // ANCHOR_END: sharded
    }
}

impl Sharded {
    /// Sells in the shard of `settings` (on the sale path's connection: see [`Waiting`]).
    async fn sell(
        &self,
        settings: &RedisStockSettings,
        d: &Deduction<'_>,
    ) -> Result<Deducted, DeductError> {
        self.cluster().await?;
        self.stock.sell(settings, d).await
    }

    /// The cluster connection, made the sale path's too ([`RedisStock::sell`] takes
    /// its primary's), with `--redis-stock-min-replicas` each of its scripts followed
    /// by `WAIT` ([`Waiting`]).
    async fn cluster(&self) -> Result<&ClusterConnection, DeductError> {
        self.layout
            .check()
            .map_err(|detail| DeductError::unavailable("redis", detail))?;
        let conn = self
            .cluster
            .get_or_try_init(|| self.nodes.cluster())
            .await
            .map_err(unavailable)?;
        if !self.stock.primary.initialized() {
            let Layout {
                min_replicas,
                replica_timeout,
                ..
            } = self.layout;
            let cluster = Cluster {
                conn: conn.clone(),
                pin: None,
                wait: (min_replicas > 0).then_some((min_replicas, replica_timeout)),
            };
            let _ = self.stock.primary.set(Box::new(cluster));
        }
        Ok(conn)
    }

    /// Deletes every shard of `product_id` of an epoch older than `epoch`.
    async fn retire(&self, product_id: i64, epoch: i64) -> Result<(), DeductError> {
        let mut conn = self.conn().await?;
        for settings in self.shards(product_id) {
            let _gone: i64 = SHARD
                .key(settings.counter(product_id))
                .arg("retire")
                .arg(epoch)
                .invoke_async(&mut conn)
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }

    /// A connection to the cluster, if it answers.
    async fn conn(&self) -> Result<Conn, DeductError> {
        Ok(Conn(Box::new(self.cluster().await?.clone())))
    }

    /// The settings of each of `product_id`'s shards: shard `i` in partition
    /// `product_id + i * partitions / shards` (so a product's shards are as far apart
    /// as the partitions allow).
    fn shards(&self, product_id: i64) -> Vec<RedisStockSettings> {
        let (count, k) = (self.partitions.len() as i64, i64::from(self.layout.shards));
        (0..k)
            .map(|i| RedisStockSettings {
                shard: (k > 1).then_some((i as i32, k as i32)),
                ..self.partitions[(product_id + i * count / k).rem_euclid(count) as usize].clone()
            })
            .collect()
    }

    /// Every shard of the product, in order, creating the missing; `Err(i)` when shard
    /// `i`'s partition holds `request_id`'s key (it sold that request already).
    async fn read(
        &self,
        shards: &[RedisStockSettings],
        pool: &MySqlPool,
        product_id: i64,
        request_id: &str,
    ) -> Result<Result<Vec<Seen>, usize>, DeductError> {
        let mut seen = Vec::with_capacity(shards.len());
        for (i, settings) in shards.iter().enumerate() {
            match self
                .read_one(settings, pool, product_id, request_id)
                .await?
            {
                Read::Seen(s) => seen.push(s),
                Read::Sold => return Ok(Err(i)),
            }
        }
        Ok(Ok(seen))
    }

    /// One shard, created from the database's row if missing.
    async fn read_one(
        &self,
        settings: &RedisStockSettings,
        pool: &MySqlPool,
        product_id: i64,
        request_id: &str,
    ) -> Result<Read, DeductError> {
        let mut conn = self.conn().await?;
        for _ in 0..2 {
            let reply: Vec<Value> = SHARD
                .key(settings.counter(product_id))
                .key(settings.request(request_id))
                .key(settings.reconciling())
                .arg("read")
                .invoke_async(&mut conn)
                .await
                .map_err(unavailable)?;
            let field = |i: usize| -> i64 {
                reply
                    .get(i)
                    .and_then(|v| redis::from_redis_value_ref::<i64>(v).ok())
                    .unwrap_or(0)
            };
            match text(&reply).as_str() {
                "ok" => {
                    let (stock, pending) = (field(1), field(2));
                    let (generation, epoch) = (field(3), field(4));
                    return Ok(Read::Seen(Seen {
                        stock,
                        pending,
                        generation,
                        epoch,
                    }));
                }
                "dup" => return Ok(Read::Sold),
                "missing" => {
                    self.stock
                        .initialise(&mut conn, settings, pool, product_id)
                        .await?
                }
                "recovering" => {
                    let reconciling =
                        "redis-stock is reconciling its counters after a Redis restart";
                    return Err(DeductError::unavailable("redis", reconciling));
                }
                other => Err(anyhow::anyhow!(
                    "redis-stock shard script answered {other:?}"
                ))?,
            }
        }
        Err(anyhow::anyhow!("redis-stock: a shard still missing after creating it").into())
    }

    /// Moves every unit of the product's shards into shard `home` (step 3 above).
    /// Another merge under way, or a restock: nothing moved (the caller reads again).
    async fn merge(
        &self,
        shards: &[RedisStockSettings],
        home: usize,
        product_id: i64,
        epoch: i64,
    ) -> Result<(), DeductError> {
        let owner = uuid::Uuid::new_v4().simple().to_string();
        // The sale path's connection: with `--redis-stock-min-replicas`, a freeze or a
        // thaw the replica did not confirm stops the merge (an emptied shard given its
        // units back by a failover would sell them twice).
        let mut conn = self.stock.primary().await?.conn().0;
        let mut held: Vec<i64> = Vec::with_capacity(shards.len());
        for settings in shards {
            let reply: Vec<Value> = SHARD
                .key(settings.counter(product_id))
                .arg("freeze")
                .arg(&owner)
                .arg(FREEZE_MS)
                .arg(epoch)
                .invoke_async(&mut conn)
                .await
                .map_err(unavailable)?;
            if text(&reply) != "ok" {
                // Busy or restocked: give back what this merge froze.
                for (settings, units) in shards.iter().zip(held) {
                    thaw(&mut conn, settings, product_id, &owner, units).await?;
                }
                return Ok(());
            }
            let units = reply
                .get(1)
                .and_then(|v| redis::from_redis_value_ref(v).ok());
            held.push(units.unwrap_or(0));
        }
        // The others first: a merger dying now loses their units, never sells them twice.
        let mut total = held[home];
        for (i, settings) in shards.iter().enumerate().filter(|(i, _)| *i != home) {
            if thaw(&mut conn, settings, product_id, &owner, 0).await? {
                total += held[i];
            }
        }
        if !thaw(&mut conn, &shards[home], product_id, &owner, total).await? {
            let lost = total - held[home];
            tracing::warn!(product_id, lost, "redis-stock: a merge outlived its freeze");
        }
        Ok(())
    }

    /// `product_id`'s shards summed (`stock`, `pending`, `epoch`, `shards`) from a
    /// round of reads that a second round finds with the same `gen`s: between merges
    /// a shard only shrinks, so the sum was true at a moment within the first round.
    async fn counted(
        &self,
        pool: &MySqlPool,
        product_id: i64,
    ) -> Result<Option<serde_json::Value>, DeductError> {
        let shards = self.shards(product_id);
        let mut before: Option<Vec<Seen>> = None;
        for _ in 0..ROUNDS {
            let Ok(seen) = self.read(&shards, pool, product_id, "").await? else {
                continue;
            };
            let gens = |s: &[Seen]| {
                s.iter()
                    .map(|s| (s.generation, s.epoch))
                    .collect::<Vec<_>>()
            };
            let settled = seen
                .iter()
                .all(|s| s.generation % 2 == 0 && s.epoch == seen[0].epoch);
            if let Some(first) = before.filter(|first| settled && gens(first) == gens(&seen)) {
                let sum = |f: fn(&Seen) -> i64| first.iter().map(f).sum::<i64>();
                return Ok(Some(serde_json::json!({
                    "stock": sum(|s| s.stock), "pending": sum(|s| s.pending),
                    "epoch": first[0].epoch, "shards": first.len(),
                })));
            }
            before = Some(seen);
        }
        Ok(None)
    }
}

/// Ends `owner`'s freeze of a shard, which sells `units` from now on; `false` when
/// the freeze had expired and the shard took its own units back.
async fn thaw(
    conn: &mut Conn,
    settings: &RedisStockSettings,
    product_id: i64,
    owner: &str,
    units: i64,
) -> Result<bool, DeductError> {
    let reply: Vec<Value> = SHARD
        .key(settings.counter(product_id))
        .arg("thaw")
        .arg(owner)
        .arg(units)
        .invoke_async(conn)
        .await
        .map_err(unavailable)?;
    Ok(text(&reply) == "ok")
}

/// What the service shows of the shards: `pending` and their sum in `redis`.
#[cfg(feature = "service")]
#[async_trait(?Send)]
impl crate::strategies::card::Served for Sharded {
    /// The backlog gauge, every partition's stream summed.
    fn register(
        &self,
        registry: &prometheus::Registry,
        _: &std::sync::Arc<dyn crate::domain::probe::Probe>,
    ) {
        let registered = registry.register(Box::new(self.stock.backlog.clone()));
        registered.expect("registered once");
    }

    async fn stock_view(&self, product_id: i64) -> serde_json::Map<String, serde_json::Value> {
        let mut view = serde_json::Map::new();
        let Some(pool) = self.pool.get() else {
            return view;
        };
        match self.counted(pool, product_id).await {
            Ok(Some(counted)) => {
                view.insert("pending".into(), counted["pending"].clone());
                view.insert("redis".into(), counted);
            }
            Ok(None) => tracing::warn!(product_id, "redis-stock shards kept changing"),
            Err(e) => tracing::warn!(product_id, error = %e, "redis-stock shards unreadable"),
        }
        view
    }

    /// The backlog: every partition's stream, summed.
    async fn scrape(&self) {
        let length = async {
            let mut conn = self.conn().await.ok()?;
            let mut length = 0;
            for partition in &self.partitions {
                length += conn.xlen::<_, i64>(partition.stream()).await.ok()?;
            }
            Some(length)
        };
        if let Ok(Some(length)) = tokio::time::timeout(Duration::from_millis(500), length).await {
            self.stock.backlog.set(length);
        }
    }
}

/// A script's first element, as text.
fn text(reply: &[Value]) -> String {
    reply
        .first()
        .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
        .unwrap_or_default()
}
