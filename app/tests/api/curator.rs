//! Interoperability with Apache Curator: a Java program using Curator's
//! `InterProcessMutex` (Debian's `libcurator-recipes-java`) and the service's
//! `zookeeper` strategy lock the same path, `<root>/stock/<product_id>`, and exclude
//! each other, in both directions.

use crate::helpers::{fresh_database, spawn_with, test_settings};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use stock_app::Settings;

/// Compiles `tests/interop/CuratorLock.java` into a fresh directory; returns the
/// directory (removed when it drops: keep it while the program runs) and the
/// classpath to run it with.
fn build() -> (tempfile::TempDir, String) {
    let out = tempfile::Builder::new()
        .prefix("curator-lock-")
        .tempdir()
        .expect("a temporary directory");
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/CuratorLock.java"
    );
    let classpath = testbed::curator::compile(std::path::Path::new(source), out.path())
        .expect("compile CuratorLock.java");
    (out, classpath)
}

struct Java {
    child: Child,
    lines: BufReader<ChildStdout>,
}

impl Java {
    fn run(classpath: &str, path: &str, args: &[&str]) -> Java {
        let connect = std::env::var("ZK_CONNECT").expect("ZK_CONNECT: run under ./scripts/test");
        let mut child = Command::new("java")
            .args(["-cp", classpath, "CuratorLock", &connect, path])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("java");
        let lines = BufReader::new(child.stdout.take().unwrap());
        Java { child, lines }
    }

    /// The program's next line of output (blocking; run it off the async workers).
    async fn next_line(mut self) -> (String, Java) {
        tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            self.lines.read_line(&mut line).unwrap();
            (line.trim().to_string(), self)
        })
        .await
        .unwrap()
    }

    /// Closes stdin: a holder releases and exits.
    async fn finish(mut self) -> String {
        drop(self.child.stdin.take());
        let (line, mut java) = self.next_line().await;
        java.child.wait().unwrap();
        line
    }
}

async fn app_with_short_lock_wait() -> (crate::helpers::TestApp, String) {
    let database = fresh_database().await;
    let settings = Settings {
        ..test_settings(&database)
    }
    .with(|s| {
        s.shared.lock_wait_ms = 1_000;
    });
    let lock_path = format!("{}/stock/1", settings.shared.zk_root);
    (spawn_with(settings).await, lock_path)
}

/// Curator holds the product's lock: the service's `zookeeper` deduction waits its
/// lock wait out and answers 503 busy, selling nothing; once Curator releases, it sells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_holder_excludes_the_service() {
    let (_classes, classpath) = build();
    let (app, lock_path) = app_with_short_lock_wait().await;
    app.stock(1, 5).await;

    let (line, java) = Java::run(&classpath, &lock_path, &["hold"])
        .next_line()
        .await;
    assert_eq!(line, "ACQUIRED");
    let refused = app.deduct("zookeeper", &json!({"product_id": 1})).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "busy", "{body}");
    assert_eq!(
        app.db_state(1).await.ledger_sum,
        0,
        "nothing sold while Curator held the lock"
    );

    assert_eq!(java.finish().await, "RELEASED");
    let sold = app.deduct("zookeeper", &json!({"product_id": 1})).await;
    assert_eq!(sold.status(), StatusCode::OK);
    app.stop().await;
}

/// The service holds the lock (its request paused after the read): Curator's
/// `acquire(1 s)` times out; once the request finishes, Curator gets the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_excludes_a_curator_client() {
    let (_classes, classpath) = build();
    let (app, lock_path) = app_with_short_lock_wait().await;
    app.stock(1, 5).await;

    app.set_failpoint("after_read", json!({"mode": "pause", "count": 1}))
        .await;
    let request = app
        .client
        .post(app.url("/deduct/zookeeper"))
        .json(&json!({"product_id": 1}));
    let paused = tokio::spawn(async move { request.send().await.unwrap().status() });
    app.wait_paused("after_read", 1).await;

    let (line, java) = Java::run(&classpath, &lock_path, &["try", "1000"])
        .next_line()
        .await;
    assert_eq!(
        line, "TIMEOUT",
        "Curator must not get the lock the service holds"
    );
    drop(java);
    app.release("after_read").await;
    assert_eq!(paused.await.unwrap(), StatusCode::OK);

    let (line, _java) = Java::run(&classpath, &lock_path, &["try", "3000"])
        .next_line()
        .await;
    assert_eq!(line, "ACQUIRED", "free again once the service released it");
    app.stop().await;
}
