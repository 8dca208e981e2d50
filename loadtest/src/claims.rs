//! The classic claims of the source articles, checked against one run.
//!
//! A speed claim is judged on **sales per second** ([`crate::rate`]) in the section
//! whose load matches it: one hot product, stock never the limit, the same
//! concurrency for every strategy compared, and one instance for a strategy that only
//! works on one (an in-process lock). The figures it compares were measured side by
//! side, in the same rounds, and each round gives a lead ([`crate::rate::lead`]). It
//! is **confirmed** or **refuted** only when every round's lead points the same way,
//! and the pooled lead is larger than the rounds' leads moved and than
//! [`crate::rate::MARGIN`] ([`crate::rate::decisive`]); otherwise it is
//! **inconclusive**, never a coin flip.
//! Each claim names its section, its load and the figures it used, each with its
//! rounds' own rates.

use crate::catalogue::{Card, Catalogue};
use crate::rate::{SalesRate, compare};
use crate::report::{Claim, ClaimVerdict, Row};
use crate::section::Section;
use stock_wire::Trait;

/// The source articles, by title (as published, in Chinese), with what they are about.
pub mod source {
    pub const OVERSELL: &str = "解决 MySQL 库存超卖问题 (Solving stock oversell in MySQL: local lock, one SQL, FOR UPDATE, versions)";
    pub const ZOOKEEPER: &str = "ZooKeeper 分布式锁实现 (A ZooKeeper distributed lock)";
    pub const LOCKS: &str = "分布式锁 (Distributed locks: properties, Lua, the watchdog)";
    pub const MYSQL_LOCKS: &str = "mysql分布式锁怎么用,mysql锁有几种方式 (MySQL distributed locks, Redis in front, RedLock's debate)";
    pub const INTERVIEW: &str =
        "分布式锁 (转行程序员: distributed locks as interview questions, Redis vs ZooKeeper)";
    /// This project's own hot-product strategies (not a claim of the articles).
    pub const HOT_PRODUCT: &str =
        "this project's hot-product strategies (the chapter Hot products)";
}

/// `confirmed` if the claim holds in the run, else `refuted`.
fn holds(holds: bool) -> ClaimVerdict {
    if holds {
        ClaimVerdict::Confirmed
    } else {
        ClaimVerdict::Refuted
    }
}

/// Confirmed when every comparison holds decisively, refuted when one fails
/// decisively, inconclusive otherwise.
pub fn all(verdicts: &[Option<bool>]) -> ClaimVerdict {
    if verdicts.contains(&Some(false)) {
        ClaimVerdict::Refuted
    } else if !verdicts.is_empty() && verdicts.iter().all(|v| *v == Some(true)) {
        ClaimVerdict::Confirmed
    } else {
        ClaimVerdict::Inconclusive
    }
}

/// A claim as checked: what, from where, on which section and load, the verdict and
/// the figures behind it.
pub fn claim(
    claim: &str,
    source: &str,
    (section, load): (&str, &str),
    verdict: ClaimVerdict,
    evidence: String,
) -> Claim {
    Claim {
        claim: claim.into(),
        source: source.into(),
        section: section.into(),
        load: load.into(),
        verdict,
        evidence,
    }
}

/// The load of the rows a claim compares, as it states it: `1 hot product, 64 in
/// flight over 2 instances, stock never the limit, steady windows of 1.7–2.3 s` (the
/// first row's load, which the others share; every row's window).
pub fn load_of(rows: &[&Row]) -> String {
    let Some(row) = rows.first() else {
        return String::new();
    };
    let windows: Vec<&SalesRate> = rows.iter().map(|r| &r.sales).collect();
    format!(
        "{} over {} instance{}, stock never the limit, {}",
        crate::report::load_text(row),
        row.instances,
        if row.instances == 1 { "" } else { "s" },
        crate::rate::windows_text(&windows)
    )
}

/// A strategy's name, its sales/s, its spread and its rounds: `name rate (q1–q3;
/// rounds r1, r2, r3)` ([`crate::rate::judged_text`]).
pub fn figure(name: &str, rate: &SalesRate) -> String {
    format!("{name} {}", crate::rate::judged_text(rate))
}

/// Checks every claim `rows` can speak to. The strategies each claim is about are
/// found by what their cards declare (a trait, the backend), as the articles describe
/// them: "a conditional UPDATE", "an in-process lock".
pub fn check(rows: &[Row], catalogue: &Catalogue) -> Vec<Claim> {
    let run = Lookup::new(rows, catalogue);
    [
        one_instance_claim(&run),
        contention_claim(&run),
        redis_versus_zookeeper_claim(&run),
        database_lock_claim(&run),
        process_lock_claim(&run),
        no_lock_claim(&run),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Where the claims find their rows: the run's rows, and the strategies by what their
/// cards declare.
struct Lookup<'a> {
    rows: &'a [Row],
    catalogue: &'a Catalogue,
    /// The distributed locks: the strategies with a lease lock, then those with a
    /// session lock.
    locks: Vec<&'a Card>,
}

impl<'a> Lookup<'a> {
    /// Where the claims on `rows` find them, and the strategies of `catalogue`.
    fn new(rows: &'a [Row], catalogue: &'a Catalogue) -> Lookup<'a> {
        let locks: Vec<&Card> = catalogue
            .with(Trait::LeaseLock)
            .into_iter()
            .chain(catalogue.with(Trait::SessionLock))
            .collect();
        Lookup {
            rows,
            catalogue,
            locks,
        }
    }

    /// The row of `strategy` in `section`.
    fn find(&self, section: &Section, strategy: &str) -> Option<&'a Row> {
        self.rows
            .iter()
            .find(|r| &r.section == section && r.strategy == strategy)
    }

    /// The first strategy whose card declares `t`.
    fn with(&self, t: Trait) -> Option<&'a str> {
        self.catalogue.first_with(t).map(|c| c.name.as_str())
    }

    /// The first distributed lock whose backend is `backend`.
    fn on(&self, backend: &str) -> Option<&'a str> {
        self.locks
            .iter()
            .find(|c| c.backend.starts_with(backend))
            .map(|c| c.name.as_str())
    }

    /// The throughput section's row of strategy `name`.
    fn measured(&self, name: Option<&str>) -> Option<&'a Row> {
        name.and_then(|n| self.find(&Section::Throughput, n))
    }
}

/// A single conditional UPDATE beats SELECT ... FOR UPDATE, which beats an in-process
/// lock, on one instance.
fn one_instance_claim(run: &Lookup) -> Option<Claim> {
    // One instance: the in-process lock works there, and only there.
    let one = |t: Trait| run.with(t).and_then(|n| run.find(&Section::OneInstance, n));
    let (Some(sql), Some(pess), Some(mutex)) = (
        one(Trait::ConditionalUpdate),
        one(Trait::RowLock),
        one(Trait::ProcessLock),
    ) else {
        return None;
    };
    Some(claim(
        "A single conditional UPDATE beats SELECT ... FOR UPDATE, which beats an in-process lock",
        source::OVERSELL,
        (
            &Section::OneInstance.to_string(),
            &load_of(&[sql, pess, mutex]),
        ),
        all(&[
            compare(&sql.sales, &pess.sales),
            compare(&pess.sales, &mutex.sales),
        ]),
        format!(
            "sales/s: {}, {}, {}",
            figure(&sql.strategy, &sql.sales),
            figure(&pess.strategy, &pess.sales),
            figure(&mutex.strategy, &mutex.sales)
        ),
    ))
}

/// Optimistic CAS degrades under contention: the contention section's row against
/// the throughput section's.
fn contention_claim(run: &Lookup) -> Option<Claim> {
    // A compare-and-set at low and at high concurrency: the high one is the
    // throughput section's row (one setup, one figure).
    let cas = run.with(Trait::CompareAndSet)?;
    let (Some(low), Some(high)) = (
        run.find(&Section::Contention, cas),
        run.find(&Section::Throughput, cas),
    ) else {
        return None;
    };
    Some(claim(
        "Optimistic CAS degrades under contention",
        source::OVERSELL,
        (
            &format!("{}, {}", Section::Contention, Section::Throughput),
            &format!(
                "{} over {} instances, stock never the limit, {}",
                crate::report::load_text(high).replace(
                    &format!("{} in flight", high.concurrency),
                    &format!("{} and {} in flight", low.concurrency, high.concurrency)
                ),
                high.instances,
                crate::rate::windows_text(&[&low.sales, &high.sales])
            ),
        ),
        all(&[compare(&low.sales, &high.sales)]),
        format!(
            "sales/s: {} at {} in flight, {} at {}; transactions per sale {:.2} and {:.2}",
            crate::rate::judged_text(&low.sales),
            low.concurrency,
            crate::rate::judged_text(&high.sales),
            high.concurrency,
            low.attempts_per_success,
            high.attempts_per_success
        ),
    ))
}

/// Redis locks are faster than ZooKeeper locks: the Redis lock's throughput against
/// the session lock's.
fn redis_versus_zookeeper_claim(run: &Lookup) -> Option<Claim> {
    let session = run.with(Trait::SessionLock);
    let (Some(redis), Some(zk)) = (run.measured(run.on("redis")), run.measured(session)) else {
        return None;
    };
    Some(claim(
        "Redis locks are faster than ZooKeeper locks",
        source::INTERVIEW,
        (&Section::Throughput.to_string(), &load_of(&[redis, zk])),
        all(&[compare(&redis.sales, &zk.sales)]),
        format!(
            "sales/s: {}, {}",
            figure(&redis.strategy, &redis.sales),
            figure(&zk.strategy, &zk.sales)
        ),
    ))
}

/// A lock in the database is the slowest distributed lock: its throughput against
/// every other distributed lock's.
fn database_lock_claim(run: &Lookup) -> Option<Claim> {
    let db = run.measured(run.on("database"))?;
    let others: Vec<&Row> = run
        .locks
        .iter()
        .filter(|c| c.name != db.strategy)
        .filter_map(|c| run.find(&Section::Throughput, &c.name))
        .collect();
    if others.is_empty() {
        return None;
    }
    let verdicts: Vec<Option<bool>> = others
        .iter()
        .map(|r| compare(&r.sales, &db.sales))
        .collect();
    let listed: Vec<String> = others
        .iter()
        .map(|r| figure(&r.strategy, &r.sales))
        .collect();
    let compared: Vec<&Row> = std::iter::once(db).chain(others.iter().copied()).collect();
    Some(claim(
        "A lock in the database is the slowest distributed lock",
        source::MYSQL_LOCKS,
        (&Section::Throughput.to_string(), &load_of(&compared)),
        all(&verdicts),
        format!(
            "sales/s: {}; {}",
            figure(&db.strategy, &db.sales),
            listed.join(", ")
        ),
    ))
}

/// An in-process lock oversells with two instances: its row of the held section.
fn process_lock_claim(run: &Lookup) -> Option<Claim> {
    let row = run
        .with(Trait::ProcessLock)
        .and_then(|n| run.find(&Section::Held, n))?;
    Some(claim(
        "An in-process lock oversells with two instances",
        source::OVERSELL,
        (&Section::Held.to_string(), &verdict_load(row)),
        holds(!row.verdict.is_clean()),
        format!(
            "{} on {} instances: {} lost updates, {} sold beyond stock",
            row.strategy, row.instances, row.verdict.lost_updates, row.verdict.beyond_stock
        ),
    ))
}

/// Without a lock, stock is oversold: the lockless strategy's row of the held section.
fn no_lock_claim(run: &Lookup) -> Option<Claim> {
    let row = run
        .with(Trait::NoLock)
        .and_then(|n| run.find(&Section::Held, n))?;
    Some(claim(
        "Without a lock, stock is oversold",
        source::INTERVIEW,
        (&Section::Held.to_string(), &verdict_load(row)),
        holds(!row.verdict.is_clean()),
        format!(
            "{}: {} sold of {}, {} lost updates",
            row.strategy, row.verdict.sold, row.verdict.initial, row.verdict.lost_updates
        ),
    ))
}

/// A verdict section's load: `1000 requests at 64 in flight over 2 instances, stock
/// 100, held 5 ms`.
fn verdict_load(row: &Row) -> String {
    format!(
        "{} requests at {} in flight over {} instances, stock {}, held {} ms between read and write",
        row.requests, row.concurrency, row.instances, row.verdict.initial, row.hold_ms
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Answer, Fired, Outcome};

    /// A row of `strategy` in `section` from a closed loop of 10 in flight, 10 ms per
    /// request: `sold(i)` says whether request i was a sale (else a refusal).
    fn row(section: Section, strategy: &str, sold: impl Fn(usize) -> bool) -> Row {
        let answers: Vec<Answer> = (0..2000)
            .map(|i| {
                let wave = (i / 10) as u64;
                Answer {
                    outcome: if sold(i) {
                        Outcome::Sold
                    } else {
                        Outcome::SoldOut
                    },
                    request_id: format!("{strategy}-{i}"),
                    items: vec![(1, 1)],
                    duplicate: false,
                    attempts: 1,
                    micros: 10_000,
                    instance: i % 2,
                    sent_us: wave * 10_000,
                    batch_size: None,
                    retries: 0,
                    done_us: (wave + 1) * 10_000,
                    error: None,
                }
            })
            .collect();
        let fired = Fired::from_answers(answers, std::time::Duration::from_secs(2), 10);
        let plan = crate::plan::Plan::throughput(section, strategy, vec![1], 10, 2.0);
        Row::new(&plan, 2, &fired, Default::default())
    }

    fn catalogue() -> Catalogue {
        serde_json::from_value(serde_json::json!([
            {"name": "redis-lock", "family": "distributed-lock", "backend": "redis",
             "traits": ["lease-lock"], "safe_across_instances": true, "description": "",
             "when_to_use": "", "explanation": "", "fencing": "token", "order": 1,
             "colour": "#000000"},
            {"name": "zookeeper", "family": "distributed-lock", "backend": "zookeeper",
             "traits": ["session-lock"], "safe_across_instances": true, "description": "",
             "when_to_use": "", "explanation": "", "fencing": "token", "order": 2,
             "colour": "#000000"},
        ]))
        .expect("a catalogue")
    }

    /// A strategy that answers every request, nine in ten of them refusals, is not
    /// faster than one that sells every request it answers at a fifth of the rate:
    /// the claim counts sales, never answers.
    #[test]
    fn refusals_do_not_count_as_throughput() {
        // redis-lock: 1000 answers/s, 100 of them sales; zookeeper: 1000 sales/s.
        let rows = vec![
            row(Section::Throughput, "redis-lock", |i| i % 10 == 0),
            row(Section::Throughput, "zookeeper", |_| true),
        ];
        let claims = check(&rows, &catalogue());
        let redis = claims
            .iter()
            .find(|c| c.claim.starts_with("Redis locks are faster"))
            .expect("the claim is checked");
        assert_eq!(redis.verdict, ClaimVerdict::Refuted, "{redis:?}");
        assert!(redis.evidence.contains("redis-lock 100 "), "{redis:?}");
        assert_eq!(redis.section, Section::Throughput.to_string());
        assert!(redis.load.contains("stock never the limit"), "{redis:?}");
    }

    /// Figures measured in rounds decide a claim only when every round agrees: the
    /// same pooled figures are refuted when the rounds agree, inconclusive when one
    /// round put them the other way round.
    #[test]
    fn a_claim_needs_every_round_to_agree() {
        let in_rounds = |mut row: Row, per_round: &[f64]| {
            row.sales.rounds = per_round.len() as u32;
            row.sales.per_round = per_round.to_vec();
            row
        };
        // redis-lock sells a tenth of zookeeper's rate, pooled.
        let rows = |redis: &[f64], zookeeper: &[f64]| {
            vec![
                in_rounds(
                    row(Section::Throughput, "redis-lock", |i| i % 10 == 0),
                    redis,
                ),
                in_rounds(row(Section::Throughput, "zookeeper", |_| true), zookeeper),
            ]
        };
        let claims = check(
            &rows(&[100.0, 90.0, 110.0], &[1000.0, 950.0, 1050.0]),
            &catalogue(),
        );
        assert_eq!(claims[0].verdict, ClaimVerdict::Refuted, "{claims:?}");
        assert!(
            claims[0].evidence.contains("rounds 100, 90.0, 110"),
            "{claims:?}"
        );
        // The second round had redis-lock ahead.
        let claims = check(
            &rows(&[100.0, 960.0, 100.0], &[1000.0, 950.0, 1000.0]),
            &catalogue(),
        );
        assert_eq!(claims[0].verdict, ClaimVerdict::Inconclusive, "{claims:?}");
    }

    /// Within the margin the verdict is inconclusive.
    #[test]
    fn a_close_race_is_inconclusive() {
        let rows = vec![
            row(Section::Throughput, "redis-lock", |i| i % 10 != 0),
            row(Section::Throughput, "zookeeper", |_| true),
        ];
        let claims = check(&rows, &catalogue());
        assert_eq!(claims[0].verdict, ClaimVerdict::Inconclusive, "{claims:?}");
    }
}
