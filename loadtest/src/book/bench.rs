//! The lock library's benchmark (`book/data/bench.json`): one client's acquire and
//! release, 16 tasks contending for one key, the latency's steadiness as concurrency
//! rises, and the source articles' Redis-vs-ZooKeeper claims judged on them.

use crate::claims::{all, claim, source};
use crate::markdown::{Facts, Pages, banner, num, table};
use crate::report::{Claim, ClaimVerdict};
use serde::Deserialize;
use std::fmt::Write as _;

const SOURCE: &str = "book/data/bench.json";

/// `target/criterion/locks-summary.json`, as `cargo bench -p locks` writes it: a
/// bench target of another crate, whose summary is plain JSON (no type `loadtest`
/// could share), so this is the book's typed view of it.
#[derive(Debug, Clone, Deserialize)]
pub struct Bench {
    /// The run it is part of (`STOCK_LOCKS_RUN` when the benchmark ran).
    #[serde(default)]
    pub run: Option<String>,
    /// The cores and each server's durability when it ran.
    #[serde(default)]
    pub machine: crate::report::Machine,
    pub uncontended: Vec<Uncontended>,
    /// How long the contended runs ran, seconds.
    pub contended_seconds: f64,
    pub contended: Vec<Contended>,
    /// Into how many parts a window was cut for a figure's spread.
    #[serde(default)]
    pub parts: u32,
    /// How long each steadiness level ran, seconds.
    #[serde(default)]
    pub steadiness_seconds: f64,
    #[serde(default)]
    pub steadiness: Vec<Steadiness>,
}

/// A figure measured in each part of a window: the median and range of the parts
/// (absent when no part had it).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct Spread {
    /// The middle part's figure.
    pub median: f64,
    /// The lowest part's.
    pub low: f64,
    /// The highest part's.
    pub high: f64,
}

impl Spread {
    /// `median (low–high)`, or `–` without data.
    fn text(spread: Option<Spread>) -> String {
        spread.map_or("–".into(), |s| {
            format!("{} ({}–{})", num(s.median), num(s.low), num(s.high))
        })
    }
}

/// `Some(true)` when `a` is decisively larger than `b`, `Some(false)` when `b` is,
/// `None` otherwise: the demo's rule for figures measured once each
/// ([`crate::rate::decisive`]). The parts of two windows were not measured side by
/// side, so `a`'s lead ranges from its lowest part over `b`'s highest to its highest
/// over `b`'s lowest.
fn decisively_larger(a: &Spread, b: &Spread) -> Option<bool> {
    let above = |a: &Spread, b: &Spread| {
        crate::rate::decisive(&crate::rate::Ratio {
            times: a.median / b.median,
            low: a.low / b.high,
            high: a.high / b.low,
        })
    };
    if above(a, b) {
        Some(true)
    } else if above(b, a) {
        Some(false)
    } else {
        None
    }
}

/// One lock service over the concurrency levels: a key per task.
#[derive(Debug, Clone, Deserialize)]
pub struct Steadiness {
    pub row: String,
    /// The server it runs on (`Redis`, `Redis Cluster`, `ZooKeeper`, `etcd`, ...).
    #[serde(default)]
    pub server: Option<String>,
    pub levels: Vec<Level>,
}

/// One concurrency level: acquisitions per second, latency p50 and p99 (µs) and
/// their ratio, each per part of the window; and the acquisitions that failed.
#[derive(Debug, Clone, Deserialize)]
pub struct Level {
    pub tasks: u64,
    pub per_second: Option<Spread>,
    pub p50_us: Option<Spread>,
    pub p99_us: Option<Spread>,
    pub p99_over_p50: Option<Spread>,
    pub errors: u64,
}

impl Level {
    /// The level, if every acquisition succeeded (a level with failures measured
    /// something else, and judges nothing).
    fn clean(&self) -> Option<&Level> {
        (self.errors == 0).then_some(self)
    }
}

/// One client, acquire + release: its median.
#[derive(Debug, Clone, Deserialize)]
pub struct Uncontended {
    pub row: String,
    pub median_us: f64,
}

/// Tasks contending for one key.
#[derive(Debug, Clone, Deserialize)]
pub struct Contended {
    /// The lock it measures: one of the `locks` backends (`ours: <backend>`), or another
    /// library's lock.
    pub row: String,
    /// For one of ours, the server it runs on.
    #[serde(default)]
    pub server: Option<String>,
    /// How many tasks contended.
    pub tasks: u64,
    pub per_second: f64,
    /// Acquisitions of the task that got the fewest and the most (none: no task).
    pub per_task_min: Option<u64>,
    pub per_task_max: Option<u64>,
    /// Jain's fairness index over the tasks' acquisitions.
    pub jain: f64,
    pub overtakes_per_acquisition: f64,
    /// Overtakes per acquisition in each part of the window.
    #[serde(default)]
    pub overtakes_spread: Option<Spread>,
    /// The longest an acquisition waited, ms.
    #[serde(default)]
    pub longest_wait_ms: Option<f64>,
    pub errors: u64,
}

/// The uncontended and the contended table.
pub fn pages(bench: &Bench, pages: &mut Pages, facts: &mut Facts) {
    let mut page = banner(SOURCE);
    let body: Vec<Vec<String>> = bench
        .uncontended
        .iter()
        .map(|r| vec![r.row.clone(), num(r.median_us)])
        .collect();
    page.push_str(&table(
        &["one client, acquire + release", ">median µs"],
        &body,
    ));
    pages.insert("bench/uncontended.md".to_string(), page);
    let mut page = banner(SOURCE);
    let _ = writeln!(
        page,
        "*16 tasks on one key for {} s, empty critical section.*\n",
        num(bench.contended_seconds)
    );
    let count = |n: Option<u64>| n.map_or_else(|| num(f64::NAN), |n| n.to_string());
    let body: Vec<Vec<String>> = bench
        .contended
        .iter()
        .map(|r| {
            if let Some(ours) = r.row.strip_prefix("ours: ") {
                facts.add(
                    &format!("bench-contended-{}", ours.replace([' ', '(', ')'], "")),
                    num(r.per_second),
                );
            }
            vec![
                r.row.clone(),
                num(r.per_second),
                format!("{}–{}", count(r.per_task_min), count(r.per_task_max)),
                num(r.jain),
                num(r.overtakes_per_acquisition),
                Spread::text(r.overtakes_spread),
                r.longest_wait_ms.map_or_else(String::new, num),
                r.errors.to_string(),
            ]
        })
        .collect();
    page.push_str(&table(
        &[
            "lock",
            ">acquisitions/s",
            ">per task min–max",
            ">Jain fairness",
            ">FIFO overtakes per acquisition",
            ">overtakes per part of the window: median (range)",
            ">longest wait ms",
            ">errors",
        ],
        &body,
    ));
    pages.insert("bench/contended.md".to_string(), page);
    if !bench.steadiness.is_empty() {
        steadiness_page(bench, pages);
        let mut page = banner(SOURCE);
        page.push_str(&claims_table(&claims(bench)));
        pages.insert("bench/claims.md".to_string(), page);
    }
}

/// Two tables, p99/p50 and acquisitions per second, a column per level.
fn steadiness_page(bench: &Bench, pages: &mut Pages) {
    let mut page = banner(SOURCE);
    let _ = writeln!(
        page,
        "*Each task acquires and releases a key of its own for {} s per level; each figure is the median (range) of its {} parts. The clients and every server (the cluster's nodes too) share this machine's cores: at many tasks the acquisitions per second measure what each acquisition costs in CPU, not how far a server would scale on machines of its own.*\n",
        num(bench.steadiness_seconds),
        bench.parts
    );
    let levels: Vec<String> = bench
        .steadiness
        .first()
        .into_iter()
        .flat_map(|s| s.levels.iter())
        .map(|l| format!(">{} task{}", l.tasks, if l.tasks == 1 { "" } else { "s" }))
        .collect();
    for (title, figure) in [
        ("p99 / p50 of acquire + release", 0),
        ("acquisitions per second", 1),
    ] {
        let mut header = vec![title.to_string()];
        header.extend(levels.iter().cloned());
        let body: Vec<Vec<String>> = bench
            .steadiness
            .iter()
            .map(|s| {
                let mut row = vec![s.row.clone()];
                row.extend(s.levels.iter().map(|l| match figure {
                    0 => Spread::text(l.p99_over_p50),
                    _ => Spread::text(l.per_second),
                }));
                row
            })
            .collect();
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        page.push_str(&table(&header, &body));
        page.push('\n');
    }
    pages.insert("bench/steadiness.md".to_string(), page);
}

/// The claims as the demo's claims page shows them, with the rule they were judged by.
fn claims_table(claims: &[Claim]) -> String {
    let mut text = super::demo::claims_table(claims);
    let _ = writeln!(
        text,
        "\nConfirmed or refuted only when every part of one figure's window is above every part of the other's, its median more than {} % above the other's, and either its lowest part more than that above the other's highest or its lead larger than it could move (from its lowest part over the other's highest to its highest over the other's lowest); otherwise inconclusive.",
        num(100.0 * crate::rate::MARGIN)
    );
    text
}

/// The Redis-vs-ZooKeeper table of the interview article, judged on the bench: Redis
/// (alone and as a cluster) against ZooKeeper (and etcd, the other consensus store).
/// A comparison counts only between levels of the same number of tasks, each without
/// failed acquisitions, and only where both figures exist.
pub fn claims(bench: &Bench) -> Vec<Claim> {
    let levels: Vec<u64> = steady(bench, REDIS[0])
        .into_iter()
        .flat_map(|s| s.levels.iter().map(|l| l.tasks))
        .collect();
    let load = format!(
        "a key per task, {} s per level in {} parts",
        num(bench.steadiness_seconds),
        bench.parts
    );
    vec![
        throughput_claim(bench, &levels, &load),
        steadiness_claim(bench, &levels, &load),
        fairness_claim(bench),
    ]
}

// Our locks, by the server they run on.
/// The servers of our Redis locks.
const REDIS: [&str; 2] = ["Redis", "Redis Cluster"];
/// The servers of our consensus locks (ZooKeeper first: the claims name it).
const CONSENSUS: [&str; 2] = ["ZooKeeper", "etcd"];

/// The steadiness runs of our lock on server `on`.
fn steady<'a>(bench: &'a Bench, on: &str) -> Option<&'a Steadiness> {
    bench
        .steadiness
        .iter()
        .find(|s| s.server.as_deref() == Some(on))
}

/// The level of `tasks` tasks of our lock on server `on`, if no acquisition failed.
fn level<'a>(bench: &'a Bench, on: &str, tasks: u64) -> Option<&'a Level> {
    steady(bench, on).and_then(|s| s.levels.iter().find(|l| l.tasks == tasks)?.clean())
}

/// The contended run of our lock on server `on`.
fn contended<'a>(bench: &'a Bench, on: &str) -> Option<&'a Contended> {
    bench
        .contended
        .iter()
        .find(|c| c.server.as_deref() == Some(on))
}

/// [`decisively_larger`], where both figures exist (none otherwise).
fn compare(a: Option<Spread>, b: Option<Spread>) -> Option<bool> {
    decisively_larger(&a?, &b?)
}

/// Throughput at the highest concurrency: every Redis lock against every consensus
/// lock, at the top level of `levels`.
fn throughput_claim(bench: &Bench, levels: &[u64], load: &str) -> Claim {
    let top = levels.last().copied().unwrap_or(0);
    let mut verdicts = Vec::new();
    let mut evidence = Vec::new();
    for on in REDIS.iter().chain(&CONSENSUS) {
        let figure = level(bench, on, top).map_or("–".into(), |l| Spread::text(l.per_second));
        evidence.push(format!("{on} {figure}/s"));
    }
    for r in REDIS {
        for c in CONSENSUS {
            let (a, b) = (level(bench, r, top), level(bench, c, top));
            verdicts.push(compare(
                a.and_then(|l| l.per_second),
                b.and_then(|l| l.per_second),
            ));
        }
    }
    claim(
        "Redis locks suit high concurrency: more acquisitions per second than ZooKeeper and etcd",
        source::INTERVIEW,
        ("lock bench, steadiness", &format!("{top} tasks, {load}")),
        all(&verdicts),
        evidence.join("; "),
    )
}

/// Steadiness, level by level: Redis's p99/p50 above ZooKeeper's. Confirmed only
/// when every level says so, refuted only when every level says the opposite.
fn steadiness_claim(bench: &Bench, levels: &[u64], load: &str) -> Claim {
    let first = levels.first().copied().unwrap_or(0);
    let top = levels.last().copied().unwrap_or(0);
    let zk = CONSENSUS[0];
    let mut verdicts = Vec::new();
    let mut evidence = Vec::new();
    let p99 = |l: &Level| Spread::text(l.p99_us);
    for &tasks in levels {
        let Some(z) = level(bench, zk, tasks) else {
            continue;
        };
        let ratio = Spread::text(z.p99_over_p50);
        let mut line = vec![format!("{zk} {ratio} (p99 {} µs)", p99(z))];
        for r in REDIS {
            let Some(l) = level(bench, r, tasks) else {
                continue;
            };
            let verdict = compare(l.p99_over_p50, z.p99_over_p50);
            verdicts.push(verdict);
            let said = match verdict {
                Some(true) => "ZooKeeper steadier",
                Some(false) => "Redis steadier",
                None => "no decision",
            };
            let ratio = Spread::text(l.p99_over_p50);
            line.push(format!("{r} {ratio} (p99 {} µs): {said}", p99(l)));
        }
        let plural = if tasks == 1 { "" } else { "s" };
        evidence.push(format!("{tasks} task{plural}: {}", line.join(", ")));
    }
    let every = |wanted: bool| !verdicts.is_empty() && verdicts.iter().all(|v| *v == Some(wanted));
    let verdict = if every(true) {
        ClaimVerdict::Confirmed
    } else if every(false) {
        ClaimVerdict::Refuted
    } else {
        ClaimVerdict::Inconclusive
    };
    claim(
        "ZooKeeper's response times are steadier than Redis's (p99 / p50 lower)",
        source::INTERVIEW,
        (
            "lock bench, steadiness",
            &format!("{first} to {top} tasks, {load}"),
        ),
        verdict,
        evidence.join("; "),
    )
}

/// Fairness under contention: ZooKeeper in arrival order in every part of the
/// window, and Redis decisively not.
fn fairness_claim(bench: &Bench) -> Claim {
    let zk = CONSENSUS[0];
    let mut verdicts = Vec::new();
    let mut evidence = Vec::new();
    let wait = |c: &Contended| {
        c.longest_wait_ms
            .map_or_else(String::new, |w| format!(", longest wait {} ms", num(w)))
    };
    if let Some(z) = contended(bench, zk) {
        verdicts.push(z.overtakes_spread.map(|s| s.high == 0.0));
        evidence.push(format!(
            "{zk} {}{}",
            Spread::text(z.overtakes_spread),
            wait(z)
        ));
        for r in REDIS {
            let Some(c) = contended(bench, r) else {
                continue;
            };
            verdicts.push(compare(c.overtakes_spread, z.overtakes_spread));
            evidence.push(format!(
                "{r} {}{}",
                Spread::text(c.overtakes_spread),
                wait(c)
            ));
        }
    }
    claim(
        "ZooKeeper locks are fair (first come, first served), Redis locks are not",
        source::INTERVIEW,
        (
            "lock bench, contended",
            &format!(
                "{} tasks on one key, {} s, FIFO overtakes per acquisition",
                bench.contended.first().map_or(0, |c| c.tasks),
                num(bench.contended_seconds)
            ),
        ),
        all(&verdicts),
        evidence.join("; "),
    )
}
