//! The sold-out fast path: once this instance has seen a product sold out, further
//! deductions of it are refused (409) without running the strategy: no transaction,
//! no row or lock to queue on, no Redis script. In a flash sale past its stock that is
//! nearly every request.
//!
//! # What it still reads
//! The refusal still asks `orders` for its request id, as every refusal does
//! ([`crate::strategies::idempotency`]): a retry of a request that succeeded before
//! the stock ran out must get its stored answer, not "sold out" (a buyer whose answer
//! was lost in the rush would be told they bought nothing). It asks on a small pool of
//! its own ([`crate::service::SOLD_OUT_POOL_SIZE`]), so a flood of such refusals
//! waits there, not for the connections other products' sales need, and with the
//! other refusals asking at the same time, many ids to one statement
//! ([`crate::service::sold_out_reads`]; alone, should that batch fail).
//! A known sold-out product takes no place in the admission limit.
//!
//! # Why it never refuses a unit that is there
//! A mark is evidence with an expiry: a strategy's own refusal that saw **0 left**
//! (not "fewer than asked") marks its product until `T` after that evidence was read
//! (`--sold-out-cache-ms`, 100 by default): from just before the strategy ran when the
//! strategy read what is left itself, from just before the refusal's read of it
//! otherwise; never later than the read, so the argument below holds, and not from the
//! request's start, which under load can be more than `T` before its answer (a
//! request that waited for a connection would leave a mark expired on arrival). A restock clears this instance's marks at
//! once and answers only after `T`, so by the time `PUT /stock` returns every mark on
//! every instance made from before the restock has expired: a deduction sent after a
//! restock is answered never from an old mark. No messages between instances, no
//! shared store: the cost is a restock that takes `T` longer, and one real refusal per
//! product, strategy and instance every `T` (which renews the mark).
//!
//! That alone leaves the restock's own `T`: a buyer on another instance, sending while
//! the restock is under way, could be refused from an old mark after someone else was
//! sold one of the new units (a history no single stock counter gives: the checker of
//! `loadtest` found it in a sell-out restocked halfway). So a mark is not enough: the
//! refusal's read of `orders` also reads what the database has left of the product,
//! and the refusal stands only if that is nothing; then it takes effect at that read.
//! Units left mean the mark is stale: it is forgotten and the request runs the
//! strategy ([`crate::service::sold_out_reads`]).
//!
//! # When a mark expires
//! The first request to find it expired runs the strategy again; the others wait for
//! it ([`Lookup::Wait`]) and then look at the mark once more. Without that, a flood's
//! requests would all run the strategy at once, queue behind each other for the
//! product's row, and by the time their refusals came back their evidence would be
//! older than a mark lasts: every mark expired on arrival, nothing ever answered from
//! the fast path. A waiter is answered from a mark valid when it looks, as any request
//! is, so the argument above holds.
//!
//! # What a flood of it costs
//! A buyer who is told "sold out" and sends again at once gets the next answer as fast
//! as the last: a flood of them would take the CPU the other products' sales need.
//! Up to [`AT_ONCE_PER_SECOND`] refusals of one product are answered without a hold
//! (a shared read of `orders` apart); past that pace they are held on the admission's
//! reject timer first (`--reject-hold-ms`), then read `orders` gathered a little longer.
//!
//! Marks are per strategy and product: each strategy's view of the stock is its own
//! (a row, split buckets, a counter in Redis).

use super::ServiceError;
use super::admission::Admission;
use super::layer::{Answer, Deduct, Request};
use super::sold_out_reads::SoldOutReads;
use crate::domain::error::DeductError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Fast-path refusals of one product (per strategy) answered at once, per second; past
/// that rate they are held on the admission's reject timer first (`--reject-hold-ms`),
/// so a flood of buyers of a sold-out product, who send again the moment they are
/// refused, pays in its own time instead of the CPU the other products' sales need.
/// Alibaba Sentinel's hot-parameter limiting, with the product as the parameter.
pub const AT_ONCE_PER_SECOND: f64 = 50.0;

/// How many at-once answers may come in one burst (a tenth of a second's worth).
const AT_ONCE_BURST: f64 = AT_ONCE_PER_SECOND / 10.0;

/// One product's mark, its pace of at-once answers (a token bucket), and the request
/// that is running the strategy again after the mark expired, if one is.
#[derive(Debug)]
struct Mark {
    until: Instant,
    tokens: f64,
    refilled: Instant,
    /// Closed when that request is done (its refusal renews the mark).
    looking: Option<watch::Receiver<()>>,
}

/// What this instance knows of an order's products.
#[derive(Debug)]
pub enum Lookup<'a> {
    /// Nothing marked: run the strategy.
    Unknown,
    /// Known sold out now.
    Known(Known),
    /// A mark expired and no request is looking again: this one runs the strategy
    /// (its refusal renews the mark); the others wait for it, see [`Looking`].
    LookAgain(Looking<'a>),
    /// A mark expired and another request is running the strategy again: wait for it
    /// and look again ([`SoldOut::find`] does).
    Wait(watch::Receiver<()>),
}

/// The one request that runs the strategy again for an expired mark. Dropping it
/// (after its refusal has renewed the mark, or its sale) lets the waiters look.
#[derive(Debug)]
pub struct Looking<'a> {
    sold_out: &'a SoldOut,
    key: (&'static str, i64),
    _done: watch::Sender<()>,
    /// Its own channel, to tell it from a later looker's.
    own: watch::Receiver<()>,
}

impl Drop for Looking<'_> {
    fn drop(&mut self) {
        let mut marks = self.sold_out.marks.lock().expect("sold-out marks poisoned");
        // Only its own: after a restock and a new mark, another may be looking.
        if let Some(mark) = marks.get_mut(&self.key)
            && mark
                .looking
                .as_ref()
                .is_some_and(|looking| self.own.same_channel(looking))
        {
            mark.looking = None;
        }
        // `_done` drops after this: every waiter's `changed()` returns.
    }
}

impl Mark {
    /// One refusal from this valid mark: at once while the product's pace allows
    /// (a token bucket), held past it.
    fn pace(&mut self, product_id: i64, now: Instant) -> Known {
        let refill = now.duration_since(self.refilled).as_secs_f64() * AT_ONCE_PER_SECOND;
        self.tokens = (self.tokens + refill).min(AT_ONCE_BURST);
        self.refilled = now;
        let hold = self.tokens < 1.0;
        if !hold {
            self.tokens -= 1.0;
        }
        Known { product_id, hold }
    }
}

/// A product this instance knows sold out, and whether its refusal is answered at once
/// or held first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    pub product_id: i64,
    /// Past [`AT_ONCE_PER_SECOND`] for this product: hold the refusal first.
    pub hold: bool,
}

/// This instance's marks: (strategy, product) → valid until, and their pace.
#[derive(Debug)]
pub struct SoldOut {
    ttl: Duration,
    marks: Mutex<HashMap<(&'static str, i64), Mark>>,
}

impl SoldOut {
    /// `ttl` zero: the fast path is off (nothing is ever marked).
    pub fn new(ttl: Duration) -> SoldOut {
        SoldOut {
            ttl,
            marks: Mutex::new(HashMap::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        !self.ttl.is_zero()
    }

    /// How long a restock waits before it answers (the marks' lifetime).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// What is known of `products` for `strategy`, waiting for the request that looks
    /// again at an expired mark instead of answering [`Lookup::Wait`]. No timeout of
    /// its own: that request ends within the service's own timeouts (the pool's, the
    /// lock's), and a waiter that gave up would run the strategy with the rest of the
    /// flood behind it. Should it end without renewing the mark (a 503, its client
    /// gone), the waiters look once more, one of them looking again, before any runs
    /// the strategy.
    pub async fn find(
        &self,
        strategy: &'static str,
        products: impl IntoIterator<Item = i64> + Clone,
    ) -> Lookup<'_> {
        for _ in 0..2 {
            match self.lookup(strategy, products.clone()) {
                Lookup::Wait(mut looking) => {
                    let _ = looking.changed().await;
                }
                found => return found,
            }
        }
        Lookup::Unknown
    }

    /// What is known of `products` for `strategy` now: the first one known sold out
    /// (and whether its refusal is past the product's at-once pace); else the first
    /// whose mark expired, to look at again (one request at a time: a flood's requests
    /// do not all run the strategy at once, queueing behind each other until the
    /// evidence of every refusal is older than a mark lasts); else nothing.
    pub fn lookup(
        &self,
        strategy: &'static str,
        products: impl IntoIterator<Item = i64>,
    ) -> Lookup<'_> {
        if !self.enabled() {
            return Lookup::Unknown;
        }
        let now = Instant::now();
        let mut marks = self.marks.lock().expect("sold-out marks poisoned");
        let mut expired = None;
        for product_id in products {
            // An expired mark is kept (with its pace) until a restock: the strategy
            // runs again, and its refusal renews it.
            let Some(mark) = marks.get_mut(&(strategy, product_id)) else {
                continue;
            };
            if mark.until > now {
                return Lookup::Known(mark.pace(product_id, now));
            }
            expired.get_or_insert(product_id);
        }
        let Some(product_id) = expired else {
            return Lookup::Unknown;
        };
        let key = (strategy, product_id);
        let mark = marks
            .get_mut(&key)
            .expect("found above, under the same lock");
        match &mark.looking {
            Some(looking) => Lookup::Wait(looking.clone()),
            None => {
                let (done, looking) = watch::channel(());
                mark.looking = Some(looking.clone());
                Lookup::LookAgain(Looking {
                    sold_out: self,
                    key,
                    _done: done,
                    own: looking,
                })
            }
        }
    }

    /// The first of `products` known sold out for `strategy` now, if any.
    #[cfg(test)]
    fn known(
        &self,
        strategy: &'static str,
        products: impl IntoIterator<Item = i64>,
    ) -> Option<Known> {
        match self.lookup(strategy, products) {
            Lookup::Known(known) => Some(known),
            _ => None,
        }
    }

    /// `strategy` refused `product` with 0 left, read no earlier than `read`: marked
    /// until `read + ttl`.
    pub fn mark(&self, strategy: &'static str, product: i64, read: Instant) {
        if self.enabled() {
            let until = read + self.ttl;
            let mut marks = self.marks.lock().expect("sold-out marks poisoned");
            let mark = marks.entry((strategy, product)).or_insert(Mark {
                until,
                tokens: AT_ONCE_BURST,
                refilled: Instant::now(),
                looking: None,
            });
            mark.until = mark.until.max(until);
        }
    }

    /// A restock here: `product`'s marks go at once (the other instances' expire
    /// before the restock answers, see the module).
    pub fn restocked(&self, product: i64) {
        let mut marks = self.marks.lock().expect("sold-out marks poisoned");
        marks.retain(|(_, p), _| *p != product);
    }

    /// `strategy`'s mark of `product` expires now (found stale: the database had units
    /// left); its pace and whoever is looking again stay as they are.
    pub fn forget(&self, strategy: &'static str, product: i64) {
        let mut marks = self.marks.lock().expect("sold-out marks poisoned");
        if let Some(mark) = marks.get_mut(&(strategy, product)) {
            mark.until = Instant::now();
        }
    }
}

/// The sold-out layer: a product known sold out here is refused without the layers
/// below it (no place in the admission line, no strategy), after one read of `orders`
/// and of what is left ([`SoldOutReads`]); the strategy's own "0 left" marks it.
pub struct Marks<D> {
    pub sold_out: Arc<SoldOut>,
    pub reads: SoldOutReads,
    /// Whose reject timer holds a refusal past the product's at-once pace.
    pub admission: Arc<Admission>,
    pub inner: D,
}

impl<D: Deduct> Deduct for Marks<D> {
    async fn deduct(&self, request: &Request<'_>) -> Answer {
        let d = request.deduction;
        // A classic mistake is made whatever the marks say, and marks nothing.
        if d.knobs.mistake.is_some() {
            return self.inner.deduct(request).await;
        }
        let products = d.order.items.iter().map(|item| item.product_id);
        match self.sold_out.find(d.strategy, products).await {
            Lookup::Known(known) => self.refuse(request, known).await,
            // After its mark expired, this request looks again (its refusal renews
            // the mark) while the others wait for it: it takes no place in the line.
            Lookup::LookAgain(_looking) => {
                let looking = Request {
                    unlimited: true,
                    ..*request
                };
                self.run_and_mark(&looking).await
            }
            Lookup::Unknown | Lookup::Wait(_) => self.run_and_mark(request).await,
        }
    }
}

impl<D: Deduct> Marks<D> {
    /// The layers below; a refusal that saw nothing left marks its product.
    async fn run_and_mark(&self, request: &Request<'_>) -> Answer {
        let answer = self.inner.deduct(request).await;
        if let Err(ServiceError::Deduct(DeductError::InsufficientStock {
            product_id,
            available: Some(0),
            ..
        })) = &answer.result
        {
            let strategy = request.deduction.strategy;
            self.sold_out
                .mark(strategy, *product_id, answer.evidence_at);
        }
        answer
    }

    /// The fast path: refused from the mark, past the product's pace after a hold,
    /// once `orders` says this id did not succeed before and the database has nothing
    /// left. Units left: the mark was stale, so it is forgotten and the request runs
    /// the layers below after all.
    async fn refuse(&self, request: &Request<'_>, known: Known) -> Answer {
        let held = known.hold && !self.admission.hold_refusal().await.is_zero();
        let d = request.deduction;
        let requested = d
            .order
            .items
            .iter()
            .find(|item| item.product_id == known.product_id)
            .map_or(1, |item| item.quantity);
        let sold_out = DeductError::InsufficientStock {
            product_id: known.product_id,
            requested: requested.into(),
            available: Some(0),
        };
        match self
            .reads
            .after_refusal(d, known.product_id, sold_out, held)
            .await
        {
            Some(result) => Answer {
                by_mark: true,
                ..Answer::now(result)
            },
            // Still inside the twin guard (a layer above): no twin slips in between.
            None => {
                self.sold_out.forget(d.strategy, known.product_id);
                self.run_and_mark(request).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_lasts_its_ttl_from_the_request_start_and_a_restock_clears_it() {
        let sold_out = SoldOut::new(Duration::from_millis(50));
        let started = Instant::now();
        sold_out.mark("atomic-sql", 7, started);
        assert_eq!(
            sold_out.known("atomic-sql", [3, 7]).map(|k| k.product_id),
            Some(7)
        );
        assert_eq!(sold_out.known("pessimistic", [7]), None, "per strategy");
        sold_out.restocked(7);
        assert_eq!(sold_out.known("atomic-sql", [7]), None);
        sold_out.mark("atomic-sql", 7, started);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(sold_out.known("atomic-sql", [7]), None, "expired");
    }

    /// Past its at-once burst, a product's refusals are held, and the pace refills.
    #[test]
    fn past_the_pace_a_refusal_is_held() {
        let sold_out = SoldOut::new(Duration::from_secs(10));
        sold_out.mark("atomic-sql", 7, Instant::now());
        let holds: Vec<bool> = (0..AT_ONCE_BURST as usize + 5)
            .map(|_| sold_out.known("atomic-sql", [7]).unwrap().hold)
            .collect();
        assert_eq!(
            holds.iter().filter(|h| !**h).count(),
            AT_ONCE_BURST as usize
        );
        assert!(holds.last().unwrap());
        sold_out.mark("atomic-sql", 8, Instant::now());
        assert!(
            !sold_out.known("atomic-sql", [8]).unwrap().hold,
            "per product"
        );
        std::thread::sleep(Duration::from_secs_f64(2.0 / AT_ONCE_PER_SECOND));
        assert!(!sold_out.known("atomic-sql", [7]).unwrap().hold, "refilled");
    }

    /// An expired mark is looked at again by one request at a time: the next waits,
    /// and is let go when the first is done.
    #[test]
    fn one_request_at_a_time_looks_again_at_an_expired_mark() {
        let sold_out = SoldOut::new(Duration::from_millis(20));
        sold_out.mark("atomic-sql", 7, Instant::now());
        assert!(matches!(
            sold_out.lookup("atomic-sql", [7]),
            Lookup::Known(_)
        ));
        std::thread::sleep(Duration::from_millis(30));
        let Lookup::LookAgain(looking) = sold_out.lookup("atomic-sql", [7]) else {
            panic!("the first request after expiry looks again");
        };
        let Lookup::Wait(waiting) = sold_out.lookup("atomic-sql", [7]) else {
            panic!("the next one waits");
        };
        assert!(matches!(
            sold_out.lookup("atomic-sql", [8]),
            Lookup::Unknown
        ));
        assert!(matches!(waiting.has_changed(), Ok(false)), "still looking");
        // The one looking found it sold out again: the mark is renewed, then it is done.
        sold_out.mark("atomic-sql", 7, Instant::now());
        drop(looking);
        assert!(waiting.has_changed().is_err(), "the waiter is let go");
        assert!(matches!(
            sold_out.lookup("atomic-sql", [7]),
            Lookup::Known(_)
        ));
    }

    #[test]
    fn off_marks_nothing() {
        let sold_out = SoldOut::new(Duration::ZERO);
        sold_out.mark("atomic-sql", 7, Instant::now());
        assert_eq!(sold_out.known("atomic-sql", [7]), None);
    }
}
