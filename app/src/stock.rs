//! The SQL that reads and writes stock, orders and the ledger.
//!
//! Every function takes the executor it must run on: the pool for standalone reads,
//! the deduction's `Transaction` for anything that has to commit or roll back with the
//! stock change (ledger and orders rows are written in the same transaction as the
//! stock, so a deduction without its ledger row cannot exist).

use crate::order::Item;
use serde::Serialize;
use sqlx::{MySql, MySqlConnection, MySqlPool, QueryBuilder};

/// A product's stock row, plus what its ledger says was sold this epoch.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct StockView {
    pub product_id: i64,
    pub quantity: i32,
    pub version: i64,
    pub epoch: i32,
    pub initial_quantity: i32,
    /// Ledger sum for the current epoch. Equals `initial_quantity - quantity` unless
    /// updates were lost (the unsafe strategies).
    pub sold: i64,
}

/// Creates the product or restocks it: sets quantity and initial_quantity, starts a
/// new epoch (so the ledger of the previous one stays apart) and bumps the version
/// (so an optimistic writer that read the old row fails its compare-and-set).
pub async fn restock(pool: &MySqlPool, product_id: i64, quantity: i32) -> sqlx::Result<StockView> {
    sqlx::query(
        r#"
        INSERT INTO stock (product_id, quantity, version, epoch, initial_quantity)
        VALUES (?, ?, 0, 1, ?)
        ON DUPLICATE KEY UPDATE
            quantity = VALUES(quantity),
            initial_quantity = VALUES(initial_quantity),
            epoch = epoch + 1,
            version = version + 1
        "#,
    )
    .bind(product_id)
    .bind(quantity)
    .bind(quantity)
    .execute(pool)
    .await?;
    Ok(find(pool, product_id)
        .await?
        .expect("the row was just written"))
}

/// The product's row and this epoch's ledger sum, or `None` if it was never stocked.
pub async fn find(pool: &MySqlPool, product_id: i64) -> sqlx::Result<Option<StockView>> {
    sqlx::query_as(
        r#"
        SELECT s.product_id, s.quantity, s.version, s.epoch, s.initial_quantity,
               CAST(COALESCE((SELECT SUM(l.quantity) FROM ledger l
                              WHERE l.product_id = s.product_id AND l.epoch = s.epoch), 0)
                    AS SIGNED) AS sold
        FROM stock s
        WHERE s.product_id = ?
        "#,
    )
    .bind(product_id)
    .fetch_optional(pool)
    .await
}

/// A stored successful deduction (the `orders` row).
#[derive(Debug, sqlx::FromRow)]
pub struct StoredOrder {
    pub request_hash: String,
    pub response: String,
}

/// The stored deduction for a request id, if one committed.
///
/// `ascii_bin` columns and MariaDB's JSON (a LONGTEXT with a binary collation) come
/// back flagged as binary, which sqlx will not decode into a `String`;
/// `CAST(... AS CHAR)` makes them text again.
pub async fn find_order(
    conn: &mut MySqlConnection,
    request_id: &str,
) -> sqlx::Result<Option<StoredOrder>> {
    sqlx::query_as(
        r#"
        SELECT CAST(request_hash AS CHAR) AS request_hash, CAST(response AS CHAR) AS response
        FROM orders WHERE request_id = ?
        "#,
    )
    .bind(request_id)
    .fetch_optional(conn)
    .await
}

/// Records the deduction under its request id. Fails with 1062 (duplicate key) when
/// a twin committed first; the caller rolls back and answers with the twin's response.
pub async fn insert_order(
    tx: &mut MySqlConnection,
    request_id: &str,
    request_hash: &str,
    strategy: &str,
    response: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO orders (request_id, request_hash, strategy, response) VALUES (?, ?, ?, ?)",
    )
    .bind(request_id)
    .bind(request_hash)
    .bind(strategy)
    .bind(response)
    .execute(tx)
    .await?;
    Ok(())
}

/// One ledger line to write: an item and the epoch it was sold from.
#[derive(Debug, Clone, Copy)]
pub struct LedgerLine {
    pub item: Item,
    pub epoch: i32,
}

/// Writes every line of a deduction in one statement.
pub async fn insert_ledger(
    tx: &mut MySqlConnection,
    request_id: &str,
    strategy: &str,
    fence_token: Option<u64>,
    lines: &[LedgerLine],
) -> sqlx::Result<()> {
    let mut insert: QueryBuilder<MySql> = QueryBuilder::new(
        "INSERT INTO ledger (request_id, product_id, quantity, epoch, strategy, fence_token) ",
    );
    insert.push_values(lines, |mut row, line| {
        row.push_bind(request_id)
            .push_bind(line.item.product_id)
            .push_bind(line.item.quantity)
            .push_bind(line.epoch)
            .push_bind(strategy)
            .push_bind(fence_token);
    });
    insert.build().execute(tx).await?;
    Ok(())
}

/// `atomic-sql`'s whole algorithm: decrement only if enough is left, in one statement.
/// The row lock InnoDB takes for the UPDATE serializes concurrent deductions of the
/// same product; the `quantity >= ?` condition is evaluated on the latest committed
/// row (an UPDATE always reads the current version, never a snapshot), so no check
/// can be stale. Returns whether a row changed. `version` is bumped by every writer so
/// optimistic compare-and-set stays sound when strategies are mixed on one product.
pub async fn decrement_if_enough(tx: &mut MySqlConnection, item: Item) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE stock SET quantity = quantity - ?, version = version + 1 WHERE product_id = ? AND quantity >= ?",
    )
    .bind(item.quantity)
    .bind(item.product_id)
    .bind(item.quantity)
    .execute(tx)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// A stock row as a deduction sees it: what is left and which epoch it belongs to.
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub struct Level {
    pub quantity: i32,
    pub version: i64,
    pub epoch: i32,
}

/// A plain read of a product's row (a consistent snapshot read under REPEATABLE READ,
/// no lock taken), in the caller's transaction.
pub async fn read_level(tx: &mut MySqlConnection, product_id: i64) -> sqlx::Result<Option<Level>> {
    sqlx::query_as("SELECT quantity, version, epoch FROM stock WHERE product_id = ?")
        .bind(product_id)
        .fetch_optional(tx)
        .await
}

/// Writes a quantity the application computed (`SET quantity = :new`), unconditionally.
/// Safe only while something else (a lock, `FOR UPDATE`) guarantees nobody wrote the
/// row since it was read; without that it is the lost-update bug.
pub async fn write_quantity(
    tx: &mut MySqlConnection,
    product_id: i64,
    quantity: i32,
) -> sqlx::Result<()> {
    sqlx::query("UPDATE stock SET quantity = ?, version = version + 1 WHERE product_id = ?")
        .bind(quantity)
        .bind(product_id)
        .execute(tx)
        .await?;
    Ok(())
}

/// A locking read: `SELECT ... FOR UPDATE` takes the row's exclusive lock (waiting for
/// it, up to `innodb_lock_wait_timeout`) and reads the latest committed version.
pub async fn read_level_for_update(
    tx: &mut MySqlConnection,
    product_id: i64,
) -> sqlx::Result<Option<Level>> {
    sqlx::query_as("SELECT quantity, version, epoch FROM stock WHERE product_id = ? FOR UPDATE")
        .bind(product_id)
        .fetch_optional(tx)
        .await
}

/// Compare-and-set on the version: writes only if nobody changed the row since we read
/// `version`. Returns whether it did (`rows_affected` counts matched rows here, which is
/// what we want: the row matched our version).
pub async fn write_quantity_if_version(
    tx: &mut MySqlConnection,
    product_id: i64,
    quantity: i32,
    version: i64,
) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE stock SET quantity = ?, version = version + 1 WHERE product_id = ? AND version = ?",
    )
    .bind(quantity)
    .bind(product_id)
    .bind(version)
    .execute(tx)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Fencing, step 1 (DESIGN "Fencing"): claim the product for `token` of `backend`, as
/// its own committed statements, outside the stock transaction (a paused holder must
/// not sit on a row lock). Succeeds only if `token` is newer than every token that
/// claimed the product before; `false` means a newer holder exists.
pub async fn claim_fence(
    pool: &MySqlPool,
    product_id: i64,
    backend: &str,
    token: u64,
) -> sqlx::Result<bool> {
    sqlx::query("INSERT IGNORE INTO stock_fence (product_id, backend, token) VALUES (?, ?, 0)")
        .bind(product_id)
        .bind(backend)
        .execute(pool)
        .await?;
    let claimed = sqlx::query(
        "UPDATE stock_fence SET token = ? WHERE product_id = ? AND backend = ? AND token < ?",
    )
    .bind(token)
    .bind(product_id)
    .bind(backend)
    .bind(token)
    .execute(pool)
    .await?;
    Ok(claimed.rows_affected() == 1)
}

/// What a fenced write checks: the lock's token, or (RedLock) its owner tag.
#[derive(Debug, Clone, Copy)]
pub enum Fence<'a> {
    Token(u64),
    Owner(&'a str),
}

/// Fencing, step 3: write the computed quantity only if this request's claim (`fence`)
/// is still the newest on the product. `false` (nothing written) means a newer holder
/// claimed it since: the caller rolls back and answers `lock_lost`.
pub async fn write_quantity_fenced(
    tx: &mut MySqlConnection,
    product_id: i64,
    quantity: i32,
    backend: &str,
    fence: Fence<'_>,
) -> sqlx::Result<bool> {
    let column = match fence {
        Fence::Token(_) => "token",
        Fence::Owner(_) => "owner",
    };
    let sql = format!(
        "UPDATE stock s \
         JOIN stock_fence f ON f.product_id = s.product_id AND f.backend = ? \
         SET s.quantity = ?, s.version = s.version + 1 \
         WHERE s.product_id = ? AND f.{column} = ?"
    );
    let query = sqlx::query(&sql)
        .bind(backend)
        .bind(quantity)
        .bind(product_id);
    let query = match fence {
        Fence::Token(token) => query.bind(token),
        Fence::Owner(owner) => query.bind(owner),
    };
    Ok(query.execute(tx).await?.rows_affected() >= 1)
}

/// Fencing without a token (RedLock), step 1: claim the product for `owner`, the
/// random value of this acquisition (antirez's check-and-set). Unconditional: there is
/// no order between owners, so the latest claim wins, even a stale holder's.
pub async fn claim_owner(
    pool: &MySqlPool,
    product_id: i64,
    backend: &str,
    owner: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO stock_fence (product_id, backend, token, owner) VALUES (?, ?, 0, ?) \
         ON DUPLICATE KEY UPDATE owner = VALUES(owner)",
    )
    .bind(product_id)
    .bind(backend)
    .bind(owner)
    .execute(pool)
    .await?;
    Ok(())
}

/// The next ticket of the `fence-only` strategy: a strictly increasing number from a
/// database sequence (one round trip, autocommit; never handed out twice).
pub async fn next_ticket(pool: &MySqlPool) -> sqlx::Result<u64> {
    let ticket: i64 = sqlx::query_scalar("SELECT NEXTVAL(fence_ticket)")
        .fetch_one(pool)
        .await?;
    Ok(ticket as u64)
}
