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
//! - **false sold-out**: a refusal inside a window answered while, even with every
//!   sale that could have come before it counted, units enough were left.
//! - **stale read**: a read inside a window showing a stock no order of the sales
//!   around it gives (units already sold, or units sold that were not).
//! - **double sale**: one request id answered `sold` twice, or `duplicate` with no sale
//!   of it anywhere (not even an unknown outcome the ledger may hold).
//! - **acknowledged but not recorded**: answered `sold`, its request id not in the
//!   ledger once the system was quiet.
//! - **failed but recorded**: a definite failure or a refusal (nothing changed, by the
//!   API's contract), its request id in the ledger.
//! - **lock overlap**: two holders of one lock key at once, as their instances logged
//!   them (`hold` records), and whether the fence refused the stale one (its deduction
//!   is not in the ledger) or both wrote. Seeing none does not prove the server kept
//!   them apart: a holder logs what it believed, and a pause can fall between two lines.
//! - **not linearizable**: a part the search found no order for, where none of the
//!   above is found.
//!
//! (Lost updates are the ledger's against the stock row, not the history's: the run
//! adds them from its database verdict.)

use super::history::{DeductAnswer, Record};
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
}

/// The most operations an anomaly lists as its proof (an oversold window of a thousand
/// sales is proven by all of them; the first few show it).
pub const PROOF: usize = 8;

/// Every anomaly found directly in `records` (a well-formed history).
pub fn find(records: &[Record]) -> Vec<Anomaly> {
    let mut found = Vec::new();
    by_request_id(records, &mut found);
    let products: Vec<i64> = (records.iter())
        .filter_map(|r| match r {
            Record::Init { product_id, .. } => Some(*product_id),
            _ => None,
        })
        .collect();
    for product in products {
        by_window(records, product, &mut found);
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
        (records.iter()).position(|r| {
            matches!(r, Record::Deduct { request_id, recorded: Some(true), .. } if request_id == id)
        })
    };
    for (key, mut holds) in by_key {
        holds.sort_by_key(|h| h.2);
        for (a, first) in holds.iter().enumerate() {
            // Every later holder that took the key while this one still believed it
            // held it: this one is the stale holder, once per pause.
            let during: Vec<&(usize, &str, u64, u64)> = (holds[a + 1..].iter())
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
            });
        }
    }
}

/// Double sales and the answers the ledger contradicts.
fn by_request_id(records: &[Record], found: &mut Vec<Anomaly>) {
    let mut by_id: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, record) in records.iter().enumerate() {
        let Record::Deduct {
            request_id,
            answer,
            recorded,
            items,
            ..
        } = record
        else {
            continue;
        };
        by_id.entry(request_id).or_default().push(i);
        let products = || items.iter().map(|i| i.product_id).collect();
        match (answer, recorded) {
            (DeductAnswer::Sold | DeductAnswer::Duplicate, Some(false)) => found.push(Anomaly {
                class: Class::AcknowledgedNotRecorded,
                products: products(),
                ops: vec![i],
                says: format!("{request_id} was answered sold; the ledger has no row of it"),
            }),
            (DeductAnswer::Failed | DeductAnswer::Refused, Some(true)) => found.push(Anomaly {
                class: Class::FailedButRecorded,
                products: products(),
                ops: vec![i],
                says: format!(
                    "{request_id} was answered {} (nothing changed); the ledger has it",
                    if *answer == DeductAnswer::Refused {
                        "sold out"
                    } else {
                        "with a failure"
                    }
                ),
            }),
            _ => {}
        }
    }
    for (id, ops) in by_id {
        let answers = |wanted: DeductAnswer| {
            (ops.iter().copied()).filter(
                move |&i| matches!(&records[i], Record::Deduct { answer, .. } if *answer == wanted),
            )
        };
        let sold: Vec<usize> = answers(DeductAnswer::Sold).collect();
        let maybe_sold = ops.iter().any(|&i| {
            matches!(&records[i], Record::Deduct { answer: DeductAnswer::Unknown, recorded, .. } if *recorded != Some(false))
        });
        let products = |ops: &[usize]| {
            let mut products: Vec<i64> = (ops.iter())
                .flat_map(|&i| match &records[i] {
                    Record::Deduct { items, .. } => items.iter().map(|i| i.product_id).collect(),
                    _ => Vec::new(),
                })
                .collect();
            products.sort_unstable();
            products.dedup();
            products
        };
        if sold.len() > 1 {
            found.push(Anomaly {
                class: Class::DoubleSale,
                products: products(&sold),
                ops: sold.iter().copied().take(PROOF).collect(),
                says: format!("{id} was answered sold {} times", sold.len()),
            });
        } else if sold.is_empty() && !maybe_sold {
            let duplicates: Vec<usize> = answers(DeductAnswer::Duplicate).collect();
            if !duplicates.is_empty() {
                found.push(Anomaly {
                    class: Class::DoubleSale,
                    products: products(&duplicates),
                    ops: duplicates.into_iter().take(PROOF).collect(),
                    says: format!(
                        "{id} was answered as a retry of an earlier sale that no answer shows"
                    ),
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
    /// Sold for certain (answered sold, or unknown and in the ledger).
    Sold,
    /// May have sold (unknown, the ledger not asked).
    MaybeSold,
    Refused,
    Read(i64),
    Restock(i64),
}

/// Oversold windows, false sold-outs and stale reads of `product`.
fn by_window(records: &[Record], product: i64, found: &mut Vec<Anomaly>) {
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
        let kind = match record {
            Record::Deduct {
                answer, recorded, ..
            } => match (answer, recorded) {
                (DeductAnswer::Sold, _) | (DeductAnswer::Unknown, Some(true)) => Kind::Sold,
                (DeductAnswer::Unknown, None) => Kind::MaybeSold,
                (DeductAnswer::Refused, _) => Kind::Refused,
                _ => continue,
            },
            Record::Read {
                product_id,
                stock: Some(stock),
                ..
            } if *product_id == product => Kind::Read(*stock),
            Record::Restock {
                product_id, stock, ..
            } if *product_id == product => Kind::Restock(*stock),
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
            Record::Deduct { items, .. } => (items.iter())
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
    // Windows: certainly (from, until), possibly (from, until) (a restock takes effect
    // somewhere between its request and its answer), the stock, the restock that
    // opened it.
    let mut restocks: Vec<&Op> = (ops.iter())
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
    let sales: Vec<&Op> = (ops.iter())
        .filter(|o| matches!(o.kind, Kind::Sold | Kind::MaybeSold))
        .collect();
    for &((from, until), (may_from, may_until), stock, opened) in &windows {
        let Some(stock) = stock.filter(|_| from < until) else {
            continue;
        };
        let first = opened.is_none();
        let inside = |o: &Op| (first || o.sent > from) && o.answered < until;
        // Could have taken effect in this window: not answered before it could have
        // opened, not sent after it could have closed. (Two events at one instant
        // overlap, as in the search.)
        let could = |o: &Op| o.answered >= may_from && o.sent <= may_until;
        let opened: Vec<usize> = opened.into_iter().collect();
        // Oversold: sales certain and inside the window beyond its stock.
        let certain: Vec<&&Op> = (sales.iter())
            .filter(|o| o.kind == Kind::Sold && inside(o))
            .collect();
        let sold: i64 = certain.iter().map(|o| o.units).sum();
        if sold > stock {
            found.push(Anomaly {
                class: Class::Oversold,
                products: vec![product],
                ops: (opened.iter().copied())
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
            });
        }
        for op in ops.iter().filter(|o| inside(o)) {
            match op.kind {
                Kind::Refused => {
                    // Every sale that could have come before it, counted.
                    let before: i64 = (sales.iter())
                        .filter(|s| could(s) && s.sent <= op.answered && s.index != op.index)
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
                        });
                    }
                }
                Kind::Read(shown) => {
                    let possibly: i64 = (sales.iter())
                        .filter(|s| could(s) && s.sent <= op.answered)
                        .map(|s| s.units)
                        .sum();
                    let surely: i64 = (sales.iter())
                        .filter(|s| s.kind == Kind::Sold && inside(s) && s.answered < op.sent)
                        .map(|s| s.units)
                        .sum();
                    let (low, high) = (stock - possibly, stock - surely);
                    if shown < low || shown > high {
                        found.push(Anomaly {
                            class: Class::StaleRead,
                            products: vec![product],
                            ops: opened.iter().copied().chain([op.index]).collect(),
                            says: format!(
                                "read {shown} left of product {product}; the sales around it leave {low} to {high}"
                            ),
                        });
                    }
                }
                _ => {}
            }
        }
    }
}
