//! `mysql-lock`, `redis-lock`, `redlock` and `zookeeper`: a distributed lock around a plain
//! read-check-write, with fenced writes.
//!
//! # Algorithm
//! 1. For each product of the order, in product_id order: acquire the lock
//!    `stock:{product_id}` (`redlock:stock:{product_id}` for RedLock, the node
//!    `/stock-locks/stock/{product_id}` in ZooKeeper; the `locks` crate: [`locks::mysql`],
//!    [`locks::redis`], [`locks::redlock`], [`locks::zookeeper`]), all
//!    under one wait bound (`--lock-wait-ms`; 503 `busy` when it runs out, releasing
//!    what was taken). The holder is this instance and request; the watchdog renews
//!    the lease every lease/3 until the request ends or `--lock-max-hold-ms`.
//! 2. **Fencing on** (the default): claim each product with the lock's token, as its
//!    own committed statement: `UPDATE stock_fence SET token = :t WHERE ... AND
//!    token < :t`. No row: a newer holder exists → 503 `lock_lost`. RedLock has no
//!    token: it claims with its owner tag instead (`SET owner = :v`, unconditional:
//!    owners have no order, so the latest claim wins, even a stale holder's).
//! 3. BEGIN; plain read, check (as `unsafe` does: the lock is trusted, the database
//!    is not asked to lock anything).
//! 4. Write the computed quantity: fenced, only `WHERE stock_fence.token = :t` (or
//!    `owner = :v`) still holds (0 rows → ROLLBACK → 503 `lock_lost`); unfenced, unconditionally.
//! 5. Ledger (with the token), orders. Fenced: a lock known to be lost by now →
//!    ROLLBACK, `lock_lost`. COMMIT. Release the locks, last first. A loss noticed only
//!    after COMMIT is reported as `lock_lost_after_commit: true`.
//!
//! # What fencing buys
//! A lease lock alone cannot stop a holder that pauses past its lease: it wakes up
//! after another holder took the lock and wrote, and overwrites that write with a
//! value computed from its stale read. Unfenced (`--fencing false` or `"fencing":
//! false`), this service does exactly what the seeds' code does, trusts the lock and
//! never looks back, and the test `fencing::*_unfenced_loses_an_update` shows the lost
//! update. Fenced, the stale holder's token is older than the newest claim and its
//! write is refused. The claim and the guarded write together are a compare-and-set:
//! they would be safe even without a lock; the lock's job becomes efficiency (few
//! refused requests), not safety.
//!
//! # When to use it
//! When the critical section spans more than the database (a call to another service
//! between read and write) and you can fence the final write. For stock in one
//! database, `atomic-sql` is simpler and faster; the report shows by how much.

use super::{Applied, Cx, Held, HeldLock, Strategy, StrategyInfo, TxError, read_and_check};
use crate::config::Settings;
use crate::error::AppError;
use crate::order::Order;
use crate::stock::{self, Fence};
use async_trait::async_trait;
use futures::future::BoxFuture;
use locks::{HolderId, LockError, LockGuard, LockOptions, Locker};
use sqlx::{MySqlConnection, MySqlPool};
use std::time::Duration;
use tokio::sync::OnceCell;

type Connect = Box<dyn Fn() -> BoxFuture<'static, Result<Locker, AppError>> + Send + Sync>;

/// A strategy that trusts one distributed lock backend.
pub struct LockStrategy {
    info: StrategyInfo,
    /// Lock keys are `<prefix><product_id>`.
    key_prefix: &'static str,
    /// Connects the backend on first use: startup never waits on Redis.
    connect: Connect,
    locker: OnceCell<Locker>,
    /// For the fencing claims (autocommit statements, outside the stock transaction).
    pool: MySqlPool,
    options: LockOptions,
    wait: Duration,
    fencing: bool,
    /// Names this process in holder ids (`<instance>:<request_id>`).
    instance: String,
}

static MYSQL_INFO: StrategyInfo = StrategyInfo {
    name: "mysql-lock",
    description: "Lock table in the database (reentrant, leased by the database clock, watchdog), plain read-check-write; fenced by default.",
    backend: "database (lock table)",
    safe_across_instances: true,
    fencing: "token",
};

static REDLOCK_INFO: StrategyInfo = StrategyInfo {
    name: "redlock",
    description: "RedLock over the Redis nodes (majority, validity = lease - elapsed - drift), plain read-check-write; fenced by owner tag by default.",
    backend: "redis x5 (RedLock)",
    safe_across_instances: true,
    fencing: "owner tag",
};

static ZOOKEEPER_INFO: StrategyInfo = StrategyInfo {
    name: "zookeeper",
    description: "Ephemeral sequential node per request, each waiter watching its predecessor (Curator-compatible), plain read-check-write; fenced by czxid by default.",
    backend: "zookeeper",
    safe_across_instances: true,
    fencing: "token (czxid)",
};

static REDIS_INFO: StrategyInfo = StrategyInfo {
    name: "redis-lock",
    description: "Redisson-style reentrant hash lock in Redis (Lua, watchdog, pub/sub wake-up), plain read-check-write; fenced by default.",
    backend: "redis",
    safe_across_instances: true,
    fencing: "token",
};

impl LockStrategy {
    fn new(
        info: StrategyInfo,
        key_prefix: &'static str,
        connect: Connect,
        settings: &Settings,
        pool: &MySqlPool,
    ) -> LockStrategy {
        LockStrategy {
            info,
            key_prefix,
            connect,
            locker: OnceCell::new(),
            pool: pool.clone(),
            options: LockOptions {
                lease: Duration::from_millis(settings.lock_lease_ms),
                renew: true,
                max_hold: Some(Duration::from_millis(settings.lock_max_hold_ms)),
            },
            wait: Duration::from_millis(settings.lock_wait_ms),
            fencing: settings.fencing,
            instance: uuid::Uuid::new_v4().simple().to_string(),
        }
    }

    /// `mysql-lock`: the lock table, on pools of its own in the service's database.
    pub fn mysql(settings: &Settings, pool: &MySqlPool) -> LockStrategy {
        let (url, size) = (settings.database_url.clone(), settings.mysql_lock_pool_size);
        let connect: Connect = Box::new(move || {
            let url = url.clone();
            Box::pin(async move {
                let backend = locks::mysql::MysqlLock::connect(&url, size)
                    .await
                    .map_err(unavailable("database"))?;
                Ok(Locker::new(backend))
            })
        });
        LockStrategy::new(MYSQL_INFO.clone(), "stock:", connect, settings, pool)
    }

    /// `redis-lock`: the first of `REDIS_URLS`.
    pub fn redis(settings: &Settings, pool: &MySqlPool) -> LockStrategy {
        let url = settings.redis_urls.first().cloned();
        let connect: Connect = Box::new(move || {
            let url = url.clone();
            Box::pin(async move {
                let url = url.ok_or_else(|| AppError::BackendUnavailable {
                    backend: "redis".into(),
                    detail: "REDIS_URLS is not set".into(),
                })?;
                let backend = locks::redis::RedisLock::connect(&url)
                    .await
                    .map_err(unavailable("redis"))?;
                Ok(Locker::new(backend))
            })
        });
        LockStrategy::new(REDIS_INFO.clone(), "stock:", connect, settings, pool)
    }

    /// `redlock`: every one of `REDIS_URLS` (at least 3; 5 in the testbed and compose).
    pub fn redlock(settings: &Settings, pool: &MySqlPool) -> LockStrategy {
        let urls = settings.redis_urls.clone();
        let node_timeout = Duration::from_millis(settings.redlock_node_timeout_ms);
        let connect: Connect = Box::new(move || {
            let urls = urls.clone();
            Box::pin(async move {
                let backend = locks::redlock::RedLock::new(&urls)
                    .map_err(|e| AppError::BackendUnavailable {
                        backend: "redlock".into(),
                        detail: format!("{e} (REDIS_URLS)"),
                    })?
                    .with_node_timeout(node_timeout);
                Ok(Locker::new(backend))
            })
        });
        LockStrategy::new(
            REDLOCK_INFO.clone(),
            "redlock:stock:",
            connect,
            settings,
            pool,
        )
    }

    /// `zookeeper`: the ensemble of `ZK_CONNECT`, nodes under `<zk-root>/stock/<id>`
    /// (the path a Curator `InterProcessMutex` would use).
    pub fn zookeeper(settings: &Settings, pool: &MySqlPool) -> LockStrategy {
        let connect_string = settings.zk_connect.clone();
        let root = settings.zk_root.clone();
        let session = Duration::from_millis(settings.zk_session_timeout_ms);
        let connect: Connect = Box::new(move || {
            let (connect_string, root) = (connect_string.clone(), root.clone());
            Box::pin(async move {
                let connect_string =
                    connect_string.ok_or_else(|| AppError::BackendUnavailable {
                        backend: "zookeeper".into(),
                        detail: "ZK_CONNECT is not set".into(),
                    })?;
                let backend =
                    locks::zookeeper::ZooKeeperLock::connect(&connect_string, &root, session)
                        .await
                        .map_err(unavailable("zookeeper"))?;
                Ok(Locker::new(backend))
            })
        });
        let mut strategy =
            LockStrategy::new(ZOOKEEPER_INFO.clone(), "stock/", connect, settings, pool);
        // The "lease" of a session lock is the holder's safety margin: give up after
        // two thirds of the session timeout without reaching the ensemble.
        strategy.options.lease = strategy.options.lease.min(session * 2 / 3);
        strategy
    }

    async fn locker(&self) -> Result<&Locker, AppError> {
        self.locker.get_or_try_init(|| (self.connect)()).await
    }

    /// Fencing, step 1: claim `product_id` with the lock's token (refused when a newer
    /// token claimed it), or, for a backend without tokens, with its owner tag.
    async fn claim(&self, locker: &Locker, product_id: i64, held: &Held) -> Result<(), AppError> {
        let backend = locker.name();
        match (held.token_for(product_id), held.owner_for(product_id)) {
            (Some(token), _) => {
                match stock::claim_fence(&self.pool, product_id, backend, token).await? {
                    true => Ok(()),
                    false => Err(AppError::LockLost(format!(
                        "fencing token {token} for product {product_id} is older than a newer holder's"
                    ))),
                }
            }
            (None, Some(owner)) => {
                Ok(stock::claim_owner(&self.pool, product_id, backend, owner).await?)
            }
            (None, None) => Err(AppError::Unexpected(anyhow::anyhow!(
                "{backend} gives neither token nor owner"
            ))),
        }
    }

    fn fenced(&self, order: &Order) -> bool {
        order.hooks.fencing.unwrap_or(self.fencing)
    }
}

fn unavailable(backend: &'static str) -> impl Fn(LockError) -> AppError {
    move |e| AppError::BackendUnavailable {
        backend: backend.into(),
        detail: e.to_string(),
    }
}

/// One product's lock, held for an order.
struct ProductLock {
    product_id: i64,
    guard: LockGuard,
}

#[async_trait]
impl HeldLock for ProductLock {
    fn product_id(&self) -> Option<i64> {
        Some(self.product_id)
    }

    fn fence_token(&self) -> Option<u64> {
        self.guard.token()
    }

    fn owner(&self) -> Option<&str> {
        Some(self.guard.holder().as_str())
    }

    fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    async fn release(self: Box<Self>) {
        let key = self.guard.key().to_string();
        if let Err(e) = self.guard.release().await {
            // Lost before the release (expired and taken): nothing left to free.
            tracing::warn!(%key, error = %e, "lock release failed");
        }
    }
}

#[async_trait]
impl Strategy for LockStrategy {
    fn info(&self) -> &StrategyInfo {
        &self.info
    }

    async fn lock(&self, order: &Order) -> Result<Held, AppError> {
        let locker = self.locker().await?;
        let holder = HolderId::new(format!("{}:{}", self.instance, order.request_id))
            .map_err(|e| AppError::Unexpected(e.into()))?;
        let fenced = self.fenced(order);
        let deadline = tokio::time::Instant::now() + self.wait;
        let mut held = Held {
            check_lost_before_commit: fenced,
            ..Held::none()
        };
        for item in order.by_product() {
            let key = format!("{}{}", self.key_prefix, item.product_id);
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let guard = match locker.acquire(&key, &holder, &self.options, left).await {
                Ok(guard) => guard,
                Err(e) => {
                    held.release().await;
                    return Err(match e {
                        LockError::TimedOut { waited, .. } => {
                            AppError::Busy(format!("lock {key} not acquired within {waited:?}"))
                        }
                        LockError::Backend(detail) => AppError::BackendUnavailable {
                            backend: locker.name().into(),
                            detail,
                        },
                        other => AppError::Unexpected(other.into()),
                    });
                }
            };
            held.push(Box::new(ProductLock {
                product_id: item.product_id,
                guard,
            }));
            if fenced && let Err(e) = self.claim(locker, item.product_id, &held).await {
                held.release().await;
                return Err(e);
            }
        }
        Ok(held)
    }

    async fn apply(
        &self,
        cx: &Cx<'_>,
        tx: &mut MySqlConnection,
        order: &Order,
        held: &Held,
    ) -> Result<Vec<Applied>, TxError> {
        let backend = self.locker().await?.name();
        read_check_write_fenced(cx, tx, order, held, backend, self.fenced(order)).await
    }
}

/// Steps 3 and 4 of the algorithm: plain read, check, then write each computed
/// quantity, guarded by the product's claim when `fenced` (0 rows: a newer claim
/// exists → `lock_lost`). Shared with `fence-only`, which claims with a ticket
/// instead of a lock's token.
pub(super) async fn read_check_write_fenced(
    cx: &Cx<'_>,
    tx: &mut MySqlConnection,
    order: &Order,
    held: &Held,
    backend: &str,
    fenced: bool,
) -> Result<Vec<Applied>, TxError> {
    let applied = read_and_check(tx, order).await?;
    cx.hooks.after_read(order).await;
    for a in &applied {
        let product_id = a.item.product_id;
        let fence = match (held.token_for(product_id), held.owner_for(product_id)) {
            _ if !fenced => None,
            (Some(token), _) => Some(Fence::Token(token)),
            (None, Some(owner)) => Some(Fence::Owner(owner)),
            (None, None) => {
                return Err(AppError::Unexpected(anyhow::anyhow!("no fence for a lock")).into());
            }
        };
        let written = match fence {
            Some(fence) => {
                stock::write_quantity_fenced(tx, product_id, a.remaining, backend, fence).await?
            }
            None => {
                stock::write_quantity(tx, product_id, a.remaining).await?;
                true
            }
        };
        if !written {
            return Err(AppError::LockLost(format!(
                "product {product_id}: this request's claim is no longer the newest; \
                 a newer holder claimed it since (this one was paused, or overtaken)"
            ))
            .into());
        }
    }
    Ok(applied)
}
