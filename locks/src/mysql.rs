//! A lock table in MySQL/MariaDB: the `distributed_lock` of the article 解决 MySQL 库存超卖问题
//! (Solving stock oversell in MySQL), done right.
//!
//! # Copying this file
//! Take `src/lock.rs` (the core), this file and `sql/mysql_lock.sql` (the DDL:
//! [`MysqlLock::create_table`] runs it) into your crate, with `mod lock; mod mysql;` at
//! its root, and the crates `copies.toml` lists under `[backend.mysql]`.
//! `./scripts/copy-check mysql DIR` builds such a copy and runs it on a real server.
//! Example: `cargo run -p locks --example mysql`.
//!
//! One row per lock key (`sql/mysql_lock.sql`):
//! `lock_key`, `holder_id` (NULL when free), `reentrant_count`, `expire_time`
//! (judged by the **database's** clock, `NOW(6)`), `fence_token`.
//!
//! # Algorithm
//! Acquire, one attempt. The common case is **one statement**:
//! 1. **Take**, one autocommit `UPDATE`: take the row when it is free (`holder_id`
//!    NULL) or expired (`expire_time <= NOW(6)`, a steal), or re-enter it when it is
//!    ours and live: `WHERE lock_key = ? AND (holder_id IS NULL OR expire_time <=
//!    NOW(6) OR holder_id = ?)`. Taking sets holder = us, count = 1,
//!    `fence_token = fence_token + 1`; re-entering counts + 1, renews the lease and
//!    keeps the **same** token. The token comes back in the reply's last-insert-id
//!    through `fence_token = LAST_INSERT_ID(...)`, MySQL's classic sequence idiom, so
//!    no read follows. One matched row: acquired. Two racers: the second re-reads the
//!    committed row, no longer matches, and takes nothing.
//! 2. Nothing matched: a plain read of the row (no row lock taken).
//!    - held by someone else with a live lease → busy, with the remaining lease as a
//!      hint;
//!    - no row → `INSERT` it with us as holder, count 1, token 1. A racer that
//!      inserted first makes ours fail with 1062: not acquired this round. This race
//!      happens once per key, ever, because rows are never deleted;
//!    - free again (released between the two statements) → step 1 once more.
//!
//! So acquire + release is two round trips in the common case (`cargo bench -p locks`
//! measures it against a plain UPDATE; the book has the figures).
//!
//! Renew: `UPDATE ... SET expire_time = NOW(6) + lease WHERE lock_key = ? AND
//! holder_id = ? AND expire_time > NOW(6)`: only while we still hold a live lease.
//!
//! Release: count − 1; at 0 `holder_id = NULL`. The row stays, so the token counter
//! survives and the next holder gets a bigger token.
//!
//! Waiting ([`MysqlLock::acquire`]): a new attempt after a jittered pause of 1-20 ms
//! (capped by the holder's remaining lease). There is no notification in a table.
//!
//! # Why these details
//! - READ COMMITTED for attempts: each attempt is one autocommit statement, and at
//!   READ COMMITTED the `UPDATE` of a key with no row yet locks no gap (at REPEATABLE
//!   READ it would lock the gap around the key for the statement, and an `INSERT` of a
//!   neighbouring key would wait). An attempt that meets the row locked by another
//!   statement (a release in flight) waits for it at either level: InnoDB's
//!   semi-consistent read, which lets an `UPDATE` at READ COMMITTED pass over a locked
//!   row whose committed version does not match, is not used for a search on the
//!   primary key, and `WHERE lock_key = ?` is one. The wait is one short statement's.
//! - Two pools: attempts run on one pool, renewals and releases on another. Under
//!   contention, waiters fill their pool with attempts; a holder's renewal must never
//!   queue behind them, or the waiters would make the holder lose the lock they are
//!   waiting for.
//! - The database's clock decides expiry, so the holders' clocks never have to agree.
//!   The holder's own deadline (in [`crate::lock::Locker`]) starts before its request is
//!   sent, so it ends before the database's.
//!
//! # How it fails
//! - **Pause past the lease** (GC, SIGSTOP): the lease ends, another holder steals the
//!   lock, the paused one wakes up and writes. Fence your writes with
//!   [`crate::LockGuard::token`]: it grows with every new holder.
//! - **Database failover**: an asynchronous replica promoted to primary may not have
//!   the latest lock row; the lock and its token can go back in time. Keep the lock
//!   table on the same primary as the data it protects (as stock-locks does), so a
//!   lost lock row means lost data too, and the fence lives with it.
//! - **Load**: every attempt is a write transaction on the primary; hundreds of waiters
//!   polling one key cost real database capacity. Jittered backoff spreads them out.
//! - `./scripts/chaos` runs this lock in the service under load (holder frozen past its
//!   lease, holder killed); the book's "Faults and fencing" has what one run showed.

use crate::lock::{Acquired, BackendKind, HolderId, LockBackend, LockError};
use async_trait::async_trait;
use sqlx::MySqlPool;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use std::str::FromStr;
use std::time::Duration;
use tokio::time::Instant;

/// The lock table's DDL (`CREATE TABLE IF NOT EXISTS distributed_lock`).
pub const DDL: &str = include_str!("../sql/mysql_lock.sql");

/// The lock table, on its own two connection pools.
#[derive(Clone)]
pub struct MysqlLock {
    /// Acquisition attempts (READ COMMITTED).
    attempts: MySqlPool,
    /// Renewals and releases: never queued behind waiters.
    holders: MySqlPool,
}

impl MysqlLock {
    /// Connects `attempt_connections` connections for attempts and a few for renewals
    /// and releases. The `distributed_lock` table must exist ([`MysqlLock::create_table`]).
    pub async fn connect(url: &str, attempt_connections: u32) -> Result<MysqlLock, LockError> {
        let options = MySqlConnectOptions::from_str(url).map_err(backend)?;
        let attempts = MySqlPoolOptions::new()
            .max_connections(attempt_connections.max(1))
            .acquire_timeout(Duration::from_secs(5))
            .after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .execute(conn)
                        .await?;
                    Ok(())
                })
            })
            .connect_with(options.clone())
            .await
            .map_err(backend)?;
        let holders = MySqlPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options)
            .await
            .map_err(backend)?;
        Ok(MysqlLock { attempts, holders })
    }

    /// Creates the lock table if it does not exist ([`DDL`]).
    pub async fn create_table(&self) -> Result<(), LockError> {
        sqlx::raw_sql(DDL)
            .execute(&self.holders)
            .await
            .map_err(backend)?;
        Ok(())
    }

    /// Closes both pools.
    pub async fn close(&self) {
        self.attempts.close().await;
        self.holders.close().await;
    }
}

fn backend(e: sqlx::Error) -> LockError {
    use sqlx::Error::{Io, PoolClosed, PoolTimedOut, Protocol, Tls, WorkerCrashed};
    let kind = match e {
        PoolTimedOut => BackendKind::Timeout,
        Io(_) | Tls(_) | Protocol(_) | PoolClosed | WorkerCrashed => BackendKind::Unreachable,
        _ => BackendKind::Failed,
    };
    LockError::Backend("mysql", kind, e.into())
}

fn error_number(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error()?
        .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .map(|e| e.number())
}

fn micros(d: Duration) -> i64 {
    d.as_micros().try_into().unwrap_or(i64::MAX)
}

/// The lock row as an attempt reads it. `ascii_bin` columns come back as binary; CAST
/// makes the holder text again.
const SELECT_ROW: &str = "SELECT CAST(holder_id AS CHAR) AS holder, \
        CAST(COALESCE(expire_time > NOW(6), 0) AS SIGNED) AS live, \
        CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, NOW(6), expire_time), 0) AS SIGNED) AS ttl_us \
    FROM distributed_lock WHERE lock_key = ?";

// ANCHOR: take
/// Step 1: takes the row when it is free or expired, or re-enters it when it is ours
/// and live, in one statement; the token when it did.
async fn take(
    conn: &mut sqlx::MySqlConnection,
    key: &str,
    holder: &HolderId,
    lease: Duration,
) -> Result<Option<u64>, LockError> {
    // MariaDB assigns left to right, so the IFs still see the old holder and expiry
    // (they are overwritten after).
    let taken = sqlx::query(
        r#"
        UPDATE distributed_lock
        SET fence_token = LAST_INSERT_ID(
                IF(holder_id = ? AND expire_time > NOW(6), fence_token, fence_token + 1)),
            reentrant_count = IF(holder_id = ? AND expire_time > NOW(6), reentrant_count + 1, 1),
            holder_id = ?,
            expire_time = NOW(6) + INTERVAL ? MICROSECOND
        WHERE lock_key = ?
          AND (holder_id IS NULL OR expire_time IS NULL OR expire_time <= NOW(6) OR holder_id = ?)
        "#,
    )
    .bind(holder.as_str())
    .bind(holder.as_str())
    .bind(holder.as_str())
    .bind(micros(lease))
    .bind(key)
    .bind(holder.as_str())
    .execute(conn)
    .await
    .map_err(backend)?;
    Ok((taken.rows_affected() == 1).then(|| taken.last_insert_id()))
}
// ANCHOR_END: take

/// One attempt's outcome: the token, or busy with the holder's remaining lease.
enum Attempt {
    Acquired(u64),
    Busy(Option<Duration>),
}

/// Step 2 for a key never locked before: creates its row with us as the holder.
async fn insert_first(
    conn: &mut sqlx::MySqlConnection,
    key: &str,
    holder: &HolderId,
    lease: Duration,
) -> Result<Attempt, LockError> {
    let inserted = sqlx::query(
        r#"
        INSERT INTO distributed_lock (lock_key, holder_id, reentrant_count, expire_time, fence_token)
        VALUES (?, ?, 1, NOW(6) + INTERVAL ? MICROSECOND, 1)
        "#,
    )
    .bind(key)
    .bind(holder.as_str())
    .bind(micros(lease))
    .execute(conn)
    .await;
    match inserted {
        Ok(_) => Ok(Attempt::Acquired(1)),
        // Another racer inserted first (1062; 1213 should several racers deadlock on
        // the key): not ours this round.
        Err(e) if matches!(error_number(&e), Some(1062 | 1213)) => Ok(Attempt::Busy(None)),
        Err(e) => Err(backend(e)),
    }
}

/// Busy, with the remaining lease, when someone other than `holder` has a live lease.
fn held_by_another(row: &Row, holder: &HolderId) -> Option<Attempt> {
    let other = row.holder.as_deref().is_some_and(|h| h != holder.as_str());
    let left = Duration::from_micros(row.ttl_us.max(0) as u64);
    (row.live == 1 && other).then_some(Attempt::Busy(Some(left)))
}

/// The lock row as an attempt sees it.
#[derive(sqlx::FromRow)]
struct Row {
    holder: Option<String>,
    live: i64,
    ttl_us: i64,
}

impl MysqlLock {
    /// One attempt: take, else read why not (insert the row if there is none).
    async fn attempt(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
    ) -> Result<Attempt, LockError> {
        let mut conn = self.attempts.acquire().await.map_err(backend)?;
        // At most twice: a second time only when the lock was released between the
        // take and the read.
        for _ in 0..2 {
            if let Some(token) = take(&mut conn, key, holder, lease).await? {
                return Ok(Attempt::Acquired(token));
            }
            // Step 2: why not? A plain read, no row lock.
            let row: Option<Row> = sqlx::query_as(SELECT_ROW)
                .bind(key)
                .fetch_optional(&mut *conn)
                .await
                .map_err(backend)?;
            match row {
                None => return insert_first(&mut conn, key, holder, lease).await,
                Some(row) => {
                    if let Some(busy) = held_by_another(&row, holder) {
                        return Ok(busy);
                    }
                }
            }
        }
        Ok(Attempt::Busy(None))
    }
}

#[async_trait]
impl LockBackend for MysqlLock {
    fn name(&self) -> &'static str {
        "mysql"
    }

    /// Attempts until acquired or `wait` is over, pausing 1-20 ms (jittered, never
    /// longer than the holder's remaining lease) between attempts.
    ///
    /// # Errors
    /// [`LockError::Backend`]: the database failed, or no connection within 5 s.
    ///
    /// # Cancellation safety
    /// Dropped while an attempt's `UPDATE` or `INSERT` is in flight, the lock may have
    /// been taken (or re-entered) with nobody to release it: it stays held until its
    /// lease ends by the database clock. Dropped during a pause, nothing is left.
    async fn acquire(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
        wait: Duration,
    ) -> Result<Option<Acquired>, LockError> {
        let deadline = Instant::now() + wait;
        loop {
            let since = Instant::now();
            let retry_after = match self.attempt(key, holder, lease).await? {
                Attempt::Acquired(token) => {
                    return Ok(Some(Acquired {
                        token: Some(token),
                        since,
                    }));
                }
                Attempt::Busy(retry_after) => retry_after,
            };
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let jitter = Duration::from_micros(rand::random_range(1_000..=20_000));
            let pause =
                retry_after.map_or(jitter, |left| left.clamp(Duration::from_millis(1), jitter));
            tokio::time::sleep(pause.min(deadline - now)).await;
        }
    }

    async fn renew(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
    ) -> Result<Option<Instant>, LockError> {
        let since = Instant::now();
        let done = sqlx::query(
            r#"
            UPDATE distributed_lock SET expire_time = NOW(6) + INTERVAL ? MICROSECOND
            WHERE lock_key = ? AND holder_id = ? AND expire_time > NOW(6)
            "#,
        )
        .bind(micros(lease))
        .bind(key)
        .bind(holder.as_str())
        .execute(&self.holders)
        .await
        .map_err(backend)?;
        Ok((done.rows_affected() == 1).then_some(since))
    }

    /// # Errors
    /// [`LockError::NotHolder`] when `holder` does not hold it; [`LockError::Backend`]
    /// when the database failed (the lease then ends the lock).
    async fn unlock(&self, key: &str, holder: &HolderId) -> Result<(), LockError> {
        // The count is assigned last, so the IFs see the count before this release
        // (MariaDB assigns left to right; with SIMULTANEOUS_ASSIGNMENT it is the same).
        let done = sqlx::query(
            r#"
            UPDATE distributed_lock
            SET holder_id = IF(reentrant_count <= 1, NULL, holder_id),
                expire_time = IF(reentrant_count <= 1, NULL, expire_time),
                reentrant_count = GREATEST(reentrant_count - 1, 0)
            WHERE lock_key = ? AND holder_id = ?
            "#,
        )
        .bind(key)
        .bind(holder.as_str())
        .execute(&self.holders)
        .await
        .map_err(backend)?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(LockError::not_holder(key, holder))
        }
    }
}
