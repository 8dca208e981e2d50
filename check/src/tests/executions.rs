//! The checker against an oracle that shares nothing with it: every execution of one
//! correct stock counter tried ([`every_execution`]), reading the records alone; and
//! random correct executions with retried request ids, as a client that lost an answer
//! sends them, each one judged linearizable, and mutated, judged as the oracle judges.

use super::super::history::{DeductAnswer, Record, RestockAnswer};
use super::{BUDGET, check, deduct, init, linearizable, read};
use DeductAnswer::{Duplicate, Refused, Sold, Unknown};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Whether some execution of one correct stock counter explains `history`, every one
/// tried, from the records alone: no partition, no model, no reading of the ledger
/// but this one. Every order of the operations that real time allows; each unknown
/// outcome made a sale or nothing, wherever it could sell; an id the ledger holds sold
/// by exactly one of its attempts, before any final read of its products; one it does
/// not hold by none; a definite failure changing nothing.
pub(super) fn every_execution(history: &[Record]) -> bool {
    Executions::new(history).explained()
}

/// One operation as [`every_execution`] sees it.
struct Step {
    sent: u64,
    /// `u64::MAX`: never answered.
    answered: u64,
    what: Does,
}

enum Does {
    /// A deduction: its request id (numbered), its items (product numbered, units),
    /// its answer.
    Deduct(usize, Vec<(usize, i64)>, DeductAnswer),
    Restock(usize, i64),
    /// A read, and whether it is a final read.
    Read(usize, i64, bool),
}

struct Executions {
    steps: Vec<Step>,
    init: Vec<i64>,
    /// Per request id: held, not held, or not asked.
    ledger: Vec<Option<bool>>,
    /// Configurations already found to lead nowhere.
    dead: std::collections::HashSet<(u64, Vec<i64>, u64, u64)>,
}

impl Executions {
    fn new(history: &[Record]) -> Executions {
        let mut products: Vec<i64> = Vec::new();
        let mut init = Vec::new();
        for record in history {
            if let Record::Init { product_id, stock } = record {
                products.push(*product_id);
                init.push(*stock);
            }
        }
        let product = |p: i64| products.iter().position(|&q| q == p).expect("an init");
        let mut ids: Vec<&str> = Vec::new();
        let mut ledger: Vec<Option<bool>> = Vec::new();
        let mut steps = Vec::new();
        for record in history {
            let Some((sent, answered)) = record.interval() else {
                continue;
            };
            let answered = answered.filter(|_| !record.open()).unwrap_or(u64::MAX);
            let what = match record {
                Record::Deduct {
                    request_id,
                    items,
                    answer,
                    recorded,
                    ..
                } => {
                    let id = match ids.iter().position(|i| i == request_id) {
                        Some(id) => id,
                        None => {
                            ids.push(request_id);
                            ledger.push(None);
                            ids.len() - 1
                        }
                    };
                    if recorded.is_some() {
                        ledger[id] = ledger[id]
                            .or(*recorded)
                            .map(|h| h || *recorded == Some(true));
                    }
                    if *answer == DeductAnswer::Failed {
                        continue;
                    }
                    let mut summed: Vec<(usize, i64)> = Vec::new();
                    for item in items {
                        let p = product(item.product_id);
                        match summed.iter_mut().find(|(q, _)| *q == p) {
                            Some((_, units)) => *units += item.quantity,
                            None => summed.push((p, item.quantity)),
                        }
                    }
                    Does::Deduct(id, summed, *answer)
                }
                Record::Restock {
                    product_id, stock, ..
                } => Does::Restock(product(*product_id), *stock),
                Record::Read {
                    product_id,
                    stock: Some(stock),
                    ..
                } => Does::Read(product(*product_id), *stock, false),
                _ => continue,
            };
            steps.push(Step {
                sent,
                answered,
                what,
            });
        }
        mark_final_reads(history, &mut steps, &ids, &ledger, product);
        assert!(steps.len() <= 64 && ids.len() <= 64 && init.len() <= 64);
        Executions {
            steps,
            init,
            ledger,
            dead: Default::default(),
        }
    }

    fn explained(&mut self) -> bool {
        let stock = self.init.clone();
        self.from(0, stock, 0, 0)
    }

    /// Whether the steps not in `placed` can follow, from `stock`, the ids `sold` and
    /// the products whose final read came (`read`).
    fn from(&mut self, placed: u64, stock: Vec<i64>, sold: u64, read: u64) -> bool {
        let n = self.steps.len();
        if placed.count_ones() as usize == n {
            return (0..self.ledger.len())
                .all(|id| self.ledger[id] != Some(true) || sold & (1 << id) != 0);
        }
        let key = (placed, stock.clone(), sold, read);
        if self.dead.contains(&key) {
            return false;
        }
        for x in 0..n {
            let ready = placed & (1 << x) == 0
                && (0..n).all(|y| {
                    placed & (1 << y) != 0 || self.steps[y].answered >= self.steps[x].sent
                });
            if !ready {
                continue;
            }
            for (stock, sold, read) in self.next(x, &stock, sold, read) {
                if self.from(placed | 1 << x, stock, sold, read) {
                    return true;
                }
            }
        }
        self.dead.insert(key);
        false
    }

    /// The configurations step `x` can lead to.
    fn next(&self, x: usize, stock: &[i64], sold: u64, read: u64) -> Vec<(Vec<i64>, u64, u64)> {
        let same = (stock.to_vec(), sold, read);
        match &self.steps[x].what {
            Does::Restock(p, to) => {
                let mut after = stock.to_vec();
                after[*p] = *to;
                vec![(after, sold, read)]
            }
            Does::Read(p, shown, last) => {
                let read = if *last { read | 1 << p } else { read };
                (stock[*p] == *shown)
                    .then_some((stock.to_vec(), sold, read))
                    .into_iter()
                    .collect()
            }
            Does::Deduct(id, items, answer) => {
                let taken = sold & (1 << id) != 0;
                let enough = items.iter().all(|&(p, q)| stock[p] >= q);
                // A sale: the id not sold, enough of every item, the ledger not against
                // it, and no final read of its products yet.
                let sale = (!taken
                    && enough
                    && self.ledger[*id] != Some(false)
                    && items.iter().all(|&(p, _)| read & (1 << p) == 0))
                .then(|| {
                    let mut after = stock.to_vec();
                    for &(p, q) in items {
                        after[p] -= q;
                    }
                    (after, sold | 1 << id, read)
                });
                match answer {
                    Sold => sale.into_iter().collect(),
                    Duplicate => taken.then_some(same).into_iter().collect(),
                    Refused => (!taken && !enough).then_some(same).into_iter().collect(),
                    Unknown => sale.into_iter().chain([same]).collect(),
                    DeductAnswer::Failed => unreachable!("left out"),
                }
            }
        }
    }
}

/// Marks each read of `steps` (from `history`) that is a final read, given the request
/// ids numbered (`ids`), the ledger's word on each, and each product's number.
fn mark_final_reads(
    history: &[Record],
    steps: &mut [Step],
    ids: &[&str],
    ledger: &[Option<bool>],
    product: impl Fn(i64) -> usize,
) {
    // A read is final when every deduction (failures too) and restock of the
    // history was sent and answered before it was sent, none of its product's
    // open without the ledger's word.
    for step in steps {
        let Does::Read(p, _, ref mut last) = step.what else {
            continue;
        };
        let at = step.sent;
        *last = history.iter().all(|record| {
            let unsettled = match record {
                Record::Deduct {
                    items,
                    request_id,
                    answer,
                    ..
                } => {
                    let id = ids.iter().position(|i| i == request_id).expect("numbered");
                    *answer == Unknown
                        && ledger[id].is_none()
                        && items.iter().any(|i| product(i.product_id) == p)
                }
                Record::Restock {
                    product_id, answer, ..
                } => *answer == RestockAnswer::Unknown && product(*product_id) == p,
                _ => return true,
            };
            let (sent, answered) = record.interval().expect("an operation");
            !unsettled && sent < at && answered.is_none_or(|a| a < at)
        });
    }
}

/// A correct execution: its history, and how many of its request ids were sent more
/// than once.
struct Execution {
    history: Vec<Record>,
    retried: usize,
}

/// An operation of an [`Execution`] being made: its record (its answer filled in once
/// the counter has run) and the instant it takes effect (none: it never did).
struct Made {
    record: Record,
    point: Option<u64>,
}

/// A random correct execution of one stock counter: one to three products with a few
/// units each; one to four orders, each sent until answered (at most three attempts,
/// one request id and one set of items), where an answer lost (unknown: the request
/// took effect, or never arrived) or a failure (nothing changed) calls for a retry;
/// a few restocks and reads; half of them ending with a final read of every product.
/// Each operation takes effect at a random instant of its interval, a lost answer's
/// at any time before the final reads. A retry of an id already sold is answered
/// `duplicate`. The ledger's word, per id from the sales made, on nine in ten.
fn execution(rng: &mut StdRng) -> Execution {
    let products: i64 = rng.random_range(1..=3);
    let start: Vec<i64> = (0..products).map(|_| rng.random_range(0..=3)).collect();
    let mut made: Vec<Made> = Vec::new();
    let retried = make_orders(rng, products, &mut made);
    make_restocks(rng, products, &mut made);
    make_reads(rng, products, &mut made);
    if rng.random_bool(0.5) {
        // After every answer.
        let quiet = made
            .iter()
            .flat_map(|m| m.record.interval().and_then(|i| i.1))
            .max()
            .unwrap_or(0)
            + 1;
        for p in 0..products {
            let sent = quiet + 2 * p as u64;
            made.push(Made {
                record: read(p + 1, 0, sent, sent + 1),
                point: Some(sent),
            });
        }
    }
    // Once the last request was sent and answered, a read is a final one: the lost
    // answers' requests took effect before it, if ever (the system is quiet then, as
    // the checker trusts).
    let busy = made
        .iter()
        .filter(|m| !matches!(m.record, Record::Read { .. }))
        .flat_map(|m| {
            let (sent, answered) = m.record.interval().expect("an operation");
            [Some(sent), answered]
        })
        .flatten()
        .max()
        .unwrap_or(0);
    let first_final = made
        .iter()
        .filter_map(|m| match m.record {
            Record::Read { sent_us, .. } if sent_us > busy => Some(sent_us),
            _ => None,
        })
        .min();
    if let Some(first_final) = first_final {
        for m in made.iter_mut().filter(|m| m.record.open()) {
            m.point = m.point.map(|p| p.min(first_final - 1));
        }
    }
    let sold = run_counter(&mut made, start.clone());
    let ledger = rng.random_bool(0.9);
    let mut history: Vec<Record> = made
        .into_iter()
        .map(|mut m| {
            if let Record::Deduct {
                request_id,
                recorded,
                ..
            } = &mut m.record
            {
                *recorded = ledger.then(|| sold.contains(request_id));
            }
            m.record
        })
        .collect();
    history.sort_by_key(|r| r.interval().map(|i| i.0));
    let inits = (0..products).map(|p| init(p + 1, start[p as usize]));
    history.splice(0..0, inits);
    Execution { history, retried }
}

/// One to four orders on products 1 to `products` into `made`, each sent until
/// answered (at most three attempts, one request id and one set of items), where an
/// answer lost (unknown: the request took effect, or never arrived) or a failure
/// (nothing changed) calls for a retry. Returns how many request ids were sent more
/// than once.
fn make_orders(rng: &mut StdRng, products: i64, made: &mut Vec<Made>) -> usize {
    let mut retried = 0;
    for order in 0..rng.random_range(1..=4) {
        let product = rng.random_range(1..=products);
        let items: &[(i64, i64)] = if products > 1 && rng.random_bool(0.25) {
            &[(1, 1), (products, 1)]
        } else {
            &[(product, rng.random_range(1..=2))]
        };
        let id = format!("o{order}");
        let mut sent = rng.random_range(0..40);
        for attempt in 0..3 {
            retried += usize::from(attempt == 1);
            let answered = sent + rng.random_range(1..=8);
            let (answer, point, answered_us) = match rng.random_range(0..100) {
                0..65 => (
                    Sold,
                    Some(rng.random_range(sent..=answered)),
                    Some(answered),
                ),
                65..82 => {
                    let arrived = rng.random_bool(0.6);
                    let point = rng.random_range(sent..=answered + 20);
                    (Unknown, arrived.then_some(point), None)
                }
                _ => (DeductAnswer::Failed, None, Some(answered)),
            };
            made.push(Made {
                record: deduct(&id, items, (sent, answered_us), answer),
                point,
            });
            if answer == Sold || rng.random_bool(0.3) {
                break;
            }
            sent = answered + rng.random_range(0..=4);
        }
    }
    retried
}

/// Up to two restocks of products 1 to `products` into `made`, a few of them never
/// answered.
fn make_restocks(rng: &mut StdRng, products: i64, made: &mut Vec<Made>) {
    for _ in 0..rng.random_range(0..=2) {
        let (sent, answered, point) = interval(rng);
        let lost = rng.random_bool(0.15);
        made.push(Made {
            record: Record::Restock {
                client: 0,
                product_id: rng.random_range(1..=products),
                stock: rng.random_range(0..=3),
                sent_us: sent,
                answered_us: (!lost).then_some(answered),
                answer: if lost {
                    RestockAnswer::Unknown
                } else {
                    RestockAnswer::Done
                },
            },
            point: Some(point),
        });
    }
}

/// Up to two reads of products 1 to `products` into `made`, a few of them never
/// answered.
fn make_reads(rng: &mut StdRng, products: i64, made: &mut Vec<Made>) {
    for _ in 0..rng.random_range(0..=2) {
        let (sent, answered, point) = interval(rng);
        let mut record = read(rng.random_range(1..=products), 0, sent, answered);
        if rng.random_bool(0.1)
            && let Record::Read {
                answered_us, stock, ..
            } = &mut record
        {
            (*answered_us, *stock) = (None, None);
        }
        made.push(Made {
            record,
            point: Some(point),
        });
    }
}

/// A request's (sent, answered, the instant it takes effect).
fn interval(rng: &mut StdRng) -> (u64, u64, u64) {
    let sent = rng.random_range(0..50);
    let answered = sent + rng.random_range(1..=8);
    (sent, answered, rng.random_range(sent..=answered))
}

/// Runs one correct counter over `made`, each operation at its instant, from `stock`,
/// and fills in the answers; returns the request ids sold.
fn run_counter(made: &mut [Made], mut stock: Vec<i64>) -> Vec<String> {
    let mut order: Vec<usize> = (0..made.len())
        .filter(|&i| made[i].point.is_some())
        .collect();
    order.sort_by_key(|&i| (made[i].point, i));
    let mut sold: Vec<String> = Vec::new();
    for i in order {
        match &mut made[i].record {
            Record::Deduct {
                request_id,
                items,
                answer,
                ..
            } => {
                let enough = items
                    .iter()
                    .all(|i| stock[(i.product_id - 1) as usize] >= i.quantity);
                let said = if sold.contains(request_id) {
                    Duplicate
                } else if enough {
                    for i in items.iter() {
                        stock[(i.product_id - 1) as usize] -= i.quantity;
                    }
                    sold.push(request_id.clone());
                    Sold
                } else {
                    Refused
                };
                // A lost answer stays unknown.
                if *answer != Unknown {
                    *answer = said;
                }
            }
            Record::Restock {
                product_id,
                stock: s,
                ..
            } => stock[(*product_id - 1) as usize] = *s,
            Record::Read {
                product_id,
                stock: s @ Some(_),
                ..
            } => *s = Some(stock[(*product_id - 1) as usize]),
            _ => {}
        }
    }
    sold
}

/// One mistake put into a correct history, of the kinds a broken service makes: an
/// answer changed, a sale dropped from the history, a read moved by a unit, or the
/// ledger's word on one id turned over. Its name, or none where the history has no
/// place for any.
fn mutate(rng: &mut StdRng, history: &mut Vec<Record>) -> Option<&'static str> {
    let of = |history: &Vec<Record>, wanted: fn(&Record) -> bool| -> Vec<usize> {
        (0..history.len())
            .filter(|&i| wanted(&history[i]))
            .collect()
    };
    let answered = of(
        history,
        |r| matches!(r, Record::Deduct { answer, .. } if *answer != Unknown),
    );
    let sales = of(history, |r| {
        matches!(r, Record::Deduct { answer: Sold, .. })
    });
    let reads = of(history, |r| {
        matches!(r, Record::Read { stock: Some(_), .. })
    });
    let settled = of(history, |r| {
        matches!(
            r,
            Record::Deduct {
                recorded: Some(_),
                ..
            }
        )
    });
    let pick = |rng: &mut StdRng, from: &[usize]| from[rng.random_range(0..from.len())];
    let first = rng.random_range(0..4);
    // The kind drawn, or the next that has a place in this history.
    let kind = (0..4)
        .map(|k| (first + k) % 4)
        .find(|&k| ![&answered, &sales, &reads, &settled][k].is_empty())?;
    match kind {
        0 if !answered.is_empty() => {
            let i = pick(rng, &answered);
            if let Record::Deduct { answer, .. } = &mut history[i] {
                let others: &[DeductAnswer] = match answer {
                    Sold => &[Refused, Duplicate, DeductAnswer::Failed],
                    Refused => &[Sold],
                    Duplicate => &[Sold, Refused],
                    _ => &[Sold],
                };
                *answer = others[rng.random_range(0..others.len())];
            }
            Some("an answer changed")
        }
        1 if !sales.is_empty() => {
            let i = pick(rng, &sales);
            history.remove(i);
            Some("a sale dropped")
        }
        2 if !reads.is_empty() => {
            let i = pick(rng, &reads);
            if let Record::Read { stock: Some(s), .. } = &mut history[i] {
                *s += if rng.random_bool(0.5) { 1 } else { -1 };
            }
            Some("a read moved")
        }
        3 if !settled.is_empty() => {
            let i = pick(rng, &settled);
            if let Record::Deduct { request_id, .. } = &history[i] {
                let id = request_id.clone();
                super::flip_ledger(history, &id);
            }
            Some("the ledger turned over")
        }
        _ => None,
    }
}

/// Thousands of random correct executions with retried request ids (a retry of an id
/// already sold answered `duplicate`, the ledger's word per id), each judged
/// linearizable (observed or not) with no anomaly, as every execution tried judges it.
#[test]
fn correct_executions_with_retries_are_linearizable() {
    let mut rng = StdRng::seed_from_u64(5);
    let (total, mut retried, mut unobserved) = (3_000, 0, 0);
    for _ in 0..total {
        let Execution {
            history,
            retried: r,
        } = execution(&mut rng);
        let verdict = check(&history, BUDGET).expect("well-formed");
        let found = super::super::anomalies(&history, &verdict);
        assert!(
            linearizable(&history) && found.is_empty() && every_execution(&history),
            "a correct execution judged {verdict:?}, {found:#?}: {history:#?}"
        );
        retried += usize::from(r > 0);
        unobserved += usize::from(matches!(verdict, super::Verdict::Unobserved { .. }));
    }
    println!(
        "{total} correct executions: {retried} with retried request ids, {unobserved} unobserved"
    );
    assert!(
        retried * 4 >= total,
        "{retried} of {total} correct executions with retried request ids"
    );
}

/// Correct executions, each with one mistake put in: the checker's verdict and every
/// execution tried agree on every one, the ledger read per id and the final reads
/// included, and a named anomaly is found exactly where no execution explains it.
#[test]
fn mutated_executions_are_judged_as_every_execution_judges_them() {
    let mut rng = StdRng::seed_from_u64(6);
    let total = 3_000;
    let (mut valid, mut retried) = (0, 0);
    let mut by_kind: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    let mut classes: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut disagreements: Vec<Vec<Record>> = Vec::new();
    for _ in 0..total {
        let Execution {
            mut history,
            retried: r,
        } = execution(&mut rng);
        let kind = mutate(&mut rng, &mut history).unwrap_or("none");
        let expected = every_execution(&history);
        let verdict = check(&history, BUDGET).expect("well-formed");
        let found = super::super::anomalies(&history, &verdict);
        // A class is a proof: none where an execution explains the answers, one at
        // least where none does.
        if linearizable(&history) != expected || found.is_empty() != expected {
            disagreements.push(history);
            continue;
        }
        for anomaly in &found {
            *classes.entry(anomaly.class.name()).or_default() += 1;
        }
        retried += usize::from(r > 0);
        valid += usize::from(expected);
        let counts = by_kind.entry(kind).or_default();
        (counts.0, counts.1) = (counts.0 + 1, counts.1 + usize::from(!expected));
    }
    println!(
        "{total} mutated executions ({retried} with retried ids): {valid} still explained, \
         {} disagreements; by mistake (histories, not explained): {by_kind:?}; \
         anomalies found: {classes:?}",
        disagreements.len()
    );
    assert!(
        disagreements.is_empty(),
        "{} of {total} disagreements, the first: {:#?}",
        disagreements.len(),
        disagreements.first()
    );
}
