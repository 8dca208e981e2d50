//! `loadtest demo` (what `./scripts/demo` runs): start everything, run each strategy on
//! one hot product, compare.
//!
//! One setup, one figure: every throughput setup is timed with stock never the limit
//! and measured in one series of rounds (sales per second over its steady windows,
//! strategy after strategy, round after round, the rounds pooled: [`loadtest::rate`]),
//! and the claims compare figures of the same rounds, round by round. The far section
//! (`--far-rtt-ms`) runs one round: no claim is judged on it. Where another section
//! needs the same setup (the far table's loopback column, the contention claim's 64 in
//! flight, the capacity past which the overload runs), it reads that row. The sections
//! whose stock runs out (what breaks, the sell-out) show what was sold and refused,
//! never a rate of answers as a throughput.

use super::{
    ADMIN_TOKEN, LoadArgs, first_product, parameters, plan, server_versions, start_instance,
    start_instance_with, write_reports,
};
use anyhow::bail;
use loadtest::flash::FlashOptions;
use loadtest::lab::Instance;
use loadtest::report::{Columns, Expect, InstanceInfo, Report, Row, print_table};
use loadtest::runner::Runner;
use sqlx::mysql::MySqlPoolOptions;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;
use stock_wire::Trait;
use testbed::{Stack, StackConfig};

#[derive(clap::Args)]
pub struct DemoArgs {
    /// The hold between read and write (`stock-app --hold-ms`) of the second section,
    /// which makes the controls without a real lock fail visibly.
    #[arg(long, default_value_t = 5)]
    pub hold_ms: u64,
    /// The stock-app binary (default: next to this one).
    #[arg(long)]
    pub app_bin: Option<PathBuf>,
    /// Skip the flash-sale section (one hot product at high concurrency, a sell-out,
    /// the split stock by number of buckets).
    #[arg(long)]
    pub no_flash_sale: bool,
    /// Flash sale: requests in flight at once, over both instances (each strategy sends
    /// for --seconds; the sell-out has its own count: 20,000 buyers).
    #[arg(long, default_value_t = 256)]
    pub flash_concurrency: usize,
    /// Flash sale: open loop instead, starting this many requests per second (at most
    /// --flash-concurrency in flight).
    #[arg(long)]
    pub flash_rate: Option<f64>,
    /// Serve a live page of the run on this address (loopback by default:
    /// 127.0.0.1:8090 when given without one): every strategy's stock, sales, lost
    /// updates and units beyond stock as they happen, then the report. It stays up
    /// after the run until Ctrl-C.
    #[arg(long, num_args = 0..=1, default_missing_value = "127.0.0.1:8090", value_name = "ADDR")]
    pub serve: Option<String>,
    /// Run the whole demo with every server behind a proxy adding this round-trip
    /// time, in ms (e.g. 0.5 inside a data centre, 2 across zones).
    #[arg(long, value_parser = testbed::Latency::parse_ms)]
    pub rtt_ms: Option<f64>,
    /// Every section, the two slow ones too, and rounds of full length: as
    /// `--far-rtt-ms 2 --overload-factor 5 --seconds 2.5`, and the flash sale's locks
    /// measured in every round too; the book's reference run uses it.
    #[arg(long)]
    pub full: bool,
    /// The throughput section again at this round-trip time to every server (two more
    /// instances behind proxies), beside the loopback figures; 0 skips it [default: 0,
    /// 2 with --full].
    #[arg(long, value_parser = testbed::Latency::parse_ms)]
    pub far_rtt_ms: Option<f64>,
    /// Past capacity: an open loop at this multiple of each strategy's measured
    /// capacity, with and without an admission limit; 0 skips the section [default: 0,
    /// 5 with --full].
    #[arg(long)]
    pub overload_factor: Option<f64>,
    /// Measure each throughput setup (the throughput, one-instance, contention,
    /// flash-sale and buckets sections) in this many rounds: every strategy once per
    /// round, every other round in reverse order, the rounds pooled. Without --full
    /// the flash sale's locks, which no claim compares, run one round. Each round
    /// gives a lead (one figure's rate over the other's): a claim is confirmed or
    /// refuted only when every round's lead points the same way, the lead is more than
    /// the margin, and either every round's lead is or the lead is larger than it
    /// moved between rounds; else it is inconclusive. With 1 round the windows'
    /// quartiles stand in, and a close race can flip from one run to the next.
    #[arg(long, default_value_t = ROUNDS, value_parser = clap::value_parser!(u32).range(1..=10))]
    pub rounds: u32,
    /// How long each overload run offers its load, in seconds.
    #[arg(long, default_value_t = 4.0)]
    pub overload_seconds: f64,
    /// The strategies loaded past capacity (default: the reference, the conditional
    /// UPDATE, and the strategy that batches sales: a database one and a hot-product
    /// one, as the service's catalogue names them).
    #[arg(long, value_delimiter = ',')]
    pub overload_strategies: Vec<String>,
    /// The fixed admission limit of the limited instances in that section, per
    /// instance.
    #[arg(long, default_value_t = 32)]
    pub overload_max_in_flight: usize,
    /// The reject hold (`stock-app --reject-hold-ms`) of that section's held
    /// settings, beside the same limits without one.
    #[arg(long, default_value_t = 1000)]
    pub overload_reject_hold_ms: u64,
    /// That section's flood: `wrk` (closed loop, never backing off) with this many
    /// connections on each setting, the reference strategy; 0 skips it.
    #[arg(long, default_value_t = loadtest::flood::DEFAULT_CONNECTIONS)]
    pub flood_connections: usize,
    #[command(flatten)]
    pub load: LoadArgs,
}

/// Rounds of every throughput setup, in the quick demo's time. Two figures alike are
/// put in the same order by all four rounds by chance one time in eight (either way):
/// the rule asks more of a lead than that ([`loadtest::rate::decisive`]), and an even
/// count runs every strategy as often early in a round as late.
const ROUNDS: u32 = 4;

/// How long each timed run of the quick demo sends, in seconds (`--full` runs rounds
/// of [`loadtest::plan::THROUGHPUT_SECONDS`]). Four rounds of it send for less than
/// one full-length run did: each run also waits for its last answers, its final read
/// and its check, and the quick demo keeps its few minutes.
const QUICK_SECONDS: f64 = 0.5;

/// A latency of `rtt_ms` round trip.
fn round_trip(rtt_ms: f64) -> testbed::Latency {
    testbed::Latency::round_trip(std::time::Duration::from_secs_f64(rtt_ms / 1000.0))
}

pub async fn demo(mut args: DemoArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let far_rtt_ms = *args
        .far_rtt_ms
        .get_or_insert(if args.full { 2.0 } else { 0.0 });
    let overload_factor = *args
        .overload_factor
        .get_or_insert(if args.full { 5.0 } else { 0.0 });
    let rounds = args.rounds;
    // The flood's connections, shared over two instances: a file each, on both ends.
    let open_files = loadtest::lab::raise_open_files();
    if overload_factor > 0.0 && args.flood_connections > 0 {
        let needed = args.flood_connections.div_ceil(2) as u64 + 100;
        anyhow::ensure!(
            open_files >= needed,
            "--flood-connections {} needs {needed} open files per process, and the hard limit is {open_files} (raise it as root: ulimit -Hn, limits.conf, docker --ulimit nofile=; or a smaller --flood-connections)",
            args.flood_connections
        );
    }
    let round_text = |round: u32| loadtest::runner::round_text(round, rounds);
    // The live page first, so a browser can watch from the start.
    let live = match &args.serve {
        Some(addr) => {
            let live = loadtest::live::Live::new();
            let (bound, _server) = live.serve(addr)?;
            eprintln!("demo: live page at http://{bound}/");
            Some(live)
        }
        None => None,
    };
    let say = |text: &str| {
        eprintln!("demo: {text}");
        if let Some(live) = &live {
            live.note(text);
        }
    };
    say(&format!(
        "starting MariaDB, 5 Redis, ZooKeeper and etcd{} ...",
        args.rtt_ms.map_or(String::new(), |rtt| format!(
            ", each behind a proxy adding {rtt} ms"
        ))
    ));
    let stack = Stack::start(&StackConfig {
        network: args.rtt_ms.map(round_trip),
        ..StackConfig::default()
    })?;
    let network = stack
        .network()
        .map(|n| (args.rtt_ms.unwrap_or(0.0), n.round_trips()));
    let env: BTreeMap<_, _> = stack.env().into_iter().collect();
    let app_bin = loadtest::lab::app_bin(args.app_bin.as_deref())?;
    // Keep every connection of the busiest section open between requests.
    let client = loadtest::lab::http_client(args.load.concurrency.max(args.flash_concurrency))?;
    // Two instances as they would run behind a load balancer, and two more started
    // with --hold-ms for the section that shows what breaks.
    let mut plain = Vec::new();
    let mut held: Vec<Instance> = Vec::new();
    for i in 1..=2 {
        plain.push(start_instance(&client, &app_bin, &env, &format!("stock-app-{i}"), 0).await?);
    }
    for i in 1..=2 {
        held.push(
            start_instance(
                &client,
                &app_bin,
                &env,
                &format!("stock-app-held-{i}"),
                args.hold_ms,
            )
            .await?,
        );
    }
    say(&format!(
        "servers and 4 stock-app instances up in {:.1} s",
        started.elapsed().as_secs_f64()
    ));

    let db = MySqlPoolOptions::new()
        .max_connections(2)
        .connect(&env["DATABASE_URL"])
        .await?;
    // A runner on some instances, with the live page and the network's counters.
    let server_pids = stack.pids();
    let first_redis = env
        .get("REDIS_URLS")
        .and_then(|urls| urls.split(',').next())
        .map(str::to_string);
    let histories = super::histories(args.load.json.as_deref(), "demo")?;
    let runner_on = |instances: &[Instance]| Runner {
        histories: Some(histories.clone()),
        histories_checked: !args.load.no_history,
        live: live.clone(),
        network: network.clone(),
        processes: loadtest::lab::processes(instances, &server_pids),
        redis_url: first_redis.clone(),
        ..Runner::new(
            client.clone(),
            db.clone(),
            instances.iter().map(|i| i.base.clone()).collect(),
            ADMIN_TOKEN,
        )
    };
    // Progress: each section announced with its number, each strategy with its count.
    let sections = 3
        + usize::from(far_rtt_ms > 0.0)
        + usize::from(!args.no_flash_sale)
        + usize::from(overload_factor > 0.0);
    let section_no = std::cell::Cell::new(0);
    let announce = |title: &str| {
        section_no.set(section_no.get() + 1);
        say(&format!(
            "section {}/{sections} (at {:.0} s): {title}",
            section_no.get(),
            started.elapsed().as_secs_f64()
        ));
    };
    let seconds = args.load.seconds.unwrap_or(if args.full {
        loadtest::plan::THROUGHPUT_SECONDS
    } else {
        QUICK_SECONDS
    });
    // A throughput run: timed, stock never the limit, one warm-up round.
    let timed = |plan: loadtest::plan::Plan| plan.timed(seconds);
    let mut rows: Vec<Row> = Vec::new();
    let runner = runner_on(&plain);
    let catalogue = runner.strategies().await?;
    let wanted = |name: &str| {
        args.load.strategies.is_empty() || args.load.strategies.iter().any(|s| s == name)
    };
    // The strategies a throughput section compares: safe across instances, and selling
    // (the control that refuses every overtaken request sells next to nothing on a hot
    // product: its section is the faults').
    let sellers: Vec<String> = (catalogue.0.iter())
        .filter(|c| c.safe_across_instances && !c.has(Trait::RefusesOvertaken) && wanted(&c.name))
        .map(|c| c.name.clone())
        .collect();
    let mut instances_extra: Vec<InstanceInfo> = Vec::new();
    let mut sell_outs = Vec::new();
    let mut floods = Vec::new();
    let mut flooded: Option<(String, f64)> = None;

    announce(&format!(
        "throughput: sales per second on one hot product, {} of {seconds} s each, stock never the limit",
        loadtest::runner::rounds_text(rounds)
    ));
    // What a throughput round measures, in this order (every other round in reverse):
    // every seller; the compare-and-set again at 4 in flight right after its own row
    // (the contention claim compares the two round by round, so they are measured side
    // by side); the baseline at the end: the
    // reference's transaction (the conditional UPDATE) over sqlx, no HTTP, same
    // concurrency, same time, as many connections as the two instances.
    let reference = catalogue
        .first_with(Trait::ConditionalUpdate)
        .map_or("the conditional UPDATE".to_string(), |c| c.name.clone());
    let mut plans: Vec<loadtest::plan::Plan> = sellers
        .iter()
        .enumerate()
        .map(|(k, strategy)| {
            timed(plan(
                "throughput",
                strategy,
                first_product(0, k),
                &args.load,
                Expect::Safe,
            ))
        })
        .collect();
    let cas = catalogue
        .first_with(Trait::CompareAndSet)
        .map(|c| c.name.clone())
        .filter(|s| wanted(s));
    if let Some(cas) = &cas {
        let mut low = timed(plan(
            loadtest::claims::CONTENTION,
            cas,
            first_product(3, 0),
            &args.load,
            Expect::Safe,
        ));
        low.concurrency = 4;
        low.warmup = 4;
        let after = plans.iter().position(|p| &p.strategy == cas);
        plans.insert(after.map_or(plans.len(), |i| i + 1), low);
    }
    let baseline = usize::from(wanted("baseline"));
    let runs = loadtest::runner::in_rounds(plans.len() + baseline, rounds, async |round, k| {
        let Some(plan) = plans.get(k) else {
            say(&format!(
                "{}baseline ({reference} over sqlx, no HTTP) ...",
                round_text(round)
            ));
            return baseline_run(
                &client,
                &plain[0].base,
                &env["DATABASE_URL"],
                &args.load,
                seconds,
            )
            .await;
        };
        let against = match plan.section.as_str() {
            loadtest::claims::CONTENTION => format!(" (against {})", args.load.concurrency),
            _ => String::new(),
        };
        say(&format!(
            "{}({}/{}) {}: {seconds} s at concurrency {}{against} over 2 instances ...",
            round_text(round),
            k + 1,
            plans.len(),
            plan.strategy,
            plan.concurrency
        ));
        runner.run_fired(&plan.in_round(round)).await
    })
    .await?;
    // The throughput section's rows, then the contention row: a table per section, as
    // the live page shows them.
    let (throughput, contention): (Vec<Row>, Vec<Row>) = runs
        .into_iter()
        .filter_map(loadtest::runner::pooled_row)
        .map(|(_, row)| row)
        .partition(|row| row.section == "throughput");
    rows.extend(throughput);
    rows.extend(contention);

    // One instance: an in-process lock works there only; the claim that ranks it
    // against the database's locks is judged on that.
    announce("one instance: the in-process lock where it works, beside the database's locks");
    let one = runner_on(&plain[..1]);
    let one_instance: Vec<String> = [Trait::ConditionalUpdate, Trait::RowLock, Trait::ProcessLock]
        .into_iter()
        .filter_map(|t| catalogue.first_with(t).map(|c| c.name.clone()))
        .filter(|n| wanted(n))
        .collect();
    // Every one of them is safe on one instance: that is the point.
    let plans: Vec<loadtest::plan::Plan> = one_instance
        .iter()
        .enumerate()
        .map(|(k, strategy)| {
            timed(plan(
                loadtest::claims::ONE_INSTANCE,
                strategy,
                first_product(1, k),
                &args.load,
                Expect::Safe,
            ))
        })
        .collect();
    rows.extend(
        one.run_in_rounds(&plans, rounds, |round, k| {
            say(&format!(
                "{}({}/{}) {}: {seconds} s at concurrency {} on 1 instance ...",
                round_text(round),
                k + 1,
                plans.len(),
                plans[k].strategy,
                plans[k].concurrency
            ))
        })
        .await?,
    );

    // What breaks: every strategy, stock that runs out, every deduction held.
    announce("what breaks: every deduction held between read and write, stock that runs out");
    let held_runner = runner_on(&held);
    let all: Vec<(String, bool)> = catalogue
        .safety()
        .into_iter()
        .filter(|(name, _)| wanted(name))
        .collect();
    for (k, (strategy, safe)) in all.iter().enumerate() {
        // Two instances: only strategies safe across instances must hold; the
        // controls must oversell.
        let expect = if *safe {
            Expect::Safe
        } else {
            Expect::Oversells
        };
        let mut plan = plan(
            loadtest::claims::HELD,
            strategy,
            first_product(2, k),
            &args.load,
            expect,
        );
        plan.server_hold_ms = args.hold_ms;
        // Reads of what is left beside the deductions: a lost update shows in them
        // (a stock that no order of the sales explains) before the ledger is read.
        plan.read_every = plan
            .read_every
            .or(Some(std::time::Duration::from_millis(5)));
        // Not timed: a number of requests at a stock that runs out.
        plan.duration = None;
        plan.requests = args.load.requests;
        say(&format!(
            "({}/{}) {strategy} (hold {} ms): {} requests at concurrency {} over 2 instances, stock {} ...",
            k + 1,
            all.len(),
            args.hold_ms,
            plan.requests,
            plan.concurrency,
            plan.stock
        ));
        rows.push(held_runner.run(&plan).await?);
    }
    // The held instances are done: stopped now, their connections and prepared
    // statements with them.
    instances_extra.extend(held.iter().map(Instance::info));
    drop(held);

    // The throughput section again with every server farther away: two more instances
    // behind a second set of proxies.
    let far_section = format!("throughput, RTT {} ms", loadtest::sweep::ms(far_rtt_ms));
    if far_rtt_ms > 0.0 {
        let distance = stack.distance(round_trip(far_rtt_ms))?;
        let far_env: BTreeMap<_, _> = distance.env().into_iter().collect();
        let mut far = Vec::new();
        for i in 1..=2 {
            far.push(
                start_instance(
                    &client,
                    &app_bin,
                    &far_env,
                    &format!("stock-app-far-{i}"),
                    0,
                )
                .await?,
            );
        }
        let runner = Runner {
            network: Some((far_rtt_ms, distance.round_trips())),
            ..runner_on(&far)
        };
        announce(&format!("throughput at {far_rtt_ms} ms from every server"));
        for (k, strategy) in sellers.iter().enumerate() {
            let plan = timed(plan(
                &far_section,
                strategy,
                first_product(5, k),
                &args.load,
                Expect::Safe,
            ));
            say(&format!(
                "({}/{}) {strategy} at {} ms from every server: {seconds} s at concurrency {} ...",
                k + 1,
                sellers.len(),
                far_rtt_ms,
                plan.concurrency
            ));
            rows.push(runner.run(&plan).await?);
        }
        for mut instance in far {
            instance.process.kill();
        }
    }

    // The flash sale: one hot product at high concurrency.
    let mut flash = None;
    if !args.no_flash_sale {
        announce("the flash sale: one hot product at high concurrency, a sell-out, buckets");
        let runner = runner_on(&plain);
        let chosen = loadtest::catalogue::Catalogue(
            catalogue
                .0
                .iter()
                .filter(|c| {
                    args.load.strategies.is_empty() || args.load.strategies.contains(&c.name)
                })
                .cloned()
                .collect(),
        );
        let mut processes: Vec<(String, u32)> = plain
            .iter()
            .map(|i| (i.process.name().to_string(), i.process.pid()))
            .collect();
        processes.extend(
            stack
                .pids()
                .into_iter()
                .filter(|(name, _)| name == "mariadb" || name == "redis-1"),
        );
        let options = FlashOptions {
            seconds,
            rounds,
            other_rounds: if args.full { rounds } else { 1 },
            concurrency: args.flash_concurrency,
            rate: args.flash_rate,
            ..FlashOptions::default()
        };
        let sale = loadtest::flash::run(&runner, &chosen, options, &processes, |n| {
            first_product(4, n)
        })
        .await?;
        rows.extend(sale.rows.iter().cloned());
        flash = Some(sale);
    }
    // Past capacity: the same strategies as they run by default, and with an
    // admission limit (fixed, adaptive) on two instances each.
    let mut overload = Vec::new();
    let overload_strategies: Vec<String> = if args.overload_strategies.is_empty() {
        [Trait::ConditionalUpdate, Trait::Batches]
            .into_iter()
            .filter_map(|t| catalogue.first_with(t).map(|c| c.name.clone()))
            .collect()
    } else {
        args.overload_strategies.clone()
    };
    if overload_factor > 0.0 && !overload_strategies.is_empty() {
        announce(&format!(
            "past capacity: {overload_factor}x each strategy's capacity"
        ));
        let limit = args.overload_max_in_flight.to_string();
        let hold = args.overload_reject_hold_ms.to_string();
        // Each limit as it answers a refusal at once (a hold of 0, said outright) and
        // with the reject hold.
        let fixed = |hold| vec!["--max-in-flight", &limit, "--reject-hold-ms", hold];
        let adaptive_with = |hold| {
            vec![
                "--adaptive-limit",
                "--max-in-flight",
                "256",
                "--reject-hold-ms",
                hold,
            ]
        };
        let (limited_flags, adaptive_flags) = (fixed("0"), adaptive_with("0"));
        let (held_flags, adaptive_held_flags) = (fixed(&hold), adaptive_with(&hold));
        let mut limited = Vec::new();
        let mut adaptive = Vec::new();
        let mut held = Vec::new();
        let mut adaptive_held = Vec::new();
        for i in 1..=2 {
            for (group, name, flags) in [
                (&mut limited, "limited", &limited_flags),
                (&mut adaptive, "adaptive", &adaptive_flags),
                (&mut held, "limited-held", &held_flags),
                (&mut adaptive_held, "adaptive-held", &adaptive_held_flags),
            ] {
                group.push(
                    start_instance_with(
                        &client,
                        &app_bin,
                        &env,
                        &format!("stock-app-{name}-{i}"),
                        flags,
                    )
                    .await?,
                );
            }
        }
        let (plain_runner, limited_runner, adaptive_runner) =
            (runner_on(&plain), runner_on(&limited), runner_on(&adaptive));
        let (held_runner, adaptive_held_runner) = (runner_on(&held), runner_on(&adaptive_held));
        // Each setting is named by its flags, the hold included: with a limit, the
        // service holds a second unless told.
        let [limited_name, adaptive_name, held_name, adaptive_held_name] = [
            &limited_flags,
            &adaptive_flags,
            &held_flags,
            &adaptive_held_flags,
        ]
        .map(|flags| flags.join(" "));
        let unfast_flags = [limited_flags.as_slice(), &["--sold-out-cache-ms", "0"]].concat();
        let mut unfast = Vec::new();
        for i in 1..=2 {
            unfast.push(
                start_instance_with(
                    &client,
                    &app_bin,
                    &env,
                    &format!("stock-app-no-fast-path-{i}"),
                    &unfast_flags,
                )
                .await?,
            );
        }
        let unfast_runner = runner_on(&unfast);
        let modes = [
            (
                &plain_runner,
                loadtest::overload::Mode {
                    name: "no limit".into(),
                    retries: 0,
                },
            ),
            (
                &limited_runner,
                loadtest::overload::Mode {
                    name: limited_name.clone(),
                    retries: 3,
                },
            ),
            (
                &adaptive_runner,
                loadtest::overload::Mode {
                    name: adaptive_name.clone(),
                    retries: 3,
                },
            ),
            (
                &held_runner,
                loadtest::overload::Mode {
                    name: held_name.clone(),
                    retries: 3,
                },
            ),
            (
                &adaptive_held_runner,
                loadtest::overload::Mode {
                    name: adaptive_held_name.clone(),
                    retries: 3,
                },
            ),
            // The client's retries off: what they add (and cost).
            (
                &limited_runner,
                loadtest::overload::Mode {
                    name: format!("{limited_name}, no retries"),
                    retries: 0,
                },
            ),
        ];
        for (i, strategy) in overload_strategies.iter().enumerate() {
            if !catalogue.0.iter().any(|c| &c.name == strategy) {
                bail!("--overload-strategies: unknown strategy {strategy:?}");
            }
            // Its capacity: the best of the no-limit rows this run already measured (one
            // setup, one figure); measured here only if no section ran it.
            let measured: Vec<&Row> = rows
                .iter()
                .filter(|r| {
                    &r.strategy == strategy
                        && ["throughput", "flash-sale"].contains(&r.section.as_str())
                })
                .collect();
            let capacity = match loadtest::overload::capacity(&measured) {
                Some(capacity) => capacity,
                None => {
                    let plan = timed(plan(
                        "overload: capacity",
                        strategy,
                        first_product(6, i * 10 + 9),
                        &args.load,
                        Expect::Safe,
                    ));
                    let row = plain_runner.run(&plan).await?;
                    let capacity = loadtest::overload::capacity(&[&row]).expect("one row");
                    rows.push(row);
                    capacity
                }
            };
            say(&format!(
                "{strategy} past capacity: {}x its capacity for {} s, {} ways ...",
                overload_factor,
                args.overload_seconds,
                modes.len()
            ));
            let (results, overload_rows) = loadtest::overload::run(
                strategy,
                capacity,
                &modes,
                overload_factor,
                args.overload_seconds,
                &|n| first_product(6, i * 10 + n),
            )
            .await?;
            // The sell-out at the same offered rate on limited instances, the fast
            // path on and off (the reference strategy only: its refusal is a
            // transaction on the hot row).
            if i == 0 {
                let offered = results.first().map_or(1000.0, |r| r.offered_per_second);
                let fast = format!("{limited_name}, fast path on");
                let unfast_name = unfast_flags.join(" ");
                let (sold_out, sell_out_rows) = loadtest::overload::sell_out(
                    strategy,
                    &[(&limited_runner, &fast), (&unfast_runner, &unfast_name)],
                    offered,
                    args.overload_seconds,
                    100,
                    &|n| first_product(7, n),
                )
                .await?;
                sell_outs.extend(sold_out);
                rows.extend(sell_out_rows);
                flooded = results
                    .first()
                    .map(|r| (strategy.clone(), r.capacity_sales_per_second));
            }
            overload.extend(results);
            rows.extend(overload_rows);
        }
        // The flood on every setting, the reference strategy only, after every polite
        // row (a flood leaves the adaptive limits where it drove them).
        if let Some((strategy, capacity)) = flooded
            && args.flood_connections > 0
        {
            say(&format!(
                "{strategy} flooded: wrk at {} connections on each setting ...",
                args.flood_connections
            ));
            let target = |mode: &str, runner| loadtest::flood::Target {
                mode: mode.into(),
                runner,
            };
            let targets = [
                target("no limit", &plain_runner),
                target(&limited_name, &limited_runner),
                target(&adaptive_name, &adaptive_runner),
                target(&held_name, &held_runner),
                target(&adaptive_held_name, &adaptive_held_runner),
            ];
            floods = loadtest::flood::run(
                &strategy,
                capacity,
                &targets,
                args.flood_connections,
                args.overload_seconds.max(6.0),
                &|n| first_product(9, n + 1),
            )
            .await?;
        }
        instances_extra.extend(unfast.iter().map(Instance::info));
        instances_extra.extend(
            (limited
                .iter()
                .chain(&adaptive)
                .chain(&held)
                .chain(&adaptive_held))
            .map(Instance::info),
        );
    }
    let servers = server_versions(&db, &env).await;
    db.close().await;

    let section = |name: &str| -> Vec<&Row> { rows.iter().filter(|r| r.section == name).collect() };
    let throughput = section("throughput");
    let on_loopback = match args.rtt_ms {
        Some(rtt) => format!("RTT {rtt} ms to every server"),
        None => "servers on loopback".to_string(),
    };
    print_table(
        &format!(
            "Throughput: one hot product, {} in flight over 2 instances, {seconds} s per strategy, stock never the limit, {on_loopback}",
            args.load.concurrency,
        ),
        &throughput,
        Columns::Throughput,
    );
    print_table(
        &format!(
            "One instance: the in-process lock where it works ({} in flight, {seconds} s per strategy, stock never the limit)",
            args.load.concurrency
        ),
        &section(loadtest::claims::ONE_INSTANCE),
        Columns::Throughput,
    );
    let far: Vec<&Row> = rows.iter().filter(|r| r.section == far_section).collect();
    if !far.is_empty() {
        print_distance_table(&throughput, &far, far_rtt_ms);
    }
    print_table(
        &format!(
            "What breaks: {} requests per strategy at {} in flight over 2 instances started with --hold-ms {h} (every deduction waits {h} ms between read and write), stock {}",
            args.load.requests,
            args.load.concurrency,
            args.load.stock,
            h = args.hold_ms
        ),
        &section(loadtest::claims::HELD),
        Columns::Verdicts,
    );
    let contention_rows = section(loadtest::claims::CONTENTION);
    if !contention_rows.is_empty() {
        print_table(
            "Optimistic CAS under little contention (one hot product, 4 in flight over 2 instances; 64 in flight is the throughput section's row)",
            &contention_rows,
            Columns::Throughput,
        );
    }
    if let Some(sale) = &flash {
        print_table(
            &format!(
                "Flash sale: one hot product, {} in flight over 2 instances, {seconds} s per strategy (stock never the limit)",
                args.flash_concurrency
            ),
            &section("flash-sale"),
            Columns::Throughput,
        );
        for l in &sale.limits {
            let cpu: Vec<String> = l
                .cpu_percent
                .iter()
                .map(|(name, p)| format!("{name} {p:.0}%"))
                .collect();
            println!(
                "  {:<12} {} sales/s{}, {:.2} statements/sale, {:.1} sales/transaction; CPU: {}",
                l.strategy,
                l.sales.text(),
                l.ratio()
                    .map_or(String::new(), |r| format!(" ({} {reference})", r.text())),
                l.statements_per_sale,
                l.sales_per_transaction,
                cpu.join(", ")
            );
        }
        println!(
            "  (statements/sale: MariaDB's Questions over the run per sale; CPU: percent of one core per process)"
        );
        let sell_rows = sale.rows.iter().filter(|r| r.section == "sell-out");
        for (s, row) in sale.sell_outs.iter().zip(sell_rows) {
            println!(
                "sell-out {:<12} stock {}{} / {} buyers: {} sold, {} refused ({} by the sold-out fast path), {} other, {:.0} answers/s, overtaken per instance {:?}: {}; history {}",
                s.strategy,
                s.stock,
                s.restock_text(),
                s.buyers,
                s.sold,
                s.refused,
                s.refused_by_fast_path,
                s.other,
                s.answers_per_second,
                s.overtaken,
                if s.exact { "exact" } else { "NOT EXACT" },
                row.history_text(),
            );
        }
        let splits = catalogue
            .first_with(Trait::SplitsStock)
            .map(|c| c.name.as_str());
        for (k, r) in &sale.buckets {
            println!(
                "{} with {k:>3} bucket(s): {} sales/s",
                splits.unwrap_or("?"),
                r.text()
            );
        }
    }
    if !overload.is_empty() {
        loadtest::overload::print_table(&overload, overload_factor);
        loadtest::overload::print_sell_out(&sell_outs);
        loadtest::flood::print_table(&floods);
    }
    let mut instances: Vec<InstanceInfo> = plain.iter().map(Instance::info).collect();
    instances.extend(instances_extra);
    for instance in plain.iter_mut() {
        instance.process.kill();
    }
    drop(stack);

    let mut report = Report::new(parameters(&args.load, 2, args.hold_ms), rows);
    report.claims = loadtest::claims::check(&report.results, &catalogue);
    report.strategies = catalogue;
    if let Some(sale) = &flash {
        report.claims.extend(sale.claims());
        report.parts.push(sale.part());
    }
    if !overload.is_empty() {
        report.parts.push(loadtest::overload::part(
            &overload,
            &sell_outs,
            &floods,
            overload_factor,
            args.overload_seconds,
        ));
    }
    report.instances = instances;
    report.machine.servers = servers;
    println!();
    for claim in &report.claims {
        println!(
            "claim: {} -> {} (on {}: {}; {})",
            claim.claim, claim.verdict, claim.section, claim.load, claim.evidence
        );
    }
    for instance in &report.instances {
        println!(
            "instance {}: peak RSS {:.1} MiB",
            instance.name,
            instance.peak_rss_kib as f64 / 1024.0
        );
    }
    let html_path = write_reports(&report, args.load.json.as_deref(), "demo")?;
    let outcome = outcome(&report, &html_path, args.hold_ms);
    if let Some(live) = &live {
        live.done(
            html_path.clone(),
            html_path.with_extension("json"),
            outcome.is_ok(),
        );
        eprintln!("demo: the live page links the report; it stays up until Ctrl-C");
        tokio::signal::ctrl_c().await?;
    }
    outcome
}

/// The demo's last words: the verdict, and an error naming what was unexpected.
fn outcome(report: &Report, html_path: &std::path::Path, hold_ms: u64) -> anyhow::Result<()> {
    if report.all_as_expected() {
        println!(
            "verdict: every strategy behaved as expected: the safe ones never oversold, \
             and the controls oversold when held {} ms between read and write (checked from the ledger)",
            hold_ms
        );
        println!("report: {}", html_path.display());
        Ok(())
    } else {
        println!("report: {}", html_path.display());
        let unexpected: Vec<String> = report
            .results
            .iter()
            .filter(|r| !r.as_expected)
            .map(|r| format!("{} ({})", r.strategy, r.section))
            .chain(
                report
                    .parts
                    .iter()
                    .filter(|p| !p.as_expected)
                    .map(|p| p.key.to_string()),
            )
            .collect();
        bail!("unexpected outcome: {}", unexpected.join(", "))
    }
}

/// The baseline row: the reference's transaction (the conditional UPDATE) over sqlx,
/// no HTTP.
pub async fn baseline_run(
    client: &reqwest::Client,
    base: &str,
    database_url: &str,
    load: &LoadArgs,
    seconds: f64,
) -> anyhow::Result<(Row, loadtest::engine::Fired)> {
    let product = first_product(3, 1);
    loadtest::engine::restock(
        client,
        base,
        ADMIN_TOKEN,
        product,
        loadtest::plan::NEVER_SOLD_OUT,
        0,
    )
    .await?;
    // As many connections as the two instances' pools hold (32 each, stock-app's
    // default), opened before the clock starts.
    let connections = load.concurrency.clamp(1, 64) as u32;
    let db = MySqlPoolOptions::new()
        .max_connections(connections)
        .min_connections(connections)
        .connect(database_url)
        .await?;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let fired = loadtest::baseline::fire(
        &db,
        product,
        std::time::Duration::from_secs_f64(seconds),
        load.concurrency,
        &format!("base-{id}"),
    )
    .await;
    let verdict = loadtest::verify::verify(&db, &[product], &fired.acknowledged, 0).await?;
    db.close().await;
    let mut plan = plan("throughput", "baseline", product, load, Expect::Safe);
    plan.products = vec![product];
    plan.stock = loadtest::plan::NEVER_SOLD_OUT;
    Ok((Row::new(&plan, 0, &fired, verdict), fired))
}

/// The throughput table's distance columns: each strategy on loopback (or the demo's
/// own RTT) and at `rtt_ms`, with the round trips per request counted there.
fn print_distance_table(near: &[&Row], far: &[&Row], rtt_ms: f64) {
    println!();
    println!(
        "Throughput at {rtt_ms} ms RTT to every server (every server behind a proxy; the same time, stock and concurrency) beside the throughput section's figures"
    );
    println!(
        "{:<12} {:>9} {:>9} {:>11} {:>11} {:>7}  round trips per request (counted)",
        "strategy", "sales/s", "p99 ms", "far sales/s", "far p99 ms", "ratio"
    );
    for f in far {
        let n = near.iter().find(|n| n.strategy == f.strategy);
        println!(
            "{:<12} {:>9} {:>9} {:>11} {:>11.1} {:>7}  {}",
            f.strategy,
            n.map_or("-".into(), |n| loadtest::rate::round(n.sales.per_second)),
            n.map_or("-".into(), |n| format!("{:.1}", n.latency_ms.p99)),
            loadtest::rate::round(f.sales.per_second),
            f.latency_ms.p99,
            n.map_or("-".into(), |n| format!(
                "{:.2}",
                f.sales.per_second / n.sales.per_second.max(1e-9)
            )),
            loadtest::report::by_kind(&f.round_trips_per_request())
        );
    }
    println!(
        "sales/s as in the throughput section (steady window); ratio = far / loopback; round trips counted by the proxies per request, sales and refusals alike"
    );
}
