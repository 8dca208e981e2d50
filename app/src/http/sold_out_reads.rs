//! The sold-out fast path's reads of `orders`, many refusals to one statement.
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
//! The first refusal to ask opens a batch and leads it: it waits for one of the
//! pool's connections ([`SoldOutReads::new`]'s `readers`), closes the batch, reads
//! every id in it (in statements of at most [`IDS_PER_STATEMENT`]) and hands each its
//! answer. The others join the open batch meanwhile and wait for theirs: while the
//! connections are busy, a batch grows by whatever arrives, and an idle instance
//! reads one id at once, as before. A refusal held past the product's pace
//! ([`crate::http::sold_out::AT_ONCE_PER_SECOND`]) has waited out its hold already:
//! as a leader it gathers [`GATHER`] longer first, so a flood's held refusals come to
//! a statement every few milliseconds, not one each. No task of its own: the batch
//! lives in its leader's request.
//!
//! # When a batch cannot answer
//! If the read fails, or the leader's client goes away (its request is dropped, and
//! the batch with it), every member is told so ([`SoldOutReads::stored`] answers
//! `None`) and reads alone, as any refusal does: errors stay each request's own
//! (a pool timeout is a 503 for the request that met it, not a guess for the batch).

use sqlx::{MySqlPool, QueryBuilder};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::{Semaphore, oneshot};

/// How long a held refusal leading a batch gathers the others before it reads.
pub const GATHER: Duration = Duration::from_millis(10);

/// Request ids per statement: a batch larger than that is read in several.
const IDS_PER_STATEMENT: usize = 1000;

/// A stored answer: (request hash, response), as `orders` holds them.
pub type Stored = (String, String);

/// One member of the open batch: its request id and where its answer goes.
#[derive(Debug)]
struct Member {
    request_id: String,
    answer: oneshot::Sender<Option<Stored>>,
}

/// The fast path's own small pool, and the batch open now, if one is.
#[derive(Debug)]
pub struct SoldOutReads {
    pool: MySqlPool,
    /// One permit per connection: a batch is closed when it gets one.
    readers: Semaphore,
    open: Mutex<Option<Vec<Member>>>,
}

/// A leader's hold on the open batch (its own: only its leader closes a batch, and a
/// new one opens only after). Dropped before it closed it (its client went away while
/// it gathered), it closes it anyway, dropping the members' answers: they read alone
/// instead of waiting in a batch no one will read.
struct Lead<'a> {
    reads: &'a SoldOutReads,
    closed: bool,
}

impl Lead<'_> {
    fn close(&mut self) -> Vec<Member> {
        self.closed = true;
        self.reads
            .open
            .lock()
            .expect("sold-out reads poisoned")
            .take()
            .unwrap_or_default()
    }
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        if !self.closed {
            drop(self.close());
        }
    }
}

impl SoldOutReads {
    /// Reads on `pool`, at most `readers` batches at once (its connections).
    pub fn new(pool: MySqlPool, readers: usize) -> SoldOutReads {
        SoldOutReads {
            pool,
            readers: Semaphore::new(readers),
            open: Mutex::new(None),
        }
    }

    /// The pool, for the refusals read alone.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// `request_id`'s stored answer, read in a batch with the other refusals asking
    /// now: `Some(None)` when it has none, `None` when the batch could not answer
    /// (read alone then, see the module). `held`: this refusal waited out a hold (as a
    /// leader, it gathers [`GATHER`] first).
    pub async fn stored(&self, request_id: &str, held: bool) -> Option<Option<Stored>> {
        let (answer, answered) = oneshot::channel();
        let member = Member {
            request_id: request_id.to_owned(),
            answer,
        };
        let leads = {
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
        if leads {
            let mut lead = Lead {
                reads: self,
                closed: false,
            };
            if held {
                tokio::time::sleep(GATHER).await;
            }
            // Others join while the connections are busy.
            let _reader = (self.readers.acquire().await).expect("never closed");
            let batch = lead.close();
            self.answer(batch).await;
        }
        answered.await.ok()
    }

    /// Reads the stored answers of `batch`'s ids and hands each member its own; on an
    /// error, none (each reads alone).
    async fn answer(&self, batch: Vec<Member>) {
        let mut found = HashMap::new();
        for chunk in batch.chunks(IDS_PER_STATEMENT) {
            // CAST: `ascii_bin` and JSON columns come back as binary, not text, to sqlx.
            let mut query = QueryBuilder::new(
                "SELECT CAST(request_id AS CHAR), CAST(request_hash AS CHAR), \
                 CAST(response AS CHAR) FROM orders WHERE request_id IN (",
            );
            let mut ids = query.separated(", ");
            for member in chunk {
                ids.push_bind(&member.request_id);
            }
            query.push(")");
            let rows: Vec<(String, String, String)> = match query
                .build_query_as()
                .fetch_all(&self.pool)
                .await
            {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::warn!(error = %e, "a batch of sold-out reads failed: each reads alone");
                    return;
                }
            };
            found.extend(
                rows.into_iter()
                    .map(|(id, hash, response)| (id, (hash, response))),
            );
        }
        for member in batch {
            let stored = found.get(&member.request_id).cloned();
            // A member whose client went away is not waiting: nothing to do.
            let _ = member.answer.send(stored);
        }
    }
}
