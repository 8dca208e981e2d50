//! Linearizability of one part by the Wing-Gong search with Lowe's memoization, as
//! Porcupine runs it: the operations' calls and returns in time order on a linked
//! list; take a call whose operation the model accepts in the current state, lift it
//! (its call and its return) off the list, go on; when every call before the list's
//! first return has been tried, undo the last lift and try the next. A (set of
//! operations taken, state) seen before is not explored twice (kept as a 128-bit
//! digest, not whole: a search of 20,000 operations visits hundreds of thousands of
//! them; two different ones sharing a digest is less likely than a bit flipping in
//! memory). Linearizable when the
//! list empties; not when there is nothing left to undo.
//!
//! One reduction on top, exact: of the calls that could be taken now, equal
//! operations (the same effect in every state: two sales of one unit of a product
//! under request ids nothing else names, two refusals, two reads of one value) are
//! tried only once, the one answered first. If an order takes the later-answered one
//! first, swapping the two gives an order as legal (the states are the same, and the
//! one answered first is put earlier, the other where the first was, which its later
//! answer allows). A stock counter's history is mostly such operations in flight
//! together; without it the search tries every subset of them.
//!
//! Two more, exact too: an operation without effect (a read, a refusal, a duplicate)
//! that the model accepts now is taken now, alone: moving it from wherever an order
//! has it to here changes no state, and real time allows it (every operation answered
//! before it was sent is in the order already). And the others are tried in the order
//! of their answers, the most urgent first.

use super::model::{Op, Part, State, step};
use std::collections::{HashMap, HashSet};
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

/// One level of the search: the calls that may be taken next (one per kind of
/// operation), the next to try, and what the level was entered with.
struct Level {
    candidates: Vec<usize>,
    next: usize,
    /// The call entry lifted to reach this level, and the state before it.
    came_by: Option<(usize, State)>,
}

/// Searches `part` for an order of its operations that respects real time (an
/// operation answered before another was sent comes first) and that the model
/// accepts, for at most `budget`.
pub fn linearizable(part: &Part, budget: Duration) -> Outcome {
    run(part, budget, None).0
}

/// The longest order of `part`'s operations the search found (all of them when the
/// part is linearizable; where it stuck otherwise), as operation indices: the search
/// runs twice, the second time stopping when it first reaches the first's depth.
pub fn longest_order(part: &Part, budget: Duration) -> Vec<usize> {
    let (_, deepest, order) = run(part, budget, None);
    match order {
        Some(order) => order,
        None => run(part, budget, Some(deepest)).2.unwrap_or_default(),
    }
}

/// The search: its outcome, the most operations it put in one order, and that order
/// when it was asked to stop at `stop_at` operations or found them all.
fn run(
    part: &Part,
    budget: Duration,
    stop_at: Option<usize>,
) -> (Outcome, usize, Option<Vec<usize>>) {
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
    // The calls before the list's first return: of equal operations, the one answered
    // first (its return entry is earliest).
    let candidates = |next: &Vec<usize>| {
        let mut first: HashMap<&Op, usize> = HashMap::new();
        let mut at = next[head];
        while at != head && entries[at].call {
            let op = entries[at].op;
            first
                .entry(&part.ops[op])
                .and_modify(|kept| {
                    if return_of[op] < return_of[entries[*kept].op] {
                        *kept = at;
                    }
                })
                .or_insert(at);
            at = next[at];
        }
        let mut calls: Vec<usize> = first.into_values().collect();
        calls.sort_unstable_by_key(|&call| return_of[entries[call].op]);
        calls
    };
    // Of `calls`, an operation without effect the model accepts in `state`, alone.
    let pruned = |calls: Vec<usize>, state: &State| -> Vec<usize> {
        let free = calls.iter().copied().find(|&call| {
            let op = &part.ops[entries[call].op];
            no_effect(op) && step(state, op).is_some()
        });
        free.map_or(calls, |call| vec![call])
    };

    let started = Instant::now();
    let mut taken = vec![0u64; n.div_ceil(64).max(1)];
    let mut seen: HashSet<u128> = HashSet::new();
    let mut state = part.init.clone();
    let mut levels = vec![Level {
        candidates: pruned(candidates(&next), &state),
        next: 0,
        came_by: None,
    }];
    let mut steps = 0u64;
    let mut deepest = 0;
    let order = |levels: &[Level]| -> Vec<usize> {
        (levels.iter())
            .filter_map(|l| l.came_by.as_ref().map(|(call, _)| entries[*call].op))
            .collect()
    };
    while next[head] != head {
        steps += 1;
        if steps.is_multiple_of(4096) && started.elapsed() > budget {
            return (Outcome::Unknown, deepest, None);
        }
        let level = levels.last_mut().expect("the first level stays");
        let Some(&call) = level.candidates.get(level.next) else {
            // Every candidate tried: undo the lift that led here.
            let Some((call, before)) = levels.pop().and_then(|l| l.came_by) else {
                return (Outcome::NotLinearizable, deepest, None);
            };
            let op = entries[call].op;
            state = before;
            taken[op / 64] &= !(1 << (op % 64));
            unlift(&mut next, &mut prev, return_of[op]);
            unlift(&mut next, &mut prev, call);
            continue;
        };
        level.next += 1;
        let op = entries[call].op;
        let Some(after) = step(&state, &part.ops[op]) else {
            continue;
        };
        taken[op / 64] |= 1 << (op % 64);
        if !seen.insert(digest(&taken, &after)) {
            taken[op / 64] &= !(1 << (op % 64));
            continue;
        }
        let before = std::mem::replace(&mut state, after);
        lift(&mut next, &mut prev, call);
        lift(&mut next, &mut prev, return_of[op]);
        levels.push(Level {
            candidates: pruned(candidates(&next), &state),
            next: 0,
            came_by: Some((call, before)),
        });
        deepest = deepest.max(levels.len() - 1);
        if stop_at == Some(levels.len() - 1) {
            return (Outcome::NotLinearizable, deepest, Some(order(&levels)));
        }
    }
    (Outcome::Linearizable, deepest, Some(order(&levels)))
}

/// A 128-bit digest of a configuration: two 64-bit hashes with different salts.
fn digest(taken: &[u64], state: &State) -> u128 {
    use std::hash::{Hash, Hasher};
    let half = |salt: u64| {
        let mut hasher = std::hash::DefaultHasher::new();
        salt.hash(&mut hasher);
        taken.hash(&mut hasher);
        state.hash(&mut hasher);
        hasher.finish()
    };
    (u128::from(half(0x5eed_0001)) << 64) | u128::from(half(0x5eed_0002))
}

/// Whether `op` changes nothing in any state it is legal in.
fn no_effect(op: &Op) -> bool {
    use super::history::DeductAnswer::{Duplicate, Refused};
    match op {
        Op::Read { .. } => true,
        Op::Deduct { answer, .. } => matches!(answer, Refused | Duplicate),
        Op::Restock { .. } => false,
    }
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
