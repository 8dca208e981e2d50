//! The classic lock mistakes of the write-ups, made on purpose: each one a few lines
//! away from the correct algorithm it breaks ([`super::algorithm`]), switched on per request with the test hook
//! `"mistake": NAME` (only with `--enable-test-hooks`; never in production), and each
//! shown failing by a test in `app/tests/api/mistakes.rs` and by the chaos runner's
//! scenario `mistakes` (the book's "Faults and fencing").
//!
//! | mistake | made in | what goes wrong | the correct code |
//! |---|---|---|---|
//! | `lock-inside-transaction` | `redis-lock` | BEGIN and a first read *before* the lock: under REPEATABLE READ the read under the lock comes from a snapshot older than the previous holder's COMMIT, and the write erases that holder's sale (lost update) | [`super::algorithm`]: lock, then BEGIN |
//! | `release-before-commit` | `redis-lock` | the lock is released, then COMMIT: the next holder reads the stock before the first one's write is visible, and its write (queued behind the first one's row lock) erases it | [`super::algorithm`]: COMMIT, then release |
//! | `setnx-then-expire` | `redis-lock` | `SETNX` then `EXPIRE`, two commands: a holder that dies between them leaves a key with no TTL, and nobody ever gets the lock again | [`locks::redis_simple`]: `SET key value NX PX lease`, one command |
//! | `get-then-del` | `redis-lock` | unlock by `GET`, compare, `DEL`: a holder whose lease ran out between its GET and its DEL deletes the *next* holder's lock, and a third one walks in while the second still works (lost update) | `locks/lua/simple_unlock.lua`: compare and delete in one script |
//! | `persistent-node` | `zookeeper` | the lock node is PERSISTENT, not EPHEMERAL: a holder that dies (its session ends) leaves the node, and every later buyer waits forever | [`locks::zookeeper`]: ephemeral sequential nodes |
//! //!
//! Each function below is the *whole* mistaken algorithm, written the way it is
//! usually written, so it can be read against the correct file. The mistakes run
//! unfenced, as the write-ups' code does: fencing would hide the first four.
//!
//! Failpoints: besides the usual ones, `before_lock` where the mistake locks (a
//! `lock-inside-transaction` request has begun its transaction and read) and
//! `before_release` (a `get-then-del` unlock has compared, and not yet deleted).
//! `after_lock` takes the mode `crash` in `setnx-then-expire` (between SETNX and
//! EXPIRE) and `persistent-node` (node created): the request stops there as a killed
//! process would, holding what it holds.

use super::algorithm::not_acquired;
use super::redis_lock;
use super::zookeeper::ZooKeeper;
use crate::domain::error::DeductError;
use crate::domain::probe::Failpoint;
use crate::strategies::card::{Reached, Served, StrategyInfo};
use crate::strategies::contract::{Context, Declare, Deducted, Deduction, Started, Strategy};
use crate::strategies::plain::{self, read_check_write};
use crate::strategies::registered::Registered;
use crate::strategies::shared::Shared;
use crate::strategies::txn::{self, Sold, check_enough};
use async_trait::async_trait;
use locks::redis::RedisLock;
use locks::redis_sentinel::{Endpoint, Primary};
use locks::{HolderId, LockGuard, LockOptions, Locker};
use redis::aio::ConnectionManager;
use std::sync::Arc;
use std::sync::LazyLock;
use std::time::Duration;
use tokio::sync::OnceCell;
use tokio::time::Instant;
use zookeeper_client as zk;

/// One classic mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mistake {
    LockInsideTransaction,
    ReleaseBeforeCommit,
    SetnxThenExpire,
    GetThenDel,
    PersistentNode,
}

impl Mistake {
    pub const ALL: [Mistake; 5] = [
        Mistake::LockInsideTransaction,
        Mistake::ReleaseBeforeCommit,
        Mistake::SetnxThenExpire,
        Mistake::GetThenDel,
        Mistake::PersistentNode,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mistake::LockInsideTransaction => "lock-inside-transaction",
            Mistake::ReleaseBeforeCommit => "release-before-commit",
            Mistake::SetnxThenExpire => "setnx-then-expire",
            Mistake::GetThenDel => "get-then-del",
            Mistake::PersistentNode => "persistent-node",
        }
    }

    pub fn parse(name: &str) -> Option<Mistake> {
        Mistake::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// A lock strategy the service can make mistakes in: which mistakes it can be made
/// to make.
pub trait MakesMistakes: Declare<Shared> {
    const MADE: &'static [&'static str];
}

impl MakesMistakes for redis_lock::RedisLock {
    const MADE: &'static [&'static str] = &[
        "lock-inside-transaction",
        "release-before-commit",
        "setnx-then-expire",
        "get-then-del",
    ];
}

impl MakesMistakes for ZooKeeper {
    const MADE: &'static [&'static str] = &["persistent-node"];
}

/// How the service runs `T` (its registry line): `T`'s own lock strategy, which a
/// copy takes alone, plus the classic mistakes it can be made to make.
pub struct Mistaken<T>(std::marker::PhantomData<T>);

impl<T: MakesMistakes> Declare<Shared> for Mistaken<T> {
    type Settings = T::Settings;

    fn build(settings: &T::Settings, context: &Context<'_, Shared>) -> Arc<dyn Strategy> {
        let strategy = T::build(settings, context);
        Arc::new(WithMistakes::new(strategy, context.shared, T::MADE))
    }
}

/// `T`'s card and flags.
impl<T: MakesMistakes + Registered> Registered for Mistaken<T> {
    type Flags = T::Flags;

    fn card() -> &'static StrategyInfo {
        T::card()
    }

    fn settings(flags: &T::Flags) -> T::Settings {
        T::settings(flags)
    }
}

/// A lock strategy that can also be made to make some of the classic mistakes
/// (`names`), on a request's `mistake` test knob.
pub struct WithMistakes {
    strategy: Arc<dyn Strategy>,
    mistakes: Mistakes,
    names: &'static [&'static str],
}

impl WithMistakes {
    pub fn new(
        strategy: Arc<dyn Strategy>,
        shared: &Shared,
        names: &'static [&'static str],
    ) -> Self {
        WithMistakes {
            strategy,
            mistakes: Mistakes::new(shared),
            names,
        }
    }
}

#[async_trait(?Send)]
impl Strategy for WithMistakes {
    fn name(&self) -> &'static str {
        self.strategy.name()
    }

    async fn deduct(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        self.strategy.deduct(d).await
    }

    fn start(&self, started: &Started<'_>) -> Option<tokio::task::JoinHandle<()>> {
        self.strategy.start(started)
    }

    async fn restocked(&self, product_id: i64) {
        self.strategy.restocked(product_id).await
    }

    fn mistakes(&self) -> &'static [&'static str] {
        self.names
    }

    async fn deduct_mistaken(
        &self,
        name: &str,
        d: &Deduction<'_>,
    ) -> Result<Deducted, DeductError> {
        match Mistake::parse(name).filter(|_| self.names.contains(&name)) {
            Some(mistake) => self.mistakes.deduct(mistake, d).await,
            None => Err(DeductError::InvalidRequest(format!(
                "`{}` makes no mistake `{name}`",
                self.name()
            ))),
        }
    }
}

#[async_trait(?Send)]
impl Served for WithMistakes {
    async fn stock_view(&self, product_id: i64) -> serde_json::Map<String, serde_json::Value> {
        self.strategy.stock_view(product_id).await
    }

    async fn ready(&self, limit: std::time::Duration) -> Option<Reached> {
        self.strategy.ready(limit).await
    }

    fn register(
        &self,
        registry: &prometheus::Registry,
        probe: &std::sync::Arc<dyn crate::domain::probe::Probe>,
    ) {
        self.strategy.register(registry, probe)
    }

    async fn scrape(&self) {
        self.strategy.scrape().await
    }
}

/// What the mistaken algorithms need: their own connections to the backends of the
/// strategies they break (made on first use, like the strategies').
pub struct Mistakes {
    /// `redis-lock`'s Redis (through Sentinel when it is configured).
    redis: Option<Endpoint>,
    zk_connect: Option<String>,
    zk_root: String,
    zk_session: Duration,
    options: LockOptions,
    wait: Duration,
    locker: OnceCell<Locker>,
    primary: OnceCell<Primary>,
}

impl Mistakes {
    pub fn new(shared: &Shared) -> Mistakes {
        Mistakes {
            redis: shared.redis_endpoint(),
            zk_connect: shared.zk_connect.clone(),
            zk_root: shared.zk_root.clone(),
            zk_session: shared.zk_session(),
            options: shared.lock_options(),
            wait: shared.lock_wait(),
            locker: OnceCell::new(),
            primary: OnceCell::new(),
        }
    }

    /// Deducts `d.order` the mistaken way.
    pub async fn deduct(
        &self,
        mistake: Mistake,
        d: &Deduction<'_>,
    ) -> Result<Deducted, DeductError> {
        match mistake {
            Mistake::LockInsideTransaction => self.lock_inside_transaction(d).await,
            Mistake::ReleaseBeforeCommit => self.release_before_commit(d).await,
            Mistake::SetnxThenExpire => self.setnx_then_expire(d).await,
            Mistake::GetThenDel => self.get_then_del(d).await,
            Mistake::PersistentNode => self.persistent_node(d).await,
        }
    }

    /// BEGIN; a first read (it fixes the transaction's snapshot); lock; the read
    /// under the lock (from that snapshot: stale if a holder committed since); write;
    /// COMMIT; release.
    async fn lock_inside_transaction(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        let mut tx = d.begin().await?;
        // The mistake: the transaction reads before the lock is taken. Any read does
        // (checking the product exists, a price); REPEATABLE READ then answers every
        // later read of this transaction from the snapshot taken here.
        for item in d.order.by_product() {
            read_quantity(&mut tx, item.product_id).await?;
        }
        d.probe.at(Failpoint::BeforeLock).await;
        let held = self.lock_all(d).await?;
        d.probe.at(Failpoint::AfterLock).await;
        let done = async {
            let mut sold = Vec::new();
            for item in d.order.by_product() {
                let quantity = read_quantity(&mut tx, item.product_id).await?;
                check_enough(item, quantity)?;
                sold.push(Sold {
                    item,
                    remaining: quantity - item.quantity,
                });
            }
            d.probe.after_read(d.knobs).await;
            for s in &sold {
                plain::write(&mut tx, s).await?;
            }
            let done = txn::record(&mut tx, d, &sold, 1, None).await?;
            txn::commit(tx, d.probe).await?;
            Ok(done)
        }
        .await;
        release_all(held).await;
        done
    }

    /// Lock; read; BEGIN; write; release; COMMIT.
    async fn release_before_commit(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        let held = self.lock_all(d).await?;
        d.probe.at(Failpoint::AfterLock).await;
        let written = async {
            let sold = plain::read_and_check(d).await?;
            d.probe.after_read(d.knobs).await;
            let mut tx = d.begin().await?;
            for s in &sold {
                plain::write(&mut tx, s).await?;
            }
            let done = txn::record(&mut tx, d, &sold, 1, None).await?;
            Ok::<_, DeductError>((tx, done))
        }
        .await;
        // The mistake: released while the write is not yet committed (a `finally`
        // inside a method whose transaction commits when it returns).
        release_all(held).await;
        let (tx, done) = written?;
        txn::commit(tx, d.probe).await?;
        Ok(done)
    }

    /// `SETNX key holder`, then `EXPIRE key lease`, then the sale, then a correct
    /// (atomic) unlock.
    async fn setnx_then_expire(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        let mut redis = self.redis().await?;
        let holder = d.order.request_id.as_str();
        let keys = self
            .take_each(d, async |key| {
                let taken: bool = redis::cmd("SETNX")
                    .arg(key)
                    .arg(holder)
                    .query_async(&mut redis.clone())
                    .await
                    .map_err(redis_down)?;
                if taken {
                    // The mistake: a crash here leaves a key with no TTL. (Nothing
                    // releases it: the holder is gone, and the key never expires.)
                    d.probe.at_or_crash(Failpoint::AfterLock).await?;
                    let () = redis::cmd("PEXPIRE")
                        .arg(key)
                        .arg(self.options.lease.as_millis() as u64)
                        .query_async(&mut redis.clone())
                        .await
                        .map_err(redis_down)?;
                }
                Ok(taken)
            })
            .await?;
        let done = read_check_write(d).await;
        for key in &keys {
            let _: redis::RedisResult<i64> = COMPARE_AND_DELETE
                .key(key)
                .arg(holder)
                .invoke_async(&mut redis)
                .await;
        }
        done
    }

    /// `SET key holder NX PX lease` (correct), the sale, then unlock by `GET`, compare,
    /// `DEL`: three steps where one script is needed.
    async fn get_then_del(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        let mut redis = self.redis().await?;
        let holder = d.order.request_id.as_str();
        let lease_ms = self.options.lease.as_millis() as u64;
        let keys = self
            .take_each(d, async |key| {
                let set: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg(holder)
                    .arg("NX")
                    .arg("PX")
                    .arg(lease_ms)
                    .query_async(&mut redis.clone())
                    .await
                    .map_err(redis_down)?;
                Ok(set.is_some())
            })
            .await?;
        d.probe.at(Failpoint::AfterLock).await;
        let done = read_check_write(d).await;
        for key in &keys {
            let current: Option<String> = redis::cmd("GET")
                .arg(key)
                .query_async(&mut redis)
                .await
                .map_err(redis_down)?;
            if current.as_deref() == Some(holder) {
                // The mistake: between the GET and the DEL the lease may run out and
                // another buyer take the lock; this DEL then deletes *its* lock.
                d.probe.at(Failpoint::BeforeRelease).await;
                let _: i64 = redis::cmd("DEL")
                    .arg(key)
                    .query_async(&mut redis)
                    .await
                    .map_err(redis_down)?;
            }
        }
        done
    }

    /// A ZooKeeper session of the request's own (as a process has), a PERSISTENT node
    /// per product as the lock (exists: someone holds it, wait), the sale, delete.
    async fn persistent_node(&self, d: &Deduction<'_>) -> Result<Deducted, DeductError> {
        let connect = self
            .zk_connect
            .as_deref()
            .ok_or_else(|| unavailable("zookeeper", "ZK_CONNECT is not set"))?;
        let client = zk::Client::connector()
            .with_session_timeout(self.zk_session)
            .connect(connect)
            .await
            .map_err(|e| unavailable("zookeeper", e))?;
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let parent = format!("{}/mistake-persistent", self.zk_root);
        client
            .mkdir(&parent, &persistent)
            .await
            .map_err(|e| unavailable("zookeeper", e))?;
        let holder = d.order.request_id.as_bytes();
        let paths = self
            .take_each(d, async |key| {
                let path = format!("{parent}/{}", key.replace(':', "-"));
                // The mistake: PERSISTENT. An ephemeral node dies with its session.
                match client.create(&path, holder, &persistent).await {
                    Ok(_) => Ok(true),
                    Err(zk::Error::NodeExists) => Ok(false),
                    Err(e) => Err(unavailable("zookeeper", e)),
                }
            })
            .await?;
        // A crash here ends the request's session: an ephemeral node would go with it.
        d.probe.at_or_crash(Failpoint::AfterLock).await?;
        let done = read_check_write(d).await;
        for key in &paths {
            let path = format!("{parent}/{}", key.replace(':', "-"));
            let _ = client.delete(&path, None).await;
        }
        done
    }

    /// Takes `stock:{id}` on `redis-lock`'s Redis for each product in order, the
    /// correct lock of `redis-lock` (its reentrant hash, shared with correct requests).
    async fn lock_all(&self, d: &Deduction<'_>) -> Result<Vec<LockGuard>, DeductError> {
        let locker = self
            .locker
            .get_or_try_init(async || {
                let lock = RedisLock::connect_to(self.endpoint()?)
                    .await
                    .map_err(|e| unavailable("redis", e))?;
                Ok::<_, DeductError>(Locker::new(lock))
            })
            .await?;
        let holder = HolderId::new(format!("mistake:{}", d.order.request_id))
            .map_err(|e| DeductError::Unexpected(e.into()))?;
        let deadline = Instant::now() + self.wait;
        let mut held = Vec::new();
        for item in d.order.by_product() {
            let key = format!("stock:{}", item.product_id);
            let left = deadline.saturating_duration_since(Instant::now());
            match locker.acquire(&key, &holder, &self.options, left).await {
                Ok(guard) => held.push(guard),
                Err(e) => {
                    release_all(held).await;
                    return Err(not_acquired("redis", &key, e));
                }
            }
        }
        Ok(held)
    }

    /// A lock taken by `try_take(key)` for each product in order, retried every
    /// 5-15 ms until the wait runs out (503 `busy`). Returns the keys taken.
    async fn take_each(
        &self,
        d: &Deduction<'_>,
        try_take: impl AsyncFn(&str) -> Result<bool, DeductError>,
    ) -> Result<Vec<String>, DeductError> {
        let deadline = Instant::now() + self.wait;
        let mut keys = Vec::new();
        for item in d.order.by_product() {
            let key = format!("mistake:stock:{}", item.product_id);
            while !try_take(&key).await? {
                if Instant::now() >= deadline {
                    // What was taken stays until its lease ends (or, for the mistakes
                    // without one, for good): the point of the two mistakes.
                    return Err(DeductError::Busy(format!(
                        "lock {key} not acquired within {:?}",
                        self.wait
                    )));
                }
                let pause = 5 + rand::random::<u64>() % 10;
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            keys.push(key);
        }
        Ok(keys)
    }

    fn endpoint(&self) -> Result<&Endpoint, DeductError> {
        self.redis
            .as_ref()
            .ok_or_else(|| unavailable("redis", "REDIS_URLS is not set"))
    }

    /// A connection to `redis-lock`'s Redis, for the mistakes' hand-made locks.
    async fn redis(&self) -> Result<ConnectionManager, DeductError> {
        let primary = self
            .primary
            .get_or_try_init(async || {
                Primary::connect(self.endpoint()?)
                    .await
                    .map_err(|e| unavailable("redis", e))
            })
            .await?;
        Ok(primary.conn().0)
    }
}

/// The correct unlock: the minimal lock's compare-and-delete script.
static COMPARE_AND_DELETE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(locks::redis_simple::SIMPLE_UNLOCK_LUA));

async fn read_quantity(
    tx: &mut sqlx::MySqlConnection,
    product_id: i64,
) -> Result<i32, DeductError> {
    sqlx::query_scalar("SELECT quantity FROM stock WHERE product_id = ?")
        .bind(product_id)
        .fetch_optional(tx)
        .await?
        .ok_or(DeductError::UnknownProduct(product_id))
}

async fn release_all(mut held: Vec<LockGuard>) {
    while let Some(guard) = held.pop() {
        let _ = guard.release().await;
    }
}

fn redis_down(e: redis::RedisError) -> DeductError {
    unavailable("redis", &e).caused_by(e)
}

fn unavailable(backend: &str, detail: impl std::fmt::Display) -> DeductError {
    DeductError::unavailable(backend, detail.to_string())
}
