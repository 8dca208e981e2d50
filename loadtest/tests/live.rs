//! The live demo page in a real browser: `loadtest demo --serve` on a small run,
//! headless Chromium (Debian's, installed by `scripts/install-deps`) driven through
//! chromedriver by WebDriver (`fantoccini`). The numbers the page shows when the run
//! is over must be the final JSON report's, row by row, with the lost updates and the
//! units sold beyond stock in red exactly where the report has them.

mod support;

use fantoccini::{ClientBuilder, Locator};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use testbed::ServerProcess;
use testbed::process::{find_binary, free_port};

/// chromedriver on a free port, once it answers (its log in `dir`, and the browser's
/// own temporary files: `TMPDIR`, so they go with `dir`).
async fn chromedriver(dir: &Path) -> (ServerProcess, String) {
    let binary = find_binary("chromedriver", "chromium-driver")
        .expect("chromedriver: ./scripts/install-deps installs chromium-driver");
    let port = free_port().unwrap();
    let driver = ServerProcess::spawn_with_env(
        "chromedriver",
        &binary,
        &[format!("--port={port}")],
        &[("TMPDIR".to_string(), dir.display().to_string())],
        dir.join("chromedriver.log"),
    )
    .expect("start chromedriver");
    let url = format!("http://127.0.0.1:{port}");
    for _ in 0..100 {
        if let Ok(answer) = reqwest::get(format!("{url}/status")).await
            && answer.status().is_success()
        {
            return (driver, url);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "chromedriver did not answer on {url}: {}",
        driver.log_tail(20)
    );
}

/// The demo with its live page (its output in `dir`, its report at `json_path`);
/// returns it and the page's address, once it printed it.
async fn demo(dir: &Path, json_path: &Path) -> (ServerProcess, String) {
    let args: Vec<String> = [
        "demo",
        "--serve",
        "127.0.0.1:0",
        "--no-flash-sale",
        // Neither the 2 ms section nor the overload one: the page is what is tested.
        "--far-rtt-ms",
        "0",
        "--overload-factor",
        "0",
        "--requests",
        "150",
        "--seconds",
        "0.5",
        // One round: the page shows every run, the report one row per setup, pooled
        // over its rounds.
        "--rounds",
        "1",
        "--concurrency",
        "32",
        "--strategies",
        "unsafe,local-mutex,atomic-sql,optimistic,redis-lock",
    ]
    .into_iter()
    .map(String::from)
    .chain([
        "--app-bin".into(),
        support::app_bin().display().to_string(),
        "--json".into(),
        json_path.display().to_string(),
    ])
    .collect();
    let log = dir.join("demo.log");
    let demo = ServerProcess::spawn(
        "loadtest demo",
        Path::new(env!("CARGO_BIN_EXE_loadtest")),
        &args,
        log.clone(),
    )
    .expect("start loadtest demo");
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        let printed = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(url) = printed
            .lines()
            .find_map(|line| line.strip_prefix("demo: live page at "))
        {
            return (demo, url.trim_end_matches('/').to_string());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "the demo printed no live page address: {}",
        demo.log_tail(20)
    );
}

/// The page's numbers match the final report, and the page links it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_page_shows_what_the_report_says() {
    let dir = testbed::process::ServerDir::new("live-page").unwrap();
    let json_path = dir.path().join("demo.json");
    let (demo, page) = demo(dir.path(), &json_path).await;
    let (_driver, driver) = chromedriver(dir.path()).await;

    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                        "--disable-dev-shm-usage", "--window-size=1200,1800"]}),
    );
    let browser = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&driver)
        .await
        .expect("a Chromium session");
    browser.goto(&page).await.unwrap();
    // The run is over when the page says so (the demo waits for Ctrl-C after it).
    browser
        .wait()
        .at_most(Duration::from_secs(150))
        .for_element(Locator::Css("#status[data-state='done']"))
        .await
        .expect("the page reached `done`");
    let shot = browser.screenshot().await.unwrap();
    let shot_path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("live-page.png");
    std::fs::write(&shot_path, &shot).unwrap();
    println!("screenshot: {}", shot_path.display());

    // What the page shows, row by row.
    let mut shown = Vec::new();
    for row in browser.find_all(Locator::Css("tr.run")).await.unwrap() {
        let mut values = serde_json::Map::new();
        for attribute in ["section", "strategy", "final"] {
            let value = row.attr(&format!("data-{attribute}")).await.unwrap();
            values.insert(attribute.into(), json!(value));
        }
        for name in ["sold", "left", "lost", "beyond", "answered"] {
            let cell = row.find(Locator::Css(&format!(".{name}"))).await.unwrap();
            let text = cell.text().await.unwrap();
            values.insert(name.into(), json!(text.parse::<i64>().unwrap()));
            let red = cell.attr("class").await.unwrap().unwrap_or_default();
            values.insert(format!("{name}_red"), json!(red.contains("bad")));
        }
        shown.push(Value::Object(values));
    }
    // The report, as the demo wrote it (the baseline runs without the service: no row).
    let report: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let rows: Vec<&Value> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["strategy"] != "baseline")
        .collect();
    assert_eq!(
        shown.len(),
        rows.len(),
        "one page row per report row: {shown:?}"
    );
    for (page_row, report_row) in shown.iter().zip(&rows) {
        let verdict = &report_row["verdict"];
        let lost = verdict["lost_updates"].as_i64().unwrap();
        let beyond = verdict["beyond_stock"].as_i64().unwrap();
        let expected = json!({
            "section": report_row["section"],
            "strategy": report_row["strategy"],
            "final": "true",
            "sold": verdict["sold"],
            "left": verdict["remaining"],
            "lost": lost,
            "beyond": beyond,
            "answered": report_row["requests"],
            "sold_red": false,
            "left_red": false,
            "lost_red": lost != 0,
            "beyond_red": beyond > 0,
            "answered_red": false,
        });
        assert_eq!(page_row, &expected, "the page vs the report");
    }
    // The controls held between read and write oversold, and the page shows it red.
    assert!(
        shown
            .iter()
            .any(|r| r["section"] == "held" && r["strategy"] == "unsafe" && r["lost_red"] == true),
        "{shown:?}"
    );
    // The page links the report it was made from.
    let link = browser.find(Locator::Css("#links a#report")).await.unwrap();
    link.click().await.unwrap();
    let title = browser.title().await.unwrap();
    assert!(title.contains("stock-locks"), "the report's title: {title}");
    let served: Value = reqwest::get(format!("{page}/report.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(served["results"], report["results"]);
    browser.close().await.unwrap();
    println!("{}", demo.log_tail(40));
}
