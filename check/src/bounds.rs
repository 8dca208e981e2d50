//! A look ahead for the search, exact: after a step changes a product's stock, the
//! operations on that product still to come are weighed against it, and a state that
//! fails one of the conditions below is given up at once instead of when its fault is
//! reached.
//!
//! Between restocks a product's stock only goes down. So for an operation `c` still
//! to come that no restock still to come can precede, with `s` the stock now:
//! - the sales that must come before `c` (answered before it was sent) leave at most
//!   `s - must` units at its point, and a read of more, or a sale of more, is
//!   impossible;
//! - the sales and unknown outcomes that may come before it (sent no later than it
//!   was answered) leave at least `s - could`, and a read of fewer, or a refusal (of
//!   one item) while at least the quantity asked is left, is impossible.
//!
//! For an operation that the first restock still to come surely precedes (answered
//! before it was sent) and no other can, the same from the restock's stock, counting
//! only the sales that must come after the restock (sent after it was answered), or
//! may (not answered before it was sent). An operation overlapping the first restock,
//! or one a second restock may precede, is not weighed.
//!
//! Each is a condition every order from here must meet: failing one proves there is
//! none, and meeting them all proves nothing (the search goes on). A search that took
//! a sale on the wrong side of a restock learns it at the first read after the restock
//! that the sale's side changes, instead of thousands of steps later, after trying
//! every interleaving of the products between. Each check looks at most [`AHEAD`]
//! operations of the product ahead, and runs in parts of several products only: in one
//! product alone the search's equal-operation reduction already keeps going back
//! cheap, and there the look ahead cost more time than it saved (measured with the
//! bench). Sums are taken in `i128`: another tool's history may ask for any quantity.

use super::history::DeductAnswer;
use super::model::{OPEN, Op, Part, State};

/// How many of a product's operations still to come one check weighs, at most.
pub const AHEAD: usize = 1024;

/// What an operation does to one product, as the look ahead sees it.
#[derive(Debug, Clone, Copy)]
enum Role {
    /// A sale that happened: takes `q`, and needs `q` left at its point.
    Sale(i64),
    /// An unknown outcome: may take `q`.
    Maybe(i64),
    /// A read of `v`.
    Read(i64),
    /// A refusal of `q` units of this product alone: needs fewer than `q` left.
    Refusal(i64),
    /// A restock to `v`.
    Restock(i64),
}

impl Role {
    /// The units it takes or may take.
    fn takes(self) -> i128 {
        match self {
            Role::Sale(q) | Role::Maybe(q) => q.into(),
            _ => 0,
        }
    }
}

/// Each product's operations in the order they were sent, with what each does there.
pub struct Bounds {
    /// Per product: (operation, role), by call; and its restocks alone.
    lists: Vec<Vec<(usize, Role)>>,
    restocks: Vec<Vec<(usize, i64)>>,
    /// Per product: the index in each list before which every operation is taken (kept
    /// low enough when an operation is put back).
    start: Vec<usize>,
    restock_start: Vec<usize>,
    /// Per operation: (product, index in that product's list, in its restocks).
    places: Vec<Vec<(usize, usize, usize)>>,
    /// Room reused by every check (a check runs at every step).
    scratch: Scratch,
}

#[derive(Default)]
struct Scratch {
    ahead: Vec<(usize, Role)>,
    could: [Vec<i128>; 2],
    sales: [Vec<(u64, i64)>; 2],
    must: [Vec<i128>; 2],
}

impl Bounds {
    pub fn new(part: &Part) -> Bounds {
        let mut lists: Vec<Vec<(usize, Role)>> = vec![Vec::new(); part.products.len()];
        for (op, kind) in part.ops.iter().enumerate() {
            match kind {
                Op::Deduct { items, answer, .. } => {
                    // A duplicate, or a refusal of several products, has no effect and
                    // no condition on one product: not listed.
                    for &(p, q) in items {
                        let role = match answer {
                            DeductAnswer::Sold => Some(Role::Sale(q)),
                            DeductAnswer::Unknown => Some(Role::Maybe(q)),
                            DeductAnswer::Refused if items.len() == 1 => Some(Role::Refusal(q)),
                            _ => None,
                        };
                        lists[p].extend(role.map(|role| (op, role)));
                    }
                }
                Op::Read { product, stock } => lists[*product].push((op, Role::Read(*stock))),
                Op::Restock { product, stock } => lists[*product].push((op, Role::Restock(*stock))),
            }
        }
        let mut places = vec![Vec::new(); part.ops.len()];
        let mut restocks = vec![Vec::new(); lists.len()];
        for (p, list) in lists.iter_mut().enumerate() {
            list.sort_by_key(|&(op, _)| (part.calls[op], op));
            for (i, &(op, role)) in list.iter().enumerate() {
                if let Role::Restock(v) = role {
                    restocks[p].push((op, v));
                }
                places[op].push((p, i, restocks[p].len().saturating_sub(1)));
            }
        }
        Bounds {
            start: vec![0; lists.len()],
            restock_start: vec![0; lists.len()],
            lists,
            restocks,
            places,
            scratch: Scratch::default(),
        }
    }

    /// `op` was put back: its products' lists may have an untaken entry earlier.
    pub fn untaken(&mut self, op: usize) {
        for &(p, i, r) in &self.places[op] {
            self.start[p] = self.start[p].min(i);
            self.restock_start[p] = self.restock_start[p].min(r);
        }
    }

    /// Whether every product `op` touches can still go on from `state`, with `taken`
    /// the operations in the order so far (`op` among them).
    pub fn feasible(&mut self, part: &Part, op: usize, state: &State, taken: &[u64]) -> bool {
        let places = std::mem::take(&mut self.places[op]);
        let ok = places
            .iter()
            .all(|&(p, _, _)| self.product(part, p, state, taken));
        self.places[op] = places;
        ok
    }

    fn product(&mut self, part: &Part, p: usize, state: &State, taken: &[u64]) -> bool {
        let is_taken = |op: usize| taken[op / 64] & (1 << (op % 64)) != 0;
        let (list, restocks) = (&self.lists[p], &self.restocks[p]);
        while self.start[p] < list.len() && is_taken(list[self.start[p]].0) {
            self.start[p] += 1;
        }
        while self.restock_start[p] < restocks.len() && is_taken(restocks[self.restock_start[p]].0)
        {
            self.restock_start[p] += 1;
        }
        // The first two restocks still to come: past the second, nothing is weighed.
        let mut coming =
            (restocks[self.restock_start[p]..].iter()).filter(|&&(op, _)| !is_taken(op));
        let first = coming.next().copied();
        let mut end = coming.next().map_or(OPEN, |&(op, _)| part.calls[op]);
        // At most AHEAD operations: `end` is a call time no operation left out comes
        // before.
        let Scratch {
            ahead,
            could,
            sales,
            must,
        } = &mut self.scratch;
        ahead.clear();
        for k in 0..2 {
            could[k].clear();
            could[k].push(0);
            sales[k].clear();
            must[k].clear();
            must[k].push(0);
        }
        for &(op, role) in &list[self.start[p]..] {
            if part.calls[op] >= end {
                break;
            }
            if is_taken(op) {
                continue;
            }
            if ahead.len() == AHEAD {
                end = part.calls[op];
                break;
            }
            ahead.push((op, role));
        }
        let (first_call, first_answer) =
            first.map_or((OPEN, OPEN), |(op, _)| (part.calls[op], part.returns[op]));
        // Before the first restock, from the stock now: what may come before an
        // operation answered at `t` is everything sent by `t` (prefix sums in call
        // order), what must come before it the sales answered before it was sent
        // (prefix sums in answer order). After it, from the restock's stock: the same,
        // of what may come after the restock (not answered before it was sent), and of
        // what must (sent after it was answered).
        for &(op, role) in ahead.iter() {
            let after = part.returns[op] >= first_call;
            for (k, counts) in [true, after].into_iter().enumerate() {
                let last = *could[k].last().expect("starts with 0");
                could[k].push(last + if counts { role.takes() } else { 0 });
            }
            if let Role::Sale(q) = role {
                sales[0].push((part.returns[op], q));
                if part.calls[op] > first_answer {
                    sales[1].push((part.returns[op], q));
                }
            }
        }
        for k in 0..2 {
            sales[k].sort_unstable();
            for &(_, q) in &sales[k] {
                let last = *must[k].last().expect("starts with 0");
                must[k].push(last + i128::from(q));
            }
        }
        for (i, &(op, role)) in ahead.iter().enumerate() {
            let (call, answer) = (part.calls[op], part.returns[op]);
            // Only where everything that may come before it was looked at, and where
            // its last restock is known: none still to come, or the first one surely.
            if answer >= end {
                continue;
            }
            let (k, base) = if answer < first_call {
                (0, i128::from(state.stock[p]))
            } else if first_answer < call {
                (1, first.map_or(0, |(_, v)| v.into()))
            } else {
                continue;
            };
            let most = base - must[k][sales[k].partition_point(|&(r, _)| r < call)];
            // The operations sent by its answer, itself left out.
            let sent_by = ahead.partition_point(|&(o, _)| part.calls[o] <= answer);
            let own = could[k][i + 1] - could[k][i];
            let least = base - (could[k][sent_by] - own);
            let possible = match role {
                Role::Read(v) => least <= v.into() && i128::from(v) <= most,
                Role::Sale(q) => most >= q.into(),
                Role::Refusal(q) => least < q.into(),
                Role::Maybe(_) | Role::Restock(_) => true,
            };
            if !possible {
                return false;
            }
        }
        true
    }
}
