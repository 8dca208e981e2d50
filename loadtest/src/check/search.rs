//! Linearizability of one part by the Wing-Gong search with Lowe's memoization, as
//! Porcupine runs it: the operations' calls and returns in time order on a linked
//! list; take the first call whose operation the model accepts in the current state,
//! lift it (its call and its return) off the list, go on; reaching a return whose
//! operation is still on the list, undo the last lift and try the next call. A
//! (set of operations taken, state) seen before is not explored twice. Linearizable
//! when the list empties; not when there is nothing left to undo.

use super::model::{Part, State, step};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// What the search found for one part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Linearizable,
    NotLinearizable,
    /// The budget ran out first.
    Unknown,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    op: usize,
    call: bool,
}

/// Searches `part` for an order of its operations that respects real time (an
/// operation answered before another was sent comes first) and that the model
/// accepts, for at most `budget`.
pub fn linearizable(part: &Part, budget: Duration) -> Outcome {
    let n = part.ops.len();
    // Entries in time order; at the same instant calls first (overlapping, not before).
    let mut entries: Vec<(u64, u8, Entry)> = (0..n)
        .flat_map(|op| {
            [
                (part.calls[op], 0, Entry { op, call: true }),
                (part.returns[op], 1, Entry { op, call: false }),
            ]
        })
        .collect();
    entries.sort_by_key(|&(time, order, entry)| (time, order, entry.op));
    let entries: Vec<Entry> = entries.into_iter().map(|(_, _, e)| e).collect();
    let mut return_of = vec![0; n];
    for (i, e) in entries.iter().enumerate() {
        if !e.call {
            return_of[e.op] = i;
        }
    }
    // A doubly linked list over entry indices; `head` (= len) is the sentinel.
    let head = entries.len();
    let mut next: Vec<usize> = (1..=head).chain([0]).collect();
    let mut prev: Vec<usize> = [head].into_iter().chain(0..head).collect();
    let lift = |next: &mut Vec<usize>, prev: &mut Vec<usize>, i: usize| {
        next[prev[i]] = next[i];
        prev[next[i]] = prev[i];
    };
    let unlift = |next: &mut Vec<usize>, prev: &mut Vec<usize>, i: usize| {
        next[prev[i]] = i;
        prev[next[i]] = i;
    };

    let started = Instant::now();
    let mut taken = vec![0u64; n.div_ceil(64).max(1)];
    let mut seen: HashSet<(Vec<u64>, State)> = HashSet::new();
    let mut undo: Vec<(usize, State)> = Vec::new();
    let mut state = part.init.clone();
    let mut at = next[head];
    let mut steps = 0u64;
    while next[head] != head {
        steps += 1;
        if steps.is_multiple_of(4096) && started.elapsed() > budget {
            return Outcome::Unknown;
        }
        let entry = entries[at];
        if entry.call {
            if let Some(after) = step(&state, &part.ops[entry.op]) {
                taken[entry.op / 64] |= 1 << (entry.op % 64);
                if seen.insert((taken.clone(), after.clone())) {
                    undo.push((at, std::mem::replace(&mut state, after)));
                    lift(&mut next, &mut prev, at);
                    lift(&mut next, &mut prev, return_of[entry.op]);
                    at = next[head];
                    continue;
                }
                taken[entry.op / 64] &= !(1 << (entry.op % 64));
            }
            at = next[at];
        } else {
            // An operation answered before any order could take it: undo the last.
            let Some((call, before)) = undo.pop() else {
                return Outcome::NotLinearizable;
            };
            let op = entries[call].op;
            state = before;
            taken[op / 64] &= !(1 << (op % 64));
            unlift(&mut next, &mut prev, return_of[op]);
            unlift(&mut next, &mut prev, call);
            at = next[call];
        }
    }
    Outcome::Linearizable
}

/// The exact test for a part of one product with deductions only (no restock, no read,
/// no unknown outcome, no refusal under a request id that also sold), in O(n log n):
/// each sale taken at its request, each refusal and duplicate at its answer. That
/// order respects real time, and it is the most lenient there is: whether the sales
/// fit does not depend on their order, a refusal is legal with the most sales before
/// it, a duplicate with its sale before it. `None`: the part is not of that kind.
pub fn quick(part: &Part) -> Option<bool> {
    use super::history::DeductAnswer::{Duplicate, Refused, Sold};
    use super::model::Op;
    if part.products.len() != 1 {
        return None;
    }
    let (mut at, mut sold, mut refused) = (Vec::new(), Vec::new(), Vec::new());
    for (i, op) in part.ops.iter().enumerate() {
        let Op::Deduct { id, answer, .. } = op else {
            return None;
        };
        match answer {
            Sold => sold.push(*id),
            Refused => refused.push(*id),
            Duplicate => {}
            _ => return None,
        }
        // A sale as early as it can be, a refusal or duplicate as late (sales first
        // at one instant).
        let sale = *answer == Sold;
        let when = if sale { part.calls[i] } else { part.returns[i] };
        at.push((when, u8::from(!sale), i));
    }
    let sold: std::collections::HashSet<usize> = sold.into_iter().flatten().collect();
    if refused.iter().flatten().any(|id| sold.contains(id)) {
        return None;
    }
    at.sort_unstable();
    let mut state = part.init.clone();
    for (_, _, i) in at {
        match step(&state, &part.ops[i]) {
            Some(after) => state = after,
            None => return Some(false),
        }
    }
    Some(true)
}
