//! The sold-out fast path's reads of `orders` and of what is left, many refusals to
//! one statement each.
//!
//! Every refusal reads `orders` once, by its request id, so that a retry of an earlier
//! success gets its stored answer ([`crate::strategies::idempotency`]). A flood of
//! buyers of a sold-out product, each sending again the moment it is answered, turns
//! that into hundreds of reads a second: each one a round trip, a wake-up of a
//! database thread and of a worker here, time the sales of the other products wait
//! behind; on a pool of its own, a queue for its few connections. So the reads are
//! gathered: many ids to one `WHERE request_id IN (...)`.
//!
//! # How a batch forms
//! The first refusal to ask opens a batch, and a task of the batch's own reads it: the
//! task takes one of the pool's connections, closes the batch, reads every id in it
//! (in statements of at most [`IDS_PER_STATEMENT`]) and hands each member its answer.
//! The others join the open batch meanwhile: while the connections are busy, a batch
//! grows by whatever arrives, and an idle instance reads one id at once. A refusal
//! held past the product's pace ([`crate::service::sold_out::AT_ONCE_PER_SECOND`]) has
//! waited out its hold already: a batch it opens gathers [`GATHER`] longer first, so a
//! flood's held refusals come to a statement every few milliseconds, not one each.
//! Batches are shared by every product and strategy: a refusal answered at once may
//! join a batch that is still gathering, and wait that long.
//!
//! The task, not the request that opened the batch, reads it: a client that goes away
//! takes only its own answer with it.
//!
//! # What is left, read with them
//! A mark is this instance's evidence, from before the read; another instance may have
//! restocked since, and sold some of the new units already. So the batch also reads
//! what the database has left of each member's product (its row and its buckets), and
//! a refusal stands only if that is 0: the refusal then takes effect at that read,
//! when nothing was left, and no order of events has a buyer told "sold out" after
//! another was sold a unit of the restock. If units are left, the mark was stale:
//! the member is told so and runs the strategy. (For a strategy that sells from a
//! counter in front of the database, units the database still has are more than the
//! counter's, never fewer: a refusal that stands is still right.)
//!
//! # When a batch cannot answer
//! If its read fails, every member reads alone, the same statement for itself
//! ([`SoldOutReads::after_refusal`]): errors stay each request's own (a pool timeout
//! is a 503 for the request that met it, not a guess for the batch).

use crate::domain::error::DeductError;
use crate::strategies::contract::{Deducted, Deduction};
use crate::strategies::idempotency;
use sqlx::{MySqlPool, QueryBuilder};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a batch opened by a held refusal gathers the others before it reads.
pub const GATHER: Duration = Duration::from_millis(10);

/// Request ids per statement: a batch larger than that is read in several.
const IDS_PER_STATEMENT: usize = 1000;

/// A stored answer as `orders` holds it.
#[derive(Debug, Clone)]
pub struct Stored {
    pub request_hash: String,
    pub response: String,
}

/// What a batch read for one member: its stored answer, if any, and the units the
/// database had left of its product.
#[derive(Debug, Clone)]
struct Read {
    stored: Option<Stored>,
    left: i64,
}

/// One member of the open batch: its request id, its product and where its answer goes.
#[derive(Debug)]
struct Member {
    request_id: String,
    product_id: i64,
    answer: oneshot::Sender<Read>,
}

/// The batch open now, if one is. A std mutex: its guard never crosses an `.await`.
type Open = Arc<Mutex<Option<Vec<Member>>>>;

/// The open batch's task's hold on it: the task closes the batch when it reads it, and
/// a task dropped before that (its worker stopped) closes it anyway, dropping the
/// members' answers: they read alone instead of waiting in a batch no task will read,
/// and the next refusal opens a new one. Only the open batch's own task closes it.
struct Closing(Open);

impl Closing {
    fn close(mut self) -> Vec<Member> {
        let batch = self.take();
        std::mem::forget(self);
        batch
    }

    fn take(&mut self) -> Vec<Member> {
        self.0
            .lock()
            .expect("sold-out reads poisoned")
            .take()
            .unwrap_or_default()
    }
}

impl Drop for Closing {
    fn drop(&mut self) {
        drop(self.take());
    }
}

/// The fast path's own small pool, and the batch open now.
#[derive(Debug)]
pub struct SoldOutReads {
    pool: MySqlPool,
    open: Open,
}

impl SoldOutReads {
    /// Reads on `pool` (its connections bound how many batches read at once).
    pub fn new(pool: MySqlPool) -> SoldOutReads {
        SoldOutReads {
            pool,
            open: Arc::default(),
        }
    }

    /// The fast path's refusal of `d` (`refusal`, `product_id` sold out): its stored
    /// answer if this request id succeeded before, read in a batch with the other
    /// refusals asking now (`held`: this one waited out a hold), else the refusal; read
    /// alone when the batch could not answer. `None`: the database has units of the
    /// product left (the mark was stale): run the strategy.
    pub async fn after_refusal(
        &self,
        d: &Deduction<'_>,
        product_id: i64,
        refusal: DeductError,
        held: bool,
    ) -> Option<Result<Deducted, DeductError>> {
        let read = match self.read(&d.order.request_id, product_id, held).await {
            Some(read) => read,
            // The same statement for this member alone: its error is its own.
            None => match self.alone(&d.order.request_id, product_id).await {
                Ok(read) => read,
                Err(e) => return Some(Err(e.into())),
            },
        };
        if read.left > 0 {
            return None;
        }
        let stored = read.stored.map(|s| (s.request_hash, s.response));
        Some(idempotency::answer(d, refusal, None, stored))
    }

    /// [`fetch`] for one request on a connection of its own.
    async fn alone(&self, request_id: &str, product_id: i64) -> sqlx::Result<Read> {
        let mut connection = self.pool.acquire().await?;
        let (mut found, left) = fetch(&mut connection, &[request_id], &[product_id]).await?;
        Ok(Read {
            stored: found.remove(request_id),
            left: left.get(&product_id).copied().unwrap_or(0),
        })
    }

    /// `request_id`'s stored answer and what is left of `product_id`, read in a batch;
    /// `None` when the batch could not answer.
    async fn read(&self, request_id: &str, product_id: i64, held: bool) -> Option<Read> {
        let (answer, answered) = oneshot::channel();
        let member = Member {
            request_id: request_id.to_owned(),
            product_id,
            answer,
        };
        let opened = {
            let mut open = self.open.lock().expect("sold-out reads poisoned");
            match open.as_mut() {
                Some(batch) => {
                    batch.push(member);
                    false
                }
                None => {
                    *open = Some(vec![member]);
                    true
                }
            }
        };
        if opened {
            let (pool, open) = (self.pool.clone(), self.open.clone());
            tokio::spawn(async move {
                let closing = Closing(open);
                if held {
                    tokio::time::sleep(GATHER).await;
                }
                // Others join while the connections are busy.
                let connection = pool.acquire().await;
                let batch = closing.close();
                match connection {
                    Ok(mut connection) => read(&mut connection, batch).await,
                    // Dropping the batch: each reads alone, and meets the error itself.
                    Err(e) => tracing::warn!(error = %e, "sold-out reads: no connection"),
                }
            });
        }
        answered.await.ok()
    }
}

/// Reads the stored answers of `batch`'s ids and what is left of their products on
/// `connection` ([`fetch`]), and hands each member its own; on an error, none (each
/// reads alone).
async fn read(connection: &mut sqlx::MySqlConnection, batch: Vec<Member>) {
    let ids: Vec<&str> = batch.iter().map(|m| m.request_id.as_str()).collect();
    let mut products: Vec<i64> = batch.iter().map(|m| m.product_id).collect();
    products.sort_unstable();
    products.dedup();
    let (found, left) = match fetch(connection, &ids, &products).await {
        Ok(read) => read,
        Err(e) => {
            tracing::warn!(error = %e, "sold-out reads: a batch failed, each reads alone");
            return;
        }
    };
    for member in batch {
        // A member whose client went away is not waiting: nothing to do.
        let _ = member.answer.send(Read {
            stored: found.get(&member.request_id).cloned(),
            left: left.get(&member.product_id).copied().unwrap_or(0),
        });
    }
}

/// The stored answers of `ids` and the units the database has left of each of
/// `products` (the row and its buckets), one statement per [`IDS_PER_STATEMENT`] ids,
/// the first reading what is left at the same moment as its answers.
async fn fetch(
    connection: &mut sqlx::MySqlConnection,
    ids: &[&str],
    products: &[i64],
) -> sqlx::Result<(HashMap<String, Stored>, HashMap<i64, i64>)> {
    let (mut found, mut left) = (HashMap::new(), HashMap::new());
    for (k, chunk) in ids.chunks(IDS_PER_STATEMENT).enumerate() {
        // One statement: the chunk's stored answers (`o` rows) and, in the first, what
        // is left of every member's product (`s` rows), read at one moment. CAST:
        // `ascii_bin` and JSON columns come back as binary, not text, to sqlx.
        let mut query = QueryBuilder::new(
            "SELECT 'o', CAST(request_id AS CHAR), CAST(request_hash AS CHAR), \
             CAST(response AS CHAR), NULL FROM orders WHERE request_id IN (",
        );
        let mut bound = query.separated(", ");
        for id in chunk {
            bound.push_bind(*id);
        }
        query.push(")");
        if k == 0 {
            query.push(
                " UNION ALL SELECT 's', CAST(s.product_id AS CHAR), NULL, NULL, \
                 CAST(s.quantity + COALESCE((SELECT SUM(b.quantity) FROM stock_bucket b \
                 WHERE b.product_id = s.product_id), 0) AS SIGNED) \
                 FROM stock s WHERE s.product_id IN (",
            );
            let mut bound = query.separated(", ");
            for product in products {
                bound.push_bind(*product);
            }
            query.push(")");
        }
        type Row = (String, String, Option<String>, Option<String>, Option<i64>);
        // Not prepared and kept: every batch size is a statement text of its own.
        let rows: Vec<Row> = query
            .build_query_as()
            .persistent(false)
            .fetch_all(&mut *connection)
            .await?;
        for (kind, id, request_hash, response, units) in rows {
            match (kind.as_str(), request_hash.zip(response), units) {
                ("o", Some((request_hash, response)), _) => {
                    found.insert(
                        id,
                        Stored {
                            request_hash,
                            response,
                        },
                    );
                }
                ("s", _, Some(units)) => {
                    left.insert(id.parse::<i64>().unwrap_or_default(), units);
                }
                _ => {}
            }
        }
    }
    Ok((found, left))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch whose read cannot run (no database listens) tells every member so,
    /// held or not, and none waits for ever: each then reads alone and meets the
    /// error itself.
    #[tokio::test]
    async fn a_batch_that_cannot_read_tells_every_member() {
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .acquire_timeout(Duration::from_millis(200))
            .connect_lazy("mysql://root@127.0.0.1:1/nothing")
            .unwrap();
        let reads = SoldOutReads::new(pool);
        let asked = (0..6).map(|i| {
            let reads = &reads;
            async move { reads.read(&format!("r{i}"), 7, i % 2 == 0).await }
        });
        let answers = futures::future::join_all(asked).await;
        assert_eq!(answers.len(), 6);
        assert!(answers.iter().all(Option::is_none), "{answers:?}");
        assert!(reads.open.lock().unwrap().is_none(), "no batch left open");
    }
}
