//! `redis-stock`: Redis in front, the database as the record. A sale is decided and answered by
//! one Lua script in Redis; a persister writes it into MariaDB afterwards.
//!
//! # Copying this file
//! A copy takes this file, the domain, the contract and the helpers it calls, under the
//! same module paths, with the schema: `copies.toml` lists them under
//! `[strategy.redis-stock]`, with the crates they need. A copy may leave out Sentinel
//! (`sentinel.rs`; then answer [`RedisEndpoint`] with [`connection::Endpoint::url`]), a
//! Redis Cluster (`cluster.rs` with `lua/redis_stock_shard.lua`, and the `redis`
//! feature `cluster-async`), deleting the `pub mod` line of each: the manifest's copy
//! does. The service's card, flags, view and gauge (`served.rs`) stay out of a copy.
//! `./scripts/copy-check redis-stock DIR` builds such a copy (without Sentinel) and
//! sells from it on a real server. It needs no idempotency layer (step 4).
//!
//! # Layout
//! This file: the request path (steps 1-2). [`stream`]: the settings and a sale as the stream
//! carries it. [`persister`]: steps 3-5. [`connection`]: its Redis ([`cluster`]: on a Redis
//! Cluster, in partitions and shards). `lua/`: the scripts. It may touch the strategies'
//! contract, `record_many` and the domain ([`sentinel`] also the `locks` crate's); nothing of the
//! service, no other strategy.
//!
//! # Algorithm
//! Per product, Redis keeps a counter hash `{stock, pending, epoch}`: units Redis may still sell,
//! units it sold that the database has not recorded yet, and the database epoch the counter
//! started from.
//! 1. **Sell** (one round trip, one atomic step: Redis runs one script at a time):
//!    [`redis_stock_deduct.lua`](lua/redis_stock_deduct.lua) checks the request id and every
//!    item's counter, and only if all fit decrements `stock`, increments `pending`, appends the
//!    sale to the stream `sales` and stores the request key (for `--redis-stock-id-ttl-secs`).
//!    The buyer is answered from it.
//! 2. **Initialise** a missing counter from the database's row (`quantity`, `epoch`):
//!    [`redis_stock_init.lua`](lua/redis_stock_init.lua), only if still missing. A restock
//!    deletes the counter: the next sale starts the new epoch.
//! 3. **Persist** (one task per instance, a consumer of the group `persisters`): up to
//!    `--redis-stock-batch` entries (`XREADGROUP`) in **one** transaction: their orders and
//!    ledger rows (multi-row INSERTs), one `UPDATE stock SET quantity = quantity - :sold WHERE
//!    product_id = ? AND epoch = ?` per product and epoch. After COMMIT, acknowledge
//!    ([`redis_stock_ack.lua`](lua/redis_stock_ack.lua): `XACK`, `XDEL`, `pending -= q` once
//!    per entry, by the call whose `XDEL` removed it). Entries a crashed consumer left are
//!    claimed once idle `--redis-stock-claim-ms` (`XAUTOCLAIM`).
//! 4. **Idempotently**: an entry whose request id is already in `orders` (its persister died
//!    before acknowledging, or a retry came after its request key expired) fails the INSERT; the
//!    batch rolls back, those entries are acknowledged (a late duplicate's units go back to the
//!    counter), the rest go again.
//! 5. **Reconcile** after a Redis restart or a failover (a new `run_id`): join the
//!    `reconciling` flag (a set of the persisters reconciling; while it exists, sales answer
//!    503), drain the stream, lower every counter to `database quantity − pending`
//!    ([`redis_stock_reconcile.lua`](lua/redis_stock_reconcile.lua)), leave the flag. Every
//!    instance's persister reconciles at once, and sales wait for the last: a sale recorded
//!    but not yet acknowledged while one still reads would count twice and lower the
//!    counter.
//!
//! # What it guarantees, and what it can lose
//! - **Never oversold in the database**: it changes only by recorded sales, and
//!   `CHECK (quantity >= 0)` refuses any beyond its stock.
//! - **Acknowledged before durable.** A 200 means Redis has the sale; `GET /stock/{id}`
//!   reports `pending` until the database has it. A Redis crash loses what was not
//!   persisted yet: everything without persistence (the testbed's default; the
//!   counters restart from the database and those units sell again), up to a second
//!   with `appendfsync everysec`, nothing with `always`. A Redis back from an older
//!   snapshot has counters too high: step 5 corrects them, and what it sold beyond
//!   the database's stock the CHECK refuses; it stays `pending`, visible. The chaos
//!   runner measures each.
//! - **Idempotency**: the request key answers a retry (`duplicate: true`) while it
//!   lives, the persister after that (step 4).
//! - A sale pending across a restock is recorded under its epoch and leaves the new
//!   stock alone. Several items: all or nothing. Test probe: `before_commit` is the
//!   persister's; `hold_ms` is refused (400): there is no step to hold.
//!
//! # When to use it
//! The hottest sales (tickets, limited drops), where answering fast matters more than
//! every sale being on disk before the buyer hears of it, with Redis persistence
//! chosen for the loss you can accept. It needs a Redis, a running persister, and
//! someone watching `pending`.

pub mod cluster;
pub mod connection;
pub mod persister;
pub mod sentinel;
pub mod stream;

/// How the service registers it and shows it: its card, its flags, `pending` in
/// `GET /stock/{id}` and the backlog in `/metrics` (`redis_stock/served.rs`; a copy
/// leaves it out).
#[cfg(feature = "service")]
mod served;

/// Where this strategy is written, from the repository's root (its card's `source`).
pub const SOURCE: &str = file!();

use crate::domain::error::DeductError;
use crate::strategies::contract::{Context, Declare, Deducted, Deduction, Started, Strategy};
use connection::{Conn, Endpoint, Primary};
use redis::{AsyncCommands, Script, Value};
use std::sync::{Arc, LazyLock};
use stream::{NAME, RedisStockSettings, Sale, unavailable};
use tokio::sync::OnceCell;

static DEDUCT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/redis_stock_deduct.lua")));
static INIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/redis_stock_init.lua")));

/// Where the Redis is: what `redis-stock` asks of the settings the strategies share.
pub trait RedisEndpoint {
    fn redis_endpoint(&self) -> Option<Endpoint>;
}

impl<S: RedisEndpoint> Declare<S> for RedisStock {
    type Settings = RedisStockSettings;

    fn build(settings: &RedisStockSettings, context: &Context<'_, S>) -> Arc<dyn Strategy> {
        let settings = RedisStockSettings {
            endpoint: context.shared.redis_endpoint(),
            ..settings.clone()
        };
        let stock = RedisStock {
            settings,
            primary: OnceCell::new(),
            #[cfg(feature = "service")]
            backlog: served::backlog(),
        };
        match stock.settings.endpoint.clone() {
            Some(endpoint) => endpoint.0.strategy(stock),
            None => Arc::new(stock),
        }
    }
}

pub struct RedisStock {
    settings: RedisStockSettings,
    /// Through Sentinel, moved to the new primary after a failover.
    primary: OnceCell<Box<dyn Primary>>,
    #[cfg(feature = "service")]
    backlog: prometheus::IntGauge,
}

impl RedisStock {
    pub async fn primary(&self) -> Result<&dyn Primary, DeductError> {
        let endpoint =
            self.settings.endpoint.as_ref().ok_or_else(|| {
                DeductError::unavailable("redis", "not configured: set REDIS_URLS")
            })?;
        self.primary
            .get_or_try_init(|| endpoint.0.connect())
            .await
            .map(|primary| &**primary)
            .map_err(unavailable)
    }

    /// Step 2: the counter from the database's row, unless another request made it.
    pub async fn initialise(
        &self,
        conn: &mut Conn,
        settings: &RedisStockSettings,
        pool: &sqlx::MySqlPool,
        product_id: i64,
    ) -> Result<(), DeductError> {
        let row: Option<(i32, i32, i32)> = sqlx::query_as(
            "SELECT quantity, epoch, initial_quantity FROM stock WHERE product_id = ?",
        )
        .bind(product_id)
        .fetch_optional(pool)
        .await?;
        let (quantity, epoch, initial) = row.ok_or(DeductError::UnknownProduct(product_id))?;
        // A shard starts with its share of the initial stock: `initial / k`, and one
        // more for the first `initial % k` shards, so the shares sum to `initial`.
        let start = match settings.shard {
            Some((i, k)) => initial / k + i32::from(i < initial % k),
            None => quantity,
        };
        let _created: i64 = INIT
            .key(settings.counter(product_id))
            .arg(start)
            .arg(epoch)
            .invoke_async(conn)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Steps 1-2 with the keys of `settings` (a cluster's partition, or all of them).
    pub async fn sell(
        &self,
        settings: &RedisStockSettings,
        d: &Deduction<'_>,
    ) -> Result<Deducted, DeductError> {
        let primary = self.primary().await?;
        let (mut conn, generation) = primary.conn();
        let order = d.order;
        // At most one initialisation per item, then the answer.
        for _ in 0..=order.items.len() {
            let mut call = DEDUCT.prepare_invoke();
            call.key(settings.request(&order.request_id))
                .key(settings.stream())
                .key(settings.reconciling());
            for item in &order.items {
                call.key(settings.counter(item.product_id));
            }
            call.arg(&order.request_id)
                .arg(&d.fingerprint)
                .arg(settings.id_ttl_secs);
            for item in &order.items {
                call.arg(item.product_id).arg(item.quantity);
            }
            let reply: Vec<Value> = match call.invoke_async(&mut conn).await {
                Ok(reply) => reply,
                Err(e) => {
                    // After a failover the next request goes to the new primary.
                    primary.follow(&e, generation).await;
                    // Sent, then the connection broke: the script may have sold (a
                    // retry with its id finds out); refused or answered with an error,
                    // it did not run.
                    let sent = e.is_io_error() || e.is_timeout() || e.is_connection_dropped();
                    if sent && !e.is_connection_refusal() {
                        return Err(DeductError::OutcomeUnknown(format!("redis: {e}")));
                    }
                    return Err(unavailable(e));
                }
            };
            let text = |i: usize| -> String {
                reply
                    .get(i)
                    .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
                    .unwrap_or_default()
            };
            let item = |i: usize| order.items[text(i).parse().unwrap_or(1_usize).saturating_sub(1)];
            match text(0).as_str() {
                "ok" => return Ok(Sale::read(d, &text(1), &text(2))?.answer()),
                "dup" => return stored_answer(d, &text(1)),
                "init" => {
                    self.initialise(&mut conn, settings, d.pool, item(1).product_id)
                        .await?
                }
                "short" => {
                    return Err(DeductError::InsufficientStock {
                        product_id: item(1).product_id,
                        requested: item(1).quantity.into(),
                        available: text(2).parse().ok(),
                    });
                }
                "recovering" => {
                    let reconciling =
                        "redis-stock is reconciling its counters after a Redis restart";
                    return Err(DeductError::unavailable("redis", reconciling));
                }
                other => Err(anyhow::anyhow!("redis-stock script answered {other:?}"))?,
            }
        }
        Err(anyhow::anyhow!("redis-stock: counters still missing after initialising them").into())
    }
}

#[async_trait::async_trait(?Send)]
impl Strategy for RedisStock {
    fn name(&self) -> &'static str {
        NAME
    }

    /// The persister (steps 3-5), started without waiting for Redis.
    fn start(&self, started: &Started<'_>) -> Option<tokio::task::JoinHandle<()>> {
        Some(tokio::spawn(persister::persist_forever(
            self.settings.clone(),
            started.pool.clone(),
            started.probe.clone(),
        )))
    }

    /// Step 2's reset. Best effort: a stale counter is caught by its epoch.
    async fn restocked(&self, product_id: i64) {
        let Ok(primary) = self.primary().await else {
            return;
        };
        let deleted: Result<i64, _> = primary
            .conn()
            .0
            .del(self.settings.counter(product_id))
            .await;
        if let Err(e) = deleted {
            tracing::warn!(product_id, error = %e, "redis-stock: counter not reset after a restock");
        }
    }

    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        if d.knobs.hold_ms.is_some() {
            return Err(DeductError::InvalidRequest(
                "hold_ms does not apply to redis-stock: its sale is one Lua script, with no step between read and write to hold"
                    .into(),
            ));
        }
        self.sell(&self.settings, d).await
    }
}

/// The answer to a request id Redis already sold: its stored sale
/// (`fingerprint \n entry \n items`) as a duplicate, or 422 if that was a different
/// request.
fn stored_answer(d: &Deduction<'_>, stored: &str) -> Result<Deducted, DeductError> {
    let mut parts = stored.splitn(3, '\n');
    if parts.next() != Some(d.fingerprint.as_str()) {
        return Err(DeductError::RequestIdReused(d.order.request_id.clone()));
    }
    let mut part = || parts.next().unwrap_or_default();
    let sale = Sale::read(d, part(), part())?;
    Ok(Deducted {
        duplicate: true,
        ..sale.answer()
    })
}
