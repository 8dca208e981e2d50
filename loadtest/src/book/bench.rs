//! The lock library's benchmark (`book/data/bench.json`): one client's acquire and
//! release, and 16 tasks contending for one key.

use super::{Facts, Pages, banner, num, table};
use serde::Deserialize;
use std::fmt::Write as _;

const SOURCE: &str = "book/data/bench.json";

/// `target/criterion/locks-summary.json`, as `cargo bench -p locks` writes it: a
/// bench target of another crate, whose summary is plain JSON (no type `loadtest`
/// could share), so this is the book's typed view of it.
#[derive(Debug, Clone, Deserialize)]
pub struct Bench {
    pub uncontended: Vec<Uncontended>,
    /// How long the contended runs ran, seconds.
    pub contended_seconds: f64,
    pub contended: Vec<Contended>,
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
    pub per_second: f64,
    /// Acquisitions of the task that got the fewest and the most (none: no task).
    pub per_task_min: Option<u64>,
    pub per_task_max: Option<u64>,
    /// Jain's fairness index over the tasks' acquisitions.
    pub jain: f64,
    pub overtakes_per_acquisition: f64,
    pub errors: u64,
}

/// The uncontended and the contended table.
pub fn pages(bench: &Bench, pages: &mut Pages, facts: &mut Facts) {
    let mut page = banner(SOURCE);
    let body: Vec<Vec<String>> = (bench.uncontended.iter())
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
    let body: Vec<Vec<String>> = (bench.contended.iter())
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
            ">errors",
        ],
        &body,
    ));
    pages.insert("bench/contended.md".to_string(), page);
}
