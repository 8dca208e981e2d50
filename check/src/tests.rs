//! The checker checked: hand-written histories, each valid or not for a reason a reader
//! can see, and the search against a brute force (every order) on random histories;
//! [`executions`] holds an oracle that shares no code with the model, and random
//! correct executions with retried request ids.

use super::BUDGET;
use super::history::{DeductAnswer, Item, Record, RestockAnswer};
use super::model::{Part, partition, step};
use super::{Verdict, check};
use executions::every_execution;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod executions;

fn init(product_id: i64, stock: i64) -> Record {
    Record::Init { product_id, stock }
}

fn deduct(id: &str, items: &[(i64, i64)], at: (u64, Option<u64>), answer: DeductAnswer) -> Record {
    Record::Deduct {
        client: 0,
        request_id: id.into(),
        items: items
            .iter()
            .map(|&(product_id, quantity)| Item {
                product_id,
                quantity,
            })
            .collect(),
        sent_us: at.0,
        answered_us: at.1,
        answer,
        recorded: None,
    }
}

/// An order of one unit of product 1 whose outcome is unknown, settled by the ledger
/// (`recorded`) or not.
fn unknown(id: &str, sent: u64, settled: Option<bool>) -> Record {
    let mut record = deduct(id, &[(1, 1)], (sent, None), Unknown);
    if let Record::Deduct { recorded, .. } = &mut record {
        *recorded = settled;
    }
    record
}

fn sale(id: &str, sent: u64, answered: u64, answer: DeductAnswer) -> Record {
    deduct(id, &[(1, 1)], (sent, Some(answered)), answer)
}

fn restock(stock: i64, sent: u64, answered: u64) -> Record {
    Record::Restock {
        client: 0,
        product_id: 1,
        stock,
        sent_us: sent,
        answered_us: Some(answered),
        answer: RestockAnswer::Done,
    }
}

fn read(product_id: i64, stock: i64, sent: u64, answered: u64) -> Record {
    Record::Read {
        client: 0,
        product_id,
        sent_us: sent,
        answered_us: Some(answered),
        stock: Some(stock),
    }
}

/// Whether `history` is judged linearizable (observed or not).
fn linearizable(history: &[Record]) -> bool {
    match check(history, BUDGET).expect("a well-formed history") {
        Verdict::Linearizable | Verdict::Unobserved { .. } => true,
        Verdict::NotLinearizable { .. } => false,
        Verdict::Unknown { .. } => panic!("the budget ran out on {history:?}"),
    }
}

use DeductAnswer::{Duplicate, Failed, Refused, Sold, Unknown};

/// Request `a` sold on product 1, then sent again for product 2 and answered `second`.
fn one_id_on_two_products(second: DeductAnswer) -> Vec<Record> {
    let again = deduct("a", &[(2, 1)], (2, Some(3)), second);
    vec![init(1, 5), init(2, 5), sale("a", 0, 1, Sold), again]
}

/// `history` (on product 1) joined to a product 2 by a refusal of both, which changes
/// nothing: the part has two products, as the search's look ahead wants.
fn joined_by_a_refusal(mut history: Vec<Record>) -> Vec<Record> {
    history.insert(0, init(2, 0));
    history.push(deduct("z", &[(1, 9), (2, 1)], (30, Some(31)), Refused));
    history
}

/// A hand-written history: what it shows, whether it is linearizable, its records.
type Case = (&'static str, bool, Vec<Record>);

#[test]
fn the_corpus_is_judged_as_written() {
    let cases = [
        sales_refusals_and_unknown_outcomes(),
        attempts_of_one_request_id(),
        request_ids_answered_twice(),
        reads_and_restocks(),
        orders_of_several_products(),
    ];
    for (name, valid, history) in cases.into_iter().flatten() {
        assert_eq!(linearizable(&history), valid, "{name}");
        assert_eq!(every_execution(&history), valid, "{name} (every execution)");
    }
}

/// Sales and refusals of one product, one after the other or overlapping, and unknown
/// outcomes taken or not, some settled by the ledger's word.
fn sales_refusals_and_unknown_outcomes() -> Vec<Case> {
    vec![
        (
            "sold until sold out, then refused",
            true,
            vec![
                init(1, 2),
                sale("a", 0, 1, Sold),
                sale("b", 2, 3, Sold),
                sale("c", 4, 5, Refused),
            ],
        ),
        (
            "oversold: two sales of the one unit, one after the other",
            false,
            vec![init(1, 1), sale("a", 0, 1, Sold), sale("b", 2, 3, Sold)],
        ),
        (
            "false sold-out: refused, answered before the only sale was sent",
            false,
            vec![init(1, 1), sale("a", 0, 1, Refused), sale("b", 2, 3, Sold)],
        ),
        (
            "concurrent: the refusal overlaps the sale, which must be put first",
            true,
            vec![init(1, 1), sale("a", 0, 10, Sold), sale("b", 1, 5, Refused)],
        ),
        (
            "an unknown outcome taken: it explains the refusal after it",
            true,
            vec![
                init(1, 1),
                deduct("a", &[(1, 1)], (0, None), Unknown),
                sale("b", 5, 6, Refused),
            ],
        ),
        (
            "an unknown outcome not taken: the sale after it had the unit",
            true,
            vec![
                init(1, 1),
                deduct("a", &[(1, 1)], (0, None), Unknown),
                sale("b", 5, 6, Sold),
            ],
        ),
        (
            "an unknown outcome the ledger holds: it took the unit, the sale after it oversold",
            false,
            vec![
                init(1, 1),
                unknown("a", 0, Some(true)),
                sale("b", 5, 6, Sold),
            ],
        ),
        (
            "an unknown outcome the ledger holds explains the refusal after it",
            true,
            vec![
                init(1, 1),
                unknown("a", 0, Some(true)),
                sale("b", 5, 6, Refused),
            ],
        ),
        (
            "an unknown outcome the ledger does not hold cannot explain a refusal",
            false,
            vec![
                init(1, 1),
                unknown("a", 0, Some(false)),
                sale("b", 5, 6, Refused),
            ],
        ),
    ]
}

/// Several attempts of one request id (retries, failures, orders with different
/// items), settled by the ledger's word on the id.
fn attempts_of_one_request_id() -> Vec<Case> {
    vec![
        (
            "a retry sold what its first attempt never did: the ledger holds the id once",
            true,
            vec![
                init(1, 1),
                unknown("a", 10, Some(true)),
                settled(sale("a", 20, 30, Sold), Some(true)),
            ],
        ),
        (
            "a retry answered duplicate: its first attempt, unanswered, sold",
            true,
            vec![
                init(1, 1),
                unknown("a", 10, Some(true)),
                settled(sale("a", 20, 30, Duplicate), Some(true)),
                sale("b", 40, 41, Refused),
            ],
        ),
        (
            "a duplicate answered before any attempt of its id was sent",
            false,
            vec![
                init(1, 1),
                settled(sale("a", 0, 5, Duplicate), Some(true)),
                unknown("a", 10, Some(true)),
            ],
        ),
        (
            "two unknown attempts of one id, recorded: one of them took the unit",
            true,
            vec![
                init(1, 1),
                unknown("a", 10, Some(true)),
                unknown("a", 20, Some(true)),
                sale("b", 40, 41, Refused),
            ],
        ),
        (
            "two unknown attempts of one id, recorded: the unit taken once, not twice",
            true,
            vec![
                init(1, 2),
                unknown("a", 10, Some(true)),
                unknown("a", 20, Some(true)),
                sale("b", 40, 41, Sold),
            ],
        ),
        (
            "two unknown attempts of one id, not recorded, then a refusal",
            false,
            vec![
                init(1, 1),
                unknown("a", 10, Some(false)),
                unknown("a", 20, Some(false)),
                sale("b", 40, 41, Refused),
            ],
        ),
        (
            "a failure, then its retry sold: the failure is not failed but recorded",
            true,
            vec![
                init(1, 1),
                settled(deduct("a", &[(1, 1)], (0, Some(5)), Failed), Some(true)),
                settled(sale("a", 10, 15, Sold), Some(true)),
                sale("b", 20, 21, Refused),
            ],
        ),
        (
            "the ledger holds an id whose only attempt was refused",
            false,
            vec![init(1, 1), settled(sale("a", 0, 5, Refused), Some(true))],
        ),
        (
            "an id the ledger holds, sold by one of two orders with different items",
            true,
            vec![
                init(1, 1),
                init(2, 0),
                settled(deduct("a", &[(1, 1)], (10, None), Unknown), Some(true)),
                settled(deduct("a", &[(2, 1)], (20, None), Unknown), Some(true)),
                sale("b", 40, 41, Refused),
            ],
        ),
        (
            "an id the ledger holds, and neither order of it could have sold",
            false,
            vec![
                init(1, 0),
                init(2, 0),
                settled(deduct("a", &[(1, 1)], (10, None), Unknown), Some(true)),
                settled(deduct("a", &[(2, 1)], (20, None), Unknown), Some(true)),
            ],
        ),
    ]
}

/// One request id answered twice: a retry given the stored sale, sold twice, on two
/// products; and a duplicate with no original.
fn request_ids_answered_twice() -> Vec<Case> {
    vec![
        (
            "a retry answered with the stored sale",
            true,
            vec![
                init(1, 5),
                sale("a", 0, 1, Sold),
                sale("a", 2, 3, Duplicate),
            ],
        ),
        (
            "double sale: one request id sold twice",
            false,
            vec![init(1, 5), sale("a", 0, 1, Sold), sale("a", 2, 3, Sold)],
        ),
        (
            "one request id on two products: the second answer is its stored sale",
            true,
            one_id_on_two_products(Duplicate),
        ),
        (
            "one request id sold on two products",
            false,
            one_id_on_two_products(Sold),
        ),
        (
            "a duplicate with no original",
            false,
            vec![init(1, 5), sale("a", 0, 1, Duplicate)],
        ),
    ]
}

/// Reads, final or not, after a sale the ledger holds; a restock mid-load; a stale
/// read.
fn reads_and_restocks() -> Vec<Case> {
    vec![
        (
            "a final read: the sale the ledger holds came before it",
            false,
            vec![init(1, 2), unknown("a", 10, Some(true)), read(1, 2, 20, 21)],
        ),
        (
            "a read that is not final: the sale the ledger holds may come after it",
            true,
            vec![
                init(1, 2),
                unknown("a", 10, Some(true)),
                unknown("b", 10, None),
                read(1, 2, 20, 21),
            ],
        ),
        (
            "a restock mid-load: refused before it, sold after it",
            true,
            vec![
                init(1, 0),
                sale("a", 0, 1, Refused),
                restock(2, 2, 3),
                sale("b", 4, 5, Sold),
                sale("c", 6, 7, Sold),
                sale("d", 8, 9, Refused),
            ],
        ),
        (
            "stale read: the stock before a sale, read after it",
            false,
            vec![init(1, 2), sale("a", 0, 1, Sold), read(1, 2, 2, 3)],
        ),
    ]
}

/// Multi-item orders (one product named twice among them), and parts of two products
/// where the search's look ahead decides, its sums near the largest integer too.
fn orders_of_several_products() -> Vec<Case> {
    vec![
        (
            "a multi-item order across two products, then a read and a refusal",
            true,
            vec![
                init(1, 1),
                init(2, 1),
                deduct("a", &[(1, 1), (2, 1)], (0, Some(1)), Sold),
                read(2, 0, 2, 3),
                sale("b", 4, 5, Refused),
            ],
        ),
        (
            "one product named twice in an order: two units asked of one",
            false,
            vec![
                init(1, 1),
                deduct("a", &[(1, 1), (1, 1)], (0, Some(1)), Sold),
            ],
        ),
        (
            "a multi-item order sold while one of its products had none",
            false,
            vec![
                init(1, 1),
                init(2, 0),
                deduct("a", &[(1, 1), (2, 1)], (0, Some(1)), Sold),
            ],
        ),
        (
            "two products: sales sent as a restock was answered may come before it",
            true,
            joined_by_a_refusal(vec![
                init(1, 2),
                restock(1, 0, 10),
                sale("a", 10, 20, Sold),
                sale("b", 10, 20, Sold),
                read(1, 1, 21, 22),
            ]),
        ),
        (
            "two products: a sale answered as a restock was sent may come after it",
            true,
            joined_by_a_refusal(vec![
                init(1, 6),
                sale("a", 0, 5, Sold),
                sale("b", 0, 10, Sold),
                restock(2, 10, 20),
                read(1, 1, 21, 22),
            ]),
        ),
        (
            "two products: a sale on the wrong side of a restock, seen far later",
            false,
            joined_by_a_refusal(vec![
                init(1, 6),
                sale("a", 0, 5, Sold),
                restock(2, 10, 20),
                sale("b", 0, 9, Sold),
                read(1, 1, 21, 22),
            ]),
        ),
        (
            "quantities near the largest integer: the look ahead's sums do not overflow",
            true,
            vec![
                init(1, 10),
                init(2, 1),
                deduct("s", &[(1, 1), (2, 1)], (0, Some(1)), Sold),
                deduct("x", &[(1, i64::MAX)], (2, None), Unknown),
                deduct("y", &[(1, i64::MAX)], (2, None), Unknown),
                read(1, 9, 2, 3),
            ],
        ),
    ]
}

#[test]
fn a_history_is_read_from_json_lines() {
    let text = r#"
{"type":"init","product_id":1,"stock":1}
{"type":"deduct","client":0,"request_id":"a","items":[{"product_id":1,"quantity":1}],"sent_us":0,"answered_us":5,"answer":"sold"}
{"type":"deduct","client":1,"request_id":"b","items":[{"product_id":1,"quantity":1}],"sent_us":6,"answered_us":9,"answer":"refused"}
"#;
    let history = super::history::parse(text).expect("parses");
    assert_eq!(history.len(), 3);
    assert!(linearizable(&history));
    let bad = super::history::parse("{\"type\":\"init\"}\n").unwrap_err();
    assert!(bad.starts_with("line 1:"), "{bad}");
}

/// Whether some order of every part's operations respects real time and is accepted
/// by the model: every order tried.
fn brute_force(history: &[Record]) -> bool {
    partition(history)
        .expect("a well-formed history")
        .iter()
        .all(|part| {
            let mut placed = vec![false; part.ops.len()];
            orders(part, &mut placed, &part.init)
        })
}

fn orders(part: &Part, placed: &mut [bool], state: &super::model::State) -> bool {
    if placed.iter().all(|&p| p) {
        return true;
    }
    for op in 0..part.ops.len() {
        // Next only if every operation answered before it was sent is placed.
        let ready = !placed[op]
            && (0..part.ops.len()).all(|o| placed[o] || part.returns[o] >= part.calls[op]);
        if !ready {
            continue;
        }
        if let Some(after) = step(state, &part.ops[op]) {
            placed[op] = true;
            let found = orders(part, placed, &after);
            placed[op] = false;
            if found {
                return true;
            }
        }
    }
    false
}

/// `ops` with the ledger's word on request id `id` turned over, on every attempt.
fn flip_ledger(ops: &mut [Record], id: &str) {
    for op in ops {
        if let Record::Deduct {
            request_id,
            recorded: Some(held),
            ..
        } = op
            && request_id == id
        {
            *held = !*held;
        }
    }
}

/// Whether the search finds an order for every part of `history` (the ledger's
/// contradictions aside, which [`check`] adds).
fn searched(history: &[Record]) -> bool {
    partition(history)
        .expect("a well-formed history")
        .iter()
        .all(|part| {
            super::search::linearizable(part, BUDGET) == super::search::Outcome::Linearizable
        })
}

/// A random history of at most 8 operations on one to three products: a real execution
/// (each operation taking effect at a random instant of its interval), and whether one
/// answer was changed afterwards (if not, it must be linearizable).
fn random_history(rng: &mut StdRng) -> (Vec<Record>, bool) {
    let products: i64 = rng.random_range(1..=3);
    let stock: Vec<i64> = (0..products).map(|_| rng.random_range(0..=3)).collect();
    let mut history: Vec<Record> = (0..products)
        .map(|p| init(p + 1, stock[p as usize]))
        .collect();
    let mut ops = random_operations(rng, products);
    ops.sort_by_key(|(point, _)| *point);
    let sold = fill_in_answers(rng, &mut ops, stock);
    let mut ops: Vec<Record> = ops.into_iter().map(|(_, r)| r).collect();
    // The ledger read per request id: an id one of whose unknown outcomes was chosen
    // to be settled has its word on every attempt.
    let settled: Vec<String> = ops
        .iter()
        .filter_map(|r| match r {
            Record::Deduct {
                request_id,
                recorded: Some(_),
                ..
            } => Some(request_id.clone()),
            _ => None,
        })
        .collect();
    for op in &mut ops {
        if let Record::Deduct {
            request_id,
            recorded,
            ..
        } = op
        {
            *recorded = settled
                .contains(request_id)
                .then(|| sold.contains(request_id));
        }
    }
    let changed = rng.random_bool(0.5);
    if changed {
        change_one(rng, &mut ops);
    }
    history.extend(ops);
    (history, changed)
}

/// One to eight random operations on products 1 to `products`: deductions (of one or
/// two products, some never answered), restocks and reads, each with a random instant
/// of its interval, where it takes effect; their answers are still to fill in.
fn random_operations(rng: &mut StdRng, products: i64) -> Vec<(u64, Record)> {
    let n = rng.random_range(1..=8);
    // (the instant it takes effect, the operation with its answer still to fill in)
    let mut ops: Vec<(u64, Record)> = Vec::new();
    for _ in 0..n {
        let sent = rng.random_range(0..20);
        let answered = sent + rng.random_range(0..10);
        let point = rng.random_range(sent..=answered);
        let product = rng.random_range(1..=products);
        let record = match rng.random_range(0..100) {
            0..60 => {
                let id = ["a", "b", "c", "d"][rng.random_range(0..4)];
                let mut items = vec![(product, rng.random_range(1..=2))];
                if products > 1 && rng.random_bool(0.3) {
                    let other = product % products + 1;
                    items = vec![(product.min(other), 1), (product.max(other), 1)];
                }
                let open = rng.random_bool(0.1);
                deduct(id, &items, (sent, (!open).then_some(answered)), Unknown)
            }
            60..75 => Record::Restock {
                client: 0,
                product_id: product,
                stock: rng.random_range(0..=3),
                sent_us: sent,
                answered_us: Some(answered),
                answer: RestockAnswer::Done,
            },
            _ => read(product, 0, sent, answered),
        };
        ops.push((point, record));
    }
    ops
}

/// Fills in the answers of `ops`, taken in order, as one correct counter starting from
/// `stock` gives them: a deduction never answered taken or not at random (and settled
/// by the ledger or not), a restock left without an answer now and then. Returns the
/// request ids sold.
fn fill_in_answers(
    rng: &mut StdRng,
    ops: &mut [(u64, Record)],
    mut stock: Vec<i64>,
) -> Vec<String> {
    let mut sold: Vec<String> = Vec::new();
    for (_, record) in ops {
        match record {
            Record::Deduct {
                request_id,
                items,
                answered_us,
                answer,
                recorded,
                ..
            } => {
                let enough = items
                    .iter()
                    .all(|i| stock[(i.product_id - 1) as usize] >= i.quantity);
                let taken = answered_us.is_some() || rng.random_bool(0.5);
                *answer = if sold.contains(request_id) {
                    Duplicate
                } else if enough && taken {
                    for i in items.iter() {
                        stock[(i.product_id - 1) as usize] -= i.quantity;
                    }
                    sold.push(request_id.clone());
                    Sold
                } else {
                    Refused
                };
                if answered_us.is_none() {
                    // Half the unknown outcomes settled by the ledger (below).
                    *recorded = rng.random_bool(0.5).then_some(false);
                    *answer = Unknown;
                }
            }
            Record::Restock {
                product_id,
                stock: s,
                answered_us,
                answer,
                ..
            } => {
                stock[(*product_id - 1) as usize] = *s;
                // A fifth of the restocks with no answer: an open end.
                if rng.random_bool(0.2) {
                    *answered_us = None;
                    *answer = RestockAnswer::Unknown;
                }
            }
            Record::Read {
                product_id,
                stock: s,
                ..
            } => *s = Some(stock[(*product_id - 1) as usize]),
            Record::Init { .. } | Record::Hold { .. } => {}
        }
    }
    sold
}

/// One of `ops` picked at random and, where it is one that can change, changed: the
/// ledger's word on a settled unknown outcome's id turned over, a deduction's answer
/// swapped, or a read moved by a unit.
fn change_one(rng: &mut StdRng, ops: &mut [Record]) {
    let i = rng.random_range(0..ops.len());
    match &mut ops[i] {
        Record::Deduct {
            answer: Unknown,
            recorded: Some(_),
            request_id,
            ..
        } => {
            let id = request_id.clone();
            flip_ledger(ops, &id);
        }
        Record::Deduct { answer, .. } => {
            *answer = match *answer {
                Sold => Refused,
                Refused => Sold,
                Duplicate => Sold,
                other => other,
            }
        }
        Record::Read { stock: Some(s), .. } => *s += if rng.random_bool(0.5) { 1 } else { -1 },
        _ => {}
    }
}

/// Where the O(n log n) test applies, it agrees with the search: on every part of the
/// random histories that holds only deductions of one product.
#[test]
fn the_quick_test_agrees_with_the_search() {
    let mut rng = StdRng::seed_from_u64(11);
    let (mut applied, mut failing) = (0, 0);
    for _ in 0..5_000 {
        let (history, _) = random_history(&mut rng);
        for part in partition(&history).expect("well-formed") {
            if let Some(quick) = super::search::quick(&part) {
                let searched = super::search::linearizable(&part, BUDGET);
                assert_eq!(
                    quick,
                    searched == super::search::Outcome::Linearizable,
                    "{part:#?}"
                );
                applied += 1;
                failing += usize::from(!quick);
            }
        }
    }
    println!("the quick test applied to {applied} parts, {failing} of them not linearizable");
    // (A tenth, not more: the three-product histories give the test more parts of
    // one product that hold only sales, most of them valid.)
    assert!(
        applied >= 1_000 && failing * 10 >= applied,
        "{applied} parts, {failing} failing"
    );
}

/// Thousands of random histories, the search and the brute force agreeing on every one,
/// every real execution left as it was judged linearizable (an oracle that shares
/// nothing with the model), a third or more valid and a third or more not.
#[test]
fn the_search_agrees_with_every_order_tried() {
    let mut rng = StdRng::seed_from_u64(7);
    let (total, mut valid, mut several) = (5_000, 0, 0);
    for _ in 0..total {
        let (history, changed) = random_history(&mut rng);
        let expected = brute_force(&history);
        // Parts of several products the O(n log n) test cannot take: where the search
        // joins operations to the most urgent one and looks ahead.
        several += partition(&history)
            .expect("well-formed")
            .iter()
            .filter(|part| part.products.len() > 1)
            .count();
        assert!(
            changed || expected,
            "a real execution judged wrong: {history:#?}"
        );
        assert_eq!(searched(&history), expected, "{history:#?}");
        valid += usize::from(expected);
    }
    let invalid = total - valid;
    println!(
        "{total} random histories: {valid} linearizable, {invalid} not; \
         {several} parts of several products"
    );
    assert!(
        valid * 3 >= total && invalid * 3 >= total && several * 5 >= total,
        "{valid} valid, {invalid} not, {several} parts of several products"
    );
}

/// `records` with the ledger's word on each deduction set to `recorded`.
fn settled(mut record: Record, settled: Option<bool>) -> Record {
    if let Record::Deduct { recorded, .. } = &mut record {
        *recorded = settled;
    }
    record
}

/// Each class caught in a history of its own, by the operations that prove it (indices
/// into the history), and nothing else found there.
#[test]
fn each_class_is_caught_in_its_case() {
    for (name, class, ops, history) in class_cases() {
        let verdict = check(&history, BUDGET).expect("well-formed");
        let found = super::anomalies(&history, &verdict);
        assert_eq!(found.len(), 1, "{name}: {found:#?}");
        assert_eq!(
            (found[0].class, &found[0].ops),
            (class, &ops),
            "{name}: {found:#?}"
        );
    }
}

/// The cases of [`each_class_is_caught_in_its_case`]: what each shows, its class, the
/// operations that prove it (indices into the history), and its history.
fn class_cases() -> Vec<(&'static str, super::classes::Class, Vec<usize>, Vec<Record>)> {
    use super::classes::Class;
    vec![
        (
            "oversold: two sales of the one unit",
            Class::Oversold,
            vec![1, 2],
            vec![init(1, 1), sale("a", 0, 1, Sold), sale("b", 2, 3, Sold)],
        ),
        (
            "oversold after a restock",
            Class::Oversold,
            vec![2, 3, 4],
            vec![
                init(1, 5),
                sale("a", 0, 1, Sold),
                restock(1, 2, 3),
                sale("b", 4, 5, Sold),
                sale("c", 6, 7, Sold),
            ],
        ),
        (
            "false sold-out: refused before the only unit was sold",
            Class::FalseSoldOut,
            vec![1],
            vec![init(1, 1), sale("a", 0, 1, Refused), sale("b", 2, 3, Sold)],
        ),
        (
            "false sold-out after a restock, whatever overlapped it",
            Class::FalseSoldOut,
            vec![3, 4],
            vec![
                init(1, 0),
                sale("a", 0, 1, Refused),
                sale("b", 2, 9, Sold),
                restock(2, 3, 4),
                sale("c", 5, 6, Refused),
            ],
        ),
        (
            "stale read: the stock before a sale, read after it, sales still to come",
            Class::StaleRead,
            vec![2],
            vec![
                init(1, 3),
                sale("a", 0, 1, Sold),
                read(1, 3, 2, 3),
                sale("b", 4, 5, Sold),
            ],
        ),
        (
            "lost update: the final read shows units answered sold",
            Class::LostUpdate,
            vec![4, 1, 2, 3],
            erased_sales(),
        ),
        (
            "double sale: one request id sold twice",
            Class::DoubleSale,
            vec![1, 2],
            vec![init(1, 5), sale("a", 0, 1, Sold), sale("a", 2, 3, Sold)],
        ),
        (
            "double sale: a retry's stored answer with no sale of it",
            Class::DoubleSale,
            vec![1],
            vec![init(1, 5), sale("a", 0, 1, Duplicate)],
        ),
        (
            "acknowledged but not recorded",
            Class::AcknowledgedNotRecorded,
            vec![1],
            vec![init(1, 5), settled(sale("a", 0, 1, Sold), Some(false))],
        ),
        (
            "failed but recorded",
            Class::FailedButRecorded,
            vec![1],
            vec![
                init(1, 5),
                settled(
                    deduct("a", &[(1, 1)], (0, Some(1)), DeductAnswer::Failed),
                    Some(true),
                ),
            ],
        ),
        (
            "not linearizable: an order of two products refused while both had units",
            Class::NotLinearizable,
            vec![],
            vec![
                init(1, 1),
                init(2, 1),
                deduct("a", &[(1, 1), (2, 1)], (0, Some(1)), Refused),
                sale("b", 2, 3, Sold),
            ],
        ),
    ]
}

/// Stock 3, three sales answered sold and in the ledger, then a final read of 2.
fn erased_sales() -> Vec<Record> {
    vec![
        init(1, 3),
        settled(sale("a", 0, 1, Sold), Some(true)),
        settled(sale("b", 2, 3, Sold), Some(true)),
        settled(sale("c", 4, 5, Sold), Some(true)),
        read(1, 2, 6, 7),
    ]
}

/// The classes found in `history`, with its verdict.
fn judged(history: &[Record]) -> (Verdict, Vec<super::classes::Anomaly>) {
    let verdict = check(history, BUDGET).expect("well-formed");
    let found = super::anomalies(history, &verdict);
    (verdict, found)
}

/// Sales erased from the stock, seen only by the final read: not linearizable, and a
/// lost update explains it, in words; the same read made while sales were still to
/// come is a stale read.
#[test]
fn a_final_read_showing_erased_sales_is_a_lost_update() {
    use super::classes::Class;
    let (verdict, found) = judged(&erased_sales());
    assert_eq!(
        verdict,
        Verdict::NotLinearizable {
            products: vec![vec![1]]
        }
    );
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].class, Class::LostUpdate);
    assert_eq!(
        found[0].says,
        "the final read of product 1 shows 2 units; the answers leave at most 0: \
         2 sold units erased from the stock"
    );
    let mut mid_run = erased_sales();
    mid_run.push(sale("d", 8, 9, Refused));
    let (verdict, found) = judged(&mid_run);
    assert!(matches!(verdict, Verdict::NotLinearizable { .. }));
    let classes: Vec<Class> = found.iter().map(|a| a.class).collect();
    assert_eq!(classes, [Class::StaleRead], "{found:#?}");
}

/// Answers the ledger contradicts fail the verdict, with nothing else wrong: a sale it
/// does not hold, a failure of an id it holds that no other attempt could have sold.
#[test]
fn answers_the_ledger_contradicts_fail_the_verdict() {
    use super::classes::Class;
    let failed = deduct("a", &[(1, 1)], (0, Some(1)), Failed);
    for (history, class) in [
        (
            vec![init(1, 5), settled(sale("a", 0, 1, Sold), Some(false))],
            Class::AcknowledgedNotRecorded,
        ),
        (
            vec![init(1, 5), settled(failed, Some(true))],
            Class::FailedButRecorded,
        ),
    ] {
        let (verdict, found) = judged(&history);
        assert_eq!(
            verdict,
            Verdict::NotLinearizable {
                products: vec![vec![1]]
            }
        );
        let classes: Vec<Class> = found.iter().map(|a| a.class).collect();
        assert_eq!(classes, [class], "{found:#?}");
    }
}

/// A part with sales only (no read, no refusal) could not have failed: unobserved,
/// never plainly linearizable; a part that failed or ran out of budget comes first, a
/// product with no operation counts for nothing.
#[test]
fn a_history_no_answer_could_contradict_is_unobserved() {
    let sales = vec![init(1, 2), sale("a", 0, 1, Sold), sale("b", 0, 2, Sold)];
    let unobserved = Verdict::Unobserved {
        products: vec![vec![1]],
    };
    assert_eq!(judged(&sales).0, unobserved);
    let mut beside = sales.clone();
    beside.extend([init(2, 1), read(2, 1, 0, 1), init(3, 0)]);
    assert_eq!(judged(&beside).0, unobserved);
    beside.push(settled(sale("c", 5, 6, Sold), Some(false)));
    assert_eq!(
        judged(&beside).0,
        Verdict::NotLinearizable {
            products: vec![vec![1]]
        }
    );
    let observed = [sales, vec![sale("c", 5, 6, Refused)]].concat();
    assert_eq!(judged(&observed).0, Verdict::Linearizable);
}

/// No class is ever found in a history that some execution explains (a class is a
/// proof, never a suspicion), and every history none explains has at least one and
/// is judged not linearizable: over the random histories of the property test, every
/// execution tried from the records alone ([`every_execution`]).
#[test]
fn a_class_is_found_exactly_where_no_order_explains_the_answers() {
    let mut rng = StdRng::seed_from_u64(7);
    let (mut named, mut not_linearizable) = (0, 0);
    for _ in 0..5_000 {
        let (history, _) = random_history(&mut rng);
        let verdict = check(&history, BUDGET).expect("well-formed");
        let found = super::anomalies(&history, &verdict);
        let explained = every_execution(&history);
        assert_eq!(linearizable(&history), explained, "{history:#?}");
        if explained {
            assert!(found.is_empty(), "{history:#?}\n{found:#?}");
        } else {
            assert!(!found.is_empty(), "{history:#?}");
            not_linearizable += 1;
            named += usize::from(
                found
                    .iter()
                    .any(|a| a.class != super::classes::Class::NotLinearizable),
            );
        }
    }
    println!("{not_linearizable} histories not linearizable, {named} of them with a named class");
}

fn hold(request_id: &str, from: u64, until: Option<u64>) -> Record {
    Record::Hold {
        request_id: request_id.into(),
        key: "stock:1".into(),
        token: None,
        from_us: from,
        until_us: until,
        lost: false,
    }
}

/// Two holders of one key at once: one anomaly per stale holder, fenced when its
/// deduction is not in the ledger, unfenced when it is; holders one after the other
/// (or one holder re-entering) are none.
#[test]
fn a_lock_overlap_is_seen_and_said_fenced_or_not() {
    use super::classes::{Class, find};
    // Fenced, the stale holder's write is refused (`lock_lost`, a definite failure).
    let stale = |recorded| {
        let answer = if recorded { Sold } else { DeductAnswer::Failed };
        settled(
            deduct("a", &[(1, 1)], (0, Some(50)), answer),
            Some(recorded),
        )
    };
    let history = |recorded| {
        vec![
            init(1, 10),
            stale(recorded),
            hold("a", 1, Some(40)),
            hold("b", 10, Some(12)),
            hold("c", 20, Some(22)),
            hold("d", 45, Some(47)),
            hold("d", 46, Some(47)),
        ]
    };
    for (recorded, says) in [(true, "both wrote"), (false, "it wrote nothing")] {
        let found = find(&history(recorded));
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].class, Class::LockOverlap);
        assert_eq!(
            found[0].ops,
            if recorded { vec![2, 3, 1] } else { vec![2, 3] }
        );
        assert!(
            found[0].says.contains("2 other holder(s)"),
            "{}",
            found[0].says
        );
        assert!(found[0].says.contains(says), "{}", found[0].says);
    }
}
