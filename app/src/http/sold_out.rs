//! The sold-out fast path: once this instance has seen a product sold out, further
//! deductions of it are refused (409) without running the strategy: no transaction,
//! no row or lock to queue on, no Redis script. In a flash sale past its stock that is
//! nearly every request.
//!
//! # What it still reads
//! The refusal still asks `orders` once, by primary key, as every refusal does
//! ([`crate::strategies::idempotency::after_refusal`]): a retry of a request that
//! succeeded before the stock ran out must get its stored answer, not "sold out" (a
//! buyer whose answer was lost in the rush would be told they bought nothing).
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
//! Marks are per strategy and product: each strategy's view of the stock is its own
//! (a row, split buckets, a counter in Redis).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// This instance's marks: (strategy, product) → valid until.
#[derive(Debug)]
pub struct SoldOut {
    ttl: Duration,
    marks: Mutex<HashMap<(&'static str, i64), Instant>>,
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

    /// The first of `products` known sold out for `strategy` now, if any.
    pub fn known(
        &self,
        strategy: &'static str,
        products: impl IntoIterator<Item = i64>,
    ) -> Option<i64> {
        if !self.enabled() {
            return None;
        }
        let now = Instant::now();
        let mut marks = self.marks.lock().expect("sold-out marks poisoned");
        products
            .into_iter()
            .find(|product| match marks.get(&(strategy, *product)) {
                Some(until) if *until > now => true,
                Some(_) => {
                    marks.remove(&(strategy, *product));
                    false
                }
                None => false,
            })
    }

    /// `strategy` refused `product` with 0 left, read no earlier than `read`: marked
    /// until `read + ttl`.
    pub fn mark(&self, strategy: &'static str, product: i64, read: Instant) {
        if self.enabled() {
            let until = read + self.ttl;
            let mut marks = self.marks.lock().expect("sold-out marks poisoned");
            let entry = marks.entry((strategy, product)).or_insert(until);
            *entry = (*entry).max(until);
        }
    }

    /// A restock here: `product`'s marks go at once (the other instances' expire
    /// before the restock answers, see the module).
    pub fn restocked(&self, product: i64) {
        let mut marks = self.marks.lock().expect("sold-out marks poisoned");
        marks.retain(|(_, p), _| *p != product);
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
        assert_eq!(sold_out.known("atomic-sql", [3, 7]), Some(7));
        assert_eq!(sold_out.known("pessimistic", [7]), None, "per strategy");
        sold_out.restocked(7);
        assert_eq!(sold_out.known("atomic-sql", [7]), None);
        sold_out.mark("atomic-sql", 7, started);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(sold_out.known("atomic-sql", [7]), None, "expired");
    }

    #[test]
    fn off_marks_nothing() {
        let sold_out = SoldOut::new(Duration::ZERO);
        sold_out.mark("atomic-sql", 7, Instant::now());
        assert_eq!(sold_out.known("atomic-sql", [7]), None);
    }
}
