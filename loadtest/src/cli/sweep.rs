//! `loadtest sweep`: every strategy across concurrencies and product layouts, drawn as lines.

use super::{ADMIN_TOKEN, server_versions, start_instance, write_reports};
use anyhow::bail;
use loadtest::lab::Instance;
use loadtest::report::Report;
use loadtest::runner::Runner;
use serde_json::json;
use sqlx::mysql::MySqlPoolOptions;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use testbed::{Latency, Stack, StackConfig};

#[derive(clap::Args)]
pub struct SweepArgs {
    /// Only these strategies (comma-separated; default: every one the service lists).
    #[arg(long, value_delimiter = ',')]
    pub strategies: Vec<String>,
    /// The concurrencies (comma-separated; default 1,4,16,64,256, or 64 with --rtt-ms).
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Vec<usize>,
    /// Put every server behind a proxy and sweep these round-trip times, in ms
    /// (comma-separated, e.g. 0,0.5,2; 0 = through the proxy, nothing added): one pass
    /// each, then each strategy's round trips per request counted at concurrency 1.
    #[arg(long, value_delimiter = ',', value_parser = testbed::Latency::parse_ms)]
    pub rtt_ms: Vec<f64>,
    /// The product layouts: how many products the load is spread over (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = loadtest::sweep::PRODUCTS)]
    pub products: Vec<usize>,
    /// How long each cell sends, in seconds (its figure is the sales per second of
    /// the steady window inside it).
    #[arg(long, default_value_t = loadtest::plan::THROUGHPUT_SECONDS)]
    pub seconds: f64,
    /// Take the cells other reports already measured (the same strategy, products,
    /// concurrency, time and distance, 2 instances, a closed loop: e.g.
    /// `reports/demo.json`'s throughput section, flash sale and its section at 2 ms)
    /// instead of measuring them again: one setup, one figure. With --rtt-ms, their
    /// loopback cells at the same concurrency are shown beside the proxied ones.
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
    use loadtest::sweep::{Sweep, SweepInfo};
    // `is_nan` too: NaN compares false with everything.
    if args.seconds.is_nan()
        || args.seconds <= 0.0
        || args.concurrency.contains(&0)
        || args.products.contains(&0)
    {
        bail!("--seconds, --concurrency and --products must be positive");
    }
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
    let widest = concurrencies.iter().copied().max().unwrap_or(1);
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
    let catalogue = runner.strategies().await?;
    let mut strategies = catalogue.safety();
    if !args.strategies.is_empty() {
        for wanted in &args.strategies {
            if !strategies.iter().any(|(name, _)| name == wanted) {
                let known: Vec<&str> = strategies.iter().map(|(n, _)| n.as_str()).collect();
                bail!("unknown strategy {wanted:?}; known: {}", known.join(", "));
            }
        }
        strategies.retain(|(name, _)| args.strategies.contains(name));
    } else if at_a_distance {
        // The distance compares what one would deploy: the safe strategies.
        strategies.retain(|(_, safe)| *safe);
    }
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
    let set_rtt = |rtt: f64| {
        if let Some(network) = network {
            network.set_latency(
                None,
                Latency::round_trip(Duration::from_secs_f64(rtt / 1000.0)),
            );
        }
    };
    // At a distance, the loopback cells another run measured are shown beside the
    // proxied ones (no proxy at all: not the same setup as 0 ms through the proxies).
    let mut rows: Vec<loadtest::report::Row> = Vec::new();
    if at_a_distance {
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
                        rows.push(loadtest::report::Row {
                            section: loadtest::sweep::section(products, None),
                            ..row
                        });
                    }
                }
            }
        }
    }
    for (pass, &rtt) in args.rtt_ms.iter().enumerate() {
        set_rtt(rtt);
        sweep.rtt_ms = Some(rtt);
        runner.network = network.map(|n| (rtt, n.round_trips()));
        let offset = pass * sweep.cells();
        rows.extend(
            sweep
                .run(&runner, |cell| {
                    base * 10_000_000 + (offset + cell) as i64 * 1_000 + 1
                })
                .await?,
        );
    }
    if !at_a_distance {
        rows = sweep
            .run(&runner, |cell| base * 10_000_000 + cell as i64 * 1_000 + 1)
            .await?;
    }
    // The round trips of each path, counted at concurrency 1 (at 0 and the largest RTT).
    let mut round_trips = Vec::new();
    if let Some(&far) = args.rtt_ms.iter().max_by(|a, b| a.total_cmp(b))
        && far > 0.0
    {
        let first = (passes * sweep.cells()) as i64;
        let (counts, count_rows) = loadtest::distance::measure_round_trips(
            &mut runner,
            &sweep.strategies,
            far,
            &set_rtt,
            &|n| base * 10_000_000 + (first + n as i64) * 1_000 + 1,
        )
        .await?;
        round_trips = counts;
        rows.extend(count_rows);
    }
    let servers = server_versions(&db, &env).await;
    db.close().await;
    let info = SweepInfo {
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
    };
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
    report
        .claims
        .extend(loadtest::distance::claim(&info, &report.results));
    for claim in &report.claims {
        println!(
            "claim: {} -> {} ({})",
            claim.claim, claim.verdict, claim.evidence
        );
    }
    report
        .parts
        .push(loadtest::distance::part(&info, &report.results, &catalogue));
    report.strategies = catalogue;
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
