//! What the history checker costs: histories generated as a correct stock counter
//! would answer them (each operation taking effect at a random instant of its
//! interval), checked whole by `stock_check::check`.
//!
//! - `hot-product`: 20,000 operations on one product, 256 in flight, with reads and
//!   restocks among the deductions (the search's case, not the O(n log n) test's);
//! - `100-products`: 20,000 operations over 100 products, a tenth of the orders for two
//!   products at once (which join all the products into one part);
//! - `failing`: the hot product's history without its restocks and with one refusal
//!   turned into a sale: one sale more than the stock, which no order explains.
//!
//! Each is checked with the runs' budget per part, on ten seeds before the first is
//! timed: a check that ran out of it would be "undecided", and the bench says how many
//! did and the longest check. Memory: `loadtest check` on the
//! same histories written out (`CHECK_BENCH_WRITE=dir`), under `/usr/bin/time -v`.

use criterion::{Criterion, criterion_group, criterion_main};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use stock_check::history::{DeductAnswer, Item, Record, RestockAnswer};
use stock_check::{BUDGET, Verdict, check};

/// Operations per history and in flight at once.
const OPERATIONS: usize = 20_000;
const IN_FLIGHT: u64 = 256;

/// A history of `OPERATIONS` operations on `products` products (`multi`: the share of
/// orders for two), `reads` and `restocks` the shares of those, as one correct counter
/// answers them: each operation sent at its slot, lasting up to `IN_FLIGHT` slots,
/// taking effect at a random instant between.
fn history(seed: u64, products: i64, multi: f64, reads: f64, restocks: f64) -> Vec<Record> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut stock: Vec<i64> = (0..products).map(|_| 2_000).collect();
    let mut history: Vec<Record> = (0..products)
        .map(|p| Record::Init {
            product_id: p + 1,
            stock: stock[p as usize],
        })
        .collect();
    // (effect instant, operation) for every operation, then applied in that order.
    let mut ops: Vec<(u64, Record)> = Vec::with_capacity(OPERATIONS);
    for i in 0..OPERATIONS as u64 {
        let sent = i * 10;
        let answered = sent + rng.random_range(1..IN_FLIGHT * 10);
        let effect = rng.random_range(sent..=answered);
        let product = rng.random_range(1..=products);
        let kind: f64 = rng.random();
        let record = if kind < reads {
            Record::Read {
                client: i,
                product_id: product,
                sent_us: sent,
                answered_us: Some(answered),
                stock: None,
            }
        } else if kind < reads + restocks {
            Record::Restock {
                client: i,
                product_id: product,
                stock: rng.random_range(0..2_000),
                sent_us: sent,
                answered_us: Some(answered),
                answer: RestockAnswer::Done,
            }
        } else {
            let mut items = vec![Item {
                product_id: product,
                quantity: 1,
            }];
            if products > 1 && rng.random_bool(multi) {
                items.push(Item {
                    product_id: product % products + 1,
                    quantity: 1,
                });
            }
            Record::Deduct {
                client: i,
                request_id: format!("r{i}"),
                items,
                sent_us: sent,
                answered_us: Some(answered),
                answer: DeductAnswer::Refused,
                recorded: None,
            }
        };
        ops.push((effect, record));
    }
    ops.sort_by_key(|(effect, _)| *effect);
    for (_, record) in &mut ops {
        match record {
            Record::Read {
                product_id,
                stock: s,
                ..
            } => *s = Some(stock[(*product_id - 1) as usize]),
            Record::Restock {
                product_id,
                stock: s,
                ..
            } => stock[(*product_id - 1) as usize] = *s,
            Record::Deduct { items, answer, .. } => {
                if items
                    .iter()
                    .all(|i| stock[(i.product_id - 1) as usize] >= 1)
                {
                    for i in items.iter() {
                        stock[(i.product_id - 1) as usize] -= 1;
                    }
                    *answer = DeductAnswer::Sold;
                }
            }
            Record::Init { .. } | Record::Hold { .. } => {}
        }
    }
    history.extend(ops.into_iter().map(|(_, r)| r));
    history
}

/// A hot product's history (without restocks, so that the units are surely all sold
/// when one is refused) with its last refusal answered as a sale instead: one sale too
/// many, which no order explains.
fn failing(mut history: Vec<Record>) -> Vec<Record> {
    let refusal = history.iter_mut().rev().find_map(|r| match r {
        Record::Deduct { answer, .. } if *answer == DeductAnswer::Refused => Some(answer),
        _ => None,
    });
    *refusal.expect("a refusal to change") = DeductAnswer::Sold;
    history
}

/// Seeds each case is generated with before it is timed, to count how often the
/// budget runs out on histories of its kind (the timed one is the first).
const SEEDS: u64 = 10;

fn bench(c: &mut Criterion) {
    type Make = fn(u64) -> Vec<Record>;
    let cases: [(&str, Make, bool); 3] = [
        (
            "hot-product",
            |seed| history(seed, 1, 0.0, 0.1, 0.001),
            true,
        ),
        (
            "100-products",
            |seed| history(seed, 100, 0.1, 0.1, 0.001),
            true,
        ),
        (
            "failing",
            |seed| failing(history(seed, 1, 0.0, 0.1, 0.0)),
            false,
        ),
    ];
    if let Some(dir) = std::env::var_os("CHECK_BENCH_WRITE") {
        for (name, make, _) in &cases {
            let path = std::path::Path::new(&dir).join(format!("{name}.jsonl"));
            let file = std::fs::File::create(&path).expect("created");
            stock_check::history::write(std::io::BufWriter::new(file), &make(1)).expect("written");
        }
    }
    let mut group = c.benchmark_group("check");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    for (name, make, valid) in &cases {
        let (mut undecided, mut longest) = (0, Duration::ZERO);
        for seed in 1..=SEEDS {
            let records = make(seed);
            let started = std::time::Instant::now();
            let verdict = check(&records, BUDGET).expect("well-formed");
            longest = longest.max(started.elapsed());
            undecided += usize::from(matches!(verdict, Verdict::Unknown { .. }));
            // A valid history is never judged not linearizable, a failing one never
            // linearizable; either may run out of budget (then counted).
            let wrong = match verdict {
                Verdict::NotLinearizable { .. } => *valid,
                Verdict::Linearizable | Verdict::Unobserved { .. } => !*valid,
                Verdict::Unknown { .. } => false,
            };
            assert!(!wrong, "{name}, seed {seed}");
        }
        let records = make(1);
        println!(
            "check/{name}: {} records; of {SEEDS} seeds, {undecided} ran out of the budget \
             ({BUDGET:?}); the longest took {longest:.2?}",
            records.len(),
        );
        group.bench_function(*name, |b| b.iter(|| check(&records, BUDGET)));
    }
    group.finish();
}

criterion_group! {
    name = benches;
    // No plots: this machine has no fonts for them, and the figures are the point.
    config = Criterion::default().without_plots();
    targets = bench
}
criterion_main!(benches);
