//! `redis-stock`: Redis in front, the database as the record. A sale is decided and
//! answered by one Lua script in Redis; a persister writes it into MariaDB afterwards.
//!
//! # Copying this file
//! Take `app/src/domain/error.rs`, `app/src/domain/order.rs`,
//! `app/src/domain/probe.rs`, `app/src/strategies/contract.rs`,
//! `app/src/strategies/record_many.rs`, its Redis
//! connection from the `locks` crate (`locks/src/lock.rs`, `locks/src/redis.rs`,
//! `locks/src/redis_sentinel.rs`, `locks/lua/lock.lua`, `locks/lua/unlock.lua`,
//! `locks/lua/renew.lua`, as a crate named `locks`) and this folder into your crate
//! under the same module paths (`crate::domain::…`, `crate::strategies::…`), with the
//! tables of `migrations/0001_initial_schema.sql`. Crates: `sqlx` (features
//! `runtime-tokio`, `mysql`), `tokio` (features `rt`, `sync`, `time`), `async-trait`,
//! `serde` (features `derive`), `serde_json`, `thiserror`, `anyhow`, `tracing`, `rand`,
//! `sha2`, `hex`, `clap` (features `derive`, `env`), `utoipa` (features `macros`),
//! `prometheus`, `redis` (features `tokio-comp`, `script`, `connection-manager`,
//! `sentinel`, `streams`), `futures`, `uuid` (features `v4`). `./scripts/copy-check
//! redis-stock DIR` builds such a copy and sells from it on a real server (three units
//! sold, the fourth refused, a retry answered once). The service's idempotency layer is
//! not needed: Redis answers a retry with its stored sale while the request key lives,
//! and the persister's `orders` key catches one after that (step 4).
//!
//! # Layout
//! - this file: the request path (steps 1-2), the settings, the counters' view;
//! - [`persister`]: steps 3-5, the background task (started by [`Strategy::start`]);
//! - [`stream`]: what both share (keys, settings, a sale as the stream carries it);
//! - `lua/`: the four scripts.
//!
//! It may touch the strategies' contract, the transaction helpers (`txn`, for the
//! persister's batches) and the domain; nothing of the service around it, and no
//! other strategy. Its metric (`stock_locks_redis_stock_backlog`), its `GET /stock`
//! fields and its background task reach the service through the `Strategy` trait.
//!
//! # Algorithm
//! Per product, Redis keeps a counter hash `{stock, pending, epoch}`: units Redis may
//! still sell, units it sold that the database has not recorded yet, and the database
//! epoch the counter started from.
//! 1. **Sell** (the request; one round trip): [`redis_stock_deduct.lua`](lua/redis_stock_deduct.lua)
//!    checks the request id (a request key that lives `--redis-stock-id-ttl-secs`),
//!    checks every item's counter, and only if all fit: decrements `stock`, increments
//!    `pending`, appends the sale to the stream `sales` (request id, fingerprint,
//!    items with what was left and the epoch), stores the request key. One atomic
//!    step: Redis runs one script at a time. The buyer is answered from it, with the
//!    sale's stream entry id.
//! 2. **Initialise** on first use: a counter that does not exist is created from the
//!    database's row (`quantity`, `epoch`) by [`redis_stock_init.lua`](lua/redis_stock_init.lua),
//!    only if still missing (two instances racing create it once). A restock deletes
//!    the counter, so the next sale starts the new epoch from the database.
//! 3. **Persist** (one task per instance, a consumer of the group `persisters`):
//!    read up to `--redis-stock-batch` entries (`XREADGROUP`), and in **one**
//!    transaction: multi-row INSERT of their orders rows, multi-row INSERT of their
//!    ledger rows, one `UPDATE stock SET quantity = quantity - :sold WHERE product_id
//!    = ? AND epoch = ?` per product and epoch; COMMIT. Only then acknowledge them
//!    ([`redis_stock_ack.lua`](lua/redis_stock_ack.lua): `XACK`, `XDEL`, and
//!    `pending -= q` exactly once per entry, since `XACK` says whether this call did
//!    it). Entries a crashed consumer read and never acknowledged are claimed by
//!    another once idle `--redis-stock-claim-ms` (`XAUTOCLAIM`, tried every half of
//!    that, not before every batch).
//! 4. **Idempotently**: an entry whose request id is already in `orders` (its
//!    persister died between COMMIT and acknowledgement, or a retry came after its
//!    request key expired) makes the orders INSERT fail on the key; the batch rolls
//!    back, those entries are set aside and acknowledged (a late duplicate's units go
//!    back to the counter), the rest go again.
//! 5. **Reconcile** after a Redis restart, or a Sentinel failover (`REDIS_SENTINELS`:
//!    the request path and the persister follow the new primary, whose `run_id` is
//!    new): raise the `reconciling` flag (sales answer 503 meanwhile), drain the
//!    stream, then set every counter to `database quantity − pending`
//!    ([`redis_stock_reconcile.lua`](lua/redis_stock_reconcile.lua)), drop the flag.
//!
//! # What it guarantees, and what it can lose
//! - **Never oversold in the database**: the database only changes by recorded sales,
//!   and `CHECK (quantity >= 0)` refuses any beyond its stock. Redis sells at most its
//!   counter, and the counter starts from the database.
//! - **Acknowledged before durable.** A 200 means Redis recorded the sale, not the
//!   database. `GET /stock/{id}` reports `pending`: sold, not yet in the database (0
//!   when drained). What a Redis crash loses depends on Redis's persistence:
//!   without it (the testbed's default) everything not yet persisted, and the
//!   counters start again from the database (those units are sold again); with
//!   `appendonly yes` + `appendfsync everysec` up to a second of sales; with
//!   `appendfsync always` nothing Redis acknowledged. The chaos runner measures it.
//! - A Redis that comes back from an older snapshot may have forgotten sales the
//!   persister already wrote: its counters are then too high. Step 5 corrects them;
//!   sales Redis acknowledged beyond what the database had are refused by the CHECK
//!   and stay `pending` (visible, never silently recorded).
//! - **Idempotency**: the request key answers a retry from Redis (its stored sale,
//!   `duplicate: true`) while it lives; after that the `orders` key catches the
//!   retry in the persister (step 4), whose units go back on sale.
//! - Restocking while sales are pending: a pending sale of the old epoch is recorded
//!   in the ledger under its epoch and leaves the new stock alone.
//!
//! # Orders with several items
//! Supported, all or nothing: the script checks every item before it changes any.
//!
//! # Test probe
//! `before_commit` is the persister's (a request commits nothing). There is no step
//! between read and write to hold: `--hold-ms` does not apply, and a request's
//! `hold_ms` is a 400.
//!
//! # When to use it
//! The hottest sales (tickets, limited drops) where answering fast matters more than
//! having every sale on disk before the buyer hears about it, with Redis persistence
//! chosen for the loss you can accept (`always` for none, at the cost of an fsync per
//! write). It needs a Redis, a persister that runs, and watching `pending`.

pub mod persister;
pub mod stream;

use crate::domain::error::DeductError;
use crate::strategies::contract::{
    ChaosCell, Context, Declare, Deducted, Deduction, Family, Started, Statements, Strategy,
    StrategyInfo, Trait,
};
use locks::redis::Connection;
use locks::redis_sentinel::{Endpoint, Primary};
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Script, Value};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use stream::{Keys, NAME, RedisStockConfig, Sale, parse_lines, unavailable};
use tokio::sync::OnceCell;

static DEDUCT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/redis_stock_deduct.lua")));
static INIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/redis_stock_init.lua")));
/// `redis-stock`'s flags.
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct RedisStockSettings {
    /// `redis-stock`: where its keys live in Redis (`<prefix>p:<id>` counters,
    /// `<prefix>sales` the stream, ...). Instances that share a database share it.
    #[arg(
        id = "redis_stock_prefix",
        value_name = "REDIS_STOCK_PREFIX",
        long = "redis-stock-prefix",
        env = "REDIS_STOCK_PREFIX",
        default_value = "stock-locks:rs:"
    )]
    pub prefix: String,

    /// `redis-stock`: how long Redis remembers a sold request id (a retry within it is
    /// answered from Redis; later, the persister finds it in `orders`), in seconds.
    #[arg(
        id = "redis_stock_id_ttl_secs",
        value_name = "REDIS_STOCK_ID_TTL_SECS",
        long = "redis-stock-id-ttl-secs",
        env = "REDIS_STOCK_ID_TTL_SECS",
        default_value_t = 86_400
    )]
    pub id_ttl_secs: u64,

    /// `redis-stock`: the most stream entries one persister transaction carries.
    #[arg(
        id = "redis_stock_batch",
        value_name = "REDIS_STOCK_BATCH",
        long = "redis-stock-batch",
        env = "REDIS_STOCK_BATCH",
        default_value_t = 500
    )]
    pub batch: usize,

    /// `redis-stock`: how long an entry may sit unacknowledged with one persister
    /// (it may have crashed) before another claims it, in milliseconds.
    #[arg(
        id = "redis_stock_claim_ms",
        value_name = "REDIS_STOCK_CLAIM_MS",
        long = "redis-stock-claim-ms",
        env = "REDIS_STOCK_CLAIM_MS",
        default_value_t = 5_000
    )]
    pub claim_ms: u64,
}

/// Where the Redis is: what `redis-stock` needs of the settings the strategies share
/// (the service's `shared::Shared`; a copy says it its own way).
pub trait RedisEndpoint {
    fn redis_endpoint(&self) -> Option<Endpoint>;
}

impl<S: RedisEndpoint> Declare<S> for RedisStock {
    type Settings = RedisStockSettings;

    fn build(settings: &RedisStockSettings, context: &Context<'_, S>) -> Arc<dyn Strategy> {
        Arc::new(RedisStock::new(RedisStockConfig {
            endpoint: context.shared.redis_endpoint(),
            keys: Keys::new(&settings.prefix),
            id_ttl_secs: settings.id_ttl_secs,
            batch: settings.batch.max(1),
            claim_after: Duration::from_millis(settings.claim_ms),
        }))
    }
}

/// The strategy: the request path (step 1-2) and the counters' view.
pub struct RedisStock {
    settings: RedisStockConfig,
    /// Through Sentinel, moved to the new primary after a failover.
    primary: OnceCell<Primary>,
    /// `stock_locks_redis_stock_backlog`: the sales Redis acknowledged that the
    /// database has not recorded yet (the stream's length), read at each scrape.
    backlog: prometheus::IntGauge,
}

static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: file!(),
    description: "Redis in front: one Lua script checks the request id, decrements the counter and appends the sale to a stream; a persister writes the stream into MariaDB in batches (orders, ledger, stock), acknowledging after COMMIT.",
    family: Family::HotProduct,
    when_to_use: "The hottest sales, where answering fast matters more than every sale being on disk before the buyer hears of it.",
    explanation: "Redis in front, the database as the record: one Lua script checks the request id, decrements the product's counter and appends the sale to a stream; a persister in each instance writes the stream into MariaDB in batches and acknowledges after COMMIT. Answers before the sale is durable: GET /stock shows what is pending, and what a Redis crash loses depends on Redis's persistence.",
    backend: "redis",
    safe_across_instances: true,
    fencing: "not needed",
    // The request runs no statement of its own: its persister's are counted (a
    // batch of one per sequential request); a 409 is the refusal's read.
    statements: Statements {
        sale: 6,
        refusal: 1,
    },
    traits: &[Trait::RecordsLater],
    chaos: &[
        // Its holder is its persister, paused before its COMMIT: another instance's
        // persister claims its entries. What a Redis crash loses: measured with everysec
        // and without persistence, nothing with always.
        ChaosCell::new("holder-killed", None, ChaosCell::NO_LOSS),
        ChaosCell::new(
            "redis-killed-everysec",
            None,
            &["safe", "refused", "unavailable", "lost"],
        ),
        ChaosCell::new("redis-killed-always", None, ChaosCell::NO_LOSS),
        ChaosCell::new(
            "redis-killed-no-persistence",
            None,
            &["safe", "refused", "unavailable", "lost"],
        ),
        ChaosCell::new("ambiguous-commit", None, &["safe", "unavailable"]),
    ],
};

/// A product's counter in Redis, as `GET /stock/{id}` shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Counter {
    /// Units Redis may still sell.
    pub stock: i64,
    /// Units Redis sold that the database has not recorded yet.
    pub pending: i64,
    /// The database epoch the counter started from.
    pub epoch: i64,
}

impl RedisStock {
    pub fn new(settings: RedisStockConfig) -> RedisStock {
        RedisStock {
            settings,
            primary: OnceCell::new(),
            backlog: prometheus::IntGauge::new(
                "stock_locks_redis_stock_backlog",
                "redis-stock's sales acknowledged by Redis and not yet recorded in the database.",
            )
            .expect("a valid metric"),
        }
    }

    /// Whether a Redis is configured (without one it answers 503 and has no counters).
    pub fn configured(&self) -> bool {
        self.settings.endpoint.is_some()
    }

    async fn primary(&self) -> Result<&Primary, DeductError> {
        let endpoint =
            self.settings
                .endpoint
                .as_ref()
                .ok_or_else(|| DeductError::BackendUnavailable {
                    backend: "redis".into(),
                    detail: "not configured: set REDIS_URLS".into(),
                })?;
        self.primary
            .get_or_try_init(|| Primary::connect(endpoint))
            .await
            .map_err(unavailable)
    }

    async fn conn(&self) -> Result<ConnectionManager, DeductError> {
        Ok(self.primary().await?.conn().0)
    }

    /// Sales in the stream that no persister has recorded yet (`XLEN`), if Redis is
    /// configured and answers within 500 ms (for `/metrics`).
    pub async fn backlog(&self) -> Option<u64> {
        if !self.configured() {
            return None;
        }
        let ask = async {
            let mut conn = self.conn().await.ok()?;
            conn.xlen::<_, u64>(self.settings.keys.stream()).await.ok()
        };
        tokio::time::timeout(Duration::from_millis(500), ask)
            .await
            .ok()
            .flatten()
    }

    /// The product's counter, if Redis is configured and has one.
    pub async fn counter(&self, product_id: i64) -> Result<Option<Counter>, DeductError> {
        let mut conn = self.conn().await?;
        let fields: HashMap<String, i64> = conn
            .hgetall(self.settings.keys.counter(product_id))
            .await
            .map_err(unavailable)?;
        Ok(
            match (
                fields.get("stock"),
                fields.get("pending"),
                fields.get("epoch"),
            ) {
                (Some(&stock), Some(&pending), Some(&epoch)) => Some(Counter {
                    stock,
                    pending,
                    epoch,
                }),
                _ => None,
            },
        )
    }

    /// After a restock: forget the product's counter, so the next sale starts the new
    /// epoch from the database (step 2). Best effort: with Redis away there is nothing
    /// it could sell anyway, and a stale counter is caught by its epoch. Nothing to do
    /// without a Redis.
    pub async fn forget(&self, product_id: i64) {
        if !self.configured() {
            return;
        }
        let Ok(mut conn) = self.conn().await else {
            return;
        };
        let deleted: Result<i64, _> = conn.del(self.settings.keys.counter(product_id)).await;
        if let Err(e) = deleted {
            tracing::warn!(product_id, error = %e, "redis-stock: counter not reset after a restock");
        }
    }

    /// Step 2: the counter from the database's row, unless another request made it.
    async fn initialise(
        &self,
        conn: &mut ConnectionManager,
        d: &Deduction<'_>,
        product_id: i64,
    ) -> Result<(), DeductError> {
        let row: Option<(i32, i32)> =
            sqlx::query_as("SELECT quantity, epoch FROM stock WHERE product_id = ?")
                .bind(product_id)
                .fetch_optional(d.pool)
                .await?;
        let (quantity, epoch) = row.ok_or(DeductError::UnknownProduct(product_id))?;
        let _created: i64 = INIT
            .key(self.settings.keys.counter(product_id))
            .arg(quantity)
            .arg(epoch)
            .invoke_async(conn)
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}

#[async_trait::async_trait(?Send)]
impl Strategy for RedisStock {
    fn info(&self) -> &StrategyInfo {
        &INFO
    }

    /// The backlog gauge, and the persister (steps 3-5): its own task and Redis
    /// connection (it blocks on the stream), started without waiting for Redis.
    fn start(&self, started: &Started<'_>) -> Option<tokio::task::JoinHandle<()>> {
        started
            .registry
            .register(Box::new(self.backlog.clone()))
            .expect("registered once");
        Some(tokio::spawn(persister::persist_forever(
            self.settings.clone(),
            started.pool.clone(),
            started.probe.clone(),
        )))
    }

    /// The counter starts the new epoch from the database at its next sale.
    async fn restocked(&self, product_id: i64) {
        self.forget(product_id).await;
    }

    /// `pending` (sold by Redis, not yet in the database; 0 when drained) and `redis`
    /// (the counter, if there is one). Nothing without a Redis or when it does not
    /// answer.
    async fn stock_view(&self, product_id: i64) -> serde_json::Map<String, serde_json::Value> {
        let mut fields = serde_json::Map::new();
        if !self.configured() {
            return fields;
        }
        match self.counter(product_id).await {
            Ok(counter) => {
                fields.insert(
                    "pending".into(),
                    counter.as_ref().map_or(0, |c| c.pending).into(),
                );
                if let Some(counter) = counter {
                    let counter = serde_json::to_value(counter).expect("plain data");
                    fields.insert("redis".into(), counter);
                }
            }
            Err(e) => tracing::warn!(product_id, error = %e, "redis-stock counter unreadable"),
        }
        fields
    }

    async fn scrape(&self) {
        if let Some(backlog) = self.backlog().await {
            self.backlog.set(backlog as i64);
        }
    }

    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        if d.knobs.hold_ms.is_some() {
            return Err(DeductError::InvalidRequest(
                "hold_ms does not apply to redis-stock: its sale is one Lua script, with no step between read and write to hold"
                    .into(),
            ));
        }
        let primary = self.primary().await?;
        let (mut conn, generation) = primary.conn();
        let keys = &self.settings.keys;
        let order = d.order;
        // At most one initialisation per item, then the answer.
        for _ in 0..=order.items.len() {
            let mut call = DEDUCT.prepare_invoke();
            call.key(keys.request(&order.request_id))
                .key(keys.stream())
                .key(keys.reconciling());
            for item in &order.items {
                call.key(keys.counter(item.product_id));
            }
            call.arg(&order.request_id)
                .arg(&d.fingerprint)
                .arg(self.settings.id_ttl_secs);
            for item in &order.items {
                call.arg(item.product_id).arg(item.quantity);
            }
            let reply: Vec<Value> = match call.invoke_async(&mut conn).await {
                Ok(reply) => reply,
                Err(e) => {
                    // After a failover the next request goes to the new primary (this
                    // one's outcome is not known: a retry with its id finds out).
                    primary.follow(&e, generation).await;
                    return Err(unavailable(e));
                }
            };
            let text = |i: usize| -> String {
                reply
                    .get(i)
                    .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
                    .unwrap_or_default()
            };
            match text(0).as_str() {
                "ok" => {
                    let sale = Sale {
                        entry: text(1),
                        request_id: order.request_id.clone(),
                        fingerprint: d.fingerprint.clone(),
                        lines: parse_lines(&text(2)).ok_or_else(|| {
                            DeductError::Unexpected(anyhow::anyhow!(
                                "unreadable sale {:?}",
                                text(2)
                            ))
                        })?,
                    };
                    return Ok(sale.answer());
                }
                "dup" => return stored_answer(d, &text(1)),
                "init" => {
                    let i: usize = text(1).parse().unwrap_or(1);
                    let product_id = order.items[i.saturating_sub(1)].product_id;
                    self.initialise(&mut conn, d, product_id).await?;
                }
                "short" => {
                    let i: usize = text(1).parse().unwrap_or(1);
                    let item = order.items[i.saturating_sub(1)];
                    return Err(DeductError::InsufficientStock {
                        product_id: item.product_id,
                        requested: item.quantity.into(),
                        available: text(2).parse().ok(),
                    });
                }
                "recovering" => {
                    return Err(DeductError::BackendUnavailable {
                        backend: "redis".into(),
                        detail: "redis-stock is reconciling its counters after a Redis restart"
                            .into(),
                    });
                }
                other => {
                    return Err(DeductError::Unexpected(anyhow::anyhow!(
                        "redis-stock script answered {other:?}"
                    )));
                }
            }
        }
        Err(DeductError::Unexpected(anyhow::anyhow!(
            "redis-stock: counters still missing after initialising them"
        )))
    }
}

/// The answer to a request id Redis already sold: its stored sale as a duplicate, or
/// 422 if that was a different request.
fn stored_answer(d: &Deduction<'_>, stored: &str) -> Result<Deducted, DeductError> {
    let mut parts = stored.splitn(3, '\n');
    let (fingerprint, entry, lines) = (parts.next(), parts.next(), parts.next());
    if fingerprint != Some(d.fingerprint.as_str()) {
        return Err(DeductError::RequestIdReused(d.order.request_id.clone()));
    }
    let sale = Sale {
        entry: entry.unwrap_or_default().to_string(),
        request_id: d.order.request_id.clone(),
        fingerprint: d.fingerprint.clone(),
        lines: lines.and_then(parse_lines).ok_or_else(|| {
            DeductError::Unexpected(anyhow::anyhow!("unreadable stored sale {stored:?}"))
        })?,
    };
    Ok(Deducted {
        duplicate: true,
        ..sale.answer()
    })
}
