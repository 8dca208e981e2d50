//! `loadtest`'s checker against a real service: it reports a clean verdict where there
//! is one, and a red one where the service really oversold (it can fail).

mod support;

use loadtest::report::Expect;
use loadtest::{Plan, Runner};
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
    let app = Application::build(Settings {
        admin_token: Some(TOKEN.into()),
        enable_test_hooks: true,
        ..Settings::for_database(&database_url)
    })
    .await
    .unwrap();
    let url = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until_stopped());
    (url, database_url)
}

fn plan(strategy: &str, expect: Expect) -> Plan {
    Plan {
        section: "test".into(),
        strategy: strategy.into(),
        products: vec![1],
        stock: 20,
        buckets: loadtest::buckets_for(strategy, 4),
        requests: 60,
        concurrency: 8,
        rate: None,
        quantity: 1,
        multi_item_share: 0.0,
        request_hold_ms: None,
        server_hold_ms: 0,
        warmup: 5,
        expect,
    }
}

/// atomic-sql: 20 sold of 20, 40 sold out, clean; unsafe with the `after_read`
/// failpoint sleeping 20 ms: lost updates, so a red verdict when it was expected safe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_finds_what_the_database_says() {
    let (url, database_url) = service().await;
    let runner = Runner {
        client: reqwest::Client::new(),
        db: sqlx::MySqlPool::connect(&database_url).await.unwrap(),
        bases: vec![url.clone()],
        admin_token: TOKEN.into(),
    };

    let clean = runner.run(&plan("atomic-sql", Expect::Safe)).await.unwrap();
    assert_eq!(clean.verdict.sold, 20);
    assert_eq!(clean.responses.get("200"), Some(&20));
    assert_eq!(clean.responses.get("409"), Some(&40));
    assert!(clean.verdict.is_clean() && clean.as_expected, "{clean:?}");
    assert_eq!(clean.verdict.missing_acknowledged, 0);

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

    // The JSON report validates against its documented schema (loadtest/report.schema.json).
    let mut report = loadtest::report::Report::new(json!({"requests": 60}), vec![clean, red]);
    report.claims = loadtest::claims::check(&report.results, Some(((4, 1.1), (64, 3.0))));
    support::assert_matches_schema(&report, "report");
    // And the HTML renders every row and claim.
    let html = loadtest::html::render(&report);
    assert!(html.contains("atomic-sql") && html.contains("UNEXPECTED: OVERSOLD"));
    assert!(html.contains("Optimistic CAS degrades under contention"));
}

/// `loadtest sweep`'s engine on a small grid: one cell per strategy, layout and
/// concurrency, stock never the limit (no 409), clean verdicts, and a report with one
/// line chart per layout and metric plus optimistic's tries per sale, valid against
/// the schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_sweep_fills_every_cell_and_draws_lines() {
    use loadtest::sweep::{Sweep, SweepInfo, requests_for, section};
    let (url, database_url) = service().await;
    let runner = Runner {
        client: reqwest::Client::new(),
        db: sqlx::MySqlPool::connect(&database_url).await.unwrap(),
        bases: vec![url.clone()],
        admin_token: TOKEN.into(),
    };
    let sweep = Sweep {
        strategies: vec![("atomic-sql".into(), true), ("optimistic".into(), true)],
        concurrencies: vec![1, 8],
        products: vec![1, 5],
        scale: 0.02,
    };
    assert_eq!(requests_for(1, 0.02), 20);
    assert_eq!(requests_for(256, 1.0), 2048);
    let rows = sweep
        .run(&runner, |cell| 1 + cell as i64 * 1_000)
        .await
        .unwrap();

    assert_eq!(rows.len(), sweep.cells());
    for products in [1, 5] {
        let cells: Vec<_> = rows
            .iter()
            .filter(|r| r.section == section(products))
            .collect();
        assert_eq!(cells.len(), 4, "{products} product(s)");
        for r in cells {
            assert!(r.verdict.is_clean() && r.as_expected, "{r:?}");
            assert_eq!(r.requests, requests_for(r.concurrency, 0.02));
            assert_eq!(
                r.responses.get("409"),
                None,
                "stock is never the limit: {r:?}"
            );
            let sold = r.responses.get("200").copied().unwrap_or(0);
            assert_eq!(sold as i64, r.verdict.sold, "{r:?}");
            assert!(r.throughput_rps > 0.0 && r.latency_ms.p99 > 0.0);
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
        scale: sweep.scale,
        seconds: 1.0,
    };
    report.parts.push(info.part(&report.results));
    let html = loadtest::html::render(&report);
    assert!(html.contains("Scaling sweep"));
    // Throughput and p99 per layout, plus optimistic's tries per sale.
    assert_eq!(html.matches("<svg").count(), 5, "five line charts");
    assert!(
        html.matches("<polyline").count() >= 2 * 2 * 2,
        "a line per strategy per chart"
    );
    support::assert_matches_schema(&report, "sweep report");
}
