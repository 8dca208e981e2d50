//! Linearizability of one part by the Wing-Gong search with Lowe's memoization, as
//! Porcupine runs it: the operations' calls and returns in time order on a linked
//! list; take a call whose operation the model accepts in the current state, lift it
//! (its call and its return) off the list, go on; when every call before the list's
//! first return has been tried, undo the last lift and try the next. A (set of
//! operations taken, state) seen before is not explored twice (kept as a 128-bit
//! digest, not whole: a long history's search meets far more of them than it could
//! keep whole; two different ones sharing a digest is less likely than a bit flipping
//! in memory). Linearizable when the list empties; not when there is nothing left to
//! undo.
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
//! before it was sent is in the order already). And, in a part of more than one
//! product, of the calls that could be taken now, only those joined to the most
//! urgent operation (the one whose answer comes first) by a chain of shared products
//! or request ids. Take any legal order from here, and the operations it puts before
//! the most urgent one that touch none of what it or those joined before it touch:
//! moved, in their order, to just after it, every operation still sees the stock it
//! saw, and real time still allows it (each of them is answered no sooner than the
//! most urgent one, and each one it passes was sent no later than that answer).
//! Without it, a search that took a sale too early on one product would try every
//! interleaving of the other products' operations before coming back to it.
//!
//! The calls left are tried in the order of their answers, the most urgent first. In
//! a part of more than one product, a look ahead ([`super::bounds`]) gives up at once
//! a state that fails one of its necessary conditions.

use super::bounds::Bounds;
use super::model::{Op, Part, State, step};
use rustc_hash::FxHashSet;
use std::cell::RefCell;
use std::collections::HashMap;
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

/// No call kept for a kind (yet), in [`Timeline::kept`].
const NONE: usize = usize::MAX;

/// What the search reads of `part` and never changes: the entries in time order, each
/// operation's return entry, what each operation touches, and which are equal.
struct Timeline<'p> {
    part: &'p Part,
    entries: Vec<Entry>,
    return_of: Vec<usize>,
    touches: Vec<Vec<usize>>,
    keys: usize,
    kind: Vec<usize>,
    kept: RefCell<Vec<usize>>,
}

impl<'p> Timeline<'p> {
    /// `part`'s timeline, read once before the search starts.
    fn new(part: &'p Part) -> Timeline<'p> {
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
        // What each operation reads and writes: its products, and its request id's bit
        // (numbered after the products).
        let touches: Vec<Vec<usize>> = part
            .ops
            .iter()
            .map(|op| footprint(op, part.products.len()))
            .collect();
        let keys = part.products.len() + part.init.sold.len() * 64;
        // Equal operations share a kind (numbered once, here).
        let mut kinds: HashMap<&Op, usize> = HashMap::new();
        let kind: Vec<usize> = part
            .ops
            .iter()
            .map(|op| {
                let next = kinds.len();
                *kinds.entry(op).or_insert(next)
            })
            .collect();
        // Per kind, the call kept for it while candidates are gathered (`NONE`: none yet).
        let kept = RefCell::new(vec![NONE; kinds.len()]);
        Timeline {
            part,
            entries,
            return_of,
            touches,
            keys,
            kind,
            kept,
        }
    }

    /// The calls before the list's first return, joined to that return's operation; of
    /// equal operations, the one answered first (its return entry is earliest).
    fn candidates(&self, next: &[usize]) -> Vec<usize> {
        let (part, entries, return_of, kind) =
            (self.part, &self.entries, &self.return_of, &self.kind);
        let head = entries.len();
        let mut window = Vec::new();
        let mut at = next[head];
        while at != head && entries[at].call {
            window.push(at);
            at = next[at];
        }
        if at != head && part.products.len() > 1 {
            window = joined(&window, entries[at].op, self.keys, &self.touches, |call| {
                entries[call].op
            });
        }
        let mut kept = self.kept.borrow_mut();
        let mut calls = Vec::new();
        for at in window {
            let op = entries[at].op;
            let slot = &mut kept[kind[op]];
            if *slot == NONE {
                calls.push(at);
                *slot = at;
            } else if return_of[op] < return_of[entries[*slot].op] {
                *slot = at;
            }
        }
        for call in calls.iter_mut() {
            let k = kind[entries[*call].op];
            *call = std::mem::replace(&mut kept[k], NONE);
        }
        calls.sort_unstable_by_key(|&call| return_of[entries[call].op]);
        calls
    }

    /// Of `calls`, an operation without effect the model accepts in `state`, alone.
    fn pruned(&self, calls: Vec<usize>, state: &State) -> Vec<usize> {
        let free = calls.iter().copied().find(|&call| {
            let op = &self.part.ops[self.entries[call].op];
            no_effect(op) && step(state, op).is_some()
        });
        free.map_or(calls, |call| vec![call])
    }

    /// The operations of the calls by which `levels` were reached, in order.
    fn order(&self, levels: &[Level]) -> Vec<usize> {
        levels
            .iter()
            .filter_map(|l| l.came_by.as_ref().map(|(call, _)| self.entries[*call].op))
            .collect()
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
    let timeline = Timeline::new(part);
    let (entries, return_of) = (&timeline.entries, &timeline.return_of);
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

    let mut bounds = Bounds::new(part);
    let started = Instant::now();
    let mut taken = vec![0u64; n.div_ceil(64).max(1)];
    // The set taken, hashed as it changes: a random key per operation, XORed in and
    // out (Zobrist's way); the state is hashed whole at each step (it is small).
    let keys_of: Vec<u128> = (0..n as u64).map(random_key).collect();
    let mut taken_key: u128 = 0;
    let mut seen: FxHashSet<u128> = FxHashSet::default();
    let mut state = part.init.clone();
    let mut levels = vec![Level {
        candidates: timeline.pruned(timeline.candidates(&next), &state),
        next: 0,
        came_by: None,
    }];
    let mut steps = 0u64;
    let mut deepest = 0;
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
            taken_key ^= keys_of[op];
            bounds.untaken(op);
            unlift(&mut next, &mut prev, return_of[op]);
            unlift(&mut next, &mut prev, call);
            continue;
        };
        level.next += 1;
        let op = entries[call].op;
        let Some(after) = step(&state, &part.ops[op]) else {
            continue;
        };
        if !seen.insert(digest(taken_key ^ keys_of[op], &after)) {
            continue;
        }
        taken[op / 64] |= 1 << (op % 64);
        if part.products.len() > 1
            && !no_effect(&part.ops[op])
            && !bounds.feasible(part, op, &after, &taken)
        {
            taken[op / 64] &= !(1 << (op % 64));
            bounds.untaken(op);
            continue;
        }
        taken_key ^= keys_of[op];
        let before = std::mem::replace(&mut state, after);
        lift(&mut next, &mut prev, call);
        lift(&mut next, &mut prev, return_of[op]);
        levels.push(Level {
            candidates: timeline.pruned(timeline.candidates(&next), &state),
            next: 0,
            came_by: Some((call, before)),
        });
        deepest = deepest.max(levels.len() - 1);
        if stop_at == Some(levels.len() - 1) {
            return (
                Outcome::NotLinearizable,
                deepest,
                Some(timeline.order(&levels)),
            );
        }
    }
    (
        Outcome::Linearizable,
        deepest,
        Some(timeline.order(&levels)),
    )
}

/// The calls of `window` joined to operation `urgent` by a chain of shared keys.
fn joined(
    window: &[usize],
    urgent: usize,
    keys: usize,
    touches: &[Vec<usize>],
    op_of: impl Fn(usize) -> usize,
) -> Vec<usize> {
    let mut touched = vec![false; keys];
    for &k in &touches[urgent] {
        touched[k] = true;
    }
    let mut inside = vec![false; window.len()];
    // Until no call joins: a few passes, the window being at most the calls in flight.
    let mut grew = true;
    while grew {
        grew = false;
        for (i, &call) in window.iter().enumerate() {
            let its = &touches[op_of(call)];
            if !inside[i] && its.iter().any(|&k| touched[k]) {
                inside[i] = true;
                grew = true;
                for &k in its {
                    touched[k] = true;
                }
            }
        }
    }
    window
        .iter()
        .zip(inside)
        .filter_map(|(&call, inside)| inside.then_some(call))
        .collect()
}

/// The keys `op` reads or writes: its products (by index), and its request id's bit
/// as key `products + id`.
fn footprint(op: &Op, products: usize) -> Vec<usize> {
    match op {
        Op::Deduct { id, items, .. } => items
            .iter()
            .map(|&(p, _)| p)
            .chain(id.map(|id| products + id))
            .collect(),
        Op::Restock { product, .. } | Op::Read { product, .. } => vec![*product],
    }
}

/// A 128-bit digest of a configuration: the taken set's key XOR two 64-bit hashes of
/// the state with different salts.
fn digest(taken_key: u128, state: &State) -> u128 {
    use std::hash::{Hash, Hasher};
    let half = |salt: u64| {
        let mut hasher = std::hash::DefaultHasher::new();
        salt.hash(&mut hasher);
        state.hash(&mut hasher);
        hasher.finish()
    };
    taken_key ^ ((u128::from(half(0x5eed_0001)) << 64) | u128::from(half(0x5eed_0002)))
}

/// Operation `i`'s random key (SplitMix64, twice): the same in every run.
fn random_key(i: u64) -> u128 {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let a = mix(i
        .wrapping_mul(2)
        .wrapping_add(1)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let b = mix(i
        .wrapping_mul(2)
        .wrapping_add(2)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15));
    (u128::from(a) << 64) | u128::from(b)
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
