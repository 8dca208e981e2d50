//! The flash sale: one hot product, thousands of buyers at once (`loadtest demo`'s
//! last section).
//!
//! Three runs, all on two instances; which strategies each takes comes from their
//! cards (`GET /strategies`: family and traits), never from a list here:
//! - **Throughput**: every strategy that is safe across instances (but the one that
//!   refuses overtaken requests), one product whose stock is never the limit, at high
//!   concurrency, each for the same time (sales per second over its steady window,
//!   with its spread: [`crate::rate`]). Besides sales/s and latency it measures what
//!   limits each strategy:
//!   statements per sale (MariaDB's `Questions` before and after), sales per
//!   transaction (a batching strategy's answers say their batch size), and the CPU
//!   each process used (instances, servers, this load generator).
//! - **Sell-out**: stock 1000, 20,000 buyers, for the hot-product family and the
//!   conditional-update reference: exactly the stock sold, everyone else 409, nobody
//!   twice; and first come, first served measured per instance (refused requests that
//!   were sent before a request that got a unit).
//! - **Buckets**: the strategy that splits the stock, with 1, 4 and the default number
//!   of buckets, for the claim that splitting the row scales.
//!
//! Verdicts come from the ledger, as everywhere; the claims from this run's numbers.

mod html;
pub mod page;
pub mod run;

use crate::catalogue::{Card, Catalogue};
use crate::claims::{all, claim, figure, load_of, source};
use crate::engine::Fired;
use crate::plan::{BUCKETS, Plan};
use crate::rate::{SalesRate, compare};
use crate::report::{Claim, Part, Row};
use crate::runner::Runner;
use crate::section::Section;
use serde::{Deserialize, Serialize};
use sqlx::MySqlPool;
use std::collections::BTreeMap;
use std::time::Instant;
use stock_wire::{Family, Trait};

/// The key the flash sale's part is stored under in the JSON report.
pub const KEY: &str = "flash_sale";

/// The strategies the sell-out runs: the hot-product family, and the reference (the
/// conditional UPDATE) they are measured against.
pub fn sell_out_strategies(catalogue: &Catalogue) -> Vec<&Card> {
    catalogue
        .0
        .iter()
        .filter(|c| c.family == Family::HotProduct || c.has(Trait::ConditionalUpdate))
        .collect()
}

/// Whether the flash sale's claims compare this strategy: the hot-product family and
/// the row locks it is measured against (the conditional UPDATE among them).
pub fn compared(card: &Card) -> bool {
    card.family == Family::HotProduct
        || card.has(Trait::ConditionalUpdate)
        || card.has(Trait::RowLock)
}

/// The bucket counts of the buckets run (the default is the throughput run's).
pub const BUCKET_SCAN: [u16; 2] = [1, 4];

/// How the flash sale is run.
#[derive(Debug, Clone)]
pub struct FlashOptions {
    /// How long each throughput and buckets run sends, in seconds.
    pub seconds: f64,
    /// Requests in flight at once, over both instances.
    pub concurrency: usize,
    /// Open loop instead: requests started per second.
    pub rate: Option<f64>,
    /// Rounds of the throughput and buckets runs of the strategies the claims compare,
    /// pooled ([`crate::runner::in_rounds`], [`compared`]).
    pub rounds: u32,
    /// Rounds of the other strategies' throughput runs. At this concurrency a lock's
    /// run takes several times its length to drain the requests still in flight, so
    /// the quick demo measures them once.
    pub other_rounds: u32,
    /// The sell-out's stock and buyers.
    pub sell_out_stock: i64,
    pub sell_out_buyers: usize,
    /// The sell-out's restock: once half the buyers were answered (long after the
    /// stock ran out), the product restocked to this many units; the buyers in flight
    /// overlap it, the ones not yet sent wait for its answer, so its units always have
    /// buyers left: the sold-out marks must not outlive it. 0: none.
    pub sell_out_restock: i64,
    /// A read of what is left every this long during the sell-out (the history's reads).
    pub sell_out_read_every: Option<std::time::Duration>,
}

impl Default for FlashOptions {
    fn default() -> Self {
        FlashOptions {
            seconds: crate::plan::THROUGHPUT_SECONDS,
            concurrency: 256,
            rate: None,
            rounds: 1,
            other_rounds: 1,
            sell_out_stock: 1000,
            sell_out_buyers: 20_000,
            sell_out_restock: 500,
            sell_out_read_every: Some(std::time::Duration::from_millis(5)),
        }
    }
}

/// What limits one strategy's throughput run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Limits {
    pub strategy: String,
    /// Sales per second over the steady window, with its spread.
    pub sales: SalesRate,
    pub sales_per_second: f64,
    /// Sales per second over the reference's (the conditional UPDATE) in the same run.
    pub times_atomic_sql: Option<f64>,
    /// That ratio's range: from this q1 over the reference's q3 to this q3 over its q1.
    pub times_atomic_sql_range: Option<[f64; 2]>,
    /// Statements MariaDB ran per sale (`Questions`, the whole server).
    pub statements_per_sale: f64,
    pub sales_per_transaction: f64,
    /// Percent of one core each process used during the run.
    pub cpu_percent: BTreeMap<String, f64>,
    /// Sales acknowledged but not in the database when the last answer came (a
    /// strategy that records later), and the milliseconds its persisters took.
    pub pending_at_end: i64,
    pub drain_ms: f64,
}

impl Limits {
    /// Sales per second over the reference's, with its range.
    pub fn ratio(&self) -> Option<crate::rate::Ratio> {
        let [low, high] = self.times_atomic_sql_range?;
        Some(crate::rate::Ratio {
            times: self.times_atomic_sql?,
            low,
            high,
        })
    }
}

/// One sell-out run, beyond its row.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SellOut {
    pub strategy: String,
    pub stock: i64,
    pub buyers: usize,
    /// Units restocked during the sell-out (once `restocked_after` buyers were
    /// answered); 0: none.
    #[serde(default)]
    pub restocked: i64,
    #[serde(default)]
    pub restocked_after: u64,
    /// Units the ledger holds for the run (its request ids, every epoch).
    pub sold: i64,
    pub refused: u64,
    /// Of the refusals, those the sold-out fast path gave without running the strategy.
    pub refused_by_fast_path: u64,
    /// Answers of every kind per second of the run: here, mostly refusals.
    pub answers_per_second: f64,
    /// Answers other than 200 and 409.
    pub other: u64,
    /// Per instance: refused requests sent before a request that got a unit.
    pub overtaken: Vec<u64>,
    /// Exactly the stock sold, everyone else 409, the ledger clean.
    pub exact: bool,
}

impl SellOut {
    /// ` + 500 restocked after 10000 answers`, or nothing without a restock.
    pub fn restock_text(&self) -> String {
        match self.restocked {
            0 => String::new(),
            units => format!(
                " + {units} restocked after {} answers",
                self.restocked_after
            ),
        }
    }
}

/// The flash sale's part of the report, under `flash_sale`: written by
/// [`FlashSale::part`], read back by the book.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlashPart {
    /// How long each throughput run sent, in seconds, and with how many in flight
    /// (or at what rate, an open loop).
    pub seconds: f64,
    pub concurrency: usize,
    pub rate: Option<f64>,
    /// The splitting strategy's number of buckets by default.
    pub buckets_default: u16,
    pub throughput: Vec<Limits>,
    pub sell_out: Vec<SellOut>,
    pub buckets: Vec<BucketRate>,
}

/// The splitting strategy's sales per second at one number of buckets.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BucketRate {
    pub buckets: u16,
    pub sales: SalesRate,
    pub sales_per_second: f64,
}

/// The processes whose CPU the run watches, by name.
pub type Processes = Vec<(String, u32)>;

async fn questions(db: &MySqlPool) -> sqlx::Result<i64> {
    let (_, value): (String, String) = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Questions'")
        .fetch_one(db)
        .await?;
    Ok(value.parse().unwrap_or(0))
}

/// Runs `plan` and measures statements per sale and each process's CPU around it.
async fn measured(
    runner: &Runner,
    plan: &Plan,
    processes: &Processes,
) -> anyhow::Result<(Row, Fired, Limits)> {
    let watched: Vec<(String, u32)> = processes
        .iter()
        .cloned()
        .chain([("loadtest".to_string(), std::process::id())])
        .collect();
    let before: Vec<Option<f64>> = watched
        .iter()
        .map(|(_, pid)| crate::cost::cpu_seconds(*pid))
        .collect();
    let asked = questions(&runner.db).await?;
    let started = Instant::now();
    let (row, fired) = runner.run_fired(plan).await?;
    let seconds = started.elapsed().as_secs_f64().max(1e-9);
    let statements = (questions(&runner.db).await? - asked) as f64;
    let sold = row.verdict.sold.max(1) as f64;
    let cpu_percent = watched
        .iter()
        .zip(before)
        .filter_map(|((name, pid), before)| {
            let used = crate::cost::cpu_seconds(*pid)? - before?;
            Some((name.clone(), 100.0 * used / seconds))
        })
        .collect();
    let limits = Limits {
        strategy: plan.strategy.clone(),
        sales: row.sales.clone(),
        sales_per_second: row.sales.per_second,
        times_atomic_sql: None,
        times_atomic_sql_range: None,
        statements_per_sale: statements / sold,
        sales_per_transaction: fired.sales_per_transaction(),
        cpu_percent,
        pending_at_end: fired.pending_at_end,
        drain_ms: fired.drain.as_secs_f64() * 1000.0,
    };
    Ok((row, fired, limits))
}

/// A plan for the flash sale's runs: timed with stock never the limit, or (a
/// sell-out) `buyers` requests at `stock`.
fn flash_plan(
    section: Section,
    strategy: &str,
    product: i64,
    sell_out: Option<(i64, usize)>,
    options: &FlashOptions,
) -> Plan {
    // Timed with the stock never the limit, one warm-up round on a product of its own
    // (connections open, buckets known); or a sell-out of `buyers` at `stock`.
    let timed = Plan {
        rate: options.rate,
        ..Plan::throughput(
            section,
            strategy,
            vec![product],
            options.concurrency,
            options.seconds,
        )
    };
    match sell_out {
        None => timed,
        Some((stock, buyers)) => Plan {
            stock,
            requests: buyers,
            duration: None,
            ..timed
        },
    }
}

/// Everything the flash sale measured.
pub struct FlashSale {
    pub rows: Vec<Row>,
    pub limits: Vec<Limits>,
    pub sell_outs: Vec<SellOut>,
    /// The splitting strategy's sales per second by number of buckets.
    pub buckets: Vec<(u16, SalesRate)>,
    pub options: FlashOptions,
    /// The strategies as the service describes them.
    pub catalogue: Catalogue,
}

/// Runs the flash sale over the strategies the service lists; `first_product` gives
/// each run fresh products.
pub async fn run(
    runner: &Runner,
    catalogue: &Catalogue,
    options: FlashOptions,
    processes: &Processes,
    first_product: impl Fn(usize) -> i64,
) -> anyhow::Result<FlashSale> {
    let mut sale = FlashSale {
        rows: Vec::new(),
        limits: Vec::new(),
        sell_outs: Vec::new(),
        buckets: Vec::new(),
        options: options.clone(),
        catalogue: catalogue.clone(),
    };
    let mut n = 0;
    let mut next = || {
        n += 1;
        first_product(n)
    };
    // The control that refuses every request a newer ticket overtook sells next to
    // nothing under this load: it is for the fencing experiments.
    let sellers = catalogue
        .0
        .iter()
        .filter(|c| c.safe_across_instances && !c.has(Trait::RefusesOvertaken))
        .collect::<Vec<_>>();
    let splits = catalogue.first_with(Trait::SplitsStock);
    let plans = throughput_plans(&sellers, splits, &options, &mut next);
    let is_compared = |strategy: &str| sellers.iter().any(|c| c.name == strategy && compared(c));
    let rounds: Vec<u32> = plans
        .iter()
        .map(|p| match is_compared(&p.strategy) {
            true => options.rounds,
            false => options.other_rounds,
        })
        .collect();
    let runs = crate::runner::in_rounds_each(&rounds, async |round, k| {
        let plan = &plans[k];
        let with = match plan.section {
            Section::Buckets => format!(" with {} bucket(s)", plan.buckets),
            _ => String::new(),
        };
        eprintln!(
            "flash sale: {}({}/{}) {}{with}: {} s at concurrency {} over {} instances ...",
            crate::runner::round_text(round, rounds[k]),
            k + 1,
            plans.len(),
            plan.strategy,
            options.seconds,
            options.concurrency,
            runner.bases.len()
        );
        measured(runner, &plan.in_round(round), processes).await
    })
    .await?;
    let mut bucket_rows = Vec::new();
    for (plan, runs) in plans.iter().zip(runs) {
        // The shown round's costs, the sales of every round.
        let (fired, mut limits): (Vec<(Row, Fired)>, Vec<Limits>) =
            runs.into_iter().map(|(row, f, l)| ((row, f), l)).unzip();
        let Some((shown, row)) = crate::runner::pooled_row(fired) else {
            continue;
        };
        if plan.section == Section::Buckets {
            sale.buckets.push((plan.buckets, row.sales.clone()));
            bucket_rows.push(row);
            continue;
        }
        let mut limits = limits.swap_remove(shown);
        limits.sales = row.sales.clone();
        limits.sales_per_second = row.sales.per_second;
        if splits.is_some_and(|c| c.name == plan.strategy) {
            sale.buckets.push((BUCKETS, limits.sales.clone()));
        }
        sale.rows.push(row);
        sale.limits.push(limits);
    }
    compare_with_reference(catalogue, &mut sale.limits);

    for card in sell_out_strategies(catalogue) {
        let (row, sell_out) = sell_out(runner, &card.name, &options, &mut next).await?;
        sale.sell_outs.push(sell_out);
        sale.rows.push(row);
    }

    sale.rows.extend(bucket_rows);
    sale.buckets.sort_by_key(|b| b.0);
    Ok(sale)
}

/// The throughput run's plans: one per seller, and the splitting strategy's other
/// bucket counts, each on a product `next` gives.
fn throughput_plans(
    sellers: &[&Card],
    splits: Option<&Card>,
    options: &FlashOptions,
    next: &mut impl FnMut() -> i64,
) -> Vec<Plan> {
    // Every strategy once per round, round after round (the rounds pooled); the
    // splitting strategy's other bucket counts right after its own row, so the claim
    // that splitting scales compares counts measured side by side.
    let mut plans: Vec<Plan> = sellers
        .iter()
        .map(|c| flash_plan(Section::FlashSale, &c.name, next(), None, options))
        .collect();
    if let Some(splits) = splits {
        let after = plans
            .iter()
            .position(|p| p.strategy == splits.name)
            .map_or(plans.len(), |i| i + 1);
        for (i, &buckets) in BUCKET_SCAN.iter().enumerate() {
            let plan = Plan {
                buckets,
                ..flash_plan(Section::Buckets, &splits.name, next(), None, options)
            };
            plans.insert(after + i, plan);
        }
    }
    plans
}

/// Sets each strategy's sales per second over the reference's (the conditional
/// UPDATE) in the same run, with its range; none without the reference.
fn compare_with_reference(catalogue: &Catalogue, limits: &mut [Limits]) {
    let reference = catalogue
        .first_with(Trait::ConditionalUpdate)
        .and_then(|r| limits.iter().find(|l| l.strategy == r.name))
        .map(|l| l.sales.clone());
    for limits in limits {
        let ratio = reference
            .as_ref()
            .map(|r| crate::rate::ratio(&limits.sales, r));
        limits.times_atomic_sql = ratio.map(|r| r.times);
        limits.times_atomic_sql_range = ratio.map(|r| [r.low, r.high]);
    }
}

/// Sells `strategy`'s stock out to the buyers (restocked halfway, if the options
/// say so) on a product `next` gives, and checks that exactly the stock was sold.
async fn sell_out(
    runner: &Runner,
    strategy: &str,
    options: &FlashOptions,
    next: &mut impl FnMut() -> i64,
) -> anyhow::Result<(Row, SellOut)> {
    eprintln!(
        "flash sale: {strategy} sells out: stock {}, {} buyers ...",
        options.sell_out_stock, options.sell_out_buyers
    );
    let restocked_after = options.sell_out_buyers as u64 / 2;
    let plan = Plan {
        read_every: options.sell_out_read_every,
        restock_during: (options.sell_out_restock > 0)
            .then_some((restocked_after, options.sell_out_restock)),
        ..flash_plan(
            Section::SellOut,
            strategy,
            next(),
            Some((options.sell_out_stock, options.sell_out_buyers)),
            options,
        )
    };
    let (row, fired) = runner.run_fired(&plan).await?;
    let refused = row.responses.get("409").copied().unwrap_or(0);
    let answered: u64 = row.responses.values().sum();
    let sold_answers = row.responses.get("200").copied().unwrap_or(0);
    let other = answered - refused - sold_answers;
    // The ledger over both epochs (one unit a buyer); the verdict is the last
    // epoch's: the restock's units, all sold.
    let sold = match &row.history {
        Some(judged) => judged.recorded,
        None => crate::history::recorded_count(&runner.db, &fired).await?,
    } as i64;
    let restocked = options.sell_out_restock;
    let last_epoch = if restocked > 0 {
        restocked
    } else {
        options.sell_out_stock
    };
    let exact = row.verdict.is_clean()
        && row.verdict.sold == last_epoch
        && sold == options.sell_out_stock + restocked
        && sold_answers as i64 == sold
        && other == 0;
    let sell_out = SellOut {
        strategy: strategy.into(),
        stock: options.sell_out_stock,
        buyers: options.sell_out_buyers,
        restocked,
        restocked_after: if restocked > 0 { restocked_after } else { 0 },
        sold,
        refused,
        refused_by_fast_path: row.refused_by_fast_path,
        answers_per_second: row.answers_per_second,
        other,
        overtaken: fired.overtaken.clone(),
        exact,
    };
    Ok((row, sell_out))
}

impl FlashSale {
    /// The claims this run can check, each on sales/s with its spread.
    pub fn claims(&self) -> Vec<Claim> {
        let mut claims = self.batching_claims();
        claims.extend(self.records_later_claims());
        claims.extend(self.buckets_claim());
        claims
    }

    /// The throughput run's row of a strategy.
    fn flash_row(&self, name: &str) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.section == Section::FlashSale && r.strategy == name)
    }

    /// The names of the strategies with a trait, as the service names them.
    fn named(&self, t: Trait) -> impl Iterator<Item = &str> {
        self.catalogue.with(t).into_iter().map(|c| c.name.as_str())
    }

    /// Per batching strategy: it beats every row lock (and the conditional UPDATE)
    /// on the hot product.
    fn batching_claims(&self) -> Vec<Claim> {
        let mut claims = Vec::new();
        for batching in self.named(Trait::Batches) {
            let Some(batched) = self.flash_row(batching) else {
                continue;
            };
            let statements = self
                .limits
                .iter()
                .find(|l| l.strategy == batching)
                .map_or(0.0, |l| l.statements_per_sale);
            let row_locks: Vec<&Row> = self
                .named(Trait::ConditionalUpdate)
                .chain(self.named(Trait::RowLock))
                .filter_map(|name| self.flash_row(name))
                .collect();
            if !row_locks.is_empty() {
                let verdicts: Vec<Option<bool>> = row_locks
                    .iter()
                    .map(|r| compare(&batched.sales, &r.sales))
                    .collect();
                let listed: Vec<String> = row_locks
                    .iter()
                    .map(|r| figure(&r.strategy, &r.sales))
                    .collect();
                let compared: Vec<&Row> = std::iter::once(batched)
                    .chain(row_locks.iter().copied())
                    .collect();
                claims.push(claim(
                    "Batching beats row locking on a hot product",
                    source::HOT_PRODUCT,
                    (&Section::FlashSale.to_string(), &load_of(&compared)),
                    all(&verdicts),
                    format!(
                        "sales/s: {} ({statements:.2} statements per sale); {}",
                        figure(batching, &batched.sales),
                        listed.join(", ")
                    ),
                ));
            }
        }
        claims
    }

    /// Per strategy that records its sales later: it is the fastest, and what it
    /// acknowledged before it was durable.
    fn records_later_claims(&self) -> Vec<Claim> {
        let mut claims = Vec::new();
        for later in self.named(Trait::RecordsLater) {
            let Some(counter) = self.flash_row(later) else {
                continue;
            };
            let Some(fastest) = self
                .rows
                .iter()
                .filter(|r| r.section == Section::FlashSale && r.strategy != later)
                .max_by(|a, b| a.sales.per_second.total_cmp(&b.sales.per_second))
            else {
                continue;
            };
            let limits = self
                .limits
                .iter()
                .find(|l| l.strategy == later)
                .expect("measured");
            claims.push(claim(
                "A Redis counter in front is fastest, and what it can lose",
                source::MYSQL_LOCKS,
                (&Section::FlashSale.to_string(), &load_of(&[counter, fastest])),
                all(&[compare(&counter.sales, &fastest.sales)]),
                format!(
                    "sales/s: {}, fastest other {}; acknowledged before durable: \
                     {} sales pending when the last buyer was answered, recorded {:.0} ms later \
                     (what a killed Redis process then loses: the chaos run measures it per persistence setting; an operating system crash it does not make)",
                    figure(later, &counter.sales),
                    figure(&fastest.strategy, &fastest.sales),
                    limits.pending_at_end,
                    limits.drain_ms
                ),
            ));
        }
        claims
    }

    /// The splitting strategy's sales rise with each step in its number of buckets
    /// (none without two bucket counts measured).
    fn buckets_claim(&self) -> Option<Claim> {
        if self.buckets.len() >= 2
            && let Some(splits) = self.named(Trait::SplitsStock).next()
            && let Some(at_default) = self.flash_row(splits)
        {
            let steps: Vec<Option<bool>> = self
                .buckets
                .windows(2)
                .map(|w| compare(&w[1].1, &w[0].1))
                .collect();
            let listed: Vec<String> = self
                .buckets
                .iter()
                .map(|(k, r)| format!("{k}: {}", crate::rate::judged_text(r)))
                .collect();
            // The default count's row stands for the load; the windows are every count's.
            let mut bucket_rows = vec![at_default];
            bucket_rows.extend(self.rows.iter().filter(|r| r.section == Section::Buckets));
            return Some(claim(
                "Splitting the row scales with the number of buckets",
                source::HOT_PRODUCT,
                (
                    &format!("{}, {}", Section::FlashSale, Section::Buckets),
                    &load_of(&bucket_rows),
                ),
                all(&steps),
                format!("{splits} sales/s by buckets: {}", listed.join(", ")),
            ));
        }
        None
    }

    /// Whether every run came out as it must: the rows' verdicts, and every sell-out
    /// exact.
    pub fn as_expected(&self) -> bool {
        self.rows.iter().all(|r| r.as_expected) && self.sell_outs.iter().all(|s| s.exact)
    }

    /// The report's part, under [`KEY`] (drawn by `flash::html` from it).
    pub fn part(&self) -> Part {
        Part {
            key: KEY,
            json: serde_json::to_value(FlashPart {
                seconds: self.options.seconds,
                concurrency: self.options.concurrency,
                rate: self.options.rate,
                buckets_default: BUCKETS,
                throughput: self.limits.clone(),
                sell_out: self.sell_outs.clone(),
                buckets: self
                    .buckets
                    .iter()
                    .map(|(buckets, sales)| BucketRate {
                        buckets: *buckets,
                        sales_per_second: sales.per_second,
                        sales: sales.clone(),
                    })
                    .collect(),
            })
            .expect("plain data"),
            title: None,
            strategies: Vec::new(),
            as_expected: self.as_expected(),
        }
    }
}
