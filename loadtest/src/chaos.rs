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
//! A cell's verdict is `lost` (red: the stock is wrong), `unavailable` (no sale during
//! the fault), `refused` (safe, and some requests were answered `lock_lost`) or `safe`.
//! Each cell states the verdicts it is expected to give; the run fails on a surprise.

use crate::engine::{is_unknown, post_deduct, restock};
use crate::lab::Instance;
use crate::verify;
use anyhow::{Context, bail};
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use testbed::proxy::{Proxy, ProxyMode};
use testbed::{Stack, StackConfig};

const ADMIN_TOKEN: &str = "chaos-admin-token";
/// Units per product: far more than a cell sells, so lost updates (not sell-outs)
/// are what the ledger shows.
const STOCK: i64 = 100_000;

/// The fault scenarios, numbered as in issue 7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// 1. A's request pauses after its read (holding the lock), then A is frozen for
    ///    3× the lease (or session timeout).
    PausePastLease,
    /// 2. The same freeze against `fence-only`: a fence with no lock.
    FenceOnly,
    /// 3. A's request pauses after its read, then A is killed with SIGKILL.
    HolderKilled,
    /// 4. A's request pauses after its read, then the Redis node of `redis-lock` is
    ///    restarted empty (no persistence).
    RedisRestart,
    /// 5. RedLock with 2 of its 5 nodes frozen.
    RedlockMinorityPaused,
    /// 5. RedLock with 3 of its 5 nodes frozen.
    RedlockMajorityPaused,
    /// 6. The ZooKeeper leader killed (three-node ensemble).
    ZkLeaderKilled,
    /// 7. A's request pauses after its read, then A's lock-service connections are
    ///    blackholed (its database path stays up); released after 3× the lease.
    LockPartition,
    /// 8. A's request pauses before COMMIT; it is let go and MariaDB is killed at
    ///    once; after the restart every unknown outcome is retried with its request_id.
    AmbiguousCommit,
}

impl Scenario {
    pub const ALL: [Scenario; 9] = [
        Scenario::PausePastLease,
        Scenario::FenceOnly,
        Scenario::HolderKilled,
        Scenario::RedisRestart,
        Scenario::RedlockMinorityPaused,
        Scenario::RedlockMajorityPaused,
        Scenario::ZkLeaderKilled,
        Scenario::LockPartition,
        Scenario::AmbiguousCommit,
    ];

    /// The name used on the command line and in the JSON.
    pub fn id(self) -> &'static str {
        match self {
            Scenario::PausePastLease => "pause-past-lease",
            Scenario::FenceOnly => "fence-only",
            Scenario::HolderKilled => "holder-killed",
            Scenario::RedisRestart => "redis-restart",
            Scenario::RedlockMinorityPaused => "redlock-2-of-5-paused",
            Scenario::RedlockMajorityPaused => "redlock-3-of-5-paused",
            Scenario::ZkLeaderKilled => "zk-leader-killed",
            Scenario::LockPartition => "lock-partition",
            Scenario::AmbiguousCommit => "ambiguous-commit",
        }
    }

    pub fn number(self) -> u8 {
        match self {
            Scenario::PausePastLease => 1,
            Scenario::FenceOnly => 2,
            Scenario::HolderKilled => 3,
            Scenario::RedisRestart => 4,
            Scenario::RedlockMinorityPaused | Scenario::RedlockMajorityPaused => 5,
            Scenario::ZkLeaderKilled => 6,
            Scenario::LockPartition => 7,
            Scenario::AmbiguousCommit => 8,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Scenario::PausePastLease => "Holder frozen past its lease",
            Scenario::FenceOnly => "Fence only, no lock (same freeze)",
            Scenario::HolderKilled => "Holder killed (kill -9) mid-section",
            Scenario::RedisRestart => "Redis restarted empty while a holder is paused",
            Scenario::RedlockMinorityPaused => "RedLock: 2 of 5 nodes frozen",
            Scenario::RedlockMajorityPaused => "RedLock: 3 of 5 nodes frozen",
            Scenario::ZkLeaderKilled => "ZooKeeper leader killed (3-node ensemble)",
            Scenario::LockPartition => "Lock service partitioned from the holder",
            Scenario::AmbiguousCommit => "Ambiguous commit: MariaDB killed as COMMIT is sent",
        }
    }

    /// How the fault is made, in one sentence.
    pub fn how(self) -> &'static str {
        match self {
            Scenario::PausePastLease => {
                "A request on instance A pauses between its read and its write (failpoint handshake), then A is SIGSTOPped for 3x the lease (ZooKeeper: 3x the session timeout), then continued."
            }
            Scenario::FenceOnly => {
                "As scenario 1, against fence-only: a ticket from a database sequence, a claim, a guarded write, and no lock at all."
            }
            Scenario::HolderKilled => {
                "A request on instance A pauses between its read and its write, then A is killed with SIGKILL; B's buyers wait for the lock to come back."
            }
            Scenario::RedisRestart => {
                "A request on instance A pauses between its read and its write, then the Redis node of redis-lock is restarted without persistence (the lock and its token counter are gone); A is let go after 3x the lease."
            }
            Scenario::RedlockMinorityPaused => {
                "Two of the five RedLock nodes are SIGSTOPped for 3x the lease, then continued."
            }
            Scenario::RedlockMajorityPaused => {
                "Three of the five RedLock nodes are SIGSTOPped for 3x the lease, then continued."
            }
            Scenario::ZkLeaderKilled => {
                "The leader of the three-node ensemble is killed with SIGKILL, and restarted after 3x the lease."
            }
            Scenario::LockPartition => {
                "A request on instance A pauses between its read and its write, then every connection of A to Redis and ZooKeeper is blackholed (its database path stays up); the request is let go after 3x the lease (ZooKeeper: the session timeout), then the partition heals."
            }
            Scenario::AmbiguousCommit => {
                "A request on instance A pauses just before COMMIT; it is let go and MariaDB is killed at once (the COMMIT may or may not land), restarted, and every request whose outcome was unknown is retried with the same request_id."
            }
        }
    }

    fn needs_ensemble(self) -> bool {
        self == Scenario::ZkLeaderKilled
    }
}

/// A cell's verdict, from the ledger and the clients' timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CellVerdict {
    /// No loss, no refusal, sales went on.
    Safe,
    /// No loss; some requests were refused (`503 lock_lost`).
    Refused,
    /// No loss; no sale at all while the fault lasted.
    Unavailable,
    /// Lost updates, units sold beyond stock, double deductions or acknowledged sales
    /// missing from the ledger.
    Lost,
}

impl CellVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            CellVerdict::Safe => "safe",
            CellVerdict::Refused => "refused",
            CellVerdict::Unavailable => "unavailable",
            CellVerdict::Lost => "lost updates",
        }
    }
}

/// What a cell is expected to show.
const NO_LOSS: &[CellVerdict] = &[
    CellVerdict::Safe,
    CellVerdict::Refused,
    CellVerdict::Unavailable,
];

/// One cell of the matrix: a scenario, a strategy, fencing on or off (`None`: the
/// strategy has no fencing switch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellSpec {
    pub scenario: Scenario,
    pub strategy: &'static str,
    pub fencing: Option<bool>,
    pub expect: &'static [CellVerdict],
    /// Only with `--all`.
    pub extra: bool,
}

const LOCKS: [&str; 4] = ["mysql-lock", "redis-lock", "redlock", "zookeeper"];

/// The whole matrix, default cells first; `extra` ones run only with `--all`.
pub fn matrix() -> Vec<CellSpec> {
    use CellVerdict::*;
    let cell = |scenario, strategy, fencing, expect| CellSpec {
        scenario,
        strategy,
        fencing,
        expect,
        extra: false,
    };
    let extra = |scenario, strategy, fencing, expect| CellSpec {
        scenario,
        strategy,
        fencing,
        expect,
        extra: true,
    };
    let mut cells = Vec::new();
    // 1. Frozen past the lease: unfenced locks lose updates, fenced ones refuse.
    for lock in LOCKS {
        cells.push(cell(
            Scenario::PausePastLease,
            lock,
            Some(false),
            &[Lost][..],
        ));
        cells.push(cell(
            Scenario::PausePastLease,
            lock,
            Some(true),
            &[Refused][..],
        ));
    }
    // The row lock is held by the frozen request: everyone else waits.
    cells.push(cell(
        Scenario::PausePastLease,
        "atomic-sql",
        None,
        &[Unavailable][..],
    ));
    cells.push(cell(
        Scenario::PausePastLease,
        "pessimistic",
        None,
        &[Unavailable][..],
    ));
    // Holds nothing: the frozen request's compare-and-set fails when it wakes.
    cells.push(cell(
        Scenario::PausePastLease,
        "optimistic",
        None,
        &[Safe][..],
    ));
    cells.push(extra(Scenario::PausePastLease, "unsafe", None, &[Lost][..]));
    cells.push(extra(
        Scenario::PausePastLease,
        "local-mutex",
        None,
        &[Lost][..],
    ));
    // 2. The fence alone.
    cells.push(cell(
        Scenario::FenceOnly,
        "fence-only",
        None,
        &[Refused][..],
    ));
    // 3. Killed holders never write: nothing lost anywhere; measure the wait.
    for lock in LOCKS {
        cells.push(cell(Scenario::HolderKilled, lock, Some(true), NO_LOSS));
    }
    for strategy in ["atomic-sql", "pessimistic", "optimistic"] {
        cells.push(cell(Scenario::HolderKilled, strategy, None, NO_LOSS));
    }
    for lock in LOCKS {
        cells.push(extra(Scenario::HolderKilled, lock, Some(false), NO_LOSS));
    }
    // 4. Redis forgets the lock and the token counter.
    cells.push(cell(
        Scenario::RedisRestart,
        "redis-lock",
        Some(false),
        &[Lost][..],
    ));
    cells.push(cell(
        Scenario::RedisRestart,
        "redis-lock",
        Some(true),
        &[Refused][..],
    ));
    // 5. RedLock's quorum.
    cells.push(cell(
        Scenario::RedlockMinorityPaused,
        "redlock",
        Some(true),
        &[Safe, Refused][..],
    ));
    cells.push(cell(
        Scenario::RedlockMajorityPaused,
        "redlock",
        Some(true),
        &[Unavailable][..],
    ));
    // 6. Consensus survives its leader.
    cells.push(cell(
        Scenario::ZkLeaderKilled,
        "zookeeper",
        Some(true),
        NO_LOSS,
    ));
    // 7. Partitioned from the lock service, not from the database.
    for lock in ["redis-lock", "redlock", "zookeeper"] {
        cells.push(cell(
            Scenario::LockPartition,
            lock,
            Some(false),
            &[Lost][..],
        ));
        cells.push(cell(
            Scenario::LockPartition,
            lock,
            Some(true),
            &[Refused][..],
        ));
    }
    // 8. The orders row makes a retry after an unknown outcome a no-op.
    for strategy in ["atomic-sql", "pessimistic", "redis-lock"] {
        cells.push(cell(
            Scenario::AmbiguousCommit,
            strategy,
            (strategy == "redis-lock").then_some(true),
            &[Safe, Unavailable][..],
        ));
    }
    for strategy in ["optimistic", "mysql-lock", "zookeeper", "fence-only"] {
        cells.push(extra(
            Scenario::AmbiguousCommit,
            strategy,
            LOCKS.contains(&strategy).then_some(true),
            &[Safe, Unavailable, Refused][..],
        ));
    }
    cells
}

/// How long things take in a run.
#[derive(Debug, Clone, Serialize)]
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
        }
    }

    /// How long a holder stays frozen or partitioned: 3x what its lock survives.
    fn freeze(&self, strategy: &str) -> Duration {
        let survives = if strategy == "zookeeper" {
            self.lease_ms.max(self.zk_session_ms)
        } else {
            self.lease_ms
        };
        Duration::from_millis(3 * survives)
    }
}

/// One cell's result.
#[derive(Debug, Clone, Serialize)]
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
    pub as_expected: bool,
    /// One sentence: why this cell came out as it did.
    pub why: String,
}

/// The chaos part of the report.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    pub timing: Timing,
    pub zk_nodes: usize,
    pub cells: Vec<Cell>,
    pub scenarios: Vec<ScenarioInfo>,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScenarioInfo {
    pub id: &'static str,
    pub number: u8,
    pub title: &'static str,
    pub how: &'static str,
}

impl ChaosReport {
    pub fn all_as_expected(&self) -> bool {
        self.cells.iter().all(|c| c.as_expected)
    }
}

/// Private servers and two `stock-app` instances with test hooks.
pub struct Lab {
    pub stack: Stack,
    /// Instance A's way to the five Redis, then to each ZooKeeper node.
    redis_proxies: Vec<Proxy>,
    zk_proxies: Vec<Proxy>,
    /// A (through the proxies) and B (direct).
    pub instances: Vec<Instance>,
    pub db: MySqlPool,
    client: reqwest::Client,
    timing: Timing,
    next_product: i64,
}

impl Lab {
    /// Starts MariaDB, five Redis, ZooKeeper (`zk_nodes` nodes), the proxies and the
    /// two instances. Call it from a long-lived thread (servers die with the thread
    /// that spawned them): the main thread, or a test's.
    pub async fn start(app_bin: PathBuf, timing: Timing, zk_nodes: usize) -> anyhow::Result<Lab> {
        let stack = Stack::start(&StackConfig {
            zookeeper_nodes: zk_nodes,
            ..StackConfig::default()
        })?;
        let redis_proxies = stack
            .redis
            .iter()
            .map(|r| Proxy::start(r.port()))
            .collect::<Result<Vec<_>, _>>()?;
        let zk = stack.zookeeper.as_ref().context("no ZooKeeper")?;
        let zk_proxies = zk
            .nodes()
            .iter()
            .map(|n| Proxy::start(n.client_port()))
            .collect::<Result<Vec<_>, _>>()?;
        let env: std::collections::BTreeMap<_, _> = stack.env().into_iter().collect();
        // Idle connections are dropped before actix's keep-alive (5 s) would close
        // them: after a freeze longer than that, the server closes every idle
        // connection the moment it wakes, and a request sent on one of them would fail
        // in transit (a spurious unknown outcome, a failed hook call).
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .pool_idle_timeout(Duration::from_secs(2))
            .build()?;
        let proxied_redis: Vec<String> = redis_proxies
            .iter()
            .map(|p| format!("redis://127.0.0.1:{}", p.port()))
            .collect();
        let proxied_zk: Vec<String> = zk_proxies
            .iter()
            .map(|p| format!("127.0.0.1:{}", p.port()))
            .collect();
        let args = |redis: String, zk: String| -> Vec<String> {
            [
                "--database-url",
                &env["DATABASE_URL"],
                "--redis-urls",
                &redis,
                "--zk-connect",
                &zk,
                "--admin-token",
                ADMIN_TOKEN,
                "--enable-test-hooks",
                "--lock-lease-ms",
                &timing.lease_ms.to_string(),
                "--zk-session-timeout-ms",
                &timing.zk_session_ms.to_string(),
                // Buyers behind a frozen row lock wait rather than time out.
                "--lock-wait-timeout-secs",
                "20",
                "--lock-wait-ms",
                "3000",
                "--db-acquire-timeout-ms",
                "3000",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        };
        let a = Instance::start(
            &client,
            &app_bin,
            "stock-app-a",
            &args(proxied_redis.join(","), proxied_zk.join(",")),
        )
        .await?;
        let b = Instance::start(
            &client,
            &app_bin,
            "stock-app-b",
            &args(env["REDIS_URLS"].clone(), env["ZK_CONNECT"].clone()),
        )
        .await?;
        let db = MySqlPoolOptions::new()
            .max_connections(2)
            .connect(&env["DATABASE_URL"])
            .await?;
        Ok(Lab {
            stack,
            redis_proxies,
            zk_proxies,
            instances: vec![a, b],
            db,
            client,
            timing,
            next_product: 1,
        })
    }

    /// Runs one cell, start to verdict. Leaves the lab ready for the next cell.
    pub async fn run_cell(&mut self, spec: &CellSpec) -> anyhow::Result<Cell> {
        let product = self.next_product;
        self.next_product += 1;
        self.ensure_up().await?;
        let b = self.instances[1].base.clone();
        restock(&self.client, &b, ADMIN_TOKEN, product, STOCK).await?;
        let load = Load::start(
            &self.client,
            &self.instances,
            spec,
            product,
            self.timing.workers,
        );
        tokio::time::sleep(Duration::from_millis(self.timing.warm_ms)).await;
        let window = self.inject(spec, &load).await?;
        tokio::time::sleep(Duration::from_millis(self.timing.after_ms)).await;
        let mut samples = load.stop().await;
        let (retried, duplicates) = self.retry_unknown(spec, product, &mut samples).await;
        let acknowledged: Vec<String> = samples
            .iter()
            .filter(|s| s.outcome == "200")
            .map(|s| s.request_id.clone())
            .collect();
        let verdict = verify::verify(&self.db, &[product], &acknowledged, 0).await?;
        Ok(judge(
            spec,
            &samples,
            &window,
            &verdict,
            retried,
            duplicates,
            &self.timing,
        ))
    }

    /// Instance A is respawned when a cell killed it; every server is running.
    async fn ensure_up(&mut self) -> anyhow::Result<()> {
        self.set_proxies(ProxyMode::Pass);
        for instance in &mut self.instances {
            let _ = instance.process.resume();
            if !instance.process.is_running() {
                instance.respawn(&self.client).await?;
            }
        }
        Ok(())
    }

    /// Every connection of instance A to Redis and ZooKeeper.
    fn set_proxies(&self, mode: ProxyMode) {
        for proxy in self.redis_proxies.iter().chain(&self.zk_proxies) {
            proxy.set(mode);
        }
    }

    /// Calls A's or B's hooks endpoint.
    async fn hook(
        &self,
        instance: usize,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> anyhow::Result<Value> {
        let url = format!("{}/hooks/{path}", self.instances[instance].base);
        let response = self
            .client
            .request(method, &url)
            .json(&body)
            .send()
            .await
            .with_context(|| url.clone())?;
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!("{url}: {status} {answer}");
        }
        Ok(answer)
    }

    /// Pauses the next request of A at `failpoint` and returns once one is there.
    async fn pause_a_at(&self, failpoint: &str) -> anyhow::Result<()> {
        self.hook(
            0,
            reqwest::Method::PUT,
            failpoint,
            json!({"mode": "pause", "count": 1}),
        )
        .await?;
        self.hook(
            0,
            reqwest::Method::GET,
            &format!("{failpoint}/paused?at_least=1&timeout_ms=20000"),
            Value::Null,
        )
        .await
        .context("no request of instance A reached the failpoint")?;
        Ok(())
    }

    async fn release_a(&self, failpoint: &str) -> anyhow::Result<()> {
        self.hook(
            0,
            reqwest::Method::POST,
            &format!("{failpoint}/release"),
            Value::Null,
        )
        .await?;
        Ok(())
    }

    /// Makes the fault of `spec.scenario` happen; returns when it healed.
    async fn inject(&mut self, spec: &CellSpec, load: &Load) -> anyhow::Result<Window> {
        let freeze = self.timing.freeze(spec.strategy);
        let window = match spec.scenario {
            Scenario::PausePastLease | Scenario::FenceOnly => {
                self.pause_a_at("after_read").await?;
                let a = &self.instances[0];
                a.process.pause()?;
                let fault = load.now();
                tokio::time::sleep(freeze).await;
                a.process.resume()?;
                self.release_a("after_read").await?;
                Window::new(fault, load.now())
            }
            Scenario::HolderKilled => {
                self.pause_a_at("after_read").await?;
                self.instances[0].process.kill();
                let fault = load.now();
                // Not healed (A stays dead until the next cell): give the lock time
                // to come back before the after-window starts.
                tokio::time::sleep(freeze).await;
                Window::new(fault, fault)
            }
            Scenario::RedisRestart => {
                self.pause_a_at("after_read").await?;
                self.stack.redis[0].restart()?;
                let fault = load.now();
                tokio::time::sleep(freeze).await;
                self.release_a("after_read").await?;
                Window::new(fault, load.now())
            }
            Scenario::RedlockMinorityPaused | Scenario::RedlockMajorityPaused => {
                let n = if spec.scenario == Scenario::RedlockMinorityPaused {
                    2
                } else {
                    3
                };
                // The last n: the first node also serves redis-lock, kept out of it.
                let paused: Vec<usize> = (5 - n..5).collect();
                for &i in &paused {
                    self.stack.redis[i].process_ref().pause()?;
                }
                let fault = load.now();
                tokio::time::sleep(freeze).await;
                for &i in &paused {
                    self.stack.redis[i].process_ref().resume()?;
                }
                Window::new(fault, load.now())
            }
            Scenario::ZkLeaderKilled => {
                let zk = self.stack.zookeeper.as_mut().context("no ZooKeeper")?;
                let leader = zk
                    .nodes()
                    .iter()
                    .position(|n| n.mode().as_deref() == Some("leader"))
                    .context("no ZooKeeper leader (the scenario needs an ensemble)")?;
                zk.nodes_mut()[leader].process().kill();
                let fault = load.now();
                tokio::time::sleep(freeze).await;
                zk.nodes_mut()[leader].restart()?;
                Window::new(fault, load.now())
            }
            Scenario::LockPartition => {
                self.pause_a_at("after_read").await?;
                self.set_proxies(ProxyMode::Blackhole);
                let fault = load.now();
                tokio::time::sleep(freeze).await;
                // The partitioned holder goes on and writes, while still partitioned.
                self.release_a("after_read").await?;
                tokio::time::sleep(Duration::from_millis(300)).await;
                // Heal: break the silent connections so clients reconnect at once.
                self.set_proxies(ProxyMode::Reset);
                tokio::time::sleep(Duration::from_millis(100)).await;
                self.set_proxies(ProxyMode::Pass);
                Window::new(fault, load.now())
            }
            Scenario::AmbiguousCommit => {
                self.pause_a_at("before_commit").await?;
                self.release_a("before_commit").await?;
                let db = self.stack.mariadb.as_mut().context("no MariaDB")?;
                db.process().kill();
                let fault = load.now();
                tokio::time::sleep(Duration::from_millis(300)).await;
                db.restart()?;
                Window::new(fault, load.now())
            }
        };
        Ok(window)
    }

    /// Retries every request whose outcome the client does not know, with the same
    /// request_id and body, until the service gives a definite answer. Returns (how
    /// many were retried, how many turned out to have committed).
    async fn retry_unknown(
        &self,
        spec: &CellSpec,
        product: i64,
        samples: &mut [Sample],
    ) -> (u64, u64) {
        let (mut retried, mut duplicates) = (0, 0);
        let url = format!("{}/deduct/{}", self.instances[1].base, spec.strategy);
        for sample in samples.iter_mut().filter(|s| is_unknown(&s.outcome)) {
            retried += 1;
            sample.retried = true;
            let body = deduct_body(&sample.request_id, product, spec.fencing);
            for _ in 0..100 {
                let reply = post_deduct(&self.client, &url, &body).await;
                let again = matches!(
                    reply.outcome.as_str(),
                    "503 outcome_unknown" | "503 backend_unavailable" | "transport" | "unreachable"
                );
                if !again {
                    duplicates += u64::from(reply.duplicate);
                    sample.outcome = reply.outcome;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        (retried, duplicates)
    }

    /// Stops everything (also done on drop).
    pub async fn stop(mut self) {
        self.db.close().await;
        for instance in &mut self.instances {
            let _ = instance.process.resume();
            instance.process.kill();
        }
    }
}

/// When the fault began and ended, in load time.
#[derive(Debug, Clone, Copy)]
struct Window {
    fault: Duration,
    healed: Duration,
}

impl Window {
    fn new(fault: Duration, healed: Duration) -> Window {
        Window { fault, healed }
    }
}

/// One answer, as the load saw it.
#[derive(Debug, Clone)]
struct Sample {
    /// When the request was sent, since the load started.
    sent: Duration,
    /// When the answer came, since the load started.
    at: Duration,
    /// Answered only by the retry after the run (its outcome had been unknown): not
    /// on the timeline.
    retried: bool,
    outcome: String,
    request_id: String,
}

/// A single-unit deduction of `product`, with the per-request fencing switch when the
/// strategy has one.
fn deduct_body(request_id: &str, product: i64, fencing: Option<bool>) -> Value {
    let mut body = json!({"request_id": request_id, "product_id": product});
    if let Some(fencing) = fencing {
        body["fencing"] = json!(fencing);
    }
    body
}

/// The background load of a cell: workers pinned to instances, each with one
/// request in flight, until stopped.
struct Load {
    started: Instant,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<Vec<Sample>>>,
}

impl Load {
    fn start(
        client: &reqwest::Client,
        instances: &[Instance],
        spec: &CellSpec,
        product: i64,
        per_instance: usize,
    ) -> Load {
        let started = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let run = uuid::Uuid::new_v4().simple().to_string();
        let mut workers = Vec::new();
        for (i, instance) in instances.iter().enumerate() {
            // A runs one buyer: the one whose request the fault catches. More would
            // be caught too, mid-transaction (a frozen process freezes all its
            // requests), and the cell would measure whichever lock they held.
            let workers_here = if i == 0 { 1 } else { per_instance };
            for w in 0..workers_here {
                let client = client.clone();
                let url = format!("{}/deduct/{}", instance.base, spec.strategy);
                let stop = stop.clone();
                let fencing = spec.fencing;
                let prefix = format!("chaos-{}-{i}-{w}", &run[..12]);
                workers.push(tokio::spawn(async move {
                    let mut samples = Vec::new();
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let request_id = format!("{prefix}-{n}");
                        let body = deduct_body(&request_id, product, fencing);
                        let sent = started.elapsed();
                        let outcome = post_deduct(&client, &url, &body).await.outcome;
                        let at = started.elapsed();
                        let failed = outcome == "transport" || outcome == "unreachable";
                        samples.push(Sample {
                            sent,
                            at,
                            retried: false,
                            outcome,
                            request_id,
                        });
                        if failed {
                            // A dead or frozen instance: do not spin.
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                    samples
                }));
            }
        }
        Load {
            started,
            stop,
            workers,
        }
    }

    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// Stops the workers after their request in flight and returns every answer.
    async fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        let mut samples = Vec::new();
        for worker in self.workers {
            if let Ok(mut s) = worker.await {
                samples.append(&mut s);
            }
        }
        samples.sort_by_key(|s| s.at);
        samples
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The cell's numbers, verdict and sentence.
fn judge(
    spec: &CellSpec,
    samples: &[Sample],
    window: &Window,
    verdict: &verify::Verdict,
    retried: u64,
    duplicates: u64,
    timing: &Timing,
) -> Cell {
    let live: Vec<&Sample> = samples.iter().filter(|s| !s.retried).collect();
    let count = |f: &dyn Fn(&str) -> bool| live.iter().filter(|s| f(&s.outcome)).count() as u64;
    let succeeded = count(&|o| o == "200");
    let sold_out = count(&|o| o == "409");
    let refused = count(&|o| o == "503 lock_lost");
    let busy = count(&|o| o == "503 busy");
    let requests = live.len() as u64;
    let failed = requests - succeeded - sold_out - refused - busy;
    // The timeline of sales, as the buyers saw them (retries after the run excluded).
    let sales: Vec<&Sample> = live
        .iter()
        .copied()
        .filter(|s| s.outcome == "200")
        .collect();
    let end = live.last().map_or(Duration::ZERO, |s| s.at);
    let longest_gap = sales
        .windows(2)
        .map(|w| w[1].at.saturating_sub(w[0].at))
        .chain(sales.last().map(|last| end.saturating_sub(last.at)))
        .max()
        .unwrap_or(end);
    // A request already in flight when the fault came may finish under a lock taken
    // before it: the fault's effect is on the requests sent after it.
    let blocked = sales
        .iter()
        .find(|s| s.sent >= window.fault)
        .map(|s| ms(s.at - window.fault));
    let recovery = sales
        .iter()
        .find(|s| s.at > window.healed)
        .map(|s| ms(s.at - window.healed));
    let during_fault = sales
        .iter()
        .any(|s| s.sent >= window.fault && s.at < window.healed);
    let (lost, double) = if verdict.lost_updates >= 0 {
        (verdict.lost_updates, 0)
    } else {
        (0, -verdict.lost_updates)
    };
    let fault_ms = ms(window.healed - window.fault);
    let cell_verdict =
        if lost > 0 || verdict.beyond_stock > 0 || double > 0 || verdict.missing_acknowledged > 0 {
            CellVerdict::Lost
        } else if fault_ms > 0.0 && !during_fault {
            CellVerdict::Unavailable
        } else if refused > 0 {
            CellVerdict::Refused
        } else {
            CellVerdict::Safe
        };
    let mut cell = Cell {
        scenario: spec.scenario,
        scenario_number: spec.scenario.number(),
        strategy: spec.strategy.to_string(),
        fencing: spec.fencing,
        requests,
        succeeded,
        sold_out,
        refused,
        busy,
        failed,
        retried_unknown: retried,
        retried_duplicates: duplicates,
        sold: verdict.sold,
        lost_updates: lost,
        beyond_stock: verdict.beyond_stock,
        double_deducted: double,
        missing_acknowledged: verdict.missing_acknowledged,
        fault_ms,
        blocked_ms: blocked,
        longest_gap_ms: ms(longest_gap),
        recovery_ms: recovery,
        verdict: cell_verdict,
        expected: spec.expect.to_vec(),
        as_expected: spec.expect.contains(&cell_verdict),
        why: String::new(),
    };
    cell.why = why(&cell, timing);
    cell
}

/// `fenced`, `unfenced`, or empty for a strategy with no fencing switch.
pub fn fencing_label(fencing: Option<bool>) -> &'static str {
    match fencing {
        Some(true) => "fenced",
        Some(false) => "unfenced",
        None => "",
    }
}

/// `redis-lock (fenced)`, `atomic-sql`: a cell's strategy and fencing mode.
pub fn cell_name(strategy: &str, fencing: Option<bool>) -> String {
    match fencing_label(fencing) {
        "" => strategy.to_string(),
        label => format!("{strategy} ({label})"),
    }
}

/// Whole milliseconds, or `-` when there are none (no sale after the fault).
pub fn fmt_opt_ms(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.0}"))
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map_or("never (within the run)".to_string(), |v| {
        format!("{v:.0} ms")
    })
}

/// One sentence on why a cell came out as it did, from its own numbers.
fn why(c: &Cell, timing: &Timing) -> String {
    use CellVerdict::*;
    let blocked = fmt_ms(c.blocked_ms);
    let lease = timing.lease_ms;
    let session = timing.zk_session_ms;
    let holder_survives = if c.strategy == "zookeeper" {
        format!("its session ({session} ms)")
    } else {
        format!("its lease ({lease} ms)")
    };
    match (c.scenario, c.verdict) {
        (_, Lost) if c.double_deducted > 0 => format!(
            "{} units left the stock with no ledger row: a deduction was applied twice.",
            c.double_deducted
        ),
        (_, Lost) if c.missing_acknowledged > 0 => format!(
            "{} acknowledged sales have no ledger row.",
            c.missing_acknowledged
        ),
        (Scenario::PausePastLease, Lost) if LOCKS.contains(&c.strategy.as_str()) => format!(
            "Unfenced, the lock is trusted: after {holder_survives} ran out B's buyers took the lock and sold; the frozen holder woke and wrote the quantity it had computed before, while B held the lock: {} sale(s) vanished from the stock (B's, or its own when B's next write landed on top of it).",
            c.lost_updates
        ),
        (Scenario::PausePastLease, Lost) => format!(
            "No lock across instances: B sold while A's request was frozen between read and write, and A's stale write erased {} sales.",
            c.lost_updates
        ),
        (Scenario::PausePastLease, Refused) => format!(
            "B's next holder claimed the product with a newer token after {holder_survives} ran out (first sale {blocked} after the freeze); the frozen holder's write was refused ({} x lock_lost): the fence, not the lock, kept the stock right.",
            c.refused
        ),
        (Scenario::PausePastLease, Unavailable) => format!(
            "Safe: the frozen request held the row lock, so every other buyer waited for it; no sale for {blocked}, as long as the freeze."
        ),
        (Scenario::PausePastLease, Safe) => format!(
            "Nothing was held while frozen: B kept selling (first sale {blocked} after the freeze), and the frozen request's compare-and-set failed when it woke and was retried."
        ),
        (Scenario::FenceOnly, Refused) => format!(
            "No lock, still no loss: every write is guarded by the newest claim. The price: {} of {} requests were refused (lock_lost) because a newer ticket overtook them, with or without a fault. A lock strategy with fencing is this plus a queue in front.",
            c.refused, c.requests
        ),
        (Scenario::HolderKilled, _) => format!(
            "A dead holder never writes, so nothing can be lost; B's buyers waited {blocked} for the lock to come back ({}).",
            match c.strategy.as_str() {
                "zookeeper" => format!("the session timeout, {session} ms"),
                "mysql-lock" | "redis-lock" | "redlock" => format!("the lease, {lease} ms"),
                _ => "MariaDB rolled back the dead client's transaction when its connection closed"
                    .to_string(),
            }
        ),
        (Scenario::RedisRestart, Lost) => format!(
            "Redis came back empty: the lock was gone while its holder worked, B took it at once and sold, and the unfenced holder's stale write erased {} sales.",
            c.lost_updates
        ),
        (Scenario::RedisRestart, Refused) => format!(
            "Redis came back empty, the token counter too: B's new tokens were older than the last claim, so B was refused ({} x lock_lost) until the counter caught up, {blocked} after the restart. Safe, but unavailable for a while: persist the counter (appendonly + fsync) or take tokens from the database.",
            c.refused
        ),
        (Scenario::RedlockMinorityPaused, _) => format!(
            "A majority (3 of 5) still answered: sales went on (longest gap {:.0} ms), nothing lost.",
            c.longest_gap_ms
        ),
        (Scenario::RedlockMajorityPaused, Unavailable) => format!(
            "No majority: every acquisition failed ({} busy or unavailable), nothing was written; sales came back {} after the nodes were continued.",
            c.busy + c.failed,
            fmt_ms(c.recovery_ms)
        ),
        (Scenario::ZkLeaderKilled, _) => format!(
            "The ensemble elected a new leader; sessions moved to the survivors. Longest gap without a sale {:.0} ms, nothing lost.",
            c.longest_gap_ms
        ),
        (Scenario::LockPartition, Lost) => format!(
            "Cut off from the lock service but not from the database, the unfenced holder could not renew, lost the lock to B, and still wrote its stale value: {} sales erased.",
            c.lost_updates
        ),
        (Scenario::LockPartition, Refused) => format!(
            "The partitioned holder lost the lock to B ({blocked} to B's first sale); its write was refused ({} x lock_lost) because B's claim was newer, or because it knew its lock was lost before COMMIT.",
            c.refused
        ),
        (Scenario::AmbiguousCommit, _) => format!(
            "{} requests had an unknown outcome; retried with the same request_id after the restart, {} turned out committed and were answered as duplicates: 0 double deductions. No sale for {:.0} ms.",
            c.retried_unknown, c.retried_duplicates, c.longest_gap_ms
        ),
        (_, v) => format!(
            "{}: {} sold, {} refused, {} busy, {} failed; first sale {blocked} after the fault.",
            v.as_str(),
            c.succeeded,
            c.refused,
            c.busy,
            c.failed
        ),
    }
}

/// Runs the cells of `scenarios` (every one when empty) and of `strategies` (every
/// one when empty); `all` adds the extra cells.
pub async fn run(
    app_bin: PathBuf,
    timing: Timing,
    scenarios: &[Scenario],
    strategies: &[String],
    all: bool,
) -> anyhow::Result<ChaosReport> {
    let started = Instant::now();
    let cells: Vec<CellSpec> = matrix()
        .into_iter()
        .filter(|c| all || !c.extra)
        .filter(|c| scenarios.is_empty() || scenarios.contains(&c.scenario))
        .filter(|c| strategies.is_empty() || strategies.iter().any(|s| s == c.strategy))
        .collect();
    if cells.is_empty() {
        bail!("no cell matches the chosen scenarios and strategies");
    }
    let zk_nodes = if cells.iter().any(|c| c.scenario.needs_ensemble()) {
        3
    } else {
        1
    };
    eprintln!(
        "chaos: starting MariaDB, 5 Redis, ZooKeeper ({zk_nodes} node(s)) and 2 stock-app instances ..."
    );
    let mut lab = Lab::start(app_bin, timing.clone(), zk_nodes).await?;
    let mut results = Vec::new();
    for spec in &cells {
        eprintln!(
            "chaos: {} {} / {} ...",
            spec.scenario.number(),
            spec.scenario.id(),
            cell_name(spec.strategy, spec.fencing),
        );
        let cell = lab
            .run_cell(spec)
            .await
            .with_context(|| format!("{} / {}", spec.scenario.id(), spec.strategy))?;
        eprintln!(
            "chaos:   -> {}{}: {}",
            cell.verdict.as_str(),
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
                id: s.id(),
                number: s.number(),
                title: s.title(),
                how: s.how(),
            })
            .collect(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Prints the grid as a table.
pub fn print_table(report: &ChaosReport) {
    println!();
    println!(
        "{:<2} {:<22} {:<12} {:<9} {:>5} {:>6} {:>5} {:>6} {:>5} {:>6} {:>8} {:>8} {:>8}  verdict",
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
        "blocked",
        "max gap",
        "recover",
    );
    for c in &report.cells {
        println!(
            "{:<2} {:<22} {:<12} {:<9} {:>5} {:>6} {:>5} {:>6} {:>5} {:>6} {:>8} {:>8.0} {:>8}  {}{}",
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
            fmt_opt_ms(c.blocked_ms),
            c.longest_gap_ms,
            fmt_opt_ms(c.recovery_ms),
            c.verdict.as_str(),
            if c.as_expected { "" } else { "  UNEXPECTED" },
        );
    }
    println!(
        "sold = successful requests; lost = ledger - stock change (sales erased by a stale write); double = stock change - ledger; blocked = ms from the fault to the next sale; recover = ms from the heal to the next sale"
    );
}
