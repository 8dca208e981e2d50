//! Checks a recorded history of a stock service against the model of a stock counter:
//! is there one order of its operations, each taking effect at one instant between
//! its request and its answer, in which every answer is what a single correct counter
//! would have given? (Linearizability, as Jepsen's Knossos and Porcupine check it.)
//! A sum over the ledger cannot see a buyer told "sold out" while units remained;
//! this can.
//!
//! - [`history`]: the format (JSON lines), readable from any tool;
//! - [`ledger`]: the ledger's word read per request id: which attempt of an id sold,
//!   and the final reads that come once the system is quiet;
//! - [`model`]: the stock model, and the history cut into independent parts;
//! - [`bounds`]: the search's look ahead: a product's stock weighed against its
//!   operations still to come;
//! - [`search`]: the Wing-Gong/Lowe search, with a time budget per part, and the exact
//!   O(n log n) test where a part holds sales and refusals of one product only;
//! - [`classes`]: the anomalies by name (oversold, false sold-out, stale read, double
//!   sale, ...), each with the operations that prove it.
//!
//! Depends on nothing of the service: serde and serde_json to read and write the
//! format, rustc-hash for the search's memory of the configurations it saw.

pub mod bounds;
pub mod classes;
pub mod history;
pub mod ledger;
pub mod model;
pub mod search;

#[cfg(test)]
mod tests;

use history::Record;
use search::Outcome;
use std::time::Duration;

/// How long a check may search one independent part before it answers "unknown", by
/// default: the runs' budget, and the bench's.
pub const BUDGET: Duration = Duration::from_secs(10);

/// The verdict on a whole history, each independent part judged apart
/// ([`model::partition`]). Where parts differ, the worst wins: not linearizable, then
/// undecided, then unobserved, then linearizable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every part has an order that explains its answers, and in every part with
    /// operations a read or a refusal could have contradicted them.
    Linearizable,
    /// No order explains the answers on these products (a part's products, each part
    /// that failed), or the ledger contradicts one of their answers: a sale it does
    /// not hold, a failure or refusal of an id it holds that nothing else could have
    /// sold.
    NotLinearizable { products: Vec<Vec<i64>> },
    /// Every part that was decided is linearizable; these ran out of budget.
    Unknown { products: Vec<Vec<i64>> },
    /// Every part is linearizable, but these held no answered read and no refusal:
    /// any order of their sales is legal unless they oversell, so nothing in them
    /// could have contradicted the answers.
    Unobserved { products: Vec<Vec<i64>> },
}

/// Every anomaly of `records` ([`classes::find`]), and, for each part the search found
/// no order for where none of them was found, that part as not linearizable.
pub fn anomalies(records: &[Record], verdict: &Verdict) -> Vec<classes::Anomaly> {
    let mut found = classes::find(records);
    // The classes that explain why a part fails; a lock overlap can come with a
    // linearizable history (the answers may all be right while two holders believed).
    let explains = |a: &classes::Anomaly| {
        !matches!(
            a.class,
            classes::Class::LockOverlap | classes::Class::NotLinearizable
        )
    };
    if let Verdict::NotLinearizable { products } = verdict {
        for part in products {
            let explained = found
                .iter()
                .any(|a| explains(a) && a.products.iter().any(|p| part.contains(p)));
            if !explained {
                found.push(classes::Anomaly {
                    class: classes::Class::NotLinearizable,
                    products: part.clone(),
                    ops: Vec::new(),
                    says: format!(
                        "no order of the operations on products {part:?} explains their answers"
                    ),
                    count: 1,
                });
            }
        }
    }
    found
}

/// Checks `records`, each independent part for at most `budget`.
///
/// # Errors
///
/// A history no service answers: an answer before its request, a product without its
/// `init`, an order without items, one request id said both recorded and not.
pub fn check(records: &[Record], budget: Duration) -> Result<Verdict, String> {
    let contradicted: std::collections::BTreeSet<i64> = classes::contradicted(records)
        .into_iter()
        .flat_map(|a| a.products)
        .collect();
    let (mut failed, mut unknown, mut unobserved) = (Vec::new(), Vec::new(), Vec::new());
    for part in model::partition(records)? {
        let outcome = if part.products.iter().any(|p| contradicted.contains(p)) {
            Outcome::NotLinearizable
        } else {
            match search::quick(&part) {
                Some(true) => Outcome::Linearizable,
                Some(false) => Outcome::NotLinearizable,
                None => search::linearizable(&part, budget),
            }
        };
        match outcome {
            Outcome::Linearizable if !observed(&part) => unobserved.push(part.products),
            Outcome::Linearizable => {}
            Outcome::NotLinearizable => failed.push(part.products),
            Outcome::Unknown => unknown.push(part.products),
        }
    }
    Ok(if !failed.is_empty() {
        Verdict::NotLinearizable { products: failed }
    } else if !unknown.is_empty() {
        Verdict::Unknown { products: unknown }
    } else if !unobserved.is_empty() {
        Verdict::Unobserved {
            products: unobserved,
        }
    } else {
        Verdict::Linearizable
    })
}

/// Whether something in `part` could have contradicted its answers: it has no
/// operation, or an answered read or a refusal among them.
fn observed(part: &model::Part) -> bool {
    use history::DeductAnswer::Refused;
    part.ops.is_empty()
        || part.ops.iter().any(|op| {
            matches!(
                op,
                model::Op::Read { .. }
                    | model::Op::Deduct {
                        answer: Refused,
                        ..
                    }
            )
        })
}
