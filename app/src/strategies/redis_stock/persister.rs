//! The persister, steps 3-5 of `redis-stock` (see `super`).

use super::connection::{Conn, Endpoint};
use super::stream::{GROUP, NAME, RedisStockSettings, Sale};
use crate::domain::error::mysql_error_number;
use crate::domain::probe::{Failpoint, Probe};
use crate::strategies::contract::Deducted;
use crate::strategies::record_many;
use futures::TryStreamExt;
use redis::streams::{StreamAutoClaimOptions, StreamReadOptions, StreamReadReply};
use redis::{AsyncCommands, Script};
use sqlx::MySqlPool;
use std::collections::{BTreeMap, HashSet};
use std::convert::Infallible;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

static ACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/redis_stock_ack.lua")));
static RECONCILE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/redis_stock_reconcile.lua")));

struct Persister {
    settings: RedisStockSettings,
    pool: MySqlPool,
    probe: Arc<dyn Probe>,
    /// Its name in the consumer group.
    consumer: String,
}

/// Runs until the task is aborted.
pub async fn persist_forever(settings: RedisStockSettings, pool: MySqlPool, probe: Arc<dyn Probe>) {
    let Some(endpoint) = settings.endpoint.clone() else {
        return;
    };
    let consumer = format!("persister-{}", uuid::Uuid::new_v4().simple());
    let p = Persister {
        settings,
        pool,
        probe,
        consumer,
    };
    let mut run_id: Option<String> = None;
    loop {
        let Err(e) = p.run(&endpoint, &mut run_id).await;
        if p.pool.is_closed() {
            return;
        }
        tracing::warn!(error = %e, "redis-stock persister: retrying in 500 ms");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn server_run_id(conn: &mut Conn) -> redis::RedisResult<String> {
    let info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
    let id = info.lines().find_map(|l| l.strip_prefix("run_id:"));
    Ok(id.unwrap_or_default().trim().to_string())
}

impl Persister {
    /// Persists batch after batch from the primary of now; returns only with an error
    /// (the caller connects again).
    async fn run(
        &self,
        endpoint: &Endpoint,
        run_id: &mut Option<String>,
    ) -> anyhow::Result<Infallible> {
        let mut conn = endpoint.0.connect().await?.conn().0;
        self.ensure_group(&mut conn).await?;
        // Housekeeping (the same Redis? a persister dead?) on (re)connecting, then every
        // half claim period. A restart breaks the connection: seen at once, too.
        let every = self.settings.claim_after / 2;
        let mut checked: Option<Instant> = None;
        loop {
            let due = checked.is_none_or(|t| t.elapsed() >= every);
            if due {
                let now = server_run_id(&mut conn).await?;
                if run_id.as_ref().is_some_and(|seen| *seen != now) {
                    tracing::warn!("redis-stock: Redis restarted; reconciling the counters");
                    self.reconcile(&mut conn).await?;
                }
                *run_id = Some(now);
                checked = Some(Instant::now());
            }
            let claim = due.then_some(self.settings.claim_after);
            let sales = self.next_batch(&mut conn, claim).await?;
            if !sales.is_empty() {
                self.persist_and_ack(&mut conn, sales).await?;
            }
        }
    }

    /// Creates the stream and the group when missing (first start, or a Redis that came
    /// back empty: reading then fails with NOGROUP, and the reconnect lands here).
    async fn ensure_group(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        let created: redis::RedisResult<()> = conn
            .xgroup_create_mkstream(self.settings.stream(), GROUP, "0")
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
        &self,
        conn: &mut Conn,
        claim: Option<Duration>,
    ) -> anyhow::Result<Vec<Sale>> {
        let stream = self.settings.stream();
        let batch = self.settings.batch as usize;
        let mut entries = Vec::new();
        if let Some(idle) = claim {
            let claimed: redis::streams::StreamAutoClaimReply = conn
                .xautoclaim_options(
                    &stream,
                    GROUP,
                    &self.consumer,
                    idle.as_millis() as u64,
                    "0-0",
                    StreamAutoClaimOptions::default().count(batch),
                )
                .await?;
            entries = claimed.claimed;
        }
        if entries.is_empty() {
            let options = StreamReadOptions::default()
                .group(GROUP, &self.consumer)
                .count(batch)
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

    /// Steps 3 and 4 for one batch.
    async fn persist_and_ack(&self, conn: &mut Conn, mut sales: Vec<Sale>) -> anyhow::Result<()> {
        let mut recorded: Vec<(Sale, bool)> = Vec::new();
        while !sales.is_empty() {
            match self.write(&sales).await {
                Ok(()) => recorded.extend(sales.drain(..).map(|s| (s, false))),
                Err(e) if mysql_error_number(&e) == Some(1062) => {
                    let ids = sales.iter().map(|s| s.request_id.as_str());
                    let known = record_many::recorded(&self.pool, ids).await?;
                    anyhow::ensure!(
                        !known.is_empty(),
                        "duplicate key in orders, none of the batch there"
                    );
                    let (done, rest): (Vec<Sale>, Vec<Sale>) = sales
                        .into_iter()
                        .partition(|s| known.contains_key(&s.request_id));
                    for sale in done {
                        // This very entry, or a late retry's earlier sale (step 4).
                        let give_back = known[&sale.request_id]
                            .as_ref()
                            .and_then(|d| d.stream_entry.as_deref())
                            != Some(&sale.entry);
                        recorded.push((sale, give_back));
                    }
                    sales = rest;
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.acknowledge(conn, &recorded).await?;
        Ok(())
    }

    /// Orders, ledger and stock for `sales`, one transaction.
    async fn write(&self, sales: &[Sale]) -> sqlx::Result<()> {
        let mut tx = self.pool.begin().await?;
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
        // One UPDATE per product and epoch (a restocked epoch's: 0 rows).
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
        self.probe.at(Failpoint::BeforeCommit).await;
        tx.commit().await
    }

    /// Acknowledges recorded entries and takes them out of `pending` (one script call).
    async fn acknowledge(
        &self,
        conn: &mut Conn,
        recorded: &[(Sale, bool)],
    ) -> redis::RedisResult<()> {
        if recorded.is_empty() {
            return Ok(());
        }
        let mut call = ACK.prepare_invoke();
        call.key(self.settings.stream()).arg(GROUP);
        for (sale, give_back) in recorded {
            call.arg(&sale.entry)
                .arg(sale.lines.len())
                .arg(u8::from(*give_back));
            for line in &sale.lines {
                call.key(self.settings.counter(line.product_id));
                call.arg(line.quantity).arg(line.epoch);
            }
        }
        let _: i64 = call.invoke_async(conn).await?;
        Ok(())
    }

    /// Step 5 (the drain claims every entry, however recently read).
    async fn reconcile(&self, conn: &mut Conn) -> anyhow::Result<()> {
        // The flag is the set of persisters reconciling, each by its own name: every
        // instance's persister sees the same new `run_id` and reconciles at once, and
        // sales must wait for the last of them. A flag the first to finish dropped
        // would let a sale through while another still reads `quantity` and `pending`:
        // recorded but not yet acknowledged, that sale counts in both, and the counter
        // comes out lower by its units. It lives a minute past the last to raise it
        // (a persister dying midway leaves its name behind that long).
        let flag = self.settings.reconciling();
        let _: () = redis::pipe()
            .atomic()
            .sadd(&flag, &self.consumer)
            .ignore()
            .expire(&flag, 60)
            .ignore()
            .query_async(conn)
            .await?;
        self.ensure_group(conn).await?;
        loop {
            let sales = self.next_batch(conn, Some(Duration::ZERO)).await?;
            if sales.is_empty() {
                break;
            }
            self.persist_and_ack(conn, sales).await?;
        }
        // Every counter key (SCAN may name one twice).
        let pattern = format!("{}p:*", self.settings.prefix);
        let counters: HashSet<String> = conn.scan_match(&pattern).await?.try_collect().await?;
        for key in counters {
            let Some(product_id) = key.rsplit(':').next().and_then(|id| id.parse::<i64>().ok())
            else {
                continue;
            };
            let row: Option<(i32, i32)> =
                sqlx::query_as("SELECT quantity, epoch FROM stock WHERE product_id = ?")
                    .bind(product_id)
                    .fetch_optional(&self.pool)
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
        let _: i64 = conn.srem(&flag, &self.consumer).await?;
        Ok(())
    }
}
