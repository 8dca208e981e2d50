//! The classic claims of the write-ups (`shared/seeds/`), checked against one run.
//!
//! A claim comparing two throughputs is confirmed only when the difference is larger
//! than [`NOISE`] (this machine is noisy: two runs of the same strategy differ by up to
//! ~10%); within it, the verdict is "inconclusive", never a coin flip.

use crate::catalogue::{Card, Catalogue};
use crate::report::{Claim, ClaimVerdict, Row};

/// Relative difference below which two measurements count as equal.
pub const NOISE: f64 = 0.10;

/// `confirmed` if the claim holds in the run, else `refuted`.
fn holds(holds: bool) -> ClaimVerdict {
    if holds {
        ClaimVerdict::Confirmed
    } else {
        ClaimVerdict::Refuted
    }
}

/// `Some(true)` if `a` is larger than `b` by more than the noise margin, `Some(false)` if
/// smaller by more than it, `None` within it.
pub fn larger(a: f64, b: f64) -> Option<bool> {
    if a > b * (1.0 + NOISE) {
        Some(true)
    } else if a < b * (1.0 - NOISE) {
        Some(false)
    } else {
        None
    }
}

/// Confirmed when every comparison holds beyond the noise, refuted when one fails
/// beyond it, inconclusive otherwise.
pub fn all(verdicts: &[Option<bool>]) -> ClaimVerdict {
    if verdicts.contains(&Some(false)) {
        ClaimVerdict::Refuted
    } else if verdicts.iter().all(|v| *v == Some(true)) {
        ClaimVerdict::Confirmed
    } else {
        ClaimVerdict::Inconclusive
    }
}

pub fn claim(claim: &str, source: &str, verdict: ClaimVerdict, evidence: String) -> Claim {
    Claim {
        claim: claim.into(),
        source: source.into(),
        verdict,
        evidence,
    }
}

/// Checks every claim that `rows` can speak to. `contention` is a compare-and-set's
/// attempts per success at low and at high concurrency, if measured. The strategies
/// each claim is about are found by what their cards declare (a trait, the backend),
/// as the seeds describe them: "a conditional UPDATE", "an in-process lock".
pub fn check(
    rows: &[Row],
    contention: Option<((usize, f64), (usize, f64))>,
    catalogue: &Catalogue,
) -> Vec<Claim> {
    let find = |section: &str, strategy: &str| {
        rows.iter()
            .find(|r| r.section == section && r.strategy == strategy)
    };
    let rps = |strategy: &str| find("throughput", strategy).map(|r| r.throughput_rps);
    // The first strategy with a trait, and its throughput.
    let with = |t: &str| catalogue.first_with(t).map(|c| c.name.as_str());
    let measured = |name: Option<&str>| name.and_then(|n| rps(n).map(|r| (n.to_string(), r)));
    let locks = catalogue
        .with("lease-lock")
        .into_iter()
        .chain(catalogue.with("session-lock"));
    let locks: Vec<&Card> = locks.collect();
    let on = |backend: &str| {
        locks
            .iter()
            .find(|c| c.backend.starts_with(backend))
            .map(|c| c.name.as_str())
    };
    let mut claims = Vec::new();

    if let (Some((sql_name, sql)), Some((pess_name, pess)), Some((mutex_name, mutex))) = (
        measured(with("conditional-update")),
        measured(with("row-lock")),
        measured(with("process-lock")),
    ) {
        claims.push(claim(
            "A single conditional UPDATE beats SELECT ... FOR UPDATE, which beats an in-process lock",
            "seed 000 (the four approaches)",
            all(&[larger(sql, pess), larger(pess, mutex)]),
            format!("{sql_name} {sql:.0} req/s, {pess_name} {pess:.0}, {mutex_name} {mutex:.0} (margin ±{:.0}%)", NOISE * 100.0),
        ));
    }
    if let Some(((low_c, low), (high_c, high))) = contention {
        claims.push(claim(
            "Optimistic CAS degrades under contention",
            "seed 000 (compare-and-set)",
            all(&[larger(high, low)]),
            format!("attempts per success: {low:.2} at concurrency {low_c}, {high:.2} at concurrency {high_c}"),
        ));
    }
    let session = catalogue
        .first_with("session-lock")
        .map(|c| c.name.as_str());
    if let (Some((redis_name, redis)), Some((zk_name, zk))) =
        (measured(on("redis")), measured(session))
    {
        claims.push(claim(
            "Redis locks are faster than ZooKeeper locks",
            "seed 004 (Redis vs ZooKeeper)",
            all(&[larger(redis, zk)]),
            format!("{redis_name} {redis:.0} req/s, {zk_name} {zk:.0}"),
        ));
    }
    if let Some((db_name, db)) = measured(on("database")) {
        let others: Vec<(&str, f64)> = locks
            .iter()
            .filter(|c| c.name != *db_name)
            .filter_map(|c| rps(&c.name).map(|r| (c.name.as_str(), r)))
            .collect();
        if !others.is_empty() {
            let verdicts: Vec<Option<bool>> = others.iter().map(|(_, r)| larger(*r, db)).collect();
            let listed: Vec<String> = others.iter().map(|(s, r)| format!("{s} {r:.0}")).collect();
            claims.push(claim(
                "A lock in the database is the slowest distributed lock",
                "seeds 003, 004",
                all(&verdicts),
                format!("{db_name} {db:.0} req/s; {}", listed.join(", ")),
            ));
        }
    }
    if let Some(row) = with("process-lock").and_then(|n| find("held", n)) {
        claims.push(claim(
            "An in-process lock oversells with two instances",
            "seed 000 (local lock)",
            holds(!row.verdict.is_clean()),
            format!(
                "{} on 2 instances: {} lost updates, {} sold beyond stock",
                row.strategy, row.verdict.lost_updates, row.verdict.beyond_stock
            ),
        ));
    }
    if let Some(row) =
        with("no-lock").and_then(|n| find("held", n).or_else(|| find("throughput", n)))
    {
        claims.push(claim(
            "Without a lock, stock is oversold",
            "seed 004 (the lost-update story)",
            holds(!row.verdict.is_clean()),
            format!(
                "{}: {} sold of {}, {} lost updates",
                row.strategy, row.verdict.sold, row.verdict.initial, row.verdict.lost_updates
            ),
        ));
    }
    claims
}
