//! The anomalies a history can show, each named, with the few operations that prove
//! it. The search ([`super::search`]) says whether any order explains a part; these
//! say what went wrong, in words a shop would use, and they are found directly (no
//! search): each is a fact no order of events can change.
//!
//! Per product, the history is cut at its restocks into windows: an operation sent
//! after a restock was answered and answered before the next was sent belongs to one
//! window, whose stock is that restock's (the first window's, the product's `init`).
//! An operation that overlaps a restock could fall on either side: it proves nothing
//! against a window, and is counted only where that makes the verdict more lenient.
//!
//! - **oversold**: more units answered sold inside one window than its stock.
//! - **lost update**: the final read ([`super::ledger`]) showing more units than its
//!   window's stock less every unit answered sold and every sale the ledger holds,
//!   but no more than the stock: sales erased from it. (A run adds the ledger's sum
//!   against the stock row too, from its database verdict.)
//! - **false sold-out**: a refusal inside a window answered while, even with every
//!   sale that could have come before it counted, units enough were left.
//! - **stale read**: a read inside a window showing a stock no order of the sales
//!   around it gives (units already sold, or units sold that were not), where it is
//!   not a lost update.
//! - **double sale**: one request id answered `sold` twice, or `duplicate` where no
//!   attempt of it could have sold.
//! - **acknowledged but not recorded**: answered `sold` (or `duplicate`), its request id
//!   not in the ledger once the system was quiet.
//! - **failed but recorded**: a request id in the ledger whose attempts were definite
//!   failures or refusals (nothing changed, by the API's contract), none answered
//!   `sold` and none unknown: no attempt of it could have sold. A failure whose retry
//!   sold is not one.
//! - **lock overlap**: two holders of one lock key at once, as their instances logged
//!   them (`hold` records), and whether the fence refused the stale one (its deduction
//!   is not in the ledger) or both wrote. Seeing none does not prove the server kept
//!   them apart: a holder logs what it believed, and a pause can fall between two lines.
//! - **not linearizable**: a part the search found no order for, where none of the
//!   above is found.
//!
//! The ledger's word is read per request id, as the model reads it
//! ([`super::ledger`]).

use super::history::{DeductAnswer, Record};
use super::ledger::{Effect, Settled, is_final, settle};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A named anomaly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    Oversold,
    LostUpdate,
    AcknowledgedNotRecorded,
    FailedButRecorded,
    DoubleSale,
    FalseSoldOut,
    StaleRead,
    LockOverlap,
    NotLinearizable,
}

impl Class {
    /// Every class, in the order a report lists them.
    pub const ALL: [Class; 9] = [
        Class::Oversold,
        Class::LostUpdate,
        Class::AcknowledgedNotRecorded,
        Class::FailedButRecorded,
        Class::DoubleSale,
        Class::FalseSoldOut,
        Class::StaleRead,
        Class::LockOverlap,
        Class::NotLinearizable,
    ];

    /// Its name in a report: `false sold-out`, `double sale`, ...
    pub fn name(self) -> &'static str {
        match self {
            Class::Oversold => "oversold",
            Class::LostUpdate => "lost update",
            Class::AcknowledgedNotRecorded => "acknowledged but not recorded",
            Class::FailedButRecorded => "failed but recorded",
            Class::DoubleSale => "double sale",
            Class::FalseSoldOut => "false sold-out",
            Class::StaleRead => "stale read",
            Class::LockOverlap => "lock overlap",
            Class::NotLinearizable => "not linearizable",
        }
    }
}

/// One anomaly: its class, the product(s), the operations that prove it (indices into
/// the history's records) and what they show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anomaly {
    pub class: Class,
    pub products: Vec<i64>,
    pub ops: Vec<usize>,
    pub says: String,
    /// How many of its class it stands for: a final read showing N sold units erased
    /// is N lost updates; every other anomaly is one.
    pub count: u64,
}

/// The most operations an anomaly lists as its proof (an oversold window of a thousand
/// sales is proven by all of them; the first few show it).
pub const PROOF: usize = 8;

/// Every anomaly found directly in `records` (a well-formed history).
pub fn find(records: &[Record]) -> Vec<Anomaly> {
    let mut found = Vec::new();
    let settled = settle(records);
    ledger_contradicts(records, &settled, &mut found);
    double_sales(records, &settled, &mut found);
    let products: Vec<i64> = records
        .iter()
        .filter_map(|r| match r {
            Record::Init { product_id, .. } => Some(*product_id),
            _ => None,
        })
        .collect();
    for product in products {
        by_window(records, &settled, product, &mut found);
    }
    overlaps(records, &mut found);
    found
}

/// Two holders of one key at once.
fn overlaps(records: &[Record], found: &mut Vec<Anomaly>) {
    let mut by_key: BTreeMap<&str, Vec<(usize, &str, u64, u64)>> = BTreeMap::new();
    for (i, record) in records.iter().enumerate() {
        // A hold never released (its process died) proves nothing: when it stopped
        // believing is not known.
        if let Record::Hold {
            request_id,
            key,
            from_us,
            until_us: Some(until_us),
            ..
        } = record
        {
            let held = (i, request_id.as_str(), *from_us, *until_us);
            by_key.entry(key).or_default().push(held);
        }
    }
    let written = |id: &str| {
        records.iter().position(|r| {
            matches!(r, Record::Deduct { request_id, recorded: Some(true), .. } if request_id == id)
        })
    };
    for (key, mut holds) in by_key {
        holds.sort_by_key(|h| h.2);
        for (a, first) in holds.iter().enumerate() {
            // Every later holder that took the key while this one still believed it
            // held it: this one is the stale holder, once per pause.
            let during: Vec<&(usize, &str, u64, u64)> = holds[a + 1..]
                .iter()
                .take_while(|h| h.2 < first.3)
                .filter(|h| h.1 != first.1)
                .collect();
            let Some(second) = during.first() else {
                continue;
            };
            // From the first other holder's grant until this one let go (or the last
            // other let go, if that came first).
            let last = during.iter().map(|h| h.3).max().unwrap_or(second.3);
            let both = last.min(first.3).saturating_sub(second.2);
            let stale_wrote = written(first.1);
            let product = key.rsplit(':').next().and_then(|p| p.parse().ok());
            found.push(Anomaly {
                class: Class::LockOverlap,
                products: product.into_iter().collect(),
                ops: [first.0, second.0].into_iter().chain(stale_wrote).collect(),
                says: format!(
                    "{key} held by {} while {} other holder(s) took it ({} first), for {:.0} ms; {}",
                    first.1,
                    during.len(),
                    second.1,
                    both as f64 / 1000.0,
                    match stale_wrote {
                        Some(_) => "the stale holder's deduction is in the ledger too: both wrote",
                        None => "the stale holder's deduction is not in the ledger: it wrote nothing",
                    }
                ),
                count: 1,
            });
        }
    }
}

/// The answers the ledger contradicts, read per request id ([`super::ledger`]):
/// acknowledged but not recorded, failed but recorded. Each makes its products' part
/// not linearizable ([`super::check`]).
pub fn contradicted(records: &[Record]) -> Vec<Anomaly> {
    let mut found = Vec::new();
    ledger_contradicts(records, &settle(records), &mut found);
    found
}

/// Every attempt of each request id, by index into `records`.
fn by_id(records: &[Record]) -> BTreeMap<&str, Vec<usize>> {
    let mut by_id: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, record) in records.iter().enumerate() {
        if let Record::Deduct { request_id, .. } = record {
            by_id.entry(request_id).or_default().push(i);
        }
    }
    by_id
}

fn answer(record: &Record) -> Option<DeductAnswer> {
    match record {
        Record::Deduct { answer, .. } => Some(*answer),
        _ => None,
    }
}

/// The products of the deductions `ops`, each once, in order.
fn products_of(records: &[Record], ops: &[usize]) -> Vec<i64> {
    let mut products: Vec<i64> = ops
        .iter()
        .flat_map(|&i| match &records[i] {
            Record::Deduct { items, .. } => items.iter().map(|i| i.product_id).collect(),
            _ => Vec::new(),
        })
        .collect();
    products.sort_unstable();
    products.dedup();
    products
}

/// An answer `sold` or `duplicate` whose id the ledger does not hold (each such
/// attempt); an id the ledger holds that none of its attempts could have sold (no
/// answer `sold`, no unknown outcome), proven by its refusals and failures.
fn ledger_contradicts(records: &[Record], settled: &Settled, found: &mut Vec<Anomaly>) {
    use DeductAnswer::{Duplicate, Failed, Refused, Sold, Unknown};
    for (id, ops) in by_id(records) {
        let answered = |wanted: &[DeductAnswer]| -> Vec<usize> {
            ops.iter()
                .copied()
                .filter(|&i| answer(&records[i]).is_some_and(|a| wanted.contains(&a)))
                .collect()
        };
        match settled.ledger.get(id) {
            Some(false) => {
                for i in answered(&[Sold, Duplicate]) {
                    let how = match answer(&records[i]) {
                        Some(Duplicate) => "as a retry of its sale",
                        _ => "sold",
                    };
                    found.push(Anomaly {
                        class: Class::AcknowledgedNotRecorded,
                        products: products_of(records, &[i]),
                        ops: vec![i],
                        says: format!("{id} was answered {how}; the ledger has no row of it"),
                        count: 1,
                    });
                }
            }
            Some(true) if answered(&[Sold, Unknown]).is_empty() => {
                let nothing = answered(&[Failed, Refused]);
                let Some(&first) = nothing.first() else {
                    continue;
                };
                let how = match answer(&records[first]) {
                    Some(Refused) => "sold out",
                    _ => "with a failure",
                };
                found.push(Anomaly {
                    class: Class::FailedButRecorded,
                    products: products_of(records, &nothing),
                    ops: nothing.iter().copied().take(PROOF).collect(),
                    says: format!(
                        "{id} was answered {how} (nothing changed){}; the ledger has it, \
                         and no attempt of it could have sold",
                        match nothing.len() {
                            1 => String::new(),
                            n => format!(", {n} attempts in all"),
                        }
                    ),
                    count: 1,
                });
            }
            _ => {}
        }
    }
}

/// One request id answered `sold` twice, or `duplicate` where no attempt of it could
/// have sold (none answered `sold`, none the ledger's sale or a possible one).
fn double_sales(records: &[Record], settled: &Settled, found: &mut Vec<Anomaly>) {
    for (id, ops) in by_id(records) {
        let answered = |wanted: DeductAnswer| -> Vec<usize> {
            ops.iter()
                .copied()
                .filter(|&i| answer(&records[i]) == Some(wanted))
                .collect()
        };
        let sold = answered(DeductAnswer::Sold);
        let maybe_sold = ops.iter().any(|&i| {
            matches!(
                settled.effects[i],
                Effect::Sale { .. } | Effect::Maybe { .. }
            )
        });
        if sold.len() > 1 {
            found.push(Anomaly {
                class: Class::DoubleSale,
                products: products_of(records, &sold),
                ops: sold.iter().copied().take(PROOF).collect(),
                says: format!("{id} was answered sold {} times", sold.len()),
                count: 1,
            });
        } else if sold.is_empty() && !maybe_sold {
            let duplicates = answered(DeductAnswer::Duplicate);
            if !duplicates.is_empty() {
                found.push(Anomaly {
                    class: Class::DoubleSale,
                    products: products_of(records, &duplicates),
                    ops: duplicates.into_iter().take(PROOF).collect(),
                    says: format!(
                        "{id} was answered as a retry of an earlier sale that no answer shows"
                    ),
                    count: 1,
                });
            }
        }
    }
}

/// An operation on one product: its record, interval ([`super::model::OPEN`] when the
/// answer never came), units (a deduction's items of this product) and kind.
struct Op {
    index: usize,
    sent: u64,
    answered: u64,
    units: i64,
    kind: Kind,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Sold for certain: answered sold, or the sale of an id the ledger holds.
    Sold,
    /// May have sold (an unknown outcome, the ledger not asked).
    MaybeSold,
    Refused,
    /// A read, and whether it is a final read ([`super::ledger`]).
    Read(i64, bool),
    Restock(i64),
}

/// Oversold windows, false sold-outs, stale reads and lost updates of `product`.
fn by_window(records: &[Record], settled: &Settled, product: i64, found: &mut Vec<Anomaly>) {
    let (init, ops) = operations_on(records, settled, product);
    let sales: Vec<&Op> = ops
        .iter()
        .filter(|o| matches!(o.kind, Kind::Sold | Kind::MaybeSold))
        .collect();
    for &((from, until), (may_from, may_until), stock, opened) in &windows(&ops, init) {
        let Some(stock) = stock.filter(|_| from < until) else {
            continue;
        };
        let window = Window {
            product,
            stock,
            from,
            until,
            may_from,
            may_until,
            first: opened.is_none(),
            opened: opened.into_iter().collect(),
            sales: &sales,
        };
        window.oversold(found);
        for op in ops.iter().filter(|o| window.inside(o)) {
            match op.kind {
                Kind::Refused => window.false_sold_out(op, found),
                Kind::Read(shown, last) => window.lost_update_or_stale_read(op, shown, last, found),
                _ => {}
            }
        }
    }
}

/// The stock `product` starts with (its `init`), and its operations as the windows
/// see them: sales certain or possible, refusals, reads and restocks of it.
///
/// A deduction with no units of it, or a refusal of an order of several
/// products, is left out: it proves nothing against one of its windows.
fn operations_on(records: &[Record], settled: &Settled, product: i64) -> (i64, Vec<Op>) {
    use super::model::OPEN;
    let mut init = 0;
    let mut ops = Vec::new();
    for (index, record) in records.iter().enumerate() {
        let Some((sent, answered)) = record.interval() else {
            if let Record::Init { product_id, stock } = record
                && *product_id == product
            {
                init = *stock;
            }
            continue;
        };
        let answered = if record.open() {
            OPEN
        } else {
            answered.unwrap_or(OPEN)
        };
        let (kind, answered) = match (record, settled.effects[index]) {
            (_, Effect::Nothing) => continue,
            (Record::Deduct { .. }, Effect::Sale { by }) => (Kind::Sold, by),
            (Record::Deduct { .. }, Effect::Maybe { by }) => (Kind::MaybeSold, by),
            (Record::Deduct { answer, .. }, _) => match answer {
                DeductAnswer::Sold => (Kind::Sold, answered),
                DeductAnswer::Refused => (Kind::Refused, answered),
                _ => continue,
            },
            (
                Record::Read {
                    product_id,
                    stock: Some(stock),
                    ..
                },
                _,
            ) if *product_id == product => {
                (Kind::Read(*stock, is_final(settled, record)), answered)
            }
            (
                Record::Restock {
                    product_id, stock, ..
                },
                _,
            ) if *product_id == product => (Kind::Restock(*stock), answered),
            _ => continue,
        };
        let units = match record {
            // A refusal of an order of several products may be any one's: it proves
            // nothing against one of them.
            Record::Deduct { items, .. }
                if kind == Kind::Refused && items.iter().any(|i| i.product_id != product) =>
            {
                continue;
            }
            Record::Deduct { items, .. } => items
                .iter()
                .filter(|i| i.product_id == product)
                .map(|i| i.quantity)
                .sum(),
            _ => 0,
        };
        if matches!(kind, Kind::Sold | Kind::MaybeSold | Kind::Refused) && units == 0 {
            continue;
        }
        ops.push(Op {
            index,
            sent,
            answered,
            units,
            kind,
        });
    }
    (init, ops)
}

/// A window as [`windows`] cuts it: certainly (from, until), possibly (from, until), its
/// stock (none: not known), the restock that opened it (none: the first window).
type Cut = ((u64, u64), (u64, u64), Option<i64>, Option<usize>);

/// The windows of a product whose operations are `ops`, cut at its restocks, the first
/// with the stock `init`.
fn windows(ops: &[Op], init: i64) -> Vec<Cut> {
    use super::model::OPEN;
    // Windows: certainly (from, until), possibly (from, until) (a restock takes effect
    // somewhere between its request and its answer), the stock, the restock that
    // opened it.
    let mut restocks: Vec<&Op> = ops
        .iter()
        .filter(|o| matches!(o.kind, Kind::Restock(_)))
        .collect();
    restocks.sort_by_key(|o| o.sent);
    // Restocks that overlap each other form one group: which came last is unknown, so
    // the window after a group of several has no known stock and is skipped.
    let mut groups: Vec<(u64, u64, Option<&Op>)> = Vec::new();
    for restock in &restocks {
        match groups.last_mut() {
            Some((_, answered, last)) if restock.sent <= *answered => {
                *answered = (*answered).max(restock.answered);
                *last = None;
            }
            _ => groups.push((restock.sent, restock.answered, Some(restock))),
        }
    }
    let mut windows = vec![((0, OPEN), (0, OPEN), Some(init), None)];
    for (sent, answered, restock) in groups {
        let last = windows.last_mut().expect("the first window");
        (last.0.1, last.1.1) = (sent, answered);
        let stock = restock.map(|r| match r.kind {
            Kind::Restock(stock) => stock,
            _ => unreachable!("a restock"),
        });
        windows.push((
            (answered, OPEN),
            (sent, OPEN),
            stock,
            Some(restock.map_or(usize::MAX, |r| r.index)),
        ));
    }
    windows
}

/// One window of a product with a known stock, and the product's sales (certain or
/// possible): what the checks of the operations inside it ask.
struct Window<'a> {
    product: i64,
    stock: i64,
    /// Certainly (from, until).
    from: u64,
    until: u64,
    /// Possibly (from, until).
    may_from: u64,
    may_until: u64,
    /// Whether it is the product's first window (its stock the `init`).
    first: bool,
    /// The restock that opened it, if any.
    opened: Vec<usize>,
    sales: &'a [&'a Op],
}

impl Window<'_> {
    /// Whether `o` was sent after the window opened and answered before it closed.
    fn inside(&self, o: &Op) -> bool {
        (self.first || o.sent > self.from) && o.answered < self.until
    }

    /// Whether `o` could have taken effect in the window.
    fn could(&self, o: &Op) -> bool {
        // Could have taken effect in this window: not answered before it could have
        // opened, not sent after it could have closed. (Two events at one instant
        // overlap, as in the search.)
        o.answered >= self.may_from && o.sent <= self.may_until
    }

    /// More units answered sold inside the window than its stock.
    fn oversold(&self, found: &mut Vec<Anomaly>) {
        let (product, stock, opened) = (self.product, self.stock, &self.opened);
        // Oversold: sales certain and inside the window beyond its stock.
        let certain: Vec<&&Op> = self
            .sales
            .iter()
            .filter(|o| o.kind == Kind::Sold && self.inside(o))
            .collect();
        let sold = sum_units(&certain);
        if sold > stock {
            found.push(Anomaly {
                class: Class::Oversold,
                products: vec![product],
                ops: opened
                    .iter()
                    .copied()
                    .chain(certain.iter().map(|o| o.index))
                    .take(PROOF)
                    .collect(),
                says: format!(
                    "{sold} units answered sold of product {product}, which had {stock}{}",
                    if opened.is_empty() {
                        ""
                    } else {
                        " after its restock"
                    }
                ),
                count: 1,
            });
        }
    }

    /// The refusal `op`, inside the window, answered while units enough were left.
    fn false_sold_out(&self, op: &Op, found: &mut Vec<Anomaly>) {
        let (product, stock, opened) = (self.product, self.stock, &self.opened);
        // Every sale that could have come before it, counted.
        let before: i64 = self
            .sales
            .iter()
            .filter(|s| self.could(s) && s.sent <= op.answered && s.index != op.index)
            .map(|s| s.units)
            .sum();
        if stock - before >= op.units {
            found.push(Anomaly {
                class: Class::FalseSoldOut,
                products: vec![product],
                ops: opened.iter().copied().chain([op.index]).collect(),
                says: format!(
                    "told sold out of product {product} while at least {} of {stock} units were left",
                    stock - before
                ),
                count: 1,
            });
        }
    }

    /// The read `op`, inside the window, showing `shown` (`last`: a final read): a lost
    /// update where it shows sales erased, a stale read where no order of the sales
    /// around it gives what it shows.
    fn lost_update_or_stale_read(&self, op: &Op, shown: i64, last: bool, found: &mut Vec<Anomaly>) {
        let (product, stock, opened) = (self.product, self.stock, &self.opened);
        let possibly: i64 = self
            .sales
            .iter()
            .filter(|s| self.could(s) && s.sent <= op.answered)
            .map(|s| s.units)
            .sum();
        let surely: Vec<&&Op> = self
            .sales
            .iter()
            .filter(|s| s.kind == Kind::Sold && self.inside(s) && s.answered < op.sent)
            .collect();
        let (low, high) = (stock - possibly, stock - sum_units(&surely));
        // A final read showing more than the sales leave, but no more than
        // the stock: sales erased from it.
        if last && high < shown && shown <= stock {
            found.push(Anomaly {
                class: Class::LostUpdate,
                products: vec![product],
                ops: opened
                    .iter()
                    .copied()
                    .chain([op.index])
                    .chain(surely.iter().map(|s| s.index))
                    .take(PROOF)
                    .collect(),
                says: format!(
                    "the final read of product {product} shows {shown} units; \
                     the answers leave at most {high}: {} sold {} erased from \
                     the stock",
                    shown - high,
                    if shown - high == 1 { "unit" } else { "units" }
                ),
                count: (shown - high) as u64,
            });
        } else if shown < low || shown > high {
            found.push(Anomaly {
                class: Class::StaleRead,
                products: vec![product],
                ops: opened.iter().copied().chain([op.index]).collect(),
                says: format!(
                    "read {shown} left of product {product}; the sales around it leave {low} to {high}"
                ),
                count: 1,
            });
        }
    }
}

/// The units of `sales`, summed.
fn sum_units(sales: &[&&Op]) -> i64 {
    sales.iter().map(|s| s.units).sum()
}
