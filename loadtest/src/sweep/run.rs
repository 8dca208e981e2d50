//! The sweep as a section of a run: [`Scaling`] (on loopback; at round-trip times the
//! same lab runs [`crate::distance::run::AtDistance`]), the lab both run in
//! ([`SweepLab`]: the servers, two instances, the strategies), and the options
//! `loadtest sweep` takes ([`SweepArgs`]).

use super::{Cell, KEY, RoundTripCount, Sweep, SweepInfo};
use crate::catalogue::Catalogue;
use crate::chapter::{Chapter, Read};
use crate::lab::{ADMIN_TOKEN, Instance, start_instance};
use crate::markdown::{Facts, Pages};
use crate::report::{Report, Row};
use crate::runner::Runner;
use crate::section::Section;
use anyhow::bail;
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;
use testbed::{Distance, Latency, Stack, StackConfig};

#[derive(clap::Args)]
pub struct SweepArgs {
    /// Only these strategies (comma-separated; default: every one the service lists).
    #[arg(long, value_delimiter = ',')]
    pub strategies: Vec<String>,
    /// The concurrencies (comma-separated; default 1,4,16,64,256, or 64 with --rtt-ms).
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Vec<usize>,
    /// Sweep these round-trip times to every server, in ms (comma-separated).
    ///
    /// For example `0,0.5,2`. Every server goes behind a proxy; 0 is through the
    /// proxy with nothing added. One pass each, then each strategy's round trips per
    /// request counted at concurrency 1.
    #[arg(long, value_delimiter = ',', value_parser = testbed::Latency::parse_ms)]
    pub rtt_ms: Vec<f64>,
    /// The product layouts: how many products the load is spread over (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = crate::sweep::PRODUCTS)]
    pub products: Vec<usize>,
    /// How long each cell sends, in seconds.
    ///
    /// Its figure is the sales per second of the steady window inside it.
    #[arg(long, default_value_t = crate::plan::THROUGHPUT_SECONDS)]
    pub seconds: f64,
    /// Take the cells these reports already measured instead of measuring them again.
    ///
    /// One setup, one figure: a cell is taken when the report ran the same strategy,
    /// products, concurrency, time and distance on 2 instances in a closed loop (e.g.
    /// `reports/demo.json`'s throughput section, flash sale and far section). With
    /// --rtt-ms, their loopback cells at the same concurrency are shown beside the
    /// proxied ones.
    ///
    /// Repeat it, or separate files with commas.
    #[arg(long, value_delimiter = ',')]
    pub reuse: Vec<PathBuf>,
    /// The stock-app binary (default: next to this one).
    #[arg(long)]
    pub app_bin: Option<PathBuf>,
    /// Write the JSON report here (default reports/sweep.json; the HTML next to it).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

impl SweepArgs {
    /// Refuses a sweep whose cells could not be measured: no time, no load or no products.
    pub fn check(&self) -> anyhow::Result<()> {
        // `is_nan` too: NaN compares false with everything.
        if self.seconds.is_nan()
            || self.seconds <= 0.0
            || self.concurrency.contains(&0)
            || self.products.contains(&0)
        {
            bail!("--seconds, --concurrency and --products must be positive");
        }
        Ok(())
    }
}

/// The servers a sweep loads: the stack (behind proxies at a distance), its
/// environment, the two stock-app instances, the database, the strategies they serve,
/// and what every runner over them shares.
///
/// Its fields are dropped in the order they are declared: the instances stop before
/// the servers they use.
pub struct SweepLab {
    pub instances: Vec<Instance>,
    pub db: MySqlPool,
    pub stack: Stack,
    pub env: BTreeMap<&'static str, String>,
    /// The strategies as the instances list them.
    pub catalogue: Catalogue,
    /// When the sweep started: its report says how long it took.
    pub started: Instant,
    /// This sweep's product ids start at `base * 10_000_000` (up to 1000 products per
    /// cell), so no cell shares stock with another run's.
    pub base: i64,
    client: reqwest::Client,
    histories: PathBuf,
}

impl SweepLab {
    /// Starts the stack (behind proxies when `at_a_distance`) and two stock-app
    /// instances, with room for `widest` requests at once, and reads the strategies
    /// they serve.
    pub async fn start(
        args: &SweepArgs,
        at_a_distance: bool,
        widest: usize,
    ) -> anyhow::Result<SweepLab> {
        let started = Instant::now();
        eprintln!(
            "sweep: starting MariaDB, 5 Redis, ZooKeeper, etcd{} and 2 stock-app instances ...",
            if at_a_distance {
                ", a proxy in front of each"
            } else {
                ""
            }
        );
        let stack = Stack::start(&StackConfig {
            network: at_a_distance.then(Latency::default),
            ..StackConfig::default()
        })?;
        let env: BTreeMap<_, _> = stack.env().into_iter().collect();
        let app_bin = crate::lab::app_bin(args.app_bin.as_deref())?;
        let client = crate::lab::http_client(widest)?;
        let mut instances = Vec::new();
        for i in 1..=2 {
            let name = format!("stock-app-{i}");
            instances.push(start_instance(&client, &app_bin, &env, &name, 0).await?);
        }
        let db = MySqlPoolOptions::new()
            .max_connections(2)
            .connect(&env["DATABASE_URL"])
            .await?;
        let mut lab = SweepLab {
            stack,
            env,
            instances,
            db,
            catalogue: Catalogue(Vec::new()),
            started,
            base: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64 % 100_000),
            client,
            histories: crate::history::folder(args.json.as_deref(), "sweep")?,
        };
        lab.catalogue = lab.runner().strategies().await?;
        Ok(lab)
    }

    /// A runner over the two instances, writing the histories, measuring the
    /// instances' and servers' CPU and the first Redis's own time.
    pub fn runner(&self) -> Runner {
        let mut runner = Runner::new(
            self.client.clone(),
            self.db.clone(),
            self.instances.iter().map(|i| i.base.clone()).collect(),
            ADMIN_TOKEN,
        );
        runner.histories = Some(self.histories.clone());
        runner.processes = crate::lab::processes(&self.instances, &self.stack.pids());
        runner.redis_url = self
            .env
            .get("REDIS_URLS")
            .and_then(|urls| urls.split(',').next())
            .map(str::to_string);
        runner
    }

    /// The first product of cell number `cell` (counted over every pass).
    pub fn first_product(&self, cell: usize) -> i64 {
        self.base * 10_000_000 + cell as i64 * 1_000 + 1
    }

    /// What `args` asks to sweep at `concurrencies`, with the cells `reused` from
    /// other runs; the strategies chosen from the lab's catalogue.
    pub fn sweep(
        &self,
        args: &SweepArgs,
        concurrencies: Vec<usize>,
        reused: Vec<Row>,
    ) -> anyhow::Result<Sweep> {
        let at_a_distance = !args.rtt_ms.is_empty();
        Ok(Sweep {
            strategies: choose_strategies(&self.catalogue, &args.strategies, at_a_distance)?,
            concurrencies,
            products: args.products.clone(),
            seconds: args.seconds,
            rtt_ms: None,
            reused,
        })
    }
}

/// The sweep on loopback: every strategy across concurrencies and product layouts.
pub struct Scaling {
    pub sweep: Sweep,
    info: Option<SweepInfo>,
}

impl Scaling {
    pub fn new(sweep: Sweep) -> Scaling {
        Scaling { sweep, info: None }
    }
}

impl Chapter for Scaling {
    type Stage = SweepLab;
    type Part = SweepInfo;
    const KEY: Option<&'static str> = Some(KEY);

    fn title(&self, _lab: &SweepLab) -> String {
        format!(
            "{} cells of {} s, over 2 instances",
            self.sweep.cells(),
            self.sweep.seconds
        )
    }

    async fn run(&mut self, lab: &SweepLab, _before: &[Row]) -> anyhow::Result<Vec<Row>> {
        let rows = self
            .sweep
            .run(&lab.runner(), |cell| lab.first_product(cell))
            .await?;
        self.info = Some(sweep_info(&[], &self.sweep, Vec::new(), lab.started));
        Ok(rows)
    }

    fn print(&self, lab: &SweepLab, rows: &[Row]) {
        if let Some(info) = &self.info {
            super::print_tables(info, rows, &lab.catalogue);
        }
    }

    fn report(&self, report: &mut Report) {
        if let Some(info) = &self.info {
            report.parts.push(info.part());
        }
    }

    fn draws(section: &Section) -> bool {
        matches!(section, Section::Sweep { .. })
    }

    /// The sweep's charts and tables (at a distance too: each RTT's layouts).
    fn html(report: &Read<'_, SweepInfo>) -> String {
        report.part.map_or(String::new(), |info| {
            super::html(info, report.results, report.strategies)
        })
    }

    fn pages(report: &Read<'_, SweepInfo>, pages: &mut Pages, _facts: &mut Facts) {
        super::page::pages(report, pages);
    }
}

/// The strategies to sweep, each with whether it is safe across instances.
///
/// The ones asked for (an unknown name is an error), else every one the service
/// lists, or only the safe ones at a distance.
fn choose_strategies(
    catalogue: &Catalogue,
    wanted: &[String],
    at_a_distance: bool,
) -> anyhow::Result<Vec<(String, bool)>> {
    let mut strategies = catalogue.safety();
    if !wanted.is_empty() {
        for wanted in wanted {
            if !strategies.iter().any(|(name, _)| name == wanted) {
                let known: Vec<&str> = strategies.iter().map(|(n, _)| n.as_str()).collect();
                bail!("unknown strategy {wanted:?}; known: {}", known.join(", "));
            }
        }
        strategies.retain(|(name, _)| wanted.contains(name));
    } else if at_a_distance {
        // The distance compares what one would deploy: the safe strategies.
        strategies.retain(|(_, safe)| *safe);
    }
    Ok(strategies)
}

/// The loopback cells of this sweep that the reused reports measured, each moved
/// into its layout's loopback section.
pub fn reused_loopback_rows(sweep: &Sweep) -> Vec<Row> {
    let mut rows = Vec::new();
    for &products in &sweep.products {
        for (strategy, _) in &sweep.strategies {
            for &c in &sweep.concurrencies {
                let cell = Cell {
                    strategy,
                    products,
                    concurrency: c,
                    seconds: sweep.seconds,
                    rtt_ms: None,
                };
                if let Some(row) = super::reuse(&sweep.reused, cell) {
                    rows.push(Row {
                        section: super::section(products, None),
                        ..row
                    });
                }
            }
        }
    }
    rows
}

/// Puts every server behind `rtt` ms of round trip through its proxy (nothing
/// without proxies).
pub fn set_rtt(network: Option<&Distance>, rtt: f64) {
    if let Some(network) = network {
        network.set_latency(None, crate::lab::round_trip(rtt));
    }
}

/// What the sweep covered and how each cell's figure was taken, for its tables and report.
pub fn sweep_info(
    rtts_ms: &[f64],
    sweep: &Sweep,
    round_trips: Vec<RoundTripCount>,
    started: Instant,
) -> SweepInfo {
    SweepInfo {
        rtts_ms: rtts_ms.to_vec(),
        round_trips,
        concurrencies: sweep.concurrencies.clone(),
        products: sweep.products.clone(),
        cell_seconds: sweep.seconds,
        requests_rule: format!(
            "each cell sends for {} s after a warm-up round (stock never the limit); its figure is the sales per second of its steady window",
            sweep.seconds
        ),
        seconds: started.elapsed().as_secs_f64(),
    }
}
