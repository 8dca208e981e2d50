//! `loadtest`'s checker against a real service: it reports a clean verdict where there
//! is one, and a red one where the service really oversold (it can fail).

mod support;

use loadtest::history::Said;
use loadtest::plan::Plan;
use loadtest::report::Expect;
use loadtest::runner::Runner;
use loadtest::section::Section;
use serde_json::json;
use sqlx::Connection;
use stock_app::{Application, Settings};

const TOKEN: &str = "loadtest-token";

/// A service on a fresh database of the shared testbed MariaDB, with test hooks on.
async fn service() -> (String, String) {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL: run under ./scripts/test");
    let (server, _) = base.rsplit_once('/').unwrap();
    let name = format!("lt_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::MySqlConnection::connect(&base).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE `{name}`"))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let database_url = format!("{server}/{name}");
    (service_on(&database_url).await, database_url)
}

/// A service on `database_url` (a second one on the same database is a second
/// instance); returns its base URL.
async fn service_on(database_url: &str) -> String {
    let mut settings = Settings {
        admin_token: Some(TOKEN.into()),
        enable_test_hooks: true,
        ..Settings::for_database(database_url)
    };
    // The testbed's Redis for redis-stock, under keys of this database's own.
    settings.shared.redis_urls = std::env::var("REDIS_URLS")
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    settings.strategies.redis_stock.redis_stock_prefix =
        format!("lt:{}:rs:", database_url.rsplit('/').next().unwrap_or("db"));
    let app = Application::build(settings).await.unwrap();
    let url = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until_stopped());
    url
}

fn plan(strategy: &str, expect: Expect) -> Plan {
    Plan {
        section: Section::Test,
        strategy: strategy.into(),
        products: vec![1],
        stock: 20,
        buckets: 4,
        requests: 60,
        duration: None,
        concurrency: 8,
        rate: None,
        quantity: 1,
        multi_item_share: 0.0,
        request_hold_ms: None,
        server_hold_ms: 0,
        warmup: 5,
        retries: 0,
        read_every: None,
        restock_during: None,
        expect,
    }
}

/// atomic-sql: 20 sold of 20, 40 sold out, clean; unsafe with the `after_read`
/// failpoint sleeping 20 ms: lost updates, so a red verdict when it was expected safe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_finds_what_the_database_says() {
    let (url, database_url) = service().await;
    let runner = Runner::new(
        reqwest::Client::new(),
        sqlx::MySqlPool::connect(&database_url).await.unwrap(),
        vec![url.clone()],
        TOKEN,
    );

    let clean = runner.run(&plan("atomic-sql", Expect::Safe)).await.unwrap();
    assert_eq!(clean.verdict.sold, 20);
    assert_eq!(clean.responses.get("200"), Some(&20));
    assert_eq!(clean.responses.get("409"), Some(&40));
    assert!(clean.verdict.is_clean() && clean.as_expected, "{clean:?}");
    assert_eq!(clean.verdict.missing_acknowledged, 0);
    // Every answer checked against a stock counter: 20 sales, then refusals, then the
    // final read of what is left once the run is quiet.
    let history = clean.history.as_ref().expect("every run is judged");
    assert_eq!(
        (history.verdict, history.operations),
        (Said::Linearizable, 61)
    );
    // Where the time goes, from the service's /metrics around the run (the warm-up
    // before it not counted): no lock, all of it in the transaction and around it.
    let split = clean.time_split.expect("the service's /metrics was read");
    assert_eq!(split.deductions, 60, "{split:?}");
    assert_eq!((split.lock_ms, split.release_ms), (0.0, 0.0), "{split:?}");
    assert!(split.transaction_ms > 0.0, "{split:?}");
    let client_mean = split.total_ms();
    assert!(
        client_mean >= split.transaction_ms && client_mean < 10_000.0,
        "{split:?}"
    );

    let set = reqwest::Client::new()
        .put(format!("{url}/hooks/after_read"))
        .json(&json!({"mode": "sleep", "ms": 20}))
        .send()
        .await
        .unwrap();
    assert!(set.status().is_success());
    let red = runner.run(&plan("unsafe", Expect::Safe)).await.unwrap();
    println!(
        "unsafe with a 20 ms sleep after the read: {:?}",
        red.verdict
    );
    assert!(red.verdict.lost_updates > 0, "{:?}", red.verdict);
    assert!(
        !red.as_expected,
        "expected safe, found oversold: the checker fails the run"
    );
    assert_eq!(red.verdict_text(), "UNEXPECTED: OVERSOLD");
    // More sales answered than the stock had (a lost update lets the row run out
    // late): no order of the answers explains them.
    assert!(red.verdict.sold > 20, "{:?}", red.verdict);
    let history = red.history.as_ref().expect("every run is judged");
    assert_eq!(history.verdict, Said::NotLinearizable, "{history:?}");
    // The 20 ms sleep after the read is inside the control's work.
    let split = red.time_split.expect("the service's /metrics was read");
    assert!(split.transaction_ms >= 18.0, "{split:?}");
    let cleared = reqwest::Client::new()
        .put(format!("{url}/hooks/after_read"))
        .json(&json!({"mode": "off"}))
        .send()
        .await
        .unwrap();
    assert!(cleared.status().is_success());

    // mysql-lock with every request holding its lock 5 ms, 8 at once: most of a
    // deduction is the wait for the lock, not the work under it.
    let mut held = plan("mysql-lock", Expect::Safe);
    held.request_hold_ms = Some(5);
    let waited = runner.run(&held).await.unwrap();
    let split = waited.time_split.expect("the service's /metrics was read");
    println!("mysql-lock, 5 ms hold, 8 at once: {split:?}");
    assert!(waited.as_expected, "{waited:?}");
    // (The 20 sales hold 5 ms; the 40 refusals do not.)
    assert!(split.transaction_ms >= 5.0 * 20.0 / 60.0, "{split:?}");
    assert!(split.lock_ms > split.transaction_ms, "{split:?}");
    assert!(split.release_ms > 0.0, "{split:?}");

    // The JSON report validates against its documented schema (loadtest/report.schema.json).
    // The oversold control, as the held section would have it, gives a claim.
    let held = loadtest::report::Row {
        section: Section::Held,
        ..red.clone()
    };
    let mut report =
        loadtest::report::Report::new(json!({"requests": 60}), vec![clean, red, waited, held]);
    report.claims = loadtest::claims::check(&report.results, &runner.strategies().await.unwrap());
    support::assert_matches_schema(&report, "report");
    // And the HTML renders every row and claim.
    let html = loadtest::page::render(&report);
    // Its first screen comes before every table of a section, and names what was
    // unexpected; the tables follow with every row.
    let glance = html.find("<h2>At a glance</h2>").expect("a first screen");
    let first_table = html
        .find("<th>concurrency</th>")
        .expect("a section's table");
    assert!(glance < first_table);
    assert!(html[glance..first_table].contains("<b>Unexpected</b>"));
    let tables = &html[first_table..];
    assert!(tables.contains("atomic-sql") && tables.contains("UNEXPECTED: OVERSOLD"));
    assert!(html.contains("Without a lock, stock is oversold"));
    assert!(html.contains("Where the time goes") && html.contains("lock wait"));
}

/// `loadtest sweep`'s engine on a small grid: one cell per strategy, layout and
/// concurrency, stock never the limit (no 409), clean verdicts, and a report with one
/// line chart per layout and metric plus optimistic's tries per sale, valid against
/// the schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_sweep_fills_every_cell_and_draws_lines() {
    use loadtest::sweep::{Sweep, SweepInfo, section};
    let (url, database_url) = service().await;
    let runner = Runner::new(
        reqwest::Client::new(),
        sqlx::MySqlPool::connect(&database_url).await.unwrap(),
        vec![url.clone()],
        TOKEN,
    );
    let sweep = Sweep {
        strategies: vec![("atomic-sql".into(), true), ("optimistic".into(), true)],
        concurrencies: vec![1, 8],
        products: vec![1, 5],
        seconds: 0.4,
        rtt_ms: None,
        reused: Vec::new(),
    };
    let rows = sweep
        .run(&runner, |cell| 1 + cell as i64 * 1_000)
        .await
        .unwrap();

    assert_eq!(rows.len(), sweep.cells());
    for products in [1, 5] {
        let cells: Vec<_> = rows
            .iter()
            .filter(|r| r.section == section(products, None))
            .collect();
        assert_eq!(cells.len(), 4, "{products} product(s)");
        for r in cells {
            assert!(r.verdict.is_clean() && r.as_expected, "{r:?}");
            // Timed: sent for the cell's time, then answered (well under a second more).
            assert!(r.seconds >= 0.4 && r.seconds < 3.0, "{r:?}");
            assert_eq!(
                r.responses.get("409"),
                None,
                "stock is never the limit: {r:?}"
            );
            let sold = r.responses.get("200").copied().unwrap_or(0);
            assert_eq!(sold as i64, r.verdict.sold, "{r:?}");
            // Sales/s over the steady window: inside the run, and every sale in the
            // window counted.
            assert!(r.sales.per_second > 0.0 && r.latency_ms.p99 > 0.0, "{r:?}");
            assert!(
                r.sales.from_s < r.sales.to_s && r.sales.to_s <= r.seconds,
                "{r:?}"
            );
            assert!(r.sales.sales > 0 && r.sales.sales <= sold, "{r:?}");
            assert!(r.sales.q1 <= r.sales.q3, "{r:?}");
            if r.strategy == "optimistic" {
                assert!(r.attempts_per_success >= 1.0, "{r:?}");
            }
        }
    }

    let mut report = loadtest::report::Report::new(json!({"command": "sweep"}), rows);
    let info = SweepInfo {
        concurrencies: sweep.concurrencies.clone(),
        products: sweep.products.clone(),
        requests_rule: "test".into(),
        cell_seconds: sweep.seconds,
        seconds: 1.0,
        rtts_ms: Vec::new(),
        round_trips: Vec::new(),
    };
    report.strategies = runner.strategies().await.unwrap();
    report.parts.push(info.part());
    let html = loadtest::page::render(&report);
    assert!(html.contains("Scaling sweep"));
    // Each strategy is drawn in the colour the service gave it, and no two alike.
    let colours: Vec<&str> = ["atomic-sql", "optimistic"]
        .iter()
        .map(|s| report.strategies.get(s).unwrap().colour.as_str())
        .collect();
    assert_ne!(colours[0], colours[1]);
    for colour in colours {
        assert!(
            html.to_lowercase().contains(colour),
            "{colour} is not drawn"
        );
    }
    // Throughput and p99 per layout, plus optimistic's tries per sale.
    assert_eq!(html.matches("<svg").count(), 5, "five line charts");
    assert!(
        html.matches("<polyline").count() >= 2 * 2 * 2,
        "a line per strategy per chart"
    );
    support::assert_matches_schema(&report, "sweep report");
}

/// The flash sale on two instances, scaled down: every run clean, each sell-out
/// exact (the stock sold, everyone else 409) with first-come-first-served counted per
/// instance, what limits each strategy measured, its two claims checked, and a report
/// part that validates against the schema and renders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_flash_sale_sells_out_exactly_and_reports_its_limits() {
    use loadtest::flash::{FlashOptions, run};
    let mut runner = two_instances().await;
    let histories = KeptOnFailure::new("flash-sale");
    runner.histories = Some(histories.path());
    // Five of the service's strategies, as it describes them.
    let strategies = only(
        &runner.strategies().await.unwrap(),
        &["unsafe", "atomic-sql", "batched", "bucketed", "redis-stock"],
    );
    let options = small_flash();
    let sale = run(&runner, &strategies, options.clone(), &Vec::new(), |n| {
        1 + n as i64 * 10_000
    })
    .await
    .unwrap();

    // Safe strategies only (unsafe is not), then four sell-outs, then two bucket counts.
    let sections: Vec<&Section> = sale.rows.iter().map(|r| &r.section).collect();
    let expected: Vec<Section> = std::iter::repeat_n(Section::FlashSale, 4)
        .chain(std::iter::repeat_n(Section::SellOut, 4))
        .chain(std::iter::repeat_n(Section::Buckets, 2))
        .collect();
    let expected: Vec<&Section> = expected.iter().collect();
    assert_eq!(sections, expected);
    assert!(
        sale.rows
            .iter()
            .all(|r| r.verdict.is_clean() && r.as_expected)
    );
    for s in &sale.sell_outs {
        assert!(s.exact, "{s:?}");
        assert_eq!((s.sold, s.refused, s.other), (60, 240, 0), "{s:?}");
        assert_eq!((s.restocked, s.restocked_after), (20, 150), "{s:?}");
        assert_eq!(s.overtaken.len(), 2, "one count per instance");
    }
    // Every sell-out's answers, its reads and its restock, explained by one order.
    for row in sale.rows.iter().filter(|r| r.section == Section::SellOut) {
        let history = row.history.as_ref().expect("judged");
        assert!(history.is_linearizable(), "{}: {history:?}", row.strategy);
        assert!(
            history.operations > 300,
            "the reads and the restock too: {history:?}"
        );
    }
    let batched = limits_of(&sale, "batched");
    assert!(batched.sales_per_transaction >= 1.0 && batched.statements_per_sale > 0.0);
    assert!(batched.cpu_percent.contains_key("loadtest"));
    // redis-stock's verdicts waited for its persisters.
    let redis = limits_of(&sale, "redis-stock");
    assert!(redis.pending_at_end >= 0 && redis.drain_ms >= 0.0);
    assert_eq!(limits_of(&sale, "atomic-sql").times_atomic_sql, Some(1.0));
    let claims = sale.claims();
    assert_eq!(claims.len(), 3, "{claims:?}");
    assert_eq!(
        sale.buckets.iter().map(|b| b.0).collect::<Vec<_>>(),
        [1, 4, loadtest::plan::BUCKETS]
    );
    // One row per strategy and bucket count, its sales pooled over both rounds (the
    // sell-outs are single runs); the costs shown are those of the round shown.
    for row in sale.rows.iter().filter(|r| r.section != Section::SellOut) {
        assert_eq!(row.sales.rounds, 2, "{row:?}");
        assert_eq!(row.sales.per_round.len(), 2, "{row:?}");
        let pooled = row.sales.pooled_s.expect("pooled seconds");
        assert!(pooled > row.sales.to_s - row.sales.from_s, "{row:?}");
        assert!(row.sales.sales > 0 && row.sales.per_second > 0.0, "{row:?}");
    }
    for limits in &sale.limits {
        let row = sale
            .rows
            .iter()
            .find(|r| r.section == Section::FlashSale && r.strategy == limits.strategy)
            .unwrap();
        assert_eq!(limits.sales, row.sales);
    }

    let mut report = loadtest::report::Report::new(json!({}), sale.rows.clone());
    report.claims = claims;
    report.parts.push(sale.part());
    support::assert_matches_schema(&report, "report");
    let html = loadtest::page::render(&report);
    assert!(html.contains("Flash sale: one hot product") && html.contains("Sell-out"));
    assert!(html.contains("Batching beats row locking on a hot product"));

    // Without histories (`--no-history`), a sell-out still counts what the ledger sold,
    // both epochs, by the run's request ids.
    let mut unchecked = runner;
    unchecked.histories_checked = false;
    let atomic = only(&strategies, &["atomic-sql"]);
    let quiet = run(
        &unchecked,
        &atomic,
        FlashOptions {
            rounds: 1,
            ..options
        },
        &Vec::new(),
        |n| 5_000_001 + n as i64 * 10_000,
    )
    .await
    .unwrap();
    let sell_out = &quiet.sell_outs[0];
    assert!(sell_out.exact, "{sell_out:?}");
    assert_eq!((sell_out.sold, sell_out.refused), (60, 240), "{sell_out:?}");
    assert!(quiet.rows.iter().all(|r| r.history.is_none()));
}

/// Two instances of a service on one fresh database, and a runner over both.
async fn two_instances() -> Runner {
    let (first, database_url) = service().await;
    let second = service_on(&database_url).await;
    Runner::new(
        reqwest::Client::new(),
        sqlx::MySqlPool::connect(&database_url).await.unwrap(),
        vec![first, second],
        TOKEN,
    )
}

/// The strategies of `catalogue` named in `names`, as the service describes them.
fn only(
    catalogue: &loadtest::catalogue::Catalogue,
    names: &[&str],
) -> loadtest::catalogue::Catalogue {
    loadtest::catalogue::Catalogue(
        catalogue
            .0
            .iter()
            .filter(|c| names.contains(&c.name.as_str()))
            .cloned()
            .collect(),
    )
}

/// The flash sale scaled down for a test: half a second per throughput run at
/// concurrency 32, and sell-outs of 40 units to 300 buyers.
fn small_flash() -> loadtest::flash::FlashOptions {
    loadtest::flash::FlashOptions {
        seconds: 0.5,
        concurrency: 32,
        rate: None,
        // Two rounds of every throughput and buckets run, pooled (every strategy here
        // is one the claims compare).
        rounds: 2,
        other_rounds: 1,
        sell_out_stock: 40,
        sell_out_buyers: 300,
        // Restocked to 20 once 150 buyers were answered, reads all along.
        sell_out_restock: 20,
        sell_out_read_every: Some(std::time::Duration::from_millis(2)),
    }
}

/// What limited `strategy`'s throughput run in the flash sale.
fn limits_of<'a>(
    sale: &'a loadtest::flash::FlashSale,
    strategy: &str,
) -> &'a loadtest::flash::Limits {
    sale.limits.iter().find(|l| l.strategy == strategy).unwrap()
}

/// A folder for a test's histories: removed when the test passes, kept (and its path
/// printed) when it fails, for `loadtest check FILE --pages`.
struct KeptOnFailure(Option<tempfile::TempDir>);

impl KeptOnFailure {
    fn new(test: &str) -> KeptOnFailure {
        let dir = tempfile::Builder::new()
            .prefix(&format!("{test}-"))
            .tempdir();
        KeptOnFailure(Some(dir.unwrap()))
    }

    fn path(&self) -> std::path::PathBuf {
        self.0.as_ref().expect("until dropped").path().to_path_buf()
    }
}

impl Drop for KeptOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(dir) = self.0.take()
        {
            eprintln!("histories kept in {}", dir.keep().display());
        }
    }
}

/// At a distance: a service whose database is behind the testbed's proxy. Its round
/// trips are counted per request on a sale and on a refusal (at least the statements
/// `atomic-sql`'s code makes: five for a sale, four for a refusal), a sweep's cells
/// carry the RTT they ran at and their round trips per sale, and the report draws
/// sales/s against RTT and states the ranking claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_at_a_distance_counts_round_trips() {
    use loadtest::distance::{COUNT_REQUESTS, measure_round_trips};
    use loadtest::sweep::{Sweep, SweepInfo, section};
    use std::time::Duration;
    use testbed::Latency;
    let (distance, mut runner) = behind_a_proxy().await;
    let set_rtt = |rtt: f64| {
        distance.set_latency(
            None,
            Latency::round_trip(Duration::from_secs_f64(rtt / 1000.0)),
        )
    };
    let strategies = vec![
        ("atomic-sql".to_string(), true),
        ("optimistic".to_string(), true),
    ];
    let (counts, count_rows) =
        measure_round_trips(&mut runner, &strategies, 2.0, &set_rtt, &|n| 500 + n as i64)
            .await
            .unwrap();
    assert_eq!(
        count_rows.len(),
        2 * 4,
        "two paths at two RTTs per strategy"
    );
    for row in &count_rows {
        assert_eq!(row.requests, COUNT_REQUESTS);
        assert!(row.verdict.is_clean(), "{row:?}");
        assert!(row.round_trips["database"] > 0, "{row:?}");
    }
    let atomic = &counts[0];
    assert!(atomic.sale["database"] >= 5.0, "{atomic:?}");
    assert!(atomic.refusal["database"] >= 4.0, "{atomic:?}");
    assert!(
        !atomic.sale.contains_key("redis"),
        "only the database is behind a proxy"
    );

    let mut sweep = Sweep {
        strategies,
        concurrencies: vec![8],
        products: vec![1],
        seconds: 0.5,
        rtt_ms: None,
        reused: Vec::new(),
    };
    let mut rows = Vec::new();
    for (pass, rtt) in [0.0, 2.0].into_iter().enumerate() {
        set_rtt(rtt);
        sweep.rtt_ms = Some(rtt);
        runner.network = Some((rtt, distance.round_trips()));
        rows.extend(
            sweep
                .run(&runner, |cell| 900 + (pass * 10 + cell) as i64 * 100)
                .await
                .unwrap(),
        );
    }
    for rtt in [0.0, 2.0] {
        for r in rows.iter().filter(|r| r.section == section(1, Some(rtt))) {
            assert_eq!(r.rtt_ms, Some(rtt));
            assert!(r.round_trips_per_sale["database"] >= 1.0, "{r:?}");
        }
    }
    let info = SweepInfo {
        concurrencies: sweep.concurrencies.clone(),
        products: sweep.products.clone(),
        requests_rule: "test".into(),
        cell_seconds: sweep.seconds,
        seconds: 1.0,
        rtts_ms: vec![0.0, 2.0],
        round_trips: counts,
    };
    rows.extend(count_rows);
    let mut report = loadtest::report::Report::new(json!({"command": "sweep"}), rows);
    report.strategies = runner.strategies().await.unwrap();
    report
        .claims
        .extend(loadtest::distance::claim(&info, &report.results));
    report.parts.push(info.part());
    let html = loadtest::page::render(&report);
    assert!(html.contains("At a distance: round-trip time"));
    assert!(html.contains("Round trips per request"));
    assert!(html.contains("round-trip time to every server"));
    support::assert_matches_schema(&report, "sweep report at a distance");
}

/// A service whose database is behind a proxy of the testbed (nothing added yet), and
/// a runner over it that counts the proxy's round trips; the runner reads the
/// database directly.
async fn behind_a_proxy() -> (testbed::Distance, Runner) {
    use testbed::{Distance, Latency};
    let (_, database_url) = service().await;
    let distance = Distance::in_front_of(
        &[("DATABASE_URL", database_url.clone())],
        Latency::default(),
    )
    .unwrap();
    let far_url = distance.env()[0].1.clone();
    assert_ne!(far_url, database_url);
    let url = service_on(&far_url).await;
    let mut runner = Runner::new(
        reqwest::Client::new(),
        sqlx::MySqlPool::connect(&database_url).await.unwrap(),
        vec![url],
        TOKEN,
    );
    runner.network = Some((0.0, distance.round_trips()));
    (distance, runner)
}
