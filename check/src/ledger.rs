//! The ledger's word, read per request id as the book defines `recorded`: whether the
//! ledger held the request id once the system was quiet. A client that retries sends
//! one id several times; the ledger holds it once, so its word is about the id, never
//! about one attempt.
//!
//! What each deduction attempt did, given that word:
//!
//! 1. An attempt answered `sold` is the id's sale. Its other unknown or failed
//!    attempts did nothing (a second sale of the id would have been a duplicate).
//! 2. With no such answer, an id the ledger holds was sold by one of its unknown
//!    attempts (a `duplicate` answer says the same: an earlier attempt sold it), or,
//!    with none, by one of its failed ones (failed but recorded, named apart). The
//!    earliest sent is taken as the sale, open-ended: see [`settle`] for why that
//!    loses nothing.
//! 3. An id the ledger does not hold was never sold: its unknown attempts did
//!    nothing.
//! 4. An id the ledger was not asked about: its earliest unknown attempt may have
//!    sold, or not.
//!
//! A definite failure changed nothing unless rule 2 names it; refusals and
//! duplicates are judged as answered.
//!
//! **Final reads.** A run ends with a read of every product once the system is quiet.
//! A read sent after every deduction and restock of the history was sent and
//! answered, where none of its product's is still open without the ledger's word, is
//! taken as one: every sale the ledger holds came before it, so such a sale's open end
//! closes just before the first final read of any of its products. (A history whose
//! last reads came while a request whose answer was lost was still on its way would
//! be judged too strictly: the rule trusts that the reads after everything were made
//! once the system was quiet, as a run makes them.)

use super::history::{DeductAnswer, Item, Record, RestockAnswer};
use std::collections::{BTreeMap, BTreeSet};

/// The time an operation's effect can come no later than: its answer, or never
/// (`u64::MAX`) when its outcome is unknown.
pub const OPEN: u64 = u64::MAX;

/// What one record did, as the model and the classes take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Judged by its answer over its interval as recorded: a deduction answered
    /// `sold`, `duplicate` or `refused`, a restock, an answered read.
    AsAnswered,
    /// The one sale of an id the ledger holds that no answer says sold: a sale
    /// between when it was sent and `by` ([`OPEN`] where no final read bounds it).
    Sale { by: u64 },
    /// May have sold, between when it was sent and `by`; of one id's attempts, at most
    /// one sells.
    Maybe { by: u64 },
    /// Nothing: a definite failure, an unknown outcome that did nothing, a read
    /// without an answer, or not an operation (`init`, `hold`).
    Nothing,
}

/// The ledger's word on every record of a history.
#[derive(Debug, Clone)]
pub struct Settled<'a> {
    /// Per request id: held (`true`) or not; absent where the ledger was not asked.
    pub ledger: BTreeMap<&'a str, bool>,
    /// Per record, what it did.
    pub effects: Vec<Effect>,
    /// The ids the ledger holds whose sale may be any of several attempts with
    /// different items (another tool's history: the service refuses an id reused for a
    /// different order), by their earliest attempt: each such attempt is a
    /// [`Effect::Maybe`], and one of them must have sold.
    pub one_of: BTreeSet<usize>,
    /// Per product, when its first final read was sent.
    pub quiet: BTreeMap<i64, u64>,
}

/// Whether two attempts of one request id disagree on the ledger's word (one says
/// held, another not): no service answers so.
pub fn conflict(records: &[Record]) -> Option<String> {
    let mut said: BTreeMap<&str, bool> = BTreeMap::new();
    for record in records {
        if let Record::Deduct {
            request_id,
            recorded: Some(held),
            ..
        } = record
            && *said.entry(request_id).or_insert(*held) != *held
        {
            return Some(format!(
                "request id {request_id} is said both recorded and not recorded"
            ));
        }
    }
    None
}

/// What each record of `records` did (a history without a [`conflict`]; where there
/// is one, the ledger is taken to hold the id).
///
/// Of the attempts that could be an id's sale (rule 2, or rule 4), the earliest sent
/// is taken, open-ended, and the others dropped: every later attempt's window (from
/// its request until the final read, or forever) lies inside the earliest one's, so
/// wherever a later attempt could have sold, the earliest could have sold at the same
/// instant, with the same items, and the model cannot tell the two apart. Where the
/// attempts name different items, that holds per set of items only: each set's
/// earliest attempt is kept ([`Settled::one_of`]).
pub fn settle(records: &[Record]) -> Settled<'_> {
    let mut ledger: BTreeMap<&str, bool> = BTreeMap::new();
    let mut attempts: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, record) in records.iter().enumerate() {
        if let Record::Deduct {
            request_id,
            recorded,
            ..
        } = record
        {
            attempts.entry(request_id).or_default().push(i);
            if let Some(held) = recorded {
                *ledger.entry(request_id).or_insert(*held) |= *held;
            }
        }
    }
    let quiet = quiet(records, &ledger);
    let mut effects: Vec<Effect> = records.iter().map(plain_effect).collect();
    let mut one_of = BTreeSet::new();
    for (id, attempts) in &attempts {
        let held = ledger.get(id).copied();
        // (Each candidate's effect is `Nothing` until chosen.)
        let earliest = earliest_per_body(records, &candidates(records, attempts, held));
        let by = |i: usize| sold_by(&records[i], &quiet);
        match (held, earliest.as_slice()) {
            (_, []) => {}
            (Some(true), &[i]) => effects[i] = Effect::Sale { by: by(i) },
            (held, _) => {
                for &i in &earliest {
                    effects[i] = Effect::Maybe { by: by(i) };
                }
                if held == Some(true) {
                    one_of.insert(earliest[0]);
                }
            }
        }
    }
    Settled {
        ledger,
        effects,
        one_of,
        quiet,
    }
}

/// The attempts of one id (`attempts`, the ledger's word `held`) that could be its
/// sale: none where an answer says sold or the ledger does not hold it; else its
/// unknown ones, or, where the ledger holds it and there are none, its failed ones.
fn candidates(records: &[Record], attempts: &[usize], held: Option<bool>) -> Vec<usize> {
    let answered = |wanted: DeductAnswer| -> Vec<usize> {
        attempts
            .iter()
            .copied()
            .filter(|&i| answer_of(&records[i]) == Some(wanted))
            .collect()
    };
    if !answered(DeductAnswer::Sold).is_empty() || held == Some(false) {
        return Vec::new();
    }
    match answered(DeductAnswer::Unknown) {
        unknown if unknown.is_empty() && held == Some(true) => answered(DeductAnswer::Failed),
        unknown => unknown,
    }
}

/// Of `candidates`, the earliest sent of each set of items, the earliest first.
fn earliest_per_body(records: &[Record], candidates: &[usize]) -> Vec<usize> {
    let sent = |i: usize| records[i].interval().expect("a deduction").0;
    let mut earliest: BTreeMap<Vec<(i64, i64)>, usize> = BTreeMap::new();
    for &i in candidates {
        let first = earliest.entry(body(&records[i])).or_insert(i);
        if (sent(i), i) < (sent(*first), *first) {
            *first = i;
        }
    }
    let mut earliest: Vec<usize> = earliest.into_values().collect();
    earliest.sort_by_key(|&i| (sent(i), i));
    earliest
}

/// A record's effect before the ledger is read: a deduction judged as answered, or
/// nothing (a failure, an unknown outcome: [`settle`] decides those).
fn plain_effect(record: &Record) -> Effect {
    match record {
        Record::Deduct {
            answer: DeductAnswer::Failed | DeductAnswer::Unknown,
            ..
        }
        | Record::Read { stock: None, .. }
        | Record::Init { .. }
        | Record::Hold { .. } => Effect::Nothing,
        Record::Deduct { .. } | Record::Restock { .. } | Record::Read { .. } => Effect::AsAnswered,
    }
}

fn answer_of(record: &Record) -> Option<DeductAnswer> {
    match record {
        Record::Deduct { answer, .. } => Some(*answer),
        _ => None,
    }
}

/// A deduction's items, a product named twice summed, in product order.
fn body(record: &Record) -> Vec<(i64, i64)> {
    let mut summed: BTreeMap<i64, i64> = BTreeMap::new();
    for item in items(record) {
        *summed.entry(item.product_id).or_default() += item.quantity;
    }
    summed.into_iter().collect()
}

fn items(record: &Record) -> &[Item] {
    match record {
        Record::Deduct { items, .. } => items,
        _ => &[],
    }
}

/// The instant a sale the ledger holds came by at the latest: just before the first
/// final read of any of its products ([`OPEN`] where none has one).
fn sold_by(record: &Record, quiet: &BTreeMap<i64, u64>) -> u64 {
    items(record)
        .iter()
        .filter_map(|item| quiet.get(&item.product_id))
        .map(|&at| at.saturating_sub(1))
        .min()
        .unwrap_or(OPEN)
}

/// Per product, when its first final read was sent: the first answered read of it sent
/// after every deduction and restock of the history (of every product) was sent and
/// answered, where none of the product's own is open without the ledger's word (an
/// unknown restock, an unknown deduction of an id the ledger was not asked about).
fn quiet(records: &[Record], ledger: &BTreeMap<&str, bool>) -> BTreeMap<i64, u64> {
    // The last instant anything was sent or answered, and the products with something
    // still open.
    let mut last = 0;
    let mut open: BTreeSet<i64> = BTreeSet::new();
    for record in records {
        let Some((sent, answered)) = record.interval() else {
            continue;
        };
        let is_open = match record {
            Record::Deduct {
                request_id, answer, ..
            } => *answer == DeductAnswer::Unknown && !ledger.contains_key(request_id.as_str()),
            Record::Restock { answer, .. } => *answer == RestockAnswer::Unknown,
            _ => continue,
        };
        last = last.max(sent).max(answered.unwrap_or(sent));
        if is_open {
            open.extend(products(record));
        }
    }
    let mut quiet: BTreeMap<i64, u64> = BTreeMap::new();
    for record in records {
        if let Record::Read {
            product_id,
            sent_us,
            stock: Some(_),
            ..
        } = record
            && *sent_us > last
            && !open.contains(product_id)
        {
            let first = quiet.entry(*product_id).or_insert(*sent_us);
            *first = (*first).min(*sent_us);
        }
    }
    quiet
}

/// The products a deduction or restock touches.
fn products(record: &Record) -> Vec<i64> {
    match record {
        Record::Restock { product_id, .. } => vec![*product_id],
        _ => items(record).iter().map(|i| i.product_id).collect(),
    }
}

/// Whether `read` (a record of `records`) is a final read: sent once its product was
/// quiet.
pub fn is_final(settled: &Settled, read: &Record) -> bool {
    match read {
        Record::Read {
            product_id,
            sent_us,
            stock: Some(_),
            ..
        } => settled
            .quiet
            .get(product_id)
            .is_some_and(|&at| *sent_us >= at),
        _ => false,
    }
}
