//! The classic claims of the write-ups (`shared/seeds/`), checked against one run.
//!
//! A claim comparing two throughputs is confirmed only when the difference is larger
//! than [`NOISE`] (this machine is noisy: two runs of the same strategy differ by up to
//! ~10%); within it, the verdict is "inconclusive", never a coin flip.

use crate::html::escape;
use crate::report::{Part, Row};
use serde::Serialize;
use std::fmt::Write;

/// Relative difference below which two measurements count as equal.
pub const NOISE: f64 = 0.10;

/// What a run says about a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClaimVerdict {
    Confirmed,
    Refuted,
    /// Within the noise margin, or not every comparison agrees.
    Inconclusive,
}

impl ClaimVerdict {
    /// `confirmed` if `holds`, else `refuted`.
    fn from(holds: bool) -> ClaimVerdict {
        if holds {
            ClaimVerdict::Confirmed
        } else {
            ClaimVerdict::Refuted
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ClaimVerdict::Confirmed => "confirmed",
            ClaimVerdict::Refuted => "refuted",
            ClaimVerdict::Inconclusive => "inconclusive",
        }
    }
}

impl std::fmt::Display for ClaimVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Claim {
    pub claim: String,
    /// Where the claim comes from.
    pub source: String,
    pub verdict: ClaimVerdict,
    /// The numbers behind the verdict.
    pub evidence: String,
}

/// `Some(true)` if `a` is larger than `b` by more than the noise margin, `Some(false)` if
/// smaller by more than it, `None` within it.
fn larger(a: f64, b: f64) -> Option<bool> {
    if a > b * (1.0 + NOISE) {
        Some(true)
    } else if a < b * (1.0 - NOISE) {
        Some(false)
    } else {
        None
    }
}

fn all(verdicts: &[Option<bool>]) -> ClaimVerdict {
    if verdicts.contains(&Some(false)) {
        ClaimVerdict::Refuted
    } else if verdicts.iter().all(|v| *v == Some(true)) {
        ClaimVerdict::Confirmed
    } else {
        ClaimVerdict::Inconclusive
    }
}

fn claim(claim: &str, source: &str, verdict: ClaimVerdict, evidence: String) -> Claim {
    Claim {
        claim: claim.into(),
        source: source.into(),
        verdict,
        evidence,
    }
}

/// Checks every claim that `rows` can speak to. `contention` is optimistic's attempts
/// per success at low and at high concurrency, if measured.
pub fn check(rows: &[Row], contention: Option<((usize, f64), (usize, f64))>) -> Vec<Claim> {
    let find = |section: &str, strategy: &str| {
        rows.iter()
            .find(|r| r.section == section && r.strategy == strategy)
    };
    let rps = |strategy: &str| find("throughput", strategy).map(|r| r.throughput_rps);
    let mut claims = Vec::new();

    if let (Some(sql), Some(pess), Some(mutex)) =
        (rps("atomic-sql"), rps("pessimistic"), rps("local-mutex"))
    {
        claims.push(claim(
            "A single conditional UPDATE beats SELECT ... FOR UPDATE, which beats an in-process lock",
            "seed 000 (the four approaches)",
            all(&[larger(sql, pess), larger(pess, mutex)]),
            format!("atomic-sql {sql:.0} req/s, pessimistic {pess:.0}, local-mutex {mutex:.0} (margin ±{:.0}%)", NOISE * 100.0),
        ));
    }
    if let Some(((low_c, low), (high_c, high))) = contention {
        claims.push(claim(
            "Optimistic CAS degrades under contention",
            "seed 000 (optimistic locking)",
            all(&[larger(high, low)]),
            format!("attempts per success: {low:.2} at concurrency {low_c}, {high:.2} at concurrency {high_c}"),
        ));
    }
    if let (Some(redis), Some(zk)) = (rps("redis-lock"), rps("zookeeper")) {
        claims.push(claim(
            "Redis locks are faster than ZooKeeper locks",
            "seed 004 (Redis vs ZooKeeper)",
            all(&[larger(redis, zk)]),
            format!("redis-lock {redis:.0} req/s, zookeeper {zk:.0}"),
        ));
    }
    if let Some(mysql) = rps("mysql-lock") {
        let others: Vec<(&str, f64)> = ["redis-lock", "redlock", "zookeeper"]
            .iter()
            .filter_map(|s| rps(s).map(|r| (*s, r)))
            .collect();
        if !others.is_empty() {
            let verdicts: Vec<Option<bool>> =
                others.iter().map(|(_, r)| larger(*r, mysql)).collect();
            let listed: Vec<String> = others.iter().map(|(s, r)| format!("{s} {r:.0}")).collect();
            claims.push(claim(
                "A lock in the database is the slowest distributed lock",
                "seeds 003, 004",
                all(&verdicts),
                format!("mysql-lock {mysql:.0} req/s; {}", listed.join(", ")),
            ));
        }
    }
    if let Some(row) = find("held", "local-mutex") {
        claims.push(claim(
            "An in-process lock oversells with two instances",
            "seed 000 (local lock)",
            ClaimVerdict::from(!row.verdict.is_clean()),
            format!(
                "local-mutex on 2 instances: {} lost updates, {} sold beyond stock",
                row.verdict.lost_updates, row.verdict.beyond_stock
            ),
        ));
    }
    if let Some(row) = find("held", "unsafe").or_else(|| find("throughput", "unsafe")) {
        claims.push(claim(
            "Without a lock, stock is oversold",
            "seed 004 (the lost-update story)",
            ClaimVerdict::from(!row.verdict.is_clean()),
            format!(
                "unsafe: {} sold of {}, {} lost updates",
                row.verdict.sold, row.verdict.initial, row.verdict.lost_updates
            ),
        ));
    }
    claims
}

/// The claims' part of the report: the list under `claims` (schema version 1 has the
/// key in every report: an empty list where no claim was checked), a table for the page.
pub fn part(claims: &[Claim]) -> Part {
    let mut html = String::new();
    if !claims.is_empty() {
        html.push_str("<h2>The classic claims, checked by this run</h2><table><tr><th>claim</th><th>source</th><th>verdict</th><th>evidence</th></tr>");
        for c in claims {
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td class=\"{v}\">{v}</td><td>{}</td></tr>",
                escape(&c.claim),
                escape(&c.source),
                escape(&c.evidence),
                v = c.verdict
            );
        }
        let _ = write!(
            html,
            "</table><p>A comparison within ±{:.0}% is inconclusive: this machine is noisy.</p>",
            NOISE * 100.0
        );
    }
    Part {
        key: "claims",
        json: serde_json::to_value(claims).expect("plain data"),
        html,
        title: None,
        sections: Vec::new(),
        strategies: Vec::new(),
        as_expected: true,
    }
}
