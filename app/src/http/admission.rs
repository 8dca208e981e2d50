//! Admission control: how many deductions an instance works on at once. Past the
//! limit a deduction is answered `429 overloaded` with `Retry-After` at once, before it
//! touches the database, Redis or a lock, instead of waiting in a queue that only
//! grows: under a flash sale past capacity the instance keeps answering the buyers it
//! admitted at the latency of its capacity, and tells the others to come back.
//!
//! Two limits (`--max-in-flight`, `--adaptive-limit`):
//! - **fixed**: at most N deductions in flight;
//! - **adaptive**, Netflix concurrency-limits' *Gradient2* (`Gradient2Limit.java`):
//!   the limit follows the ratio of a long-term average latency to the latest sample.
//!   When latency rises above the long average (a queue is forming, here or in the
//!   database) the limit shrinks, down to half per step; when it falls back, the limit
//!   grows by a small queue allowance per sample. It only grows while at least half
//!   the limit is in use (an idle service does not learn a huge limit), and it stays
//!   within `[min, max]`. With the fixed limit it also caps the adaptive one.
//!
//! `/health`, `/ready`, `/metrics` and the admin routes are never limited.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The adaptive limit's parameters: Gradient2's defaults (initial 20, min 20,
/// smoothing 0.2, tolerance 1.5, long window 600 samples, queue allowance 4), with the
/// maximum from `--max-in-flight` (default 1000).
#[derive(Debug, Clone, Copy)]
pub struct Gradient2Params {
    pub initial: f64,
    pub min: f64,
    pub max: f64,
    pub smoothing: f64,
    pub tolerance: f64,
    pub long_window: f64,
    pub queue: f64,
}

impl Gradient2Params {
    pub fn with_max(max: usize) -> Gradient2Params {
        let max = max.max(1) as f64;
        Gradient2Params {
            initial: 20f64.min(max),
            min: 20f64.min(max),
            max,
            smoothing: 0.2,
            tolerance: 1.5,
            long_window: 600.0,
            queue: 4.0,
        }
    }
}

/// Gradient2's state: the estimated limit and the long-term latency average.
#[derive(Debug)]
struct Gradient2 {
    params: Gradient2Params,
    limit: f64,
    /// Exponential average of the latency (seconds), a plain mean over the first ten.
    long: f64,
    samples: u64,
}

impl Gradient2 {
    fn new(params: Gradient2Params) -> Gradient2 {
        Gradient2 {
            params,
            limit: params.initial,
            long: 0.0,
            samples: 0,
        }
    }

    /// One finished deduction: its latency and how many were in flight when it ended.
    fn sample(&mut self, latency: Duration, in_flight: usize) {
        let p = self.params;
        let short = latency.as_secs_f64().max(1e-6);
        self.samples += 1;
        self.long = if self.samples <= 10 {
            self.long + (short - self.long) / self.samples as f64
        } else {
            let factor = 2.0 / (p.long_window + 1.0);
            self.long * (1.0 - factor) + short * factor
        };
        // Back to normal after a long overload: drop the inflated long average faster
        // than its smoothing would.
        if self.long / short > 2.0 {
            self.long *= 0.95;
        }
        // Do not grow while the application itself uses less than half the limit.
        if (in_flight as f64) < self.limit / 2.0 {
            return;
        }
        let gradient = (p.tolerance * self.long / short).clamp(0.5, 1.0);
        let target = self.limit * gradient + p.queue;
        let next = self.limit * (1.0 - p.smoothing) + target * p.smoothing;
        self.limit = next.clamp(p.min, p.max);
    }
}

/// What limits the deductions in flight.
#[derive(Debug)]
enum Limit {
    Unlimited,
    Fixed(usize),
    Adaptive(Mutex<Gradient2>),
}

/// The instance's admission control: a counter of deductions in flight and its limit.
#[derive(Debug)]
pub struct Admission {
    limit: Limit,
    in_flight: AtomicUsize,
    reject_hold: std::time::Duration,
}

/// One admitted deduction; dropping it lets the next in (and, with the adaptive
/// limit, reports its latency).
pub struct Permit<'a> {
    admission: &'a Admission,
    started: Instant,
}

/// A deduction turned away: the limit at that moment.
#[derive(Debug, Clone, Copy)]
pub struct Refused {
    pub limit: usize,
}

impl Admission {
    /// `max_in_flight` 0 and not adaptive: no limit. Adaptive: Gradient2 with
    /// `max_in_flight` (or 1000) as its ceiling.
    pub fn new(max_in_flight: usize, adaptive: bool) -> Admission {
        let limit = match (max_in_flight, adaptive) {
            (0, false) => Limit::Unlimited,
            (n, false) => Limit::Fixed(n),
            (n, true) => {
                let max = if n == 0 { 1000 } else { n };
                Limit::Adaptive(Mutex::new(Gradient2::new(Gradient2Params::with_max(max))))
            }
        };
        Admission {
            limit,
            in_flight: AtomicUsize::new(0),
            reject_hold: std::time::Duration::ZERO,
        }
    }

    /// Refusals wait this long before they are answered (`--reject-hold-ms`).
    pub fn with_reject_hold(self, hold: std::time::Duration) -> Admission {
        Admission {
            reject_hold: hold,
            ..self
        }
    }

    /// How long this refusal waits before it is answered: the hold, jittered to
    /// between half and one and a half of it. Without the jitter a flood's refused
    /// connections, all refused in the same instant, would all come back in the same
    /// instant, a herd that arrives in step every hold.
    pub fn reject_hold(&self) -> std::time::Duration {
        if self.reject_hold.is_zero() {
            return self.reject_hold;
        }
        self.reject_hold.mul_f64(rand::random_range(0.5..1.5))
    }

    /// The current limit (`None`: unlimited).
    pub fn limit(&self) -> Option<usize> {
        match &self.limit {
            Limit::Unlimited => None,
            Limit::Fixed(n) => Some(*n),
            Limit::Adaptive(g) => Some(g.lock().expect("limit poisoned").limit as usize),
        }
    }

    /// Deductions in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Admits one deduction, or refuses it at once when the limit is reached.
    pub fn try_enter(&self) -> Result<Permit<'_>, Refused> {
        let limit = self.limit();
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        if let Some(limit) = limit
            && before >= limit
        {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused { limit });
        }
        Ok(Permit {
            admission: self,
            started: Instant::now(),
        })
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let in_flight = self.admission.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Limit::Adaptive(g) = &self.admission.limit {
            g.lock()
                .expect("limit poisoned")
                .sample(self.started.elapsed(), in_flight);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_limit_refuses_past_it_and_frees_on_drop() {
        let admission = Admission::new(2, false);
        let a = admission.try_enter().unwrap();
        let _b = admission.try_enter().unwrap();
        assert_eq!(admission.try_enter().err().map(|r| r.limit), Some(2));
        assert_eq!(admission.in_flight(), 2);
        drop(a);
        assert!(admission.try_enter().is_ok());
    }

    #[test]
    fn no_limit_admits_everything() {
        let admission = Admission::new(0, false);
        let permits: Vec<_> = (0..10_000)
            .map(|_| admission.try_enter().unwrap())
            .collect();
        assert_eq!(admission.in_flight(), permits.len());
        assert_eq!(admission.limit(), None);
    }

    /// Gradient2 shrinks when latency climbs above its long average (a queue forms)
    /// and grows back when it falls, within [min, max].
    #[test]
    fn the_adaptive_limit_follows_latency() {
        let mut g = Gradient2::new(Gradient2Params::with_max(200));
        // Steady 10 ms at a full limit: it grows by its queue allowance.
        for _ in 0..200 {
            let limit = g.limit as usize;
            g.sample(Duration::from_millis(10), limit);
        }
        let grown = g.limit;
        assert!(grown > 100.0, "{grown}");
        // Latency jumps to 100 ms: a queue. The limit falls towards the minimum.
        for _ in 0..50 {
            let limit = g.limit as usize;
            g.sample(Duration::from_millis(100), limit);
        }
        assert!(g.limit < grown / 2.0, "{} vs {grown}", g.limit);
        assert!(g.limit >= 20.0);
        // Idle (few in flight): it does not grow.
        let before = g.limit;
        for _ in 0..100 {
            g.sample(Duration::from_millis(1), 1);
        }
        assert_eq!(g.limit, before);
        assert!(g.limit <= 200.0);
    }
}
