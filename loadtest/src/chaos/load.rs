//! The load a cell runs under: buyers on both instances, every answer sampled.

use super::*;

/// When the fault began and ended, in load time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    pub(super) fault: Duration,
    pub(super) healed: Duration,
}

impl Window {
    pub(super) fn new(fault: Duration, healed: Duration) -> Window {
        Window { fault, healed }
    }
}

/// One answer, as the load saw it.
#[derive(Debug, Clone)]
pub(super) struct Sample {
    /// When the request was sent, since the load started.
    pub(super) sent: Duration,
    /// When the answer came, since the load started.
    pub(super) at: Duration,
    /// Answered only by the retry after the run (its outcome had been unknown): not
    /// on the timeline.
    pub(super) retried: bool,
    pub(super) outcome: Outcome,
    pub(super) request_id: String,
    /// Transactions the service ran for a sale (its `attempts`; 0 otherwise).
    pub(super) attempts: u64,
    /// A 200 that was the stored answer of an earlier request with this id.
    pub(super) duplicate: bool,
    /// The instance it went to (0: A, 1: B).
    pub(super) instance: usize,
}

impl Sample {
    /// As the engine records an answer (one unit of `product`); a request retried after
    /// the run, whose first outcome was unknown, as that unknown outcome.
    pub(super) fn answer(&self, product: i64) -> crate::engine::Answer {
        crate::engine::Answer {
            outcome: if self.retried {
                Outcome::Transport
            } else {
                self.outcome.clone()
            },
            request_id: self.request_id.clone(),
            items: vec![(product, 1)],
            duplicate: self.duplicate && !self.retried,
            attempts: self.attempts,
            micros: (self.at - self.sent).as_micros() as u64,
            instance: self.instance,
            sent_us: self.sent.as_micros() as u64,
            batch_size: None,
            retries: 0,
            done_us: self.at.as_micros() as u64,
            error: None,
        }
    }
}

/// A single-unit deduction of `product`, with the per-request fencing switch when the
/// strategy has one, and the scenario's classic mistake when it is one.
pub(super) fn deduct_body(request_id: &str, product: i64, spec: &CellSpec) -> Value {
    let mut body = json!({"request_id": request_id, "product_id": product});
    if let Some(fencing) = spec.fencing {
        body["fencing"] = json!(fencing);
    }
    if let Some(mistake) = spec.scenario.mistake() {
        body["mistake"] = json!(mistake);
    }
    body
}

/// The background load of a cell: workers pinned to instances, each with one
/// request in flight, until stopped.
pub(super) struct Load {
    pub(super) started: Instant,
    /// CLOCK_MONOTONIC at `started`, in microseconds.
    pub(super) clock_start_us: u64,
    /// The prefix of every request id of this load.
    pub(super) prefix: String,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) workers: Vec<tokio::task::JoinHandle<Vec<Sample>>>,
}

impl Load {
    pub(super) fn start(
        client: &reqwest::Client,
        instances: &[Instance],
        spec: &CellSpec,
        product: i64,
        per_instance: usize,
    ) -> Load {
        let clock_start_us = crate::engine::monotonic_us();
        let started = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let run = uuid::Uuid::new_v4().simple().to_string();
        let load_prefix = format!("chaos-{}", &run[..12]);
        let mut workers = Vec::new();
        for (i, instance) in instances.iter().enumerate() {
            // A runs one buyer: the one whose request the fault catches. More would
            // be caught too, mid-transaction (a frozen process freezes all its
            // requests), and the cell would measure whichever lock they held.
            let workers_here = if i == 0 { 1 } else { per_instance };
            for w in 0..workers_here {
                let client = client.clone();
                let url = format!("{}/deduct/{}", instance.base, spec.strategy);
                let stop = stop.clone();
                let spec = spec.clone();
                let prefix = format!("{load_prefix}-{i}-{w}");
                workers.push(tokio::spawn(async move {
                    let mut samples = Vec::new();
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let request_id = format!("{prefix}-{n}");
                        let body = deduct_body(&request_id, product, &spec);
                        let sent = started.elapsed();
                        let reply = post_deduct(&client, &url, &body).await;
                        let (outcome, attempts, duplicate) =
                            (reply.outcome, reply.attempts, reply.duplicate);
                        let at = started.elapsed();
                        let failed = outcome.is_transport_failure();
                        samples.push(Sample {
                            sent,
                            at,
                            retried: false,
                            outcome,
                            request_id,
                            attempts,
                            duplicate,
                            instance: i,
                        });
                        if failed {
                            // A dead or frozen instance: do not spin.
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                    samples
                }));
            }
        }
        Load {
            started,
            clock_start_us,
            prefix: load_prefix,
            stop,
            workers,
        }
    }

    pub(super) fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// Stops the workers after their request in flight and returns every answer.
    pub(super) async fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        let mut samples = Vec::new();
        for worker in self.workers {
            if let Ok(mut s) = worker.await {
                samples.append(&mut s);
            }
        }
        samples.sort_by_key(|s| s.at);
        samples
    }
}
