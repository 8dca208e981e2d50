//! The stock model the history is checked against, and the history cut into
//! independent parts: products no order joins are checked apart (a multi-item order
//! joins its products into one part).
//!
//! Per product a stock counter; per part the request ids already sold. A deduction
//! answered `sold` is legal only if its id was not sold and every item has enough (it
//! deducts them all); `refused` only if its id was not sold and some item has too
//! few; `duplicate` only if its id was sold (it changes nothing). A restock sets the
//! stock; a read must return it. `remaining` in an answer is not judged.
//!
//! An operation without a known outcome (no answer, or `outcome_unknown`) is given an
//! open end: it may take effect at any point after it was sent. Its step sells if it
//! can; "it never happened" is the same as taking effect after everything else, where
//! nothing observes it. The ledger's word is read per request id ([`super::ledger`]):
//! an id it holds is one sale (an attempt answered `sold`, or else its earliest
//! unknown attempt, open-ended until the first final read of its products); the
//! attempts of an id it does not hold did nothing. A definite failure changes nothing,
//! and a read without an answer says nothing: both are left out.

use super::history::{DeductAnswer, Record};
use super::ledger::{Effect, Settled, conflict, settle};
use std::collections::BTreeMap;

/// An operation as the model sees it: products by their index in the part, request
/// ids by number. Two equal operations have the same effect in every state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Op {
    Deduct {
        /// The request id's number, if another operation of the part has it too (one
        /// that no other has needs no memory of being sold: it keeps states small).
        id: Option<usize>,
        items: Vec<(usize, i64)>,
        answer: DeductAnswer,
    },
    Restock {
        product: usize,
        stock: i64,
    },
    Read {
        product: usize,
        stock: i64,
    },
}

/// The stock of each product of a part, and which request ids sold (a bit each).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    pub stock: Vec<i64>,
    pub sold: Vec<u64>,
}

impl State {
    fn is_sold(&self, id: Option<usize>) -> bool {
        id.is_some_and(|id| self.sold[id / 64] & (1 << (id % 64)) != 0)
    }

    fn sell(&self, id: Option<usize>, items: &[(usize, i64)]) -> State {
        let mut next = self.clone();
        for &(product, quantity) in items {
            next.stock[product] -= quantity;
        }
        if let Some(id) = id {
            next.sold[id / 64] |= 1 << (id % 64);
        }
        next
    }
}

/// The state after `op`, or `None` when its answer is impossible in `state`.
pub fn step(state: &State, op: &Op) -> Option<State> {
    match op {
        Op::Deduct { id, items, answer } => {
            let sold = state.is_sold(*id);
            let enough = items.iter().all(|&(p, q)| state.stock[p] >= q);
            match answer {
                DeductAnswer::Sold => (!sold && enough).then(|| state.sell(*id, items)),
                DeductAnswer::Duplicate => sold.then(|| state.clone()),
                DeductAnswer::Refused => (!sold && !enough).then(|| state.clone()),
                DeductAnswer::Failed => Some(state.clone()),
                DeductAnswer::Unknown if !sold && enough => Some(state.sell(*id, items)),
                DeductAnswer::Unknown => Some(state.clone()),
            }
        }
        Op::Restock { product, stock } => {
            let mut next = state.clone();
            next.stock[*product] = *stock;
            Some(next)
        }
        Op::Read { product, stock } => (state.stock[*product] == *stock).then(|| state.clone()),
    }
}

/// The time an operation's effect can come no later than ([`super::ledger::OPEN`]).
pub use super::ledger::OPEN;

/// Products no operation joins to others, with their operations.
#[derive(Debug, Clone)]
pub struct Part {
    /// The product ids, in index order.
    pub products: Vec<i64>,
    pub init: State,
    pub ops: Vec<Op>,
    /// When each operation was sent, and when answered ([`OPEN`]: unknown outcome).
    pub calls: Vec<u64>,
    pub returns: Vec<u64>,
    /// Each operation's record: its index in the history (the ledger's word that one
    /// of an id's attempts sold has its earliest attempt's).
    pub records: Vec<usize>,
}

/// Cuts a history into its independent parts.
pub fn partition(records: &[Record]) -> Result<Vec<Part>, String> {
    if let Some(conflict) = conflict(records) {
        return Err(conflict);
    }
    let settled = settle(records);
    let mut stock = BTreeMap::new();
    // Each operation with its index in the history.
    let mut ops: Vec<(usize, &Record)> = Vec::new();
    for (index, record) in records.iter().enumerate() {
        if let Record::Init {
            product_id,
            stock: s,
        } = record
            && stock.insert(*product_id, *s).is_some()
        {
            return Err(format!("product {product_id} has two init records"));
        }
        if settled.effects[index] != Effect::Nothing {
            well_formed(record)?;
            ops.push((index, record));
        }
    }
    // Union-find over products: each operation joins its products, and operations
    // with one request id join theirs (the ids sold are a part's state).
    let mut parent: BTreeMap<i64, i64> = stock.keys().map(|&p| (p, p)).collect();
    fn root(parent: &mut BTreeMap<i64, i64>, mut p: i64) -> i64 {
        while parent[&p] != p {
            let up = parent[&parent[&p]];
            parent.insert(p, up);
            p = up;
        }
        p
    }
    let mut first_of_id: BTreeMap<&str, i64> = BTreeMap::new();
    for &(_, op) in &ops {
        let mut products = products_of(op);
        for p in &products {
            if !parent.contains_key(p) {
                return Err(format!("product {p} has no init record"));
            }
        }
        if let Record::Deduct { request_id, .. } = op {
            products.push(*first_of_id.entry(request_id).or_insert(products[0]));
        }
        for pair in products.windows(2) {
            let (a, b) = (root(&mut parent, pair[0]), root(&mut parent, pair[1]));
            parent.insert(a, b);
        }
    }
    // Per part (by its root product): its products, its operations.
    type Ops<'a> = Vec<(usize, &'a Record)>;
    let mut parts: BTreeMap<i64, (Vec<i64>, Ops)> = BTreeMap::new();
    for &p in stock.keys() {
        let r = root(&mut parent, p);
        parts.entry(r).or_default().0.push(p);
    }
    for op in ops {
        let r = root(&mut parent, products_of(op.1)[0]);
        parts
            .get_mut(&r)
            .expect("every product has a part")
            .1
            .push(op);
    }
    Ok(parts
        .into_values()
        .map(|(products, records)| build(products, &records, &stock, &settled))
        .collect())
}

/// Refuses what no service answers: an answer before its request, a definite answer
/// without its time, an order with no items or a quantity below 1.
fn well_formed(record: &Record) -> Result<(), String> {
    let (sent, answered) = record.interval().expect("an operation");
    if let Some(answered) = answered
        && answered < sent
    {
        return Err(format!(
            "an answer at {answered} µs before its request at {sent} µs"
        ));
    }
    if answered.is_none() && !record.open() {
        return Err(format!("an answer without answered_us, sent at {sent} µs"));
    }
    if let Record::Deduct { items, .. } = record
        && (items.is_empty() || items.iter().any(|i| i.quantity < 1))
    {
        return Err(format!(
            "an order sent at {sent} µs with no items or a quantity below 1"
        ));
    }
    Ok(())
}

fn products_of(record: &Record) -> Vec<i64> {
    match record {
        Record::Deduct { items, .. } => items.iter().map(|i| i.product_id).collect(),
        Record::Restock { product_id, .. } | Record::Read { product_id, .. } => vec![*product_id],
        Record::Init { product_id, .. } => vec![*product_id],
        Record::Hold { .. } => Vec::new(),
    }
}

/// One operation of a part being built: its record (index and record), the answer
/// the model judges where it is not the recorded one, when it was sent, and the end
/// of its window.
type Planned<'a> = (usize, &'a Record, Option<DeductAnswer>, u64, u64);

/// A part's operations as the model takes them ([`planned`]), with its products' stock.
fn build(
    products: Vec<i64>,
    records: &[(usize, &Record)],
    stock: &BTreeMap<i64, i64>,
    settled: &Settled,
) -> Part {
    let planned = planned(records, settled);
    // Request ids numbered where two operations of the part share one (one that no
    // other has needs no memory of being sold).
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, record, ..) in &planned {
        if let Record::Deduct { request_id, .. } = record {
            *seen.entry(request_id).or_default() += 1;
        }
    }
    let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
    let mut ops = Vec::new();
    for &(_, record, judged, ..) in &planned {
        let id = match record {
            Record::Deduct { request_id, .. } if seen[request_id.as_str()] > 1 => {
                let next = ids.len();
                Some(*ids.entry(request_id.as_str()).or_insert(next))
            }
            _ => None,
        };
        ops.push(op_of(record, judged, id, &products));
    }
    let init = State {
        stock: products.iter().map(|p| stock[p]).collect(),
        sold: vec![0; ids.len().div_ceil(64).max(1)],
    };
    Part {
        products,
        init,
        ops,
        calls: planned.iter().map(|p| p.3).collect(),
        returns: planned.iter().map(|p| p.4).collect(),
        records: planned.iter().map(|p| p.0).collect(),
    }
}

/// Each record as its [`Effect`] says, and after the earliest attempt of an id in
/// [`Settled::one_of`] the ledger's word that one of its attempts sold: a duplicate
/// with an open end.
fn planned<'a>(records: &[(usize, &'a Record)], settled: &Settled) -> Vec<Planned<'a>> {
    let mut planned = Vec::new();
    for &(i, record) in records {
        let (sent, answered) = record.interval().expect("an operation");
        let (answer, end) = match settled.effects[i] {
            Effect::Sale { by } => (Some(DeductAnswer::Sold), by),
            Effect::Maybe { by } => (Some(DeductAnswer::Unknown), by),
            _ if record.open() => (None, OPEN),
            // (An answer before its request, or none, is refused by `partition`.)
            _ => (None, answered.unwrap_or(OPEN)),
        };
        planned.push((i, record, answer, sent, end));
        if settled.one_of.contains(&i) {
            planned.push((i, record, Some(DeductAnswer::Duplicate), sent, OPEN));
        }
    }
    planned
}

/// `record` as an operation on `products` (by index), judged by `judged` where given,
/// its request id numbered `id`.
fn op_of(record: &Record, judged: Option<DeductAnswer>, id: Option<usize>, products: &[i64]) -> Op {
    let index = |p: i64| products.iter().position(|&q| q == p).expect("in the part");
    match record {
        Record::Deduct { items, answer, .. } => {
            // A product named twice is one item of the sum (the service refuses such an
            // order; another tool's history may hold one).
            let mut summed: BTreeMap<usize, i64> = BTreeMap::new();
            for item in items {
                *summed.entry(index(item.product_id)).or_default() += item.quantity;
            }
            Op::Deduct {
                id,
                items: summed.into_iter().collect(),
                answer: judged.unwrap_or(*answer),
            }
        }
        Record::Restock {
            product_id, stock, ..
        } => Op::Restock {
            product: index(*product_id),
            stock: *stock,
        },
        Record::Read {
            product_id, stock, ..
        } => Op::Read {
            product: index(*product_id),
            stock: stock.expect("reads without an answer are left out"),
        },
        Record::Init { .. } | Record::Hold { .. } => {
            unreachable!("init and hold records are not operations")
        }
    }
}
