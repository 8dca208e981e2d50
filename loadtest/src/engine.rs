//! Firing deductions: closed loop (a fixed number in flight) or open loop (a fixed
//! start rate), round-robin over the service instances, every answer classified and
//! every latency recorded in an HdrHistogram.

use futures::StreamExt;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// One strategy's load.
#[derive(Debug, Clone)]
pub struct Load {
    /// Service base URLs; request i goes to `bases[i % len]`.
    pub bases: Vec<String>,
    pub strategy: String,
    /// The products deducted: request i asks for `products[i % len]` (and, for a
    /// multi-item request, the next one too).
    pub products: Vec<i64>,
    pub requests: usize,
    /// Requests in flight at once (closed loop), or at most (open loop).
    pub concurrency: usize,
    /// Open loop: start this many requests per second, whatever the answers take.
    pub rate: Option<f64>,
    /// Units per item.
    pub quantity: i64,
    /// Share of requests (0.0-1.0) that order two products at once.
    pub multi_item_share: f64,
    /// Per-request `hold_ms` (a test hook: the service must run with test hooks).
    pub hold_ms: Option<u64>,
    /// Stop sending after this long (the requests already sent are answered); at most
    /// `requests` either way. A throughput run is timed, so that its steady window
    /// ([`crate::rate`]) is as long for a fast strategy as for a slow one.
    pub duration: Option<Duration>,
    /// Prefix of the request ids, so runs never collide.
    pub id_prefix: String,
    /// Counts the answers as they come (the live page's progress), if given.
    pub answered: Option<Arc<std::sync::atomic::AtomicU64>>,
    /// A 429 (`overloaded`) is sent again after its `Retry-After` (times a jitter of
    /// 0.5-1.5, so the refused do not come back together), up to this many times,
    /// within the load's retry budget ([`RetryBudget`]).
    pub retries: u32,
    /// Reads and restocks sent beside the deductions.
    pub beside: Beside,
}

/// Operations sent beside a load's deductions, so that a history holds something
/// besides sales for the checker to disagree with: reads of what is left, a restock.
#[derive(Debug, Clone, Default)]
pub struct Beside {
    /// A `GET /stock/{product}` every this long while the load runs, over its products
    /// and instances in turn.
    pub read_every: Option<Duration>,
    /// A restock of every product of the load, once this many deductions were answered;
    /// the deductions not yet sent by then wait for its answer ([`MidRestock`]).
    pub restock: Option<MidRestock>,
}

/// A restock in the middle of a load. Once `after_answers` deductions were answered,
/// a deduction not yet sent waits until the restock is answered: the ones in flight
/// overlap it (at most the load's concurrency), the rest come after it and find its
/// units. Without the wait, a sold-out product's refusals are answered so fast that
/// the last buyers can all be refused before the restock lands (it answers only after
/// the sold-out marks have expired), and its units stay unsold: a run that says
/// nothing of the strategy.
#[derive(Debug, Clone)]
pub struct MidRestock {
    pub after_answers: u64,
    pub stock: i64,
    pub buckets: u16,
    pub admin_token: String,
}

/// A read or a restock sent beside the deductions, as its client saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub product: i64,
    /// A read: the stock it was shown; a restock: the stock it set.
    pub stock: Option<i64>,
    pub restock: bool,
    /// Microseconds since the load started; `done_us` is `None` when no answer came
    /// (or, for a restock, an error whose outcome is unknown).
    pub sent_us: u64,
    pub done_us: Option<u64>,
}

/// A load's retry budget, as Finagle's `RetryBudget` has it: retries may add at most
/// 20 % to the requests started so far (plus 10), so that under overload the refused
/// do not come back as a multiple of the load they were refused for.
#[derive(Debug, Default)]
pub struct RetryBudget {
    started: std::sync::atomic::AtomicU64,
    retried: std::sync::atomic::AtomicU64,
}

impl RetryBudget {
    pub const SHARE: f64 = 0.2;
    pub const FLOOR: u64 = 10;

    fn started(&self) {
        self.started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Takes one retry from the budget, if there is one left.
    fn try_retry(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let allowed = (self.started.load(Relaxed) as f64 * Self::SHARE) as u64 + Self::FLOOR;
        self.retried
            .fetch_update(Relaxed, Relaxed, |r| (r < allowed).then_some(r + 1))
            .is_ok()
    }
}

/// What the clients saw.
#[derive(Debug)]
pub struct Fired {
    /// Answers by kind: `200`, `409`, `503 busy`, `4xx`, `5xx`, `transport`.
    pub outcomes: BTreeMap<String, u64>,
    /// Latency of every request, in microseconds.
    pub latency_us: Histogram<u64>,
    /// Latency of the requests answered 200 (the sale's last attempt), microseconds.
    pub sold_latency_us: Histogram<u64>,
    /// Requests sent again after a 429 (each resend counts).
    pub retries: u64,
    /// Reads and restocks sent beside the deductions ([`Beside`]).
    pub beside: Vec<Probe>,
    /// The run's record: every request's outcome, instance, when it was sent and
    /// when its answer came (in the order they were answered). Rates come from it
    /// ([`Fired::sales`]).
    pub record: Vec<Answer>,
    /// Requests in flight at once (closed loop), or at most (open loop).
    pub concurrency: usize,
    /// Started at a rate (open loop) rather than kept at `concurrency` in flight.
    pub open_loop: bool,
    /// An open loop that had to wait for one of its `concurrency` slots: its rate fell
    /// below the one offered because the service held that many unanswered.
    pub ceiling_reached: bool,
    /// Requests that got no HTTP answer, by what the client saw (the innermost error).
    pub transport_errors: BTreeMap<String, u64>,
    /// When the last request was first sent, microseconds since the load started (an
    /// open loop's achieved rate is the requests over it).
    pub last_sent_us: u64,
    /// Request ids answered 200: each must have its ledger rows.
    pub acknowledged: Vec<String>,
    /// Request ids whose outcome is unknown (`outcome_unknown`, transport errors):
    /// they may or may not have been applied, and are counted apart.
    pub unknown: Vec<String>,
    /// Sum of `attempts` over the 200 answers.
    pub attempts: u64,
    /// Transactions the sales rode in: each sale counts 1/`batch_size` (a batching
    /// strategy's answer says how many sales shared its transaction; any other sale
    /// counts 1).
    pub transactions: f64,
    /// First come, first served, per instance: requests answered 409 although a
    /// request sent later to the same instance got a unit (0 when every sale went
    /// to the earliest buyers).
    pub overtaken: Vec<u64>,
    pub elapsed: Duration,
    /// CLOCK_MONOTONIC when the load started, in microseconds ([`monotonic_us`]): the
    /// record's times (`sent_us`, `done_us`) are counted from it, and a history's from
    /// the clock itself, which every process on this host shares.
    pub clock_start_us: u64,
    /// A strategy that records later: units sold, acknowledged and not yet in the
    /// database when the
    /// last answer came, and how long the persisters took to record them.
    pub pending_at_end: i64,
    pub drain: Duration,
    /// The run's request ids are `<id_prefix>-<n>` (empty for answers gathered
    /// otherwise).
    pub id_prefix: String,
}

impl Fired {
    /// Counts, records and sorts out every answer of a run that took `elapsed` with
    /// `concurrency` in flight.
    pub fn from_answers(answers: Vec<Answer>, elapsed: Duration, concurrency: usize) -> Fired {
        let clock_start_us = monotonic_us().saturating_sub(elapsed.as_micros() as u64);
        let mut fired = Fired {
            outcomes: BTreeMap::new(),
            latency_us: Histogram::new_with_bounds(1, 120_000_000, 3).expect("histogram bounds"),
            sold_latency_us: Histogram::new_with_bounds(1, 120_000_000, 3)
                .expect("histogram bounds"),
            retries: 0,
            beside: Vec::new(),
            record: Vec::new(),
            concurrency,
            open_loop: false,
            ceiling_reached: false,
            transport_errors: BTreeMap::new(),
            last_sent_us: answers.iter().map(|a| a.sent_us).max().unwrap_or(0),
            acknowledged: Vec::new(),
            unknown: Vec::new(),
            attempts: 0,
            transactions: 0.0,
            overtaken: overtaken(&answers),
            elapsed,
            clock_start_us,
            pending_at_end: 0,
            drain: Duration::ZERO,
            id_prefix: String::new(),
        };
        for answer in &answers {
            *fired.outcomes.entry(answer.outcome.key()).or_default() += 1;
            let _ = fired.latency_us.record(answer.micros.max(1));
            fired.retries += u64::from(answer.retries);
            if let Some(error) = &answer.error {
                *fired.transport_errors.entry(error.clone()).or_default() += 1;
            }
            if answer.outcome == Outcome::Sold {
                let _ = fired.sold_latency_us.record(answer.micros.max(1));
                fired.acknowledged.push(answer.request_id.clone());
                fired.attempts += answer.attempts;
                fired.transactions += 1.0 / answer.batch_size.unwrap_or(1).max(1) as f64;
            } else if answer.outcome.is_unknown() {
                fired.unknown.push(answer.request_id.clone());
            }
        }
        fired.record = answers;
        fired
    }

    pub fn count(&self, outcome: &Outcome) -> u64 {
        self.outcomes.get(&outcome.key()).copied().unwrap_or(0)
    }

    /// Answers of every kind per second of the whole run: what a sell-out's refusals
    /// are measured by (never a throughput: [`Fired::sales`] is).
    pub fn answers_per_second(&self) -> f64 {
        let total: u64 = self.outcomes.values().sum();
        total as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// A latency percentile in milliseconds.
    pub fn latency_ms(&self, percentile: f64) -> f64 {
        self.latency_us.value_at_quantile(percentile / 100.0) as f64 / 1000.0
    }

    /// Sales per transaction (1 unless sales shared transactions).
    pub fn sales_per_transaction(&self) -> f64 {
        let ok = self.count(&Outcome::Sold) as f64;
        if self.transactions > 0.0 {
            ok / self.transactions
        } else {
            0.0
        }
    }

    pub fn attempts_per_success(&self) -> f64 {
        let ok = self.count(&Outcome::Sold);
        if ok == 0 {
            0.0
        } else {
            self.attempts as f64 / ok as f64
        }
    }
}

/// How one deduction was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 200: sold (or the stored answer to an earlier request with the same id).
    Sold,
    /// 409: not enough stock.
    SoldOut,
    /// 503 with the service's error code: `busy`, `lock_lost`, `outcome_unknown`,
    /// `backend_unavailable`.
    Unavailable(String),
    /// 429 `overloaded`: past the instance's admission limit; nothing was done.
    Overloaded,
    /// Another 4xx.
    ClientError,
    /// A 5xx other than 503.
    ServerError,
    /// Never sent (connection refused): certainly not applied.
    Unreachable,
    /// Sent, no answer: it may or may not have been applied.
    Transport,
}

impl Outcome {
    /// 503 `busy`: the lock or the retries ran out; nothing was done.
    pub fn busy() -> Outcome {
        Outcome::Unavailable("busy".into())
    }

    /// 503 `lock_lost`: the fence refused a holder that had lost its lock.
    pub fn lock_lost() -> Outcome {
        Outcome::Unavailable("lock_lost".into())
    }

    /// Its key in a report's `responses`: `200`, `409`, `503 <code>`, `4xx`, `5xx`,
    /// `unreachable`, `transport`.
    pub fn key(&self) -> String {
        match self {
            Outcome::Sold => "200".into(),
            Outcome::SoldOut => "409".into(),
            Outcome::Unavailable(code) => format!("503 {code}"),
            Outcome::Overloaded => "429 overloaded".into(),
            Outcome::ClientError => "4xx".into(),
            Outcome::ServerError => "5xx".into(),
            Outcome::Unreachable => "unreachable".into(),
            Outcome::Transport => "transport".into(),
        }
    }

    /// Whether it leaves the client not knowing if the deduction was applied (sent, no
    /// answer; or the service's own `outcome_unknown`): retry it with the same
    /// request_id to find out.
    pub fn is_unknown(&self) -> bool {
        matches!(self, Outcome::Transport)
            || matches!(self, Outcome::Unavailable(code) if code == "outcome_unknown")
    }

    /// Whether the request failed on its way (never reached the service, or no answer).
    pub fn is_transport_failure(&self) -> bool {
        matches!(self, Outcome::Transport | Outcome::Unreachable)
    }
}

/// The classification of one answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub outcome: Outcome,
    pub request_id: String,
    /// What it ordered: (product, units) per item.
    pub items: Vec<(i64, i64)>,
    /// A 200 that was the stored answer to an earlier request with this id.
    pub duplicate: bool,
    /// Transactions the service ran (the 200 body's `attempts`).
    pub attempts: u64,
    pub micros: u64,
    /// The instance it went to (its index in the load's bases).
    pub instance: usize,
    /// When it was sent, in microseconds since the load started.
    pub sent_us: u64,
    /// The 200 body's `batch_size` (sales in its transaction), if it said.
    pub batch_size: Option<u64>,
    /// Times it was sent again after a 429.
    pub retries: u32,
    /// When its (last) answer came, in microseconds since the load started.
    pub done_us: u64,
    /// What the client saw when no answer came.
    pub error: Option<String>,
}

/// Per instance: the requests refused (409) that were sent before some request that
/// got a unit on the same instance.
fn overtaken(answers: &[Answer]) -> Vec<u64> {
    let instances = answers.iter().map(|a| a.instance + 1).max().unwrap_or(0);
    let mut last_sale = vec![None; instances];
    for a in answers.iter().filter(|a| a.outcome == Outcome::Sold) {
        let last = &mut last_sale[a.instance];
        *last = Some(last.map_or(a.sent_us, |t: u64| t.max(a.sent_us)));
    }
    let mut overtaken = vec![0; instances];
    for a in answers.iter().filter(|a| a.outcome == Outcome::SoldOut) {
        if last_sale[a.instance].is_some_and(|t| a.sent_us < t) {
            overtaken[a.instance] += 1;
        }
    }
    overtaken
}

/// Microseconds on CLOCK_MONOTONIC: on one Linux host every process reads the same
/// clock, so the loadtest's histories and the instances' lock intervals line up.
/// (`std::time::Instant` reads it too, but does not show its value.)
pub fn monotonic_us() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given, and CLOCK_MONOTONIC
    // exists on every Linux.
    let done = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    assert_eq!(done, 0, "CLOCK_MONOTONIC is readable");
    now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000
}

/// Request `i`'s items: (product, units) each.
fn items(load: &Load, i: usize) -> Vec<(i64, i64)> {
    let product = load.products[i % load.products.len()];
    // Deterministic spread of multi-item requests: every k-th request.
    let multi = load.multi_item_share > 0.0
        && load.products.len() > 1
        && ((i as f64 * load.multi_item_share).floor()
            != ((i + 1) as f64 * load.multi_item_share).floor());
    if multi {
        let next = load.products[(i + 1) % load.products.len()];
        vec![(product, load.quantity), (next, load.quantity)]
    } else {
        vec![(product, load.quantity)]
    }
}

fn body(load: &Load, i: usize, items: &[(i64, i64)]) -> (String, Value) {
    let request_id = format!("{}-{i}", load.id_prefix);
    let mut body = match items {
        [(product, quantity)] => {
            json!({"request_id": request_id, "product_id": product, "quantity": quantity})
        }
        items => {
            let items: Vec<Value> = items
                .iter()
                .map(|(product, quantity)| json!({"product_id": product, "quantity": quantity}))
                .collect();
            json!({"request_id": request_id, "items": items})
        }
    };
    if let Some(hold) = load.hold_ms {
        body["hold_ms"] = json!(hold);
    }
    (request_id, body)
}

/// Sends request `i`; a 429 goes again after its Retry-After, up to `load.retries`
/// times. Its latency is its last attempt's.
async fn send(
    client: &reqwest::Client,
    load: &Load,
    i: usize,
    started: Instant,
    budget: &RetryBudget,
) -> Answer {
    let instance = i % load.bases.len();
    let url = format!("{}/deduct/{}", load.bases[instance], load.strategy);
    let items = items(load, i);
    let (request_id, body) = body(load, i, &items);
    let first = Instant::now();
    budget.started();
    let mut retries = 0;
    let (reply, sent) = loop {
        let sent = Instant::now();
        let reply = post_deduct(client, &url, &body).await;
        if reply.outcome != Outcome::Overloaded || retries >= load.retries || !budget.try_retry() {
            break (reply, sent);
        }
        retries += 1;
        let wait = reply.retry_after.unwrap_or(Duration::from_secs(1));
        tokio::time::sleep(wait.mul_f64(rand::random_range(0.5..1.5))).await;
    };
    if let Some(answered) = &load.answered {
        answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    Answer {
        outcome: reply.outcome,
        request_id,
        items,
        duplicate: reply.duplicate,
        attempts: reply.attempts,
        micros: sent.elapsed().as_micros() as u64,
        instance,
        sent_us: first.duration_since(started).as_micros() as u64,
        batch_size: reply.batch_size,
        retries,
        done_us: started.elapsed().as_micros() as u64,
        error: reply.error,
    }
}

/// One deduction's answer, classified.
#[derive(Debug, Clone)]
pub struct Reply {
    pub outcome: Outcome,
    /// The 200 body's `attempts` (0 otherwise).
    pub attempts: u64,
    /// A 200 that is the stored answer to an earlier request with the same id.
    pub duplicate: bool,
    /// The 200 body's `batch_size`, if it has one.
    pub batch_size: Option<u64>,
    /// A 429's or 503's `Retry-After`, in whole seconds as HTTP has it.
    pub retry_after: Option<Duration>,
    /// No answer: the innermost error the client saw.
    pub error: Option<String>,
}

/// Sends one deduction and classifies the answer.
pub async fn post_deduct(client: &reqwest::Client, url: &str, body: &Value) -> Reply {
    let reply = |outcome: Outcome, attempts, duplicate| Reply {
        outcome,
        attempts,
        duplicate,
        batch_size: None,
        retry_after: None,
        error: None,
    };
    match client.post(url).json(body).send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let answer: Value = response.json().await.unwrap_or(Value::Null);
            match status {
                200 => Reply {
                    batch_size: answer["batch_size"].as_u64(),
                    ..reply(
                        Outcome::Sold,
                        answer["attempts"].as_u64().unwrap_or(1),
                        answer["duplicate"] == Value::Bool(true),
                    )
                },
                409 => reply(Outcome::SoldOut, 0, false),
                429 => Reply {
                    retry_after,
                    ..reply(Outcome::Overloaded, 0, false)
                },
                503 => {
                    let code = answer["error"].as_str().unwrap_or("?").to_string();
                    reply(Outcome::Unavailable(code), 0, false)
                }
                400..=499 => reply(Outcome::ClientError, 0, false),
                _ => reply(Outcome::ServerError, 0, false),
            }
        }
        // Never sent (connection refused): certainly not applied.
        Err(e) if e.is_connect() => Reply {
            error: Some(innermost(&e)),
            ..reply(Outcome::Unreachable, 0, false)
        },
        Err(e) => Reply {
            error: Some(innermost(&e)),
            ..reply(Outcome::Transport, 0, false)
        },
    }
}

/// The innermost cause of an error (`connection closed before message completed`,
/// `operation timed out`), what tells a transport error's side.
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

/// A progress bar on a terminal; hidden otherwise (CI logs stay quiet).
fn progress(load: &Load) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(load.requests as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>12} [{bar:40}] {pos}/{len} {per_sec}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(load.strategy.clone());
    bar
}

/// Runs the load and returns what the clients saw.
pub async fn fire(client: &reqwest::Client, load: &Load) -> Fired {
    let bar = progress(load);
    let fired = fire_quietly(client, load, &bar).await;
    bar.finish_and_clear();
    fired
}

async fn fire_quietly(
    client: &reqwest::Client,
    load: &Load,
    bar: &indicatif::ProgressBar,
) -> Fired {
    let clock_start_us = monotonic_us();
    let started = Instant::now();
    let budget = Arc::new(RetryBudget::default());
    // The answers counted (for the live page, and for a restock beside the load).
    let answered = load.answered.clone().unwrap_or_default();
    let load = &Load {
        answered: Some(answered.clone()),
        ..load.clone()
    };
    let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (restocked, restock_answered) = tokio::sync::watch::channel(false);
    let beside = tokio::spawn(beside(
        client.clone(),
        load.clone(),
        started,
        (answered, restocked),
        finished.clone(),
    ));
    let deadline = load.duration.map(|d| started + d);
    let open = move || deadline.is_none_or(|d| Instant::now() < d);
    let mut ceiling_reached = false;
    let answers: Vec<Answer> = match load.rate {
        None => {
            let (budget, restock_answered) = (&budget, &restock_answered);
            futures::stream::iter(0..load.requests)
                .take_while(|_| std::future::ready(open()))
                .map(|i| async move {
                    after_a_due_restock(load, restock_answered.clone()).await;
                    let answer = send(client, load, i, started, budget).await;
                    bar.inc(1);
                    answer
                })
                .buffer_unordered(load.concurrency.max(1))
                .collect()
                .await
        }
        Some(rate) => {
            // Open loop: a request starts every 1/rate s; at most `concurrency` wait.
            let gate = Arc::new(Semaphore::new(load.concurrency.max(1)));
            let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.001)));
            let mut running = Vec::new();
            for i in 0..load.requests {
                ticks.tick().await;
                if !open() {
                    break;
                }
                ceiling_reached |= gate.available_permits() == 0;
                let permit = gate.clone().acquire_owned().await.expect("open semaphore");
                let (client, load, budget) = (client.clone(), load.clone(), budget.clone());
                let restock_answered = restock_answered.clone();
                running.push(tokio::spawn(async move {
                    after_a_due_restock(&load, restock_answered).await;
                    let answer = send(&client, &load, i, started, &budget).await;
                    drop(permit);
                    answer
                }));
            }
            let mut answers = Vec::with_capacity(running.len());
            for task in running {
                answers.push(task.await.expect("request task"));
                bar.inc(1);
            }
            answers
        }
    };
    let elapsed = started.elapsed();
    finished.store(true, std::sync::atomic::Ordering::Relaxed);
    let probes = beside
        .await
        .expect("the reads and restocks beside the load");
    let mut fired = Fired::from_answers(answers, elapsed, load.concurrency);
    fired.beside = probes;
    fired.ceiling_reached = ceiling_reached;
    fired.clock_start_us = clock_start_us;
    fired.open_loop = load.rate.is_some();
    fired.id_prefix = load.id_prefix.clone();
    fired
}

/// Waits, when the load's restock is due (enough answers came) and not yet answered,
/// until it is ([`MidRestock`]). A restock that failed releases the wait too, as does
/// a `beside` task that is gone.
async fn after_a_due_restock(
    load: &Load,
    mut restock_answered: tokio::sync::watch::Receiver<bool>,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let (Some(mid), Some(answered)) = (&load.beside.restock, &load.answered) else {
        return;
    };
    if answered.load(Relaxed) >= mid.after_answers {
        let _gone = restock_answered.wait_for(|answered| *answered).await;
    }
}

/// Sends the load's reads and restock ([`Beside`]) until `finished`; says when the
/// restock was answered through `restocked`.
async fn beside(
    client: reqwest::Client,
    load: Load,
    started: Instant,
    (answered, restocked): (
        Arc<std::sync::atomic::AtomicU64>,
        tokio::sync::watch::Sender<bool>,
    ),
    finished: Arc<std::sync::atomic::AtomicBool>,
) -> Vec<Probe> {
    use std::sync::atomic::Ordering::Relaxed;
    let Beside {
        read_every,
        restock: pending,
    } = load.beside.clone();
    if read_every.is_none() && pending.is_none() {
        return Vec::new();
    }
    let since = |at: Instant| at.duration_since(started).as_micros() as u64;
    let mut probes = Vec::new();
    let mut pending = pending;
    let mut next_read = Instant::now();
    let mut reads = 0usize;
    while !finished.load(Relaxed) {
        if let Some(every) = read_every
            && Instant::now() >= next_read
        {
            let product = load.products[reads % load.products.len()];
            let base = &load.bases[reads % load.bases.len()];
            reads += 1;
            let sent = Instant::now();
            let stock = read_stock(&client, base, product).await;
            let done = stock.is_some().then(|| since(Instant::now()));
            probes.push(Probe {
                product,
                stock,
                restock: false,
                sent_us: since(sent),
                done_us: done,
            });
            next_read = sent + every;
        }
        if let Some(mid) = pending.take_if(|mid| answered.load(Relaxed) >= mid.after_answers) {
            // Every product at once, each from its own instance in turn.
            let sent = Instant::now();
            let done =
                futures::future::join_all(load.products.iter().enumerate().map(|(i, &product)| {
                    let base = &load.bases[i % load.bases.len()];
                    restock(
                        &client,
                        base,
                        &mid.admin_token,
                        product,
                        mid.stock,
                        mid.buckets,
                    )
                }))
                .await;
            let answered_at = since(Instant::now());
            restocked.send_replace(true);
            for (&product, done) in load.products.iter().zip(done) {
                probes.push(Probe {
                    product,
                    stock: Some(mid.stock),
                    restock: true,
                    sent_us: since(sent),
                    done_us: done.is_ok().then_some(answered_at),
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    probes
}

/// What `GET /stock/{product}` shows is left to sell: the units of the view the
/// strategies sell from (the Redis counter's `stock` where one exists, the database's
/// `quantity` otherwise); `None` when no answer came.
pub async fn read_stock(client: &reqwest::Client, base: &str, product: i64) -> Option<i64> {
    let view: Value = (client
        .get(format!("{base}/stock/{product}"))
        .send()
        .await
        .ok()?)
    .error_for_status()
    .ok()?
    .json()
    .await
    .ok()?;
    view["redis"]["stock"]
        .as_i64()
        .or_else(|| view["quantity"].as_i64())
}

/// The history's last word: every product of `products` read once from `base`, once
/// the system is quiet (nothing in flight, persisters drained, unknown outcomes
/// settled). Without it a history of sales alone could not fail: any order of them is
/// legal. With it, a sale erased from the stock (a stale write that put units back)
/// or one the counter forgot shows as a read no order of the answers gives.
///
/// A read that gets no answer within a second is tried again, 100 ms apart, until 10 s
/// have passed for that product (an instance just restarted may take that long to
/// answer); a product never answered gets no final read, and its history says so (the
/// checker calls it unobserved).
/// Times are microseconds since `clock_start_us` on CLOCK_MONOTONIC, as [`Probe`]'s.
pub async fn final_reads(
    client: &reqwest::Client,
    base: &str,
    products: &[i64],
    clock_start_us: u64,
) -> Vec<Probe> {
    const PATIENCE: Duration = Duration::from_secs(10);
    const ONE_READ: Duration = Duration::from_secs(1);
    let since_start = || monotonic_us().saturating_sub(clock_start_us);
    let mut probes = Vec::with_capacity(products.len());
    for &product in products {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            let sent_us = since_start();
            let read = tokio::time::timeout(ONE_READ, read_stock(client, base, product)).await;
            if let Ok(Some(stock)) = read {
                probes.push(Probe {
                    product,
                    stock: Some(stock),
                    restock: false,
                    sent_us,
                    done_us: Some(since_start()),
                });
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    probes
}

/// Waits until no product of `products` has sales pending in Redis (`GET /stock`'s
/// `pending`: sales not yet in the database), up to `timeout`.
/// Returns the units pending at the first look and how long the drain took.
pub async fn drained(
    client: &reqwest::Client,
    base: &str,
    products: &[i64],
    timeout: Duration,
) -> anyhow::Result<(i64, Duration)> {
    let started = Instant::now();
    let mut first = None;
    loop {
        let mut pending = 0;
        for product in products {
            let view: Value = client
                .get(format!("{base}/stock/{product}"))
                .send()
                .await?
                .json()
                .await?;
            pending += view["pending"].as_i64().unwrap_or(0);
        }
        first.get_or_insert(pending);
        if pending == 0 {
            return Ok((first.unwrap_or(0), started.elapsed()));
        }
        if started.elapsed() > timeout {
            anyhow::bail!("{pending} units still pending in Redis after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Restocks a product through the admin API (a new epoch).
pub async fn restock(
    client: &reqwest::Client,
    base: &str,
    admin_token: &str,
    product_id: i64,
    stock: i64,
    buckets: u16,
) -> anyhow::Result<()> {
    let response = client
        .put(format!("{base}/stock/{product_id}"))
        .bearer_auth(admin_token)
        .json(&json!({ "quantity": stock, "buckets": buckets }))
        .send()
        .await?;
    if !response.status().is_success() {
        anyhow::bail!("restock of {product_id} failed: {}", response.text().await?);
    }
    Ok(())
}
