//! The live demo page in a real browser: `loadtest demo --serve` on a small run,
//! headless Chromium (Debian's, installed by `scripts/install-deps`) driven through
//! chromedriver by WebDriver (`fantoccini`). The numbers the page shows when the run
//! is over must be the final JSON report's, row by row, with the lost updates and the
//! units sold beyond stock in red exactly where the report has them.

use fantoccini::{ClientBuilder, Locator};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The `stock-app` binary of this build (built here if it is not yet).
fn app_bin() -> PathBuf {
    if let Ok(path) = loadtest::lab::app_bin(None) {
        return path;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "stock-app", "--bin", "stock-app"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build -p stock-app failed");
    loadtest::lab::app_bin(None).expect("stock-app built")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed (SIGKILL) when dropped, whatever the test did.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// chromedriver on a free port, once it answers.
async fn chromedriver() -> (Killed, String) {
    let binary = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("chromedriver is missing: ./scripts/install-deps installs chromium-driver");
    let port = free_port();
    let child = Killed(
        Command::new(binary)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver"),
    );
    let url = format!("http://127.0.0.1:{port}");
    for _ in 0..100 {
        if let Ok(answer) = reqwest::get(format!("{url}/status")).await
            && answer.status().is_success()
        {
            return (child, url);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("chromedriver did not answer on {url}");
}

/// The demo with its live page; returns it and the page's address.
fn demo(json_path: &std::path::Path) -> (Killed, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args([
            "demo",
            "--serve",
            "127.0.0.1:0",
            "--no-flash-sale",
            "--requests",
            "150",
            "--concurrency",
            "32",
            "--strategies",
            "unsafe,local-mutex,atomic-sql,optimistic,redis-lock",
            "--app-bin",
        ])
        .arg(app_bin())
        .arg("--json")
        .arg(json_path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start loadtest demo");
    let stderr = child.stderr.take().unwrap();
    let child = Killed(child);
    let (found, page) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("{line}");
            if let Some(url) = line.strip_prefix("demo: live page at ") {
                let _ = found.send(url.trim_end_matches('/').to_string());
            }
        }
    });
    let url = page
        .recv_timeout(Duration::from_secs(30))
        .expect("the demo printed its live page's address");
    (child, url)
}

/// The page's numbers match the final report, and the page links it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_page_shows_what_the_report_says() {
    let dir = std::env::temp_dir().join(format!("live-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let json_path = dir.join("demo.json");
    let (_demo, page) = demo(&json_path);
    let (_driver, driver) = chromedriver().await;

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
    let _ = std::fs::remove_dir_all(&dir);
}
