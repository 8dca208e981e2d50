//! The live page (`loadtest demo --serve ADDR`): the demo as it runs, in a browser.
//!
//! One page (HTML, CSS and script embedded in the binary: it works offline) and one
//! stream of server-sent events. Every event is a JSON object with a `type`:
//! - `note`: what the demo is doing (`{text}`);
//! - `start`: a run begins (`{id, section, strategy, stock, requests, instances}`);
//! - `progress`: every [`TICK`] during a run, read from the database the way the
//!   verdict is (`{id, t_ms, answered, sold, left, lost, beyond}`), so a lost update or
//!   a unit sold beyond the stock shows the moment the ledger has it;
//! - `row`: the run's verdict, the same numbers as its row in the final report
//!   (`{id, sold, left, lost, beyond, answered, rps, verdict, clean, as_expected}`);
//! - `done`: the report is written (`{report, json, as_expected}`, links served here).
//!
//! A page that connects late gets every event so far first (the history is kept),
//! then the new ones.

use crate::plan::Plan;
use crate::report::Row;
use actix_web::{HttpResponse, web};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

/// How often a run's progress is read and sent.
pub const TICK: Duration = Duration::from_millis(200);

const PAGE: &str = include_str!("live/page.html");

/// The event stream and what the page links when the run is over. Cheap to clone.
#[derive(Clone)]
pub struct Live {
    inner: Arc<Inner>,
}

struct Inner {
    /// Every event so far (for a page that connects late), and the channel for the
    /// next ones: appended and sent under the same lock, so none is missed or doubled.
    history: Mutex<Vec<String>>,
    sender: broadcast::Sender<String>,
    next_run: AtomicU64,
    /// The report files, once written.
    report: Mutex<Option<(PathBuf, PathBuf)>>,
}

impl Default for Live {
    fn default() -> Self {
        Live::new()
    }
}

impl Live {
    pub fn new() -> Live {
        Live {
            inner: Arc::new(Inner {
                history: Mutex::new(Vec::new()),
                sender: broadcast::channel(4096).0,
                next_run: AtomicU64::new(1),
                report: Mutex::new(None),
            }),
        }
    }

    /// Sends an event to every page, and keeps it for the pages to come.
    pub fn send(&self, event: Value) {
        let text = event.to_string();
        let mut history = self.inner.history.lock().expect("live history poisoned");
        history.push(text.clone());
        // No page listening is fine: the history has it.
        let _ = self.inner.sender.send(text);
    }

    /// Says what the demo is doing.
    pub fn note(&self, text: &str) {
        self.send(json!({"type": "note", "text": text}));
    }

    /// The history so far and a receiver for what follows, taken together.
    fn subscribe(&self) -> (Vec<String>, broadcast::Receiver<String>) {
        let history = self.inner.history.lock().expect("live history poisoned");
        (history.clone(), self.inner.sender.subscribe())
    }

    /// A run begins: announces it and returns what follows it.
    pub fn start(&self, plan: &Plan, instances: usize) -> LiveRun {
        let id = self.inner.next_run.fetch_add(1, Ordering::Relaxed);
        self.send(json!({
            "type": "start",
            "id": id,
            "section": plan.section,
            "strategy": plan.strategy,
            "stock": plan.stock * plan.products.len() as i64,
            "requests": plan.requests,
            "instances": instances,
        }));
        LiveRun {
            live: self.clone(),
            id,
            answered: Arc::new(AtomicU64::new(0)),
            started: Instant::now(),
        }
    }

    /// The report is written: the page links it.
    pub fn done(&self, html: PathBuf, json: PathBuf, as_expected: bool) {
        *self.inner.report.lock().expect("live report poisoned") = Some((html, json));
        self.send(json!({
            "type": "done",
            "report": "/report.html",
            "json": "/report.json",
            "as_expected": as_expected,
        }));
    }

    /// Serves the page, the events and (when written) the report on `addr`. Returns
    /// the address bound (port 0 picks one) and a handle to stop the server.
    pub fn serve(
        &self,
        addr: &str,
    ) -> anyhow::Result<(std::net::SocketAddr, actix_web::dev::ServerHandle)> {
        let live = web::Data::new(self.clone());
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new()
                .app_data(live.clone())
                .route("/", web::get().to(page))
                .route("/events", web::get().to(events))
                .route("/report.{extension}", web::get().to(report))
        })
        .workers(1)
        .bind(addr)?;
        let bound = server.addrs()[0];
        let server = server.run();
        let handle = server.handle();
        tokio::spawn(server);
        Ok((bound, handle))
    }

    /// The report's HTML, or its JSON, once written.
    fn report_file(&self, json: bool) -> Option<Vec<u8>> {
        let report = self.inner.report.lock().expect("live report poisoned");
        let (html_path, json_path) = report.as_ref()?;
        std::fs::read(if json { json_path } else { html_path }).ok()
    }
}

async fn page() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(PAGE)
}

/// The server-sent events: the history, then each new event as it comes.
async fn events(live: web::Data<Live>) -> HttpResponse {
    let (history, receiver) = live.subscribe();
    let past = futures::stream::iter(history);
    let next = futures::stream::unfold(receiver, |mut receiver| async move {
        loop {
            match receiver.recv().await {
                Ok(event) => return Some((event, receiver)),
                // A page too slow to keep up misses some progress; the rows and the
                // final numbers come again in the report.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    use futures::StreamExt;
    let stream = past
        .chain(next)
        .map(|event| Ok::<_, actix_web::Error>(web::Bytes::from(format!("data: {event}\n\n"))));
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(stream)
}

/// `/report.html` and `/report.json`, once the demo wrote them.
async fn report(live: web::Data<Live>, extension: web::Path<String>) -> HttpResponse {
    let (json, content_type) = match extension.as_str() {
        "html" => (false, "text/html; charset=utf-8"),
        "json" => (true, "application/json"),
        _ => return HttpResponse::NotFound().body("no such report"),
    };
    match live.report_file(json) {
        Some(bytes) => HttpResponse::Ok().content_type(content_type).body(bytes),
        None => HttpResponse::NotFound().body("the report is not written yet"),
    }
}

/// One run on the live page: counts its answers, reports its progress, then its row.
pub struct LiveRun {
    live: Live,
    id: u64,
    /// Answers so far (the engine adds one per answer).
    pub answered: Arc<AtomicU64>,
    started: Instant,
}

impl LiveRun {
    /// Reads `products`' stock and ledger every [`TICK`] until the returned task is
    /// aborted, sending each reading.
    pub fn watch(&self, db: sqlx::MySqlPool, products: Vec<i64>) -> tokio::task::JoinHandle<()> {
        let (live, id, answered, started) = (
            self.live.clone(),
            self.id,
            self.answered.clone(),
            self.started,
        );
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(TICK);
            loop {
                ticks.tick().await;
                if let Ok(now) = crate::verify::stock(&db, &products).await {
                    live.send(json!({
                        "type": "progress",
                        "id": id,
                        "t_ms": started.elapsed().as_millis() as u64,
                        "answered": answered.load(Ordering::Relaxed),
                        "sold": now.sold,
                        "left": now.remaining,
                        "lost": now.lost_updates,
                        "beyond": now.beyond_stock,
                    }));
                }
            }
        })
    }

    /// The run's verdict, as its report row says it.
    pub fn finish(self, row: &Row) {
        self.live.send(json!({
            "type": "row",
            "id": self.id,
            "sold": row.verdict.sold,
            "left": row.verdict.remaining,
            "lost": row.verdict.lost_updates,
            "beyond": row.verdict.beyond_stock,
            "answered": row.requests,
            "sales_per_second": row.sales.per_second,
            "verdict": row.verdict_text(),
            "clean": row.verdict.is_clean(),
            "as_expected": row.as_expected,
        }));
    }
}
