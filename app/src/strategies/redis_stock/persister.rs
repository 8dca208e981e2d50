//! The persister (steps 3-5 of `redis-stock`): one task per instance, a consumer of
//! the stream's group. It writes the sales Redis made into the database in batches
//! and acknowledges them after COMMIT; after a Redis restart it reconciles the
//! counters. Uses the shared stream types and the transaction helpers; the request
//! path (`super`) starts it and knows nothing else of it.

use super::stream::{GROUP, NAME, RedisStockConfig, Sale};
use crate::domain::error::mysql_error_number;
use crate::domain::probe::{Failpoint, Probe};
use crate::strategies::contract::Deducted;
use crate::strategies::record_many;
use locks::redis::Connection;
use locks::redis_sentinel::Primary;
use redis::aio::ConnectionManager;
use redis::streams::{StreamAutoClaimOptions, StreamReadOptions, StreamReadReply};
use redis::{AsyncCommands, Script};
use sqlx::MySqlPool;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

static ACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/redis_stock_ack.lua")));
static RECONCILE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/redis_stock_reconcile.lua")));

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
    let records: Vec<record_many::Record> = sales
        .iter()
        .zip(&answers)
        .map(|(sale, answer)| record_many::Record {
            answer,
            fingerprint: &sale.fingerprint,
            epochs: sale.lines.iter().map(|l| l.epoch).collect(),
        })
        .collect();
    record_many::record_many(&mut tx, NAME, &records).await?;
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
    let stored = record_many::recorded(pool, sales.iter().map(|s| s.request_id.as_str())).await?;
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
    let pattern = settings.keys.counters();
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
