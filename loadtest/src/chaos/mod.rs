//! The chaos runner: named fault scenarios under concurrent load, with the ledger as
//! the judge.
//!
//! A [`Lab`] owns private servers (MariaDB, five Redis, ZooKeeper: one node or a
//! three-node ensemble) and two `stock-app` instances started with test hooks and
//! short leases. Instance **A** reaches Redis and ZooKeeper through proxies (so its
//! lock traffic can be partitioned while its database path stays up); instance **B**
//! connects directly. Each [`Cell`] (one scenario, one strategy, fencing on or off)
//! runs on a product of its own:
//!
//! 1. restock; start the load: one buyer on A (the one the fault catches) and a few
//!    on B, each pinned to its instance (so requests to a frozen instance do not
//!    starve the other), sending single-unit deductions in a loop;
//! 2. inject the fault deterministically: a failpoint `pause` handshake tells the
//!    runner a request of A is exactly between its read and its write (holding its
//!    lock), and only then is A frozen (SIGSTOP), killed, or partitioned;
//! 3. heal, let the load run on, stop it, retry every request whose outcome was
//!    unknown with the same `request_id`;
//! 4. read the verdict from the database: lost updates, units sold beyond stock,
//!    double deductions, acknowledged sales missing from the ledger; and from the
//!    clients' timeline: the longest gap without a sale, how long sales stopped after
//!    the fault, how long they took to come back after the heal.
//!
//! A cell's verdict is `erased` (red: sales erased from the stock), `missing` (red:
//! acknowledged sales missing from the ledger), `unavailable` (no sale during the
//! fault), `refused` (safe, and some requests were answered `lock_lost`) or `safe`.
//! Each cell states the verdicts it is expected to give, and from them the checker's
//! verdict expected of its history; the run fails on a surprise in either.

use crate::engine::{Outcome, post_deduct, restock};
use crate::lab::Instance;
use crate::verify;
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use stock_wire::Trait;
use testbed::proxy::ProxyMode;
use testbed::{Stack, StackConfig};

const ADMIN_TOKEN: &str = "chaos-admin-token";
/// Units per product: far more than a cell sells, so lost updates (not sell-outs)
/// are what the ledger shows.
const STOCK: i64 = 100_000;
/// Units of the `no-guard` mistake's product: sold out early in the cell.
const NO_GUARD_STOCK: i64 = 200;
/// The RedLock node whose clock jumps (the third: in A's majority of nodes 1-3).
const JUMPING_NODE: usize = 2;
/// How far its clock jumps forward, as an NTP step or an operator might.
const CLOCK_JUMP_MS: i64 = 30_000;
/// How long a mistake's holder is held where the mistake bites.
const MISTAKE_HOLD: Duration = Duration::from_millis(300);

mod faults;
mod html;
mod judge;
mod lab;
mod load;
pub mod page;
pub mod run;
mod scenarios;

use judge::*;
pub use judge::{cell_name, fencing_label, fmt_opt_ms};
pub use lab::Lab;
use load::*;

pub use scenarios::{CellSpec, CellVerdict, History, Scenario, Setup, history_as_expected, matrix};

/// How long things take in a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Timing {
    /// `--lock-lease-ms` of both instances.
    pub lease_ms: u64,
    /// `--zk-session-timeout-ms` of both instances.
    pub zk_session_ms: u64,
    /// Load before the fault.
    pub warm_ms: u64,
    /// Load after the heal.
    pub after_ms: u64,
    /// Buyers on instance B, each with one request in flight (A runs one).
    pub workers: usize,
    /// A round-trip time (ms) between the instances and every server (`--rtt-ms`):
    /// the stack behind the testbed's proxies, and A's fault proxies with it. `None`:
    /// loopback.
    pub rtt_ms: Option<f64>,
}

impl Timing {
    /// The defaults of `loadtest chaos`.
    pub fn standard() -> Timing {
        Timing {
            lease_ms: 1000,
            zk_session_ms: 2000,
            warm_ms: 800,
            after_ms: 1500,
            workers: 3,
            rtt_ms: None,
        }
    }

    /// Short leases and windows, for the test suite.
    pub fn quick() -> Timing {
        Timing {
            lease_ms: 400,
            zk_session_ms: 1000,
            warm_ms: 400,
            after_ms: 800,
            workers: 2,
            rtt_ms: None,
        }
    }

    /// The latency [`Timing::rtt_ms`] puts between the instances and the servers.
    pub fn network(&self) -> Option<testbed::Latency> {
        self.rtt_ms.map(crate::lab::round_trip)
    }

    /// Chubby's lock-delay of the lock-delay scenarios: 2x the lease.
    pub fn lock_delay_ms(&self) -> u64 {
        2 * self.lease_ms
    }

    /// How long a holder stays frozen or partitioned: 3x what its lock survives (a
    /// session lock, its session; a lease in whole seconds, the rounded lease and the
    /// server's expiry check; with lock-delay, lease + delay); the short lock-delay
    /// pause, 2x the lease (past the lease, within lease + delay).
    fn freeze(&self, spec: &CellSpec) -> Duration {
        match spec.scenario {
            Scenario::LockDelayShortPause => return Duration::from_millis(2 * self.lease_ms),
            Scenario::LockDelayLongPause => {
                return Duration::from_millis(3 * (self.lease_ms + self.lock_delay_ms()));
            }
            _ => {}
        }
        let survives = if spec.has(Trait::SessionLock) {
            self.lease_ms.max(self.zk_session_ms)
        } else if spec.has(Trait::LeaseInWholeSeconds) {
            // Rounded up to seconds, and expired by a check every 500 ms (etcd).
            self.lease_ms.div_ceil(1000) * 1000 + 500
        } else {
            self.lease_ms
        };
        Duration::from_millis(3 * survives)
    }
}

/// One cell's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    pub scenario: Scenario,
    pub scenario_number: u8,
    pub strategy: String,
    /// `null`: the strategy has no fencing switch.
    pub fencing: Option<bool>,
    pub requests: u64,
    pub succeeded: u64,
    pub sold_out: u64,
    /// `503 lock_lost`: refused by the fence (or a lock known lost before COMMIT).
    pub refused: u64,
    /// `503 busy`: no lock within the wait, or retries exhausted.
    pub busy: u64,
    /// Everything else: `503 backend_unavailable`, `503 outcome_unknown`, 5xx,
    /// transport errors (requests to a frozen or dead instance).
    pub failed: u64,
    /// Requests whose outcome was unknown, retried with the same request_id.
    pub retried_unknown: u64,
    /// Of those, how many the service answered as duplicates (they had committed).
    pub retried_duplicates: u64,
    /// Units in the ledger (sold this epoch).
    pub sold: i64,
    /// Transactions per successful request (a compare-and-set retries).
    pub attempts_per_sale: f64,
    pub lost_updates: i64,
    pub beyond_stock: i64,
    /// Units taken from stock with no ledger row: a deduction applied twice.
    pub double_deducted: i64,
    pub missing_acknowledged: u64,
    /// How long the fault lasted (0 for a kill that is not healed).
    pub fault_ms: f64,
    /// From the fault to the next sale.
    pub blocked_ms: Option<f64>,
    /// The longest time without a sale during the run.
    pub longest_gap_ms: f64,
    /// From the heal to the next sale.
    pub recovery_ms: Option<f64>,
    pub verdict: CellVerdict,
    pub expected: Vec<CellVerdict>,
    /// The checker's verdict the cell expects of its history
    /// ([`CellVerdict::expected_history`]).
    pub expected_history: crate::history::Said,
    /// The ledger gave an expected verdict, and the history (when checked) the one
    /// expected of it.
    pub as_expected: bool,
    /// One sentence: why this cell came out as it did.
    pub why: String,
    /// The checker's verdict on the cell's history (every answer, unknown outcomes
    /// settled by the ledger), with the ledger's classes added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<crate::history::Judged>,
    /// The strategy's traits (from its card), for the sentences.
    #[serde(skip)]
    pub traits: Vec<Trait>,
}

impl Cell {
    /// Whether the strategy declares `t`.
    pub fn has(&self, t: Trait) -> bool {
        self.traits.contains(&t)
    }

    /// Adds the checker's verdict on the cell's history, and judges the cell again.
    pub fn add_history(&mut self, judged: crate::history::Judged) {
        self.history = Some(judged);
        self.as_expected = self.judged_as_expected();
    }

    /// Whether the ledger gave one of the expected verdicts and the history, when it
    /// was checked, the verdict expected of it.
    fn judged_as_expected(&self) -> bool {
        self.expected.contains(&self.verdict)
            && self
                .history
                .as_ref()
                .is_none_or(|h| history_as_expected(self.expected_history, h.verdict))
    }
}

/// The key the chaos grid's part is stored under in the JSON report.
pub const KEY: &str = "faults";

/// The chaos part of the report, under `faults`: written by [`ChaosReport::part`],
/// read back by the book.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChaosReport {
    pub timing: Timing,
    pub zk_nodes: usize,
    pub cells: Vec<Cell>,
    pub scenarios: Vec<ScenarioInfo>,
    pub seconds: f64,
    /// The strategies as the lab's service lists them (the grid's column order); in
    /// the report once, as its `strategies`.
    #[serde(skip)]
    pub strategies: crate::catalogue::Catalogue,
}

/// A scenario as the report states it ([`Scenario`]'s id, number, title and how).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScenarioInfo {
    pub id: String,
    pub number: u8,
    pub title: String,
    pub how: String,
}

impl ChaosReport {
    /// The grid's part of the report, under [`KEY`] (drawn by [`ChaosReport::html`]).
    pub fn part(&self) -> crate::report::Part {
        crate::report::Part {
            key: KEY,
            json: serde_json::to_value(self).expect("plain data"),
            title: Some((
                "stock-locks: faults and fencing",
                "One run of <code>loadtest chaos</code>",
            )),
            strategies: self.cells.iter().map(|c| c.strategy.clone()).collect(),
            as_expected: self.all_as_expected(),
        }
    }

    /// The grid's part of the HTML report: the grid, the fencing lesson, a table per
    /// scenario. `strategies` gives the columns' order (the report keeps the
    /// catalogue once, as its `strategies`).
    pub fn html(&self, strategies: &crate::catalogue::Catalogue) -> String {
        html::faults_section(self, strategies)
    }

    pub fn all_as_expected(&self) -> bool {
        self.cells.iter().all(|c| c.as_expected)
    }

    /// The write-ups' claims this run's cells speak to (the classic mistakes), each
    /// confirmed when its cell failed the way the claim says.
    pub fn claims(&self) -> Vec<crate::report::Claim> {
        use crate::claims::claim;
        use crate::report::ClaimVerdict;
        let mut claims = Vec::new();
        for c in &self.cells {
            let Some((text, source, holds)) = self.claim_of(c) else {
                continue;
            };
            let verdict = if holds {
                ClaimVerdict::Confirmed
            } else {
                ClaimVerdict::Refuted
            };
            claims.push(claim(
                text,
                source,
                (
                    &format!("chaos: {}", c.scenario.id()),
                    &format!(
                        "{}, {}",
                        cell_name(&c.strategy, c.fencing),
                        c.scenario.title()
                    ),
                ),
                verdict,
                format!(
                    "{} ({}): {}",
                    cell_name(&c.strategy, c.fencing),
                    c.scenario.id(),
                    c.why
                ),
            ));
        }
        claims
    }

    /// The claim of the write-ups a cell speaks to, if any: its text, its source, and
    /// whether the cell failed (or held) the way the claim says.
    fn claim_of(&self, c: &Cell) -> Option<(&'static str, &'static str, bool)> {
        match c.scenario {
            Scenario::MistakeLockInsideTransaction => {
                faults::mistake_lock_scope::claim_mistake_lock_inside_transaction(c)
            }
            Scenario::MistakeReleaseBeforeCommit => {
                faults::mistake_lock_scope::claim_mistake_release_before_commit(c)
            }
            Scenario::MistakeSetnxThenExpire => {
                faults::mistake_holder_killed::claim_mistake_setnx_then_expire(c)
            }
            Scenario::MistakeGetThenDel => {
                faults::mistake_get_then_del::claim_mistake_get_then_del(c)
            }
            Scenario::MistakePersistentNode => {
                faults::mistake_holder_killed::claim_mistake_persistent_node(c)
            }
            Scenario::MistakeNoGuard => faults::mistake_no_guard::claim_mistake_no_guard(c),
            Scenario::RedisFailover => faults::redis_failover::claim_redis_failover(c),
            Scenario::RedlockClockJump => faults::redlock_clock_jump::claim_redlock_clock_jump(c),
            Scenario::ReplicaLag => faults::replica_lag::claim_replica_lag(self, c),
            Scenario::RedisFailoverWait => faults::redis_failover::claim_redis_failover_wait(c),
            _ => None,
        }
    }
}

/// Runs the cells of `scenarios` (every one when empty) and of `strategies` (every
/// one when empty); `all` adds the extra cells.
pub async fn run(
    app_bin: PathBuf,
    timing: Timing,
    scenarios: &[Scenario],
    strategies_filter: &[String],
    all: bool,
    histories: Option<std::path::PathBuf>,
) -> anyhow::Result<ChaosReport> {
    let strategies_chosen =
        |filter: &[String], name: &str| filter.is_empty() || filter.iter().any(|s| s == name);
    let started = Instant::now();
    // The cells come from the strategies' cards, which the lab's service serves: the
    // servers are chosen by the scenarios (an ensemble when one needs it).
    let chosen = |s: &Scenario| scenarios.is_empty() || scenarios.contains(s);
    let zk_nodes = if Scenario::ALL
        .iter()
        .any(|s| chosen(s) && s.needs_ensemble())
    {
        3
    } else {
        1
    };
    eprintln!(
        "chaos: starting MariaDB, 5 Redis, ZooKeeper and etcd ({zk_nodes} node(s) each) and 2 stock-app instances ..."
    );
    let mut lab = Lab::start(app_bin, timing.clone(), zk_nodes).await?;
    lab.histories = histories;
    if Scenario::ALL.iter().any(|s| chosen(s) && s.lags_replica()) {
        lab.start_replica()?;
    }
    let strategies = lab.catalogue.clone();
    let cells: Vec<CellSpec> = lab
        .matrix()
        .into_iter()
        .filter(|c| all || !c.extra)
        .filter(|c| chosen(&c.scenario))
        .filter(|c| strategies_chosen(strategies_filter, &c.strategy))
        .collect();
    if cells.is_empty() {
        lab.stop().await;
        bail!("no cell matches the chosen scenarios and strategies");
    }
    let mut results = Vec::new();
    for spec in &cells {
        eprintln!(
            "chaos: {} {} / {} ...",
            spec.scenario.number(),
            spec.scenario.id(),
            cell_name(&spec.strategy, spec.fencing),
        );
        let cell = lab
            .run_cell(spec)
            .await
            .with_context(|| format!("{} / {}", spec.scenario.id(), spec.strategy))?;
        eprintln!(
            "chaos:   -> {}{}: {}",
            cell.verdict.id(),
            if cell.as_expected {
                ""
            } else {
                " (UNEXPECTED)"
            },
            cell.why
        );
        results.push(cell);
    }
    lab.stop().await;
    let mut scenarios_seen: Vec<Scenario> = Vec::new();
    for c in &results {
        if !scenarios_seen.contains(&c.scenario) {
            scenarios_seen.push(c.scenario);
        }
    }
    Ok(ChaosReport {
        timing,
        zk_nodes,
        cells: results,
        scenarios: scenarios_seen
            .into_iter()
            .map(|s| ScenarioInfo {
                id: s.id().to_string(),
                number: s.number(),
                title: s.title().to_string(),
                how: s.how().to_string(),
            })
            .collect(),
        seconds: started.elapsed().as_secs_f64(),
        strategies,
    })
}

/// Prints the grid as a table.
pub fn print_table(report: &ChaosReport) {
    println!();
    println!(
        "{:<2} {:<31} {:<12} {:<9} {:>5} {:>6} {:>5} {:>6} {:>5} {:>6} {:>7} {:>8} {:>8} {:>8}  {:<16}  {:<16}  verdict",
        "#",
        "scenario",
        "strategy",
        "fencing",
        "sold",
        "refused",
        "busy",
        "failed",
        "lost",
        "double",
        "missing",
        "blocked",
        "max gap",
        "recover",
        "history",
        "expected history",
    );
    for c in &report.cells {
        println!(
            "{:<2} {:<31} {:<12} {:<9} {:>5} {:>6} {:>5} {:>6} {:>5} {:>6} {:>7} {:>8} {:>8.0} {:>8}  {:<16}  {:<16}  {}{}{}",
            c.scenario_number,
            c.scenario.id(),
            c.strategy,
            match fencing_label(c.fencing) {
                "" => "-",
                label => label,
            },
            c.succeeded,
            c.refused,
            c.busy,
            c.failed,
            c.lost_updates,
            c.double_deducted,
            c.missing_acknowledged,
            fmt_opt_ms(c.blocked_ms),
            c.longest_gap_ms,
            fmt_opt_ms(c.recovery_ms),
            crate::history::verdict_text(c.history.as_ref()),
            c.expected_history.text(),
            c.verdict.id(),
            if c.as_expected { "" } else { "  UNEXPECTED" },
            match c.history.as_ref().filter(|h| !h.anomalies.is_empty()) {
                Some(h) => format!("  ({})", h.anomalies_text()),
                None => String::new(),
            },
        );
    }
    println!(
        "sold = successful requests; lost = ledger - stock change (sales erased by a stale write); double = stock change - ledger; missing = acknowledged sales with no ledger row; blocked = ms from the fault to the next sale; recover = ms from the heal to the next sale"
    );
}
