//! The stage every section of the demo plays on: the servers, the two plain instances,
//! the catalogue, the live page.

use super::DemoArgs;
use crate::catalogue::Catalogue;
use crate::chapter::Chapter;
use crate::lab::Instance;
use crate::lab::{ADMIN_TOKEN, start_instance};
use crate::live::Live;
use crate::report::{InstanceInfo, Row};
use crate::runner::Runner;
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;
use stock_wire::Trait;
use testbed::{Stack, StackConfig};

/// What every section shares: the demo's options, the servers, two plain instances
/// as they would run behind a load balancer, the strategies they serve, and the
/// progress shown in the terminal and on the live page.
///
/// Its fields are dropped in the order they are declared: on an error the plain
/// instances stop before the servers they use.
pub struct Stage {
    /// The demo's options, with `--far-rtt-ms` and `--overload-factor` resolved.
    pub args: DemoArgs,
    /// The far section's round-trip time in ms (0: no far section).
    pub far_rtt_ms: f64,
    /// The overload section's multiple of capacity (0: no overload section).
    pub overload_factor: f64,
    /// How long each timed throughput run sends, in seconds.
    pub seconds: f64,
    /// When the demo started: the announcements say the time since.
    pub started: Instant,
    live: Option<Live>,
    /// Sections announced so far, and how many there are.
    announced: Cell<usize>,
    sections: Cell<usize>,
    /// The two instances as they would run behind a load balancer.
    pub plain: Vec<Instance>,
    /// The database every verdict is read from.
    pub db: MySqlPool,
    /// MariaDB, five Redis, ZooKeeper and etcd (behind proxies with `--rtt-ms`).
    pub stack: Stack,
    /// The servers' addresses, as an instance reads them from its environment.
    pub env: BTreeMap<&'static str, String>,
    /// The `stock-app` binary every instance runs.
    pub app_bin: PathBuf,
    /// One client for every run, keeping every connection of the busiest section
    /// open between requests.
    pub client: reqwest::Client,
    /// The servers' processes, whose CPU a run measures per sale.
    server_pids: Vec<(String, u32)>,
    /// The first Redis, whose own time a run reads.
    first_redis: Option<String>,
    /// The folder every run's history is written to.
    histories: PathBuf,
    /// The strategies as the plain instances list them.
    pub catalogue: Catalogue,
}

impl Stage {
    /// Serves the live page (if asked), starts the servers and the two plain
    /// instances, and reads the catalogue from them.
    pub async fn start(mut args: DemoArgs) -> anyhow::Result<Stage> {
        let started = Instant::now();
        let far_rtt_ms = *args
            .far_rtt_ms
            .get_or_insert(if args.full { 2.0 } else { 0.0 });
        let overload_factor =
            *args
                .overload_factor
                .get_or_insert(if args.full { 5.0 } else { 0.0 });
        ensure_open_files(&args, overload_factor)?;
        // The live page first, so a browser can watch from the start.
        let live = match &args.serve {
            Some(addr) => {
                let live = Live::new();
                let (bound, _server) = live.serve(addr)?;
                eprintln!("demo: live page at http://{bound}/");
                Some(live)
            }
            None => None,
        };
        say_to(
            live.as_ref(),
            &format!(
                "starting MariaDB, 5 Redis, ZooKeeper and etcd{} ...",
                args.rtt_ms.map_or(String::new(), |rtt| format!(
                    ", each behind a proxy adding {rtt} ms"
                ))
            ),
        );
        let stack = Stack::start(&StackConfig {
            network: args.rtt_ms.map(crate::lab::round_trip),
            ..StackConfig::default()
        })?;
        let env: BTreeMap<_, _> = stack.env().into_iter().collect();
        let app_bin = crate::lab::app_bin(args.app_bin.as_deref())?;
        let client = crate::lab::http_client(args.load.concurrency.max(args.flash_concurrency))?;
        let mut plain = Vec::new();
        for i in 1..=2 {
            plain
                .push(start_instance(&client, &app_bin, &env, &format!("stock-app-{i}"), 0).await?);
        }
        let db = MySqlPoolOptions::new()
            .max_connections(2)
            .connect(&env["DATABASE_URL"])
            .await?;
        let first_redis = env
            .get("REDIS_URLS")
            .and_then(|urls| urls.split(',').next())
            .map(str::to_string);
        let histories = crate::history::folder(args.load.json.as_deref(), "demo")?;
        let seconds = args.load.seconds.unwrap_or(if args.full {
            crate::plan::THROUGHPUT_SECONDS
        } else {
            super::QUICK_SECONDS
        });
        let mut stage = Stage {
            args,
            far_rtt_ms,
            overload_factor,
            seconds,
            started,
            live,
            announced: Cell::new(0),
            sections: Cell::new(0),
            server_pids: stack.pids(),
            stack,
            env,
            app_bin,
            client,
            plain,
            db,
            first_redis,
            histories,
            catalogue: Catalogue(Vec::new()),
        };
        stage.catalogue = stage.runner_on(&stage.plain).strategies().await?;
        Ok(stage)
    }

    /// Says `text` in the terminal and on the live page.
    pub fn say(&self, text: &str) {
        say_to(self.live.as_ref(), text);
    }

    /// How many sections this run has, for the announcements' "section 2/5".
    pub fn expect_sections(&self, count: usize) {
        self.sections.set(count);
    }

    /// Announces the next section with its number and the time so far.
    fn announce(&self, title: &str) {
        self.announced.set(self.announced.get() + 1);
        self.say(&format!(
            "section {}/{} (at {:.0} s): {title}",
            self.announced.get(),
            self.sections.get(),
            self.started.elapsed().as_secs_f64()
        ));
    }

    /// Announces `section`, runs it and adds its rows to `rows`.
    pub async fn run(
        &self,
        section: &mut impl Chapter<Stage = Stage>,
        rows: &mut Vec<Row>,
    ) -> anyhow::Result<()> {
        self.announce(&section.title(self));
        let added = section.run(self, rows).await?;
        rows.extend(added);
        Ok(())
    }

    /// "round 2/4: " before a run's line when there are rounds.
    pub fn round_text(&self, round: u32) -> String {
        crate::runner::round_text(round, self.args.rounds)
    }

    /// A runner on `instances`, with the live page, the network's counters, the
    /// processes whose CPU it measures and the folder for its histories.
    pub fn runner_on(&self, instances: &[Instance]) -> Runner {
        let network = self
            .stack
            .network()
            .map(|n| (self.args.rtt_ms.unwrap_or(0.0), n.round_trips()));
        Runner {
            histories: Some(self.histories.clone()),
            histories_checked: !self.args.load.no_history,
            live: self.live.clone(),
            network,
            processes: crate::lab::processes(instances, &self.server_pids),
            redis_url: self.first_redis.clone(),
            ..Runner::new(
                self.client.clone(),
                self.db.clone(),
                instances.iter().map(|i| i.base.clone()).collect(),
                ADMIN_TOKEN,
            )
        }
    }

    /// Starts two instances named `stock-app-<name>-1` and `-2` with `flags`, on the
    /// servers of `env`.
    pub async fn start_pair(
        &self,
        env: &BTreeMap<&'static str, String>,
        name: &str,
        flags: &[&str],
    ) -> anyhow::Result<Vec<Instance>> {
        let mut pair = Vec::new();
        for i in 1..=2 {
            pair.push(
                crate::lab::start_instance_with(
                    &self.client,
                    &self.app_bin,
                    env,
                    &format!("stock-app-{name}-{i}"),
                    flags,
                )
                .await?,
            );
        }
        Ok(pair)
    }

    /// Whether `--strategies` lets `name` run (every strategy when it is empty).
    pub fn wanted(&self, name: &str) -> bool {
        let only = &self.args.load.strategies;
        only.is_empty() || only.iter().any(|s| s == name)
    }

    /// The strategies a throughput section compares: safe across instances, and
    /// selling (the control that refuses every overtaken request sells next to nothing
    /// on a hot product: its section is the faults').
    pub fn sellers(&self) -> Vec<String> {
        self.catalogue
            .0
            .iter()
            .filter(|c| {
                c.safe_across_instances && !c.has(Trait::RefusesOvertaken) && self.wanted(&c.name)
            })
            .map(|c| c.name.clone())
            .collect()
    }

    /// The name of the first strategy with trait `t`, if `--strategies` lets it run.
    pub fn first_wanted(&self, t: Trait) -> Option<String> {
        self.catalogue
            .first_with(t)
            .map(|c| c.name.clone())
            .filter(|name| self.wanted(name))
    }

    /// The reference strategy's name, the conditional UPDATE, as the tables and
    /// progress lines call it.
    pub fn reference(&self) -> String {
        self.catalogue
            .first_with(Trait::ConditionalUpdate)
            .map_or("the conditional UPDATE".to_string(), |c| c.name.clone())
    }

    /// A throughput run: `plan` timed for the demo's seconds, stock never the limit,
    /// one warm-up round.
    pub fn timed(&self, plan: crate::plan::Plan) -> crate::plan::Plan {
        plan.timed(self.seconds)
    }

    /// Stops the plain instances and the servers; what outlives them: the options
    /// and the live page.
    pub fn stop(self) -> (DemoArgs, Option<Live>) {
        let Stage {
            args,
            live,
            mut plain,
            stack,
            ..
        } = self;
        for instance in plain.iter_mut() {
            instance.process.kill();
        }
        drop(stack);
        (args, live)
    }

    /// The plain instances as the report lists them (read while they run: their
    /// peak memory comes from `/proc`).
    pub fn plain_info(&self) -> Vec<InstanceInfo> {
        self.plain.iter().map(Instance::info).collect()
    }
}

/// Says `text` in the terminal and, if there is one, on the live page.
fn say_to(live: Option<&Live>, text: &str) {
    eprintln!("demo: {text}");
    if let Some(live) = live {
        live.note(text);
    }
}

/// Raises this process's open files to the hard limit, and fails early when the
/// flood's connections, shared over two instances (a file each, on both ends), would
/// not fit in it.
fn ensure_open_files(args: &DemoArgs, overload_factor: f64) -> anyhow::Result<()> {
    let open_files = crate::lab::raise_open_files();
    if overload_factor > 0.0 && args.flood_connections > 0 {
        let needed = args.flood_connections.div_ceil(2) as u64 + 100;
        anyhow::ensure!(
            open_files >= needed,
            "--flood-connections {} needs {needed} open files per process, and the hard limit is {open_files} (raise it as root: ulimit -Hn, limits.conf, docker --ulimit nofile=; or a smaller --flood-connections)",
            args.flood_connections
        );
    }
    Ok(())
}
