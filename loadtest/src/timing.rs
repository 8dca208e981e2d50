//! Where the time goes: the instances' own `GET /metrics` read before and after a
//! strategy's run, the difference split into lock wait, transaction, release, the rest
//! of the service's handling, and what the client waited beyond that (HTTP, queues).
//!
//! The service times each deduction from its handler's start to its answer
//! (`stock_locks_deduction_duration_seconds`) and the phases inside it
//! (`stock_locks_phase_seconds{phase}`); a scrape carries their sums and counts, so
//! the mean per deduction over a run is (sum after − sum before) / (count after −
//! count before), summed over the instances. Parsing is `prometheus-parse`'s.

use serde::Serialize;
use std::collections::BTreeMap;

/// The counters of one strategy, summed over the instances, at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sums {
    /// Deductions the handler timed, and their total time (seconds).
    count: f64,
    seconds: f64,
    lock: f64,
    transaction: f64,
    release: f64,
    pool_wait: f64,
    /// Deductions the sold-out fast path refused without running the strategy.
    sold_out_fast: f64,
}

/// Every strategy's sums, at one moment, over every instance scraped.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    sums: BTreeMap<String, Sums>,
    /// Deductions in flight at the scrape, over every instance (admitted, not yet
    /// answered: `stock_locks_admission{value="in_flight"}`).
    pub in_flight: u64,
}

/// One strategy's mean deduction over a run, split by where the time went
/// (milliseconds per deduction; the report's "Where the time goes").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct TimeSplit {
    /// Deductions the service timed during the run (every request that reached the
    /// handler).
    pub deductions: u64,
    /// Waiting for and taking the lock (a distributed lock, a mutex, a
    /// `SELECT ... FOR UPDATE`).
    pub lock_ms: f64,
    /// The database work: the transaction under a lock, or a lock-free strategy's
    /// whole work (retries and backoff included).
    pub transaction_ms: f64,
    /// Giving the lock back.
    pub release_ms: f64,
    /// The rest of the handler: parsing, the idempotency layer, answering.
    pub rest_ms: f64,
    /// What the client waited beyond the handler: HTTP, connections, the service's
    /// accept and worker queues (the client's mean latency − the handler's).
    pub outside_ms: f64,
    /// Of the transaction: waiting for a pooled database connection.
    pub pool_wait_ms: f64,
}

impl TimeSplit {
    /// The parts' names, in the order the chart stacks them.
    pub const PARTS: [&'static str; 6] = [
        "lock wait",
        "pool wait",
        "transaction",
        "release",
        "rest of the service",
        "outside the service",
    ];

    /// The parts in the order the chart stacks them, with their names: the pool wait
    /// shown apart from the rest of the transaction it is part of.
    pub fn parts(&self) -> [(&'static str, f64); 6] {
        let pool_wait = self.pool_wait_ms.min(self.transaction_ms);
        let ms = [
            self.lock_ms,
            pool_wait,
            self.transaction_ms - pool_wait,
            self.release_ms,
            self.rest_ms,
            self.outside_ms,
        ];
        std::array::from_fn(|i| (Self::PARTS[i], ms[i]))
    }

    /// The client's mean latency it adds up to, in milliseconds.
    pub fn total_ms(&self) -> f64 {
        self.parts().iter().map(|(_, ms)| ms).sum()
    }
}

impl Snapshot {
    /// Parses one instance's scrape and adds it.
    pub fn add(&mut self, text: &str) -> anyhow::Result<()> {
        let lines = text.lines().map(|line| Ok(line.to_string()));
        let scrape = prometheus_parse::Scrape::parse(lines)?;
        for sample in scrape.samples {
            let (prometheus_parse::Value::Untyped(value)
            | prometheus_parse::Value::Counter(value)
            | prometheus_parse::Value::Gauge(value)) = sample.value
            else {
                continue;
            };
            if sample.metric == "stock_locks_admission"
                && sample.labels.get("value") == Some("in_flight")
            {
                self.in_flight += value as u64;
            }
            let Some(strategy) = sample.labels.get("strategy") else {
                continue;
            };
            let sums = self.sums.entry(strategy.to_string()).or_default();
            let slot = match (sample.metric.as_str(), sample.labels.get("phase")) {
                ("stock_locks_deduction_duration_seconds_count", _) => &mut sums.count,
                ("stock_locks_deduction_duration_seconds_sum", _) => &mut sums.seconds,
                ("stock_locks_phase_seconds_sum", Some("lock")) => &mut sums.lock,
                ("stock_locks_phase_seconds_sum", Some("transaction")) => &mut sums.transaction,
                ("stock_locks_phase_seconds_sum", Some("release")) => &mut sums.release,
                ("stock_locks_db_pool_wait_seconds_sum", _) => &mut sums.pool_wait,
                ("stock_locks_sold_out_fast_total", _) => &mut sums.sold_out_fast,
                _ => continue,
            };
            *slot += value;
        }
        Ok(())
    }

    /// Reads every instance's `/metrics`.
    pub async fn scrape(client: &reqwest::Client, bases: &[String]) -> anyhow::Result<Snapshot> {
        let mut snapshot = Snapshot::default();
        for base in bases {
            let response = client.get(format!("{base}/metrics")).send().await?;
            anyhow::ensure!(
                response.status().is_success(),
                "{base}/metrics answered {}",
                response.status()
            );
            snapshot.add(&response.text().await?)?;
        }
        Ok(snapshot)
    }

    /// The deductions of `strategy` the sold-out fast path refused between `before` and
    /// this snapshot (answered 409 without the strategy running).
    pub fn refused_by_fast_path(&self, before: &Snapshot, strategy: &str) -> u64 {
        let now = self.sums.get(strategy).map_or(0.0, |s| s.sold_out_fast);
        let then = before.sums.get(strategy).map_or(0.0, |s| s.sold_out_fast);
        (now - then).max(0.0).round() as u64
    }

    /// `strategy`'s mean deduction between `before` and this snapshot, given the
    /// client's mean latency over the same run (milliseconds); `None` when the service
    /// timed no deduction of it in between.
    pub fn since(
        &self,
        before: &Snapshot,
        strategy: &str,
        client_mean_ms: f64,
    ) -> Option<TimeSplit> {
        let now = self.sums.get(strategy).copied().unwrap_or_default();
        let then = before.sums.get(strategy).copied().unwrap_or_default();
        let count = now.count - then.count;
        if count < 1.0 {
            return None;
        }
        let mean = |after: f64, before: f64| (after - before).max(0.0) * 1000.0 / count;
        let handler = mean(now.seconds, then.seconds);
        let lock = mean(now.lock, then.lock);
        let transaction = mean(now.transaction, then.transaction);
        let release = mean(now.release, then.release);
        Some(TimeSplit {
            deductions: count as u64,
            lock_ms: lock,
            transaction_ms: transaction,
            release_ms: release,
            rest_ms: (handler - lock - transaction - release).max(0.0),
            outside_ms: (client_mean_ms - handler).max(0.0),
            pool_wait_ms: mean(now.pool_wait, then.pool_wait),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = r#"# TYPE stock_locks_deduction_duration_seconds histogram
stock_locks_deduction_duration_seconds_bucket{strategy="mysql-lock",le="0.01"} 1
stock_locks_deduction_duration_seconds_bucket{strategy="mysql-lock",le="+Inf"} 1
stock_locks_deduction_duration_seconds_sum{strategy="mysql-lock"} 0.004
stock_locks_deduction_duration_seconds_count{strategy="mysql-lock"} 1
# TYPE stock_locks_phase_seconds histogram
stock_locks_phase_seconds_sum{phase="lock",strategy="mysql-lock"} 0.001
stock_locks_phase_seconds_count{phase="lock",strategy="mysql-lock"} 1
"#;

    const AFTER: &str = r#"# TYPE stock_locks_deduction_duration_seconds histogram
stock_locks_deduction_duration_seconds_sum{strategy="mysql-lock"} 0.044
stock_locks_deduction_duration_seconds_count{strategy="mysql-lock"} 5
# TYPE stock_locks_phase_seconds histogram
stock_locks_phase_seconds_sum{phase="lock",strategy="mysql-lock"} 0.025
stock_locks_phase_seconds_sum{phase="transaction",strategy="mysql-lock"} 0.008
stock_locks_phase_seconds_sum{phase="release",strategy="mysql-lock"} 0.004
# TYPE stock_locks_db_pool_wait_seconds histogram
stock_locks_db_pool_wait_seconds_sum{strategy="mysql-lock"} 0.0004
# TYPE stock_locks_sold_out_fast_total counter
stock_locks_sold_out_fast_total{strategy="mysql-lock"} 3
"#;

    /// The difference of two scrapes, per deduction: 4 deductions took 40 ms in the
    /// handler, 24 of them waiting for the lock.
    #[test]
    fn the_split_is_the_difference_per_deduction() {
        let (mut before, mut after) = (Snapshot::default(), Snapshot::default());
        before.add(BEFORE).unwrap();
        after.add(AFTER).unwrap();
        let split = after.since(&before, "mysql-lock", 12.5).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert_eq!(split.deductions, 4);
        assert!(close(split.lock_ms, 6.0), "{split:?}");
        assert!(close(split.transaction_ms, 2.0), "{split:?}");
        assert!(close(split.release_ms, 1.0), "{split:?}");
        assert!(close(split.rest_ms, 1.0), "{split:?}");
        assert!(close(split.outside_ms, 2.5), "{split:?}");
        assert!(close(split.pool_wait_ms, 0.1), "{split:?}");
        assert!(close(split.total_ms(), 12.5));
        assert_eq!(after.since(&before, "atomic-sql", 1.0), None);
        assert_eq!(after.refused_by_fast_path(&before, "mysql-lock"), 3);
    }

    /// Two instances' scrapes add up.
    #[test]
    fn instances_add_up() {
        let mut both = Snapshot::default();
        both.add(AFTER).unwrap();
        both.add(AFTER).unwrap();
        let split = both.since(&Snapshot::default(), "mysql-lock", 0.0).unwrap();
        assert_eq!(split.deductions, 10);
        assert!((split.lock_ms - 5.0).abs() < 1e-9);
    }
}
