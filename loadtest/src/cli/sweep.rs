//! `loadtest sweep`: every strategy across concurrencies and product layouts, drawn as lines.

use super::{ADMIN_TOKEN, server_versions, start_instance, write_reports};
use anyhow::bail;
use loadtest::catalogue::Catalogue;
use loadtest::lab::Instance;
use loadtest::report::{Report, Row};
use loadtest::runner::Runner;
use loadtest::sweep::{RoundTripCount, Sweep, SweepInfo};
use serde_json::json;
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
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
    #[arg(long, value_delimiter = ',', default_values_t = loadtest::sweep::PRODUCTS)]
    pub products: Vec<usize>,
    /// How long each cell sends, in seconds.
    ///
    /// Its figure is the sales per second of the steady window inside it.
    #[arg(long, default_value_t = loadtest::plan::THROUGHPUT_SECONDS)]
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

pub async fn sweep(args: SweepArgs) -> anyhow::Result<()> {
    check_args(&args)?;
    let mut reused = Vec::new();
    for path in &args.reuse {
        reused.extend(loadtest::report::rows_of(path)?);
    }
    let at_a_distance = !args.rtt_ms.is_empty();
    let concurrencies = match (args.concurrency.is_empty(), at_a_distance) {
        (false, _) => args.concurrency.clone(),
        (true, false) => loadtest::sweep::CONCURRENCIES.to_vec(),
        (true, true) => vec![64],
    };
    let started = Instant::now();
    let widest = concurrencies.iter().copied().max().unwrap_or(1);
    let Lab {
        stack,
        env,
        instances,
        db,
        mut runner,
    } = start_lab(&args, at_a_distance, widest).await?;
    let catalogue = runner.strategies().await?;
    let strategies = choose_strategies(&catalogue, &args.strategies, at_a_distance)?;
    let mut sweep = Sweep {
        strategies,
        concurrencies,
        products: args.products.clone(),
        seconds: args.seconds,
        rtt_ms: None,
        reused,
    };
    let passes = args.rtt_ms.len().max(1);
    eprintln!(
        "sweep: {} cells of {} s, over 2 instances ...",
        sweep.cells() * passes,
        sweep.seconds
    );
    // Product ids of its own for every cell (up to 1000 products per cell).
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64 % 100_000);
    let network = stack.network();
    // At a distance, the loopback cells another run measured are shown beside the
    // proxied ones (no proxy at all: not the same setup as 0 ms through the proxies).
    let mut rows: Vec<Row> = Vec::new();
    if at_a_distance {
        rows.extend(reused_loopback_rows(&sweep));
    }
    rows.extend(measure_at_distances(&mut sweep, &mut runner, &args.rtt_ms, network, base).await?);
    if !at_a_distance {
        rows = sweep
            .run(&runner, |cell| base * 10_000_000 + cell as i64 * 1_000 + 1)
            .await?;
    }
    // The round trips of each path, counted at concurrency 1 (at 0 and the largest RTT).
    let (round_trips, count_rows) =
        count_round_trips(&mut runner, &sweep, &args.rtt_ms, network, base).await?;
    rows.extend(count_rows);
    let servers = server_versions(&db, &env).await;
    db.close().await;
    let info = sweep_info(&args, &sweep, round_trips, started);
    loadtest::sweep::print_tables(&info, &rows, &catalogue);
    if at_a_distance {
        loadtest::distance::print_tables(&info, &rows);
    }
    let mut report = Report::new(
        json!({
            "command": "sweep", "strategies": args.strategies, "concurrency": info.concurrencies,
            "products": args.products, "seconds": args.seconds, "instances": 2, "rtt_ms": args.rtt_ms,
            "reuse": args.reuse,
        }),
        rows,
    );
    report.machine.servers = servers;
    report.instances = instances.iter().map(Instance::info).collect();
    add_distance(&mut report, &info, catalogue);
    let html_path = write_reports(&report, args.json.as_deref(), "sweep")?;
    println!("report: {}", html_path.display());
    println!(
        "sweep: {} cells in {:.0} s",
        report.results.len(),
        started.elapsed().as_secs_f64()
    );
    drop(instances);
    drop(stack);
    if report.all_as_expected() {
        Ok(())
    } else {
        bail!("a strategy did something unexpected (see the report)")
    }
}

/// Refuses a sweep whose cells could not be measured: no time, no load or no products.
fn check_args(args: &SweepArgs) -> anyhow::Result<()> {
    // `is_nan` too: NaN compares false with everything.
    if args.seconds.is_nan()
        || args.seconds <= 0.0
        || args.concurrency.contains(&0)
        || args.products.contains(&0)
    {
        bail!("--seconds, --concurrency and --products must be positive");
    }
    Ok(())
}

/// The servers a sweep loads: the stack, its environment, the two stock-app
/// instances, the database and a runner over the instances.
struct Lab {
    stack: Stack,
    env: BTreeMap<&'static str, String>,
    instances: Vec<Instance>,
    db: MySqlPool,
    runner: Runner,
}

/// Starts the stack (behind proxies when `at_a_distance`) and two stock-app
/// instances, and a runner over them with room for `widest` requests at once.
async fn start_lab(args: &SweepArgs, at_a_distance: bool, widest: usize) -> anyhow::Result<Lab> {
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
    let app_bin = loadtest::lab::app_bin(args.app_bin.as_deref())?;
    let client = loadtest::lab::http_client(widest)?;
    let mut instances = Vec::new();
    for i in 1..=2 {
        instances
            .push(start_instance(&client, &app_bin, &env, &format!("stock-app-{i}"), 0).await?);
    }
    let db = MySqlPoolOptions::new()
        .max_connections(2)
        .connect(&env["DATABASE_URL"])
        .await?;
    let mut runner = Runner::new(
        client,
        db.clone(),
        instances.iter().map(|i| i.base.clone()).collect(),
        ADMIN_TOKEN,
    );
    runner.histories = Some(super::histories(args.json.as_deref(), "sweep")?);
    runner.processes = loadtest::lab::processes(&instances, &stack.pids());
    runner.redis_url = env
        .get("REDIS_URLS")
        .and_then(|urls| urls.split(',').next())
        .map(str::to_string);
    Ok(Lab {
        stack,
        env,
        instances,
        db,
        runner,
    })
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
fn reused_loopback_rows(sweep: &Sweep) -> Vec<Row> {
    let mut rows = Vec::new();
    for &products in &sweep.products {
        for (strategy, _) in &sweep.strategies {
            for &c in &sweep.concurrencies {
                let cell = loadtest::sweep::Cell {
                    strategy,
                    products,
                    concurrency: c,
                    seconds: sweep.seconds,
                    rtt_ms: None,
                };
                if let Some(row) = loadtest::sweep::reuse(&sweep.reused, cell) {
                    rows.push(Row {
                        section: loadtest::sweep::section(products, None),
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
fn set_rtt(network: Option<&Distance>, rtt: f64) {
    if let Some(network) = network {
        network.set_latency(
            None,
            Latency::round_trip(Duration::from_secs_f64(rtt / 1000.0)),
        );
    }
}

/// Runs every cell once per round-trip time (none on loopback), the servers put
/// behind it first; each pass's cells get product ids after the passes before.
async fn measure_at_distances(
    sweep: &mut Sweep,
    runner: &mut Runner,
    rtts_ms: &[f64],
    network: Option<&Distance>,
    base: i64,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (pass, &rtt) in rtts_ms.iter().enumerate() {
        set_rtt(network, rtt);
        sweep.rtt_ms = Some(rtt);
        runner.network = network.map(|n| (rtt, n.round_trips()));
        let offset = pass * sweep.cells();
        rows.extend(
            sweep
                .run(runner, |cell| {
                    base * 10_000_000 + (offset + cell) as i64 * 1_000 + 1
                })
                .await?,
        );
    }
    Ok(rows)
}

/// Counts each strategy's round trips per request at concurrency 1, at 0 and the
/// largest round-trip time, with the rows that counted them.
///
/// None on loopback, nor when the largest round-trip time is 0. The cells get
/// product ids after every pass's.
async fn count_round_trips(
    runner: &mut Runner,
    sweep: &Sweep,
    rtts_ms: &[f64],
    network: Option<&Distance>,
    base: i64,
) -> anyhow::Result<(Vec<RoundTripCount>, Vec<Row>)> {
    if let Some(&far) = rtts_ms.iter().max_by(|a, b| a.total_cmp(b))
        && far > 0.0
    {
        let passes = rtts_ms.len().max(1);
        let first = (passes * sweep.cells()) as i64;
        return loadtest::distance::measure_round_trips(
            runner,
            &sweep.strategies,
            far,
            &|rtt| set_rtt(network, rtt),
            &|n| base * 10_000_000 + (first + n as i64) * 1_000 + 1,
        )
        .await;
    }
    Ok((Vec::new(), Vec::new()))
}

/// What the sweep covered and how each cell's figure was taken, for its tables and report.
fn sweep_info(
    args: &SweepArgs,
    sweep: &Sweep,
    round_trips: Vec<RoundTripCount>,
    started: Instant,
) -> SweepInfo {
    SweepInfo {
        rtts_ms: args.rtt_ms.clone(),
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

/// Adds the distance's claims (printed, one a line), its part and the strategies to the report.
fn add_distance(report: &mut Report, info: &SweepInfo, catalogue: Catalogue) {
    report
        .claims
        .extend(loadtest::distance::claim(info, &report.results));
    for claim in &report.claims {
        println!(
            "claim: {} -> {} ({})",
            claim.claim, claim.verdict, claim.evidence
        );
    }
    report
        .parts
        .push(loadtest::distance::part(info, &report.results, &catalogue));
    report.strategies = catalogue;
}
