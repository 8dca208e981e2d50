//! `redis-stock`: Redis in front, the database as the record. A sale is decided and
//! answered by one Lua script in Redis; a persister writes it into MariaDB afterwards.
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

use crate::domain::error::{DeductError, mysql_error_number};
use crate::domain::probe::{Failpoint, Probe};
use crate::strategies::contract::{
    Context, Declare, Deducted, Deduction, Family, ItemResult, Started, Strategy, StrategyInfo,
};
use crate::strategies::shared::Shared;
use crate::strategies::txn;
use locks::redis::{Endpoint, Primary};
use redis::aio::ConnectionManager;
use redis::streams::{StreamAutoClaimOptions, StreamId, StreamReadOptions, StreamReadReply};
use redis::{AsyncCommands, Script, Value};
use serde::Serialize;
use sqlx::MySqlPool;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;

static DEDUCT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/redis_stock_deduct.lua")));
static INIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/redis_stock_init.lua")));
static ACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/redis_stock_ack.lua")));
static RECONCILE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/redis_stock_reconcile.lua")));

/// The consumer group of the persisters.
const GROUP: &str = "persisters";

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
    fn counter(&self, product_id: i64) -> String {
        format!("{}p:{product_id}", self.prefix)
    }
    fn request(&self, request_id: &str) -> String {
        format!("{}req:{request_id}", self.prefix)
    }
    fn stream(&self) -> String {
        format!("{}sales", self.prefix)
    }
    fn reconciling(&self) -> String {
        format!("{}reconciling", self.prefix)
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

/// `redis-stock`'s flags.
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct RedisStockSettings {
    /// `redis-stock`: where its keys live in Redis (`<prefix>p:<id>` counters,
    /// `<prefix>sales` the stream, ...). Instances that share a database share it.
    #[arg(
        id = "redis_stock_prefix",
        long = "redis-stock-prefix",
        env = "REDIS_STOCK_PREFIX",
        default_value = "stock-locks:rs:"
    )]
    pub prefix: String,

    /// `redis-stock`: how long Redis remembers a sold request id (a retry within it is
    /// answered from Redis; later, the persister finds it in `orders`), in seconds.
    #[arg(
        id = "redis_stock_id_ttl_secs",
        long = "redis-stock-id-ttl-secs",
        env = "REDIS_STOCK_ID_TTL_SECS",
        default_value_t = 86_400
    )]
    pub id_ttl_secs: u64,

    /// `redis-stock`: the most stream entries one persister transaction carries.
    #[arg(
        id = "redis_stock_batch",
        long = "redis-stock-batch",
        env = "REDIS_STOCK_BATCH",
        default_value_t = 500
    )]
    pub batch: usize,

    /// `redis-stock`: how long an entry may sit unacknowledged with one persister
    /// (it may have crashed) before another claims it, in milliseconds.
    #[arg(
        id = "redis_stock_claim_ms",
        long = "redis-stock-claim-ms",
        env = "REDIS_STOCK_CLAIM_MS",
        default_value_t = 5_000
    )]
    pub claim_ms: u64,
}

impl Declare<Shared> for RedisStock {
    type Settings = RedisStockSettings;

    /// Its Redis is the single Redis the strategies share ([`super::shared::Shared`]).
    fn build(settings: &RedisStockSettings, context: &Context<'_, Shared>) -> Arc<dyn Strategy> {
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
    name: "redis-stock",
    description: "Redis in front: one Lua script checks the request id, decrements the counter and appends the sale to a stream; a persister writes the stream into MariaDB in batches (orders, ledger, stock), acknowledging after COMMIT.",
    family: Family::HotProduct,
    when_to_use: "The hottest sales, where answering fast matters more than every sale being on disk before the buyer hears of it.",
    explanation: "Redis in front, the database as the record: one Lua script checks the request id, decrements the product's counter and appends the sale to a stream; a persister in each instance writes the stream into MariaDB in batches and acknowledges after COMMIT. Answers before the sale is durable: GET /stock shows what is pending, and what a Redis crash loses depends on Redis's persistence.",
    backend: "redis",
    safe_across_instances: true,
    fencing: "not needed",
};

/// One line of a sale as the stream carries it.
#[derive(Debug, Clone, PartialEq)]
struct Line {
    product_id: i64,
    quantity: i32,
    /// What the counter had left after this sale.
    left: i64,
    epoch: i32,
}

/// A sale as the stream carries it.
#[derive(Debug, Clone)]
struct Sale {
    entry: String,
    request_id: String,
    fingerprint: String,
    lines: Vec<Line>,
}

/// `p:q:left:epoch,...` (what the script writes).
fn parse_lines(text: &str) -> Option<Vec<Line>> {
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
    fn answer(&self) -> Deducted {
        Deducted {
            deducted: true,
            request_id: self.request_id.clone(),
            strategy: INFO.name.to_string(),
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

    fn from_entry(entry: &StreamId) -> Option<Sale> {
        Some(Sale {
            entry: entry.id.clone(),
            request_id: entry.get("request_id")?,
            fingerprint: entry.get("hash")?,
            lines: parse_lines(&entry.get::<String>("items")?)?,
        })
    }
}

fn unavailable(e: impl std::fmt::Display) -> DeductError {
    DeductError::BackendUnavailable {
        backend: "redis".into(),
        detail: e.to_string(),
    }
}

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
        Some(tokio::spawn(persist_forever(
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

/// The persister (steps 3-5): one per instance, started with the service when Redis
/// is configured. Runs until the task is aborted.
/// Its transactions pass the `before_commit` failpoint (how a test stops a persister
/// between its writes and its COMMIT).
pub async fn persist_forever(settings: RedisStockConfig, pool: MySqlPool, probe: Arc<dyn Probe>) {
    let Some(endpoint) = settings.endpoint.clone() else {
        return;
    };
    let consumer = format!("persister-{}", uuid::Uuid::new_v4().simple());
    let mut run_id: Option<String> = None;
    loop {
        let result = async {
            // Through Sentinel: the primary of now (after a failover, the new one,
            // whose new run_id makes the persister reconcile the counters).
            let mut conn = Primary::connect(&endpoint).await?.conn().0;
            ensure_group(&settings, &mut conn).await?;
            // The housekeeping round trips (is this still the same Redis? did a
            // persister die?) run on (re)connecting and then every half claim period,
            // not before every batch. A restart breaks the connection, so it is also
            // seen at once, through the error and the reconnect.
            let every = settings.claim_after / 2;
            let mut checked: Option<Instant> = None;
            loop {
                let due = checked.is_none_or(|t| t.elapsed() >= every);
                if due {
                    // A new run_id: Redis restarted, and may have forgotten sales.
                    let now = server_run_id(&mut conn).await?;
                    if run_id.as_ref().is_some_and(|seen| *seen != now) {
                        tracing::warn!("redis-stock: Redis restarted; reconciling the counters");
                        reconcile(&settings, &pool, &probe, &mut conn, &consumer).await?;
                    }
                    run_id = Some(now);
                    checked = Some(Instant::now());
                }
                let claim = due.then_some(settings.claim_after);
                let sales = next_batch(&settings, &mut conn, &consumer, claim).await?;
                if !sales.is_empty() {
                    persist_and_ack(&settings, &pool, &probe, &mut conn, sales).await?;
                }
            }
            #[allow(unreachable_code)]
            Ok::<(), anyhow::Error>(())
        }
        .await;
        if let Err(e) = result {
            if pool.is_closed() {
                return;
            }
            tracing::warn!(error = %e, "redis-stock persister: retrying in 500 ms");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

async fn server_run_id(conn: &mut ConnectionManager) -> redis::RedisResult<String> {
    let info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .unwrap_or_default()
        .trim()
        .to_string())
}

/// Creates the stream and the group when missing (first start, or a Redis that came
/// back empty: reading then fails with NOGROUP, and the reconnect lands here).
async fn ensure_group(
    settings: &RedisStockConfig,
    conn: &mut ConnectionManager,
) -> redis::RedisResult<()> {
    let created: redis::RedisResult<()> = conn
        .xgroup_create_mkstream(settings.keys.stream(), GROUP, "0")
        .await;
    match created {
        Err(e) if e.code() != Some("BUSYGROUP") => Err(e),
        _ => Ok(()),
    }
}

/// Entries to persist: with `claim`, first any a consumer has held unacknowledged for
/// longer than that (it crashed, or this is a drain); else, or if there were none,
/// new ones (waiting up to 100 ms for them).
async fn next_batch(
    settings: &RedisStockConfig,
    conn: &mut ConnectionManager,
    consumer: &str,
    claim: Option<Duration>,
) -> anyhow::Result<Vec<Sale>> {
    let stream = settings.keys.stream();
    let mut entries = Vec::new();
    if let Some(idle) = claim {
        let claimed: redis::streams::StreamAutoClaimReply = conn
            .xautoclaim_options(
                &stream,
                GROUP,
                consumer,
                idle.as_millis() as u64,
                "0-0",
                StreamAutoClaimOptions::default().count(settings.batch),
            )
            .await?;
        entries = claimed.claimed;
    }
    if entries.is_empty() {
        let options = StreamReadOptions::default()
            .group(GROUP, consumer)
            .count(settings.batch)
            .block(100);
        let read: Option<StreamReadReply> =
            conn.xread_options(&[&stream], &[">"], &options).await?;
        entries = read
            .map(|r| r.keys.into_iter().flat_map(|k| k.ids).collect())
            .unwrap_or_default();
    }
    Ok(entries
        .iter()
        .filter_map(|entry| {
            let sale = Sale::from_entry(entry);
            if sale.is_none() {
                tracing::error!(entry = %entry.id, "redis-stock: unreadable stream entry skipped");
            }
            sale
        })
        .collect())
}

/// One batch: written in one transaction, then acknowledged (step 3), with entries
/// the database already has set aside (step 4).
async fn persist_and_ack(
    settings: &RedisStockConfig,
    pool: &MySqlPool,
    probe: &Arc<dyn Probe>,
    conn: &mut ConnectionManager,
    mut sales: Vec<Sale>,
) -> anyhow::Result<()> {
    let mut recorded: Vec<(Sale, bool)> = Vec::new();
    while !sales.is_empty() {
        match write(pool, probe, &sales).await {
            Ok(()) => {
                recorded.extend(sales.drain(..).map(|s| (s, false)));
            }
            Err(e) if mysql_error_number(&e) == Some(1062) => {
                let known = already_recorded(pool, &sales).await?;
                if known.is_empty() {
                    return Err(anyhow::anyhow!(
                        "duplicate key in orders, none of the batch there"
                    ));
                }
                let (done, rest): (Vec<Sale>, Vec<Sale>) = sales
                    .into_iter()
                    .partition(|s| known.contains_key(&s.request_id));
                for sale in done {
                    // The database has this request id: this very entry (its
                    // persister died before acknowledging), or an earlier sale of a
                    // retry that came after its request key expired: then this
                    // entry's units were never really sold.
                    let give_back = known[&sale.request_id].as_deref() != Some(sale.entry.as_str());
                    recorded.push((sale, give_back));
                }
                sales = rest;
            }
            Err(e) => return Err(e.into()),
        }
    }
    acknowledge(settings, conn, &recorded).await?;
    Ok(())
}

/// Orders, ledger and stock for `sales`, one transaction.
async fn write(pool: &MySqlPool, probe: &Arc<dyn Probe>, sales: &[Sale]) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    let answers: Vec<Deducted> = sales.iter().map(Sale::answer).collect();
    let records: Vec<txn::Record> = sales
        .iter()
        .zip(&answers)
        .map(|(sale, answer)| txn::Record {
            answer,
            fingerprint: &sale.fingerprint,
            epochs: sale.lines.iter().map(|l| l.epoch).collect(),
        })
        .collect();
    txn::record_many(&mut tx, INFO.name, &records).await?;
    // One UPDATE per product and epoch; a sale of an epoch since restocked is in the
    // ledger under its epoch and leaves the new stock alone (0 rows).
    let mut sold: BTreeMap<(i64, i32), i64> = BTreeMap::new();
    for line in sales.iter().flat_map(|s| &s.lines) {
        *sold.entry((line.product_id, line.epoch)).or_default() += i64::from(line.quantity);
    }
    for ((product_id, epoch), quantity) in sold {
        sqlx::query(
            "UPDATE stock SET quantity = quantity - ?, version = version + 1 WHERE product_id = ? AND epoch = ?",
        )
        .bind(quantity)
        .bind(product_id)
        .bind(epoch)
        .execute(&mut *tx)
        .await?;
    }
    probe.at(Failpoint::BeforeCommit).await;
    tx.commit().await
}

/// The request ids of `sales` already in `orders`, with the stream entry their stored
/// answer names.
async fn already_recorded(
    pool: &MySqlPool,
    sales: &[Sale],
) -> sqlx::Result<HashMap<String, Option<String>>> {
    let stored = txn::recorded(pool, sales.iter().map(|s| s.request_id.as_str())).await?;
    Ok(stored
        .into_iter()
        .map(|(id, response)| {
            let entry = serde_json::from_str::<Deducted>(&response)
                .ok()
                .and_then(|d| d.stream_entry);
            (id, entry)
        })
        .collect())
}

/// Acknowledges recorded entries and takes them out of `pending` (one script call).
async fn acknowledge(
    settings: &RedisStockConfig,
    conn: &mut ConnectionManager,
    recorded: &[(Sale, bool)],
) -> redis::RedisResult<()> {
    if recorded.is_empty() {
        return Ok(());
    }
    let mut call = ACK.prepare_invoke();
    call.key(settings.keys.stream()).arg(GROUP);
    for (sale, give_back) in recorded {
        call.arg(&sale.entry)
            .arg(sale.lines.len())
            .arg(u8::from(*give_back));
        for line in &sale.lines {
            call.key(settings.keys.counter(line.product_id));
            call.arg(line.quantity).arg(line.epoch);
        }
    }
    let _: i64 = call.invoke_async(conn).await?;
    Ok(())
}

/// Step 5: no sales while the counters are set right again. Drains the stream
/// (claiming every entry, however recently read), then sets each counter to the
/// database's quantity minus what is still pending.
async fn reconcile(
    settings: &RedisStockConfig,
    pool: &MySqlPool,
    probe: &Arc<dyn Probe>,
    conn: &mut ConnectionManager,
    consumer: &str,
) -> anyhow::Result<()> {
    let flag = settings.keys.reconciling();
    let _: () = conn.set_ex(&flag, 1, 60).await?;
    ensure_group(settings, conn).await?;
    loop {
        let sales = next_batch(settings, conn, consumer, Some(Duration::ZERO)).await?;
        if sales.is_empty() {
            break;
        }
        persist_and_ack(settings, pool, probe, conn, sales).await?;
    }
    let pattern = format!("{}p:*", settings.keys.prefix);
    let counters: Vec<String> = {
        let mut iter: redis::AsyncIter<String> = conn.scan_match(&pattern).await?;
        let mut all = HashSet::new();
        while let Some(key) = futures_next(&mut iter).await {
            all.insert(key);
        }
        all.into_iter().collect()
    };
    for key in counters {
        let Some(product_id) = key.rsplit(':').next().and_then(|id| id.parse::<i64>().ok()) else {
            continue;
        };
        let row: Option<(i32, i32)> =
            sqlx::query_as("SELECT quantity, epoch FROM stock WHERE product_id = ?")
                .bind(product_id)
                .fetch_optional(pool)
                .await?;
        if let Some((quantity, epoch)) = row {
            let change: i64 = RECONCILE
                .key(&key)
                .arg(quantity)
                .arg(epoch)
                .invoke_async(conn)
                .await?;
            if change != 0 {
                tracing::warn!(product_id, change, "redis-stock: counter corrected");
            }
        }
    }
    let _: i64 = conn.del(&flag).await?;
    Ok(())
}

async fn futures_next(iter: &mut redis::AsyncIter<'_, String>) -> Option<String> {
    match iter.next_item().await {
        Some(Ok(key)) => Some(key),
        _ => None,
    }
}
