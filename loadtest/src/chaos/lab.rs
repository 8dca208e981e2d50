//! The lab: private servers, two instances, a cell's run, and what the faults share
//! (pausing and releasing a request, proxies, hooks). Each fault's own injection is
//! in `faults/`.

use super::*;
use stock_wire::Trait;
use testbed::{Distance, ServerKind};

/// Private servers and two `stock-app` instances with test hooks.
pub struct Lab {
    pub stack: Stack,
    /// Instance A's way to every node of every lock server (each kind of
    /// `testbed::KINDS` declared `behind_lab_proxies`): the partition cells cut them.
    pub(super) proxies: Distance,
    /// A (through the proxies) and B (direct).
    pub instances: Vec<Instance>,
    pub db: MySqlPool,
    pub(super) client: reqwest::Client,
    pub(super) timing: Timing,
    pub(super) next_product: i64,
    /// A Redis primary, replica and Sentinels, for the failover scenarios only.
    pub(super) ha: Option<testbed::RedisHa>,
    /// A Redis Cluster, for the cluster scenarios only.
    pub(super) cluster: Option<testbed::RedisCluster>,
    /// Each instance's command line as started (the failover cells add to it).
    base_args: Vec<Vec<String>>,
    /// RedLock node 3 runs with a clock the runner can move (set up once, on first use).
    movable_clock: bool,
    /// A read replica of the lab's MariaDB (started on first use).
    pub(in crate::chaos) replica: Option<testbed::replication::Replica>,
    /// The strategies as instance A serves them: their cards declare the cells.
    pub catalogue: crate::catalogue::Catalogue,
    /// Where each cell's history is written (`<scenario>.<cell>.jsonl`), if anywhere;
    /// every cell is judged either way.
    pub histories: Option<std::path::PathBuf>,
}

impl Lab {
    /// Starts MariaDB, five Redis, ZooKeeper and etcd (`ensemble` nodes each: 3 for the
    /// leader-killed scenarios), the proxies and the
    /// two instances. Call it from a long-lived thread (servers die with the thread
    /// that spawned them): the main thread, or a test's.
    pub async fn start(app_bin: PathBuf, timing: Timing, ensemble: usize) -> anyhow::Result<Lab> {
        let stack = Stack::start(
            &StackConfig {
                // A binary log, so a read replica can follow (the replica-lag cells).
                mariadb_primary: true,
                // At a distance (`--rtt-ms`): every server behind a proxy with that latency.
                network: timing.network(),
                ..StackConfig::default()
            }
            .with_nodes(&testbed::zookeeper::KIND, ensemble)
            .with_nodes(&testbed::etcd::KIND, ensemble),
        )?;
        // A's own proxies (the faults') reach the servers directly: the same distance.
        let lock_servers: Vec<_> = stack
            .direct_env()
            .into_iter()
            .filter(|(variable, _)| {
                ServerKind::of_variable(variable).is_some_and(|kind| kind.behind_lab_proxies)
            })
            .collect();
        let proxies = Distance::in_front_of(&lock_servers, timing.network().unwrap_or_default())?;
        let env: std::collections::BTreeMap<_, _> = stack.env().into_iter().collect();
        // Idle connections are dropped before actix's keep-alive (5 s) would close
        // them: after a freeze longer than that, the server closes every idle
        // connection the moment it wakes, and a request sent on one of them would fail
        // in transit (a spurious unknown outcome, a failed hook call).
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .pool_idle_timeout(Duration::from_secs(2))
            .build()?;
        // The servers come from the stack's variables (`Instance::start`); instance a
        // reaches the lock servers through the proxies instead.
        let servers: Vec<(&str, String)> = env.iter().map(|(k, v)| (*k, v.clone())).collect();
        let mut proxied = env.clone();
        proxied.extend(proxies.env());
        let servers_a: Vec<(&str, String)> = proxied.into_iter().collect();
        let args = || -> Vec<String> {
            [
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
                // A dead persister's entries are claimed after about a lease.
                "--redis-stock-claim-ms",
                &timing.lease_ms.to_string(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        };
        let a = Instance::start(&client, &app_bin, "stock-app-a", &servers_a, &args()).await?;
        let b = Instance::start(&client, &app_bin, "stock-app-b", &servers, &args()).await?;
        let db = MySqlPoolOptions::new()
            .max_connections(2)
            .connect(&env["DATABASE_URL"])
            .await?;
        let base_args = vec![a.process.args().to_vec(), b.process.args().to_vec()];
        let catalogue = crate::catalogue::Catalogue::fetch(&client, &a.base).await?;
        Ok(Lab {
            stack,
            proxies,
            instances: vec![a, b],
            db,
            client,
            timing,
            next_product: 1,
            ha: None,
            cluster: None,
            base_args,
            movable_clock: false,
            replica: None,
            catalogue,
            histories: None,
        })
    }

    /// Every cell the lab's strategies declare ([`matrix`]).
    pub fn matrix(&self) -> Vec<CellSpec> {
        matrix(&self.catalogue)
    }

    /// Runs one cell, start to verdict. Leaves the lab ready for the next cell.
    pub async fn run_cell(&mut self, spec: &CellSpec) -> anyhow::Result<Cell> {
        let product = self.next_product;
        self.next_product += 1;
        self.ensure_up().await?;
        if spec.scenario.needs_sentinel() {
            self.through_sentinel(spec.scenario == Scenario::RedisFailoverWait)
                .await?;
        }
        if spec.scenario.needs_cluster() {
            self.on_a_cluster(spec.scenario == Scenario::RedisClusterFailoverWait)
                .await?;
        }
        if spec.scenario.lags_replica() {
            self.start_replica()?;
        }
        if spec.scenario.lock_delay() {
            let delay = self.timing.lock_delay_ms().to_string();
            self.respawn_with(&["--lock-delay-ms".to_string(), delay])
                .await?;
        }
        if spec.scenario.reads_from_replica() {
            let url = self
                .replica
                .as_ref()
                .context("no replica")?
                .server
                .url(&StackConfig::default().database);
            self.respawn_with(&["--read-replica-url".to_string(), url])
                .await?;
        }
        if spec.scenario == Scenario::RedlockClockJump && !self.movable_clock {
            // Restarted (empty) before the load starts.
            let node = &mut self.stack.redis_mut()[JUMPING_NODE];
            tokio::task::block_in_place(|| node.with_movable_clock())?;
            self.movable_clock = true;
        }
        let cell = self.run_cell_here(spec, product).await;
        if spec.scenario.needs_sentinel() {
            self.ha = None;
        }
        let respawned = spec.scenario.needs_sentinel()
            || spec.scenario.needs_cluster()
            || spec.scenario.reads_from_replica()
            || spec.scenario.lock_delay();
        if respawned {
            self.respawn_with(&[]).await?;
        }
        self.cluster = None;
        cell
    }

    /// Starts the read replica, once. The runner starts it before the first cell when a
    /// replica-lag cell is to run: a replica that copies the primary's whole binary
    /// log later may meet an event cut short when MariaDB was killed mid-write (the
    /// ambiguous-commit cells; error 1236 "binlog truncated in the middle of event").
    pub fn start_replica(&mut self) -> anyhow::Result<()> {
        if self.replica.is_none() {
            let primary = self.stack.get::<testbed::MariaDb>().context("no MariaDB")?;
            let replica =
                tokio::task::block_in_place(|| testbed::replication::Replica::follow(primary))?;
            self.replica = Some(replica);
        }
        Ok(())
    }

    /// A fresh primary, replica and Sentinels, and both instances restarted to take
    /// their Redis locks through them (`wait`: a lock granted only once a replica has it).
    async fn through_sentinel(&mut self, wait: bool) -> anyhow::Result<()> {
        let ha = testbed::RedisHa::start("chaos-ha")?;
        let extra: Vec<String> = [
            "--redis-sentinels",
            &ha.sentinel_addrs().join(","),
            "--redis-master-name",
            testbed::sentinel::MASTER_NAME,
            "--redis-lock-min-replicas",
            if wait { "1" } else { "0" },
            "--redis-lock-replica-timeout-ms",
            "200",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        self.ha = Some(ha);
        self.respawn_with(&extra).await
    }

    /// A fresh Redis Cluster, and both instances restarted to take their Redis locks
    /// and keep their Redis counters on it (`wait`: a lock granted, a sale answered,
    /// only once a replica has it).
    async fn on_a_cluster(&mut self, wait: bool) -> anyhow::Result<()> {
        let cluster =
            tokio::task::block_in_place(|| testbed::RedisCluster::start("chaos-cluster", 6))?;
        let replicas = if wait { "1" } else { "0" };
        let extra: Vec<String> = [
            "--redis-cluster-urls",
            &cluster.urls().join(","),
            "--redis-lock-min-replicas",
            replicas,
            "--redis-lock-replica-timeout-ms",
            "200",
            "--redis-stock-min-replicas",
            replicas,
            "--redis-stock-replica-timeout-ms",
            "200",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        self.cluster = Some(cluster);
        self.respawn_with(&extra).await
    }

    /// The master serving the cell's keys on the cluster: the lock's (`stock:ID`), or
    /// for a strategy that records later the partition holding the product's counter
    /// (the one master whose keys include `...:p:ID`).
    pub(in crate::chaos) fn cluster_master(
        &self,
        spec: &CellSpec,
        product: i64,
    ) -> anyhow::Result<(u16, String)> {
        let cluster = self.cluster.as_ref().context("no Redis Cluster")?;
        if !spec.has(Trait::RecordsLater) {
            let key = format!("stock:{product}");
            return Ok((cluster.master_of(cluster.slot_of(&key)?)?, key));
        }
        let pattern = format!("*:p:{product}");
        for node in cluster.nodes() {
            let port = node.port();
            let info = cluster
                .command(port, &["INFO", "replication"])
                .unwrap_or_default();
            if !info.contains("role:master") {
                continue;
            }
            let keys = cluster.command(port, &["--scan", "--pattern", &pattern])?;
            if let Some(key) = keys.lines().map(str::trim).find(|k| !k.is_empty()) {
                return Ok((port, key.to_string()));
            }
        }
        bail!("no master holds the counter of product {product}")
    }

    /// The product's ledger rows (its sales recorded so far).
    pub(in crate::chaos) async fn ledger_rows(&self, product: i64) -> anyhow::Result<i64> {
        let query = "SELECT COUNT(*) FROM ledger WHERE product_id = ?";
        Ok(sqlx::query_scalar(query)
            .bind(product)
            .fetch_one(&self.db)
            .await?)
    }

    /// Waits until the product has more than `rows` ledger rows, up to `limit`.
    pub(in crate::chaos) async fn until_sold_after(
        &self,
        product: i64,
        rows: i64,
        limit: Duration,
    ) -> anyhow::Result<()> {
        let start = std::time::Instant::now();
        while self.ledger_rows(product).await? <= rows {
            if start.elapsed() > limit {
                bail!("no sale of product {product} within {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Restarts both instances with their first command line plus `extra`.
    async fn respawn_with(&mut self, extra: &[String]) -> anyhow::Result<()> {
        for (instance, base) in self.instances.iter_mut().zip(&self.base_args) {
            instance
                .process
                .set_args([base.clone(), extra.to_vec()].concat());
            instance.respawn(&self.client).await?;
        }
        Ok(())
    }

    /// Pauses a request of A after its read, holding a lock that `where_` does not
    /// have (`reached` says whether it has): one taken after the cut. A request that
    /// took its lock before the cut is let go, and the next one caught instead.
    pub(in crate::chaos) async fn pause_a_holding_a_lock_not_on(
        &self,
        where_: &str,
        reached: impl AsyncFn() -> anyhow::Result<bool>,
    ) -> anyhow::Result<()> {
        for _ in 0..10 {
            self.pause_a_at("after_read").await?;
            if !reached().await? {
                return Ok(());
            }
            self.release_a("after_read").await?;
        }
        bail!("every lock of A reached {where_} despite the blackhole")
    }

    async fn run_cell_here(&mut self, spec: &CellSpec, product: i64) -> anyhow::Result<Cell> {
        let b = self.instances[1].base.clone();
        let buckets = if spec.has(Trait::SplitsStock) {
            crate::plan::BUCKETS
        } else {
            0
        };
        // The guard's mistake shows only when the product sells out.
        let stock = if spec.scenario == Scenario::MistakeNoGuard {
            NO_GUARD_STOCK
        } else {
            STOCK
        };
        restock(&self.client, &b, ADMIN_TOKEN, product, stock, buckets).await?;
        // A replica the instances read from must have the product before they ask.
        if spec.scenario.reads_from_replica()
            && let (Some(replica), Some(primary)) =
                (&self.replica, self.stack.get::<testbed::MariaDb>())
        {
            tokio::task::block_in_place(|| {
                replica.wait_caught_up(primary, Duration::from_secs(30))
            })?;
        }
        let load = Load::start(
            &self.client,
            &self.instances,
            spec,
            product,
            self.timing.workers,
        );
        tokio::time::sleep(Duration::from_millis(self.timing.warm_ms)).await;
        let window = self.inject(spec, &load, product).await?;
        tokio::time::sleep(Duration::from_millis(self.timing.after_ms)).await;
        let (clock_start_us, load_prefix) = (load.clock_start_us, load.prefix.clone());
        let mut samples = load.stop().await;
        let (retried, duplicates) = self.retry_unknown(spec, product, &mut samples).await;
        // A strategy that records later: the verdict waits for the persisters to record
        // what was sold (a sale Redis lost is not pending: it shows as missing).
        let b = &self.instances[1].base;
        if let Err(e) =
            crate::engine::drained(&self.client, b, &[product], crate::plan::DRAIN_TIMEOUT).await
        {
            eprintln!("chaos: {} not drained: {e}", spec.strategy);
        }
        let acknowledged: Vec<String> = samples
            .iter()
            .filter(|s| s.outcome == Outcome::Sold)
            .map(|s| s.request_id.clone())
            .collect();
        let verdict = verify::verify(&self.db, &[product], &acknowledged, 0).await?;
        let mut cell = judge(
            spec,
            &samples,
            &window,
            &verdict,
            retried,
            duplicates,
            &self.timing,
        );
        // Every answer against a stock counter, unknown outcomes settled by the ledger
        // (the retries after the run are the ledger's witnesses, not operations).
        // Quiet now (the load stopped, the unknown outcomes retried, the persisters
        // drained): the history ends with a read of what is left, from B.
        let last = crate::engine::final_reads(&self.client, b, &[product], clock_start_us).await;
        let recorded = crate::history::recorded(&self.db, &load_prefix).await?;
        let answers: Vec<_> = samples.iter().map(|s| s.answer(product)).collect();
        let mut records = crate::history::of_answers(
            &answers,
            &last,
            clock_start_us,
            &[(product, stock)],
            &recorded,
        );
        // The locks as their holders logged them: two holders at once show here.
        let logs: Vec<_> = self
            .instances
            .iter()
            .filter_map(|i| i.lock_log.clone())
            .collect();
        records.extend(crate::history::holds(&logs, &load_prefix));
        let fencing = match super::fencing_label(spec.fencing) {
            "" => String::new(),
            label => format!(".{label}"),
        };
        let file = format!("{}.{}{fencing}.jsonl", spec.scenario.id(), spec.strategy);
        let mut judged =
            crate::history::judge_and_write(records, self.histories.as_deref(), &file).await?;
        judged.add_ledger(&verdict);
        cell.add_history(judged);
        Ok(cell)
    }

    /// Instance A is respawned when a cell killed it; every server is running.
    pub(super) async fn ensure_up(&mut self) -> anyhow::Result<()> {
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
    pub(super) fn set_proxies(&self, mode: ProxyMode) {
        self.proxies.set_mode(mode);
    }

    /// Calls A's or B's hooks endpoint.
    pub(super) async fn hook(
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
    pub(super) async fn pause_a_at(&self, failpoint: &str) -> anyhow::Result<()> {
        self.pause_at(0, failpoint).await
    }

    /// Pauses the next request of `instance` (0: A, 1: B) at `failpoint`, and returns
    /// once one is there.
    pub(super) async fn pause_at(&self, instance: usize, failpoint: &str) -> anyhow::Result<()> {
        self.hook(
            instance,
            reqwest::Method::PUT,
            failpoint,
            json!({"mode": "pause", "count": 1}),
        )
        .await?;
        self.hook(
            instance,
            reqwest::Method::GET,
            &format!("{failpoint}/paused?at_least=1&timeout_ms=20000"),
            Value::Null,
        )
        .await
        .with_context(|| format!("no request of instance {instance} reached {failpoint}"))?;
        Ok(())
    }

    pub(super) async fn release_a(&self, failpoint: &str) -> anyhow::Result<()> {
        self.release_at(0, failpoint).await
    }

    pub(super) async fn release_at(&self, instance: usize, failpoint: &str) -> anyhow::Result<()> {
        self.hook(
            instance,
            reqwest::Method::POST,
            &format!("{failpoint}/release"),
            Value::Null,
        )
        .await?;
        Ok(())
    }

    /// Makes the fault of `spec.scenario` happen; returns when it healed.
    pub(super) async fn inject(
        &mut self,
        spec: &CellSpec,
        load: &Load,
        product: i64,
    ) -> anyhow::Result<Window> {
        let freeze = self.timing.freeze(spec);
        let window = match spec.scenario {
            Scenario::PausePastLease
            | Scenario::FenceAlone
            | Scenario::LockDelayShortPause
            | Scenario::LockDelayLongPause => self.inject_pause_past_lease(load, freeze).await?,
            Scenario::HolderKilled => self.inject_holder_killed(spec, load, freeze).await?,
            Scenario::RedisRestart => self.inject_redis_restart(load, freeze).await?,
            Scenario::RedlockMinorityPaused | Scenario::RedlockMajorityPaused => {
                self.inject_redlock_paused(spec, load, freeze).await?
            }
            Scenario::ZkLeaderKilled => self.inject_zk_leader_killed(load, freeze).await?,
            Scenario::EtcdLeaderKilled => self.inject_etcd_leader_killed(load, freeze).await?,
            Scenario::LockPartition => self.inject_lock_partition(load, freeze).await?,
            Scenario::RedisKilledEverySec
            | Scenario::RedisKilledAlways
            | Scenario::RedisKilledNoPersistence => self.inject_redis_killed(spec, load).await?,
            Scenario::MistakeLockInsideTransaction | Scenario::MistakeReleaseBeforeCommit => {
                self.inject_mistake_lock_scope(spec, load).await?
            }
            Scenario::MistakeSetnxThenExpire | Scenario::MistakePersistentNode => {
                self.inject_mistake_holder_killed(load, freeze).await?
            }
            Scenario::MistakeGetThenDel => self.inject_mistake_get_then_del(load).await?,
            Scenario::RedisFailover => self.inject_redis_failover(load, product).await?,
            Scenario::RedlockClockJump => self.inject_redlock_clock_jump(load, product).await?,
            Scenario::ReplicaLag | Scenario::ReplicaLagPrimaryReads => {
                self.inject_replica_lag(load).await?
            }
            Scenario::RedisFailoverWait => self.inject_redis_failover_wait(load).await?,
            Scenario::RedisClusterFailover | Scenario::RedisClusterFailoverWait => {
                self.inject_redis_cluster_failover(spec, load, product)
                    .await?
            }
            Scenario::RedisClusterReshard => {
                self.inject_redis_cluster_reshard(spec, load, product)
                    .await?
            }
            Scenario::MistakeNoGuard => self.inject_mistake_no_guard(load, product).await?,
            Scenario::AmbiguousCommit => self.inject_ambiguous_commit(load).await?,
        };
        Ok(window)
    }

    /// Retries every request whose outcome the client does not know, with the same
    /// request_id and body, until the service gives a definite answer. Returns (how
    /// many were retried, how many turned out to have committed).
    pub(super) async fn retry_unknown(
        &self,
        spec: &CellSpec,
        product: i64,
        samples: &mut [Sample],
    ) -> (u64, u64) {
        let (mut retried, mut duplicates) = (0, 0);
        let url = format!("{}/deduct/{}", self.instances[1].base, spec.strategy);
        for sample in samples.iter_mut().filter(|s| s.outcome.is_unknown()) {
            retried += 1;
            sample.retried = true;
            let body = deduct_body(&sample.request_id, product, spec);
            for _ in 0..100 {
                let reply = post_deduct(&self.client, &url, &body).await;
                // Still not known, or the service cannot tell yet: ask again.
                let again = reply.outcome.is_unknown()
                    || reply.outcome.is_transport_failure()
                    || reply.outcome == Outcome::Unavailable("backend_unavailable".into());
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

/// One Redis command with one key, on a fresh connection.
pub(in crate::chaos) async fn redis_command<T: redis::FromRedisValue>(
    url: &str,
    command: &str,
    key: &str,
) -> anyhow::Result<T> {
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    Ok(redis::cmd(command).arg(key).query_async(&mut conn).await?)
}
