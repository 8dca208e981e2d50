//! Admission control: how many deductions an instance works on at once. Past the
//! limit a deduction is answered `429 overloaded` with `Retry-After`, before it
//! touches the database, Redis or a lock, instead of waiting in a queue that only
//! grows: under a flash sale past capacity the instance keeps answering the buyers it
//! admitted at the latency of its capacity, and tells the others to come back. It is
//! answered at once, or after a hold spent in a bounded line (below).
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
//! # A flood that does not back off
//! A refusal answered at once is the cheapest thing the instance does, but a client
//! that does not back off (a buyer pressing "buy" again, a bot, `wrk`) sends its next
//! request the moment the 429 arrives: tens of thousands of refusals a second, and the
//! admitted deductions starve for CPU. With a reject hold (what a limit brings unless
//! `--reject-hold-ms` says otherwise) a deduction past the limit waits in line for up
//! to its hold ([`Admission::enter`]) before it is refused, so such a client waits in
//! its own time; the hold grows while many are held, so the
//! refusals answered per second stay under [`REFUSALS_PER_SECOND`] up to that rate
//! times the longest hold of connections flooding (past that, each waits the longest
//! hold). A place that frees goes to the oldest in line: without the line,
//! the connection that freed it would send again at once and take it back before any
//! held request returned, and the first connections admitted would keep the places.
//! So does every place the adaptive limit grows by, and a newcomer joins the line's
//! end whenever anyone waits: a free place is never taken ahead of those waiting (a
//! client that waits its turn is never worse off than one that keeps sending).
//! `./scripts/flood` measures it.
//!
//! `/health`, `/ready`, `/metrics` and the admin routes are never limited.

use super::ServiceError;
use super::layer::{Answer, Deduct, Request};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The adaptive limit's parameters: Gradient2's defaults (initial 20, min 20,
/// smoothing 0.2, tolerance 1.5, long window 600 samples, queue allowance 4), with the
/// maximum from `--max-in-flight` (1000 when that is 0).
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
    reject_hold: Duration,
    /// Refusals on their timer now.
    held: AtomicUsize,
    /// With a hold: the refused deductions waiting for a place, oldest first. A place
    /// that frees goes to the oldest, not to whoever asks next.
    waiting: Mutex<VecDeque<oneshot::Sender<()>>>,
}

/// Refusals answered per second, at most, while many are held at once
/// ([`Admission::hold_refusal`]).
pub const REFUSALS_PER_SECOND: f64 = 500.0;

/// The longest a paced hold gets, in multiples of `--reject-hold-ms`, before its jitter
/// (which adds up to half again: six times the hold at the most). A client's own
/// timeout (`wrk`'s, a browser's) must stay above that.
pub const LONGEST_HOLD: f64 = 4.0;

/// One refusal counted as held while it lives.
struct Held<'a> {
    count: &'a AtomicUsize,
    /// Held at once, this one included, when it began.
    now: usize,
}

impl<'a> Held<'a> {
    fn enter(count: &'a AtomicUsize) -> Held<'a> {
        let now = count.fetch_add(1, Ordering::AcqRel) + 1;
        Held { count, now }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One admitted deduction; dropping it lets the next in (and, with the adaptive
/// limit, reports its latency).
pub struct Permit<'a> {
    admission: &'a Admission,
    started: Instant,
}

/// A deduction turned away: the limit at that moment, and how long it was held.
#[derive(Debug, Clone, Copy)]
pub struct Refused {
    pub limit: usize,
    pub held: Duration,
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
            reject_hold: Duration::ZERO,
            held: AtomicUsize::new(0),
            waiting: Mutex::new(VecDeque::new()),
        }
    }

    /// Deductions past the limit wait in line this long (jittered, paced) before they
    /// are refused (`--reject-hold-ms`).
    pub fn with_reject_hold(self, hold: Duration) -> Admission {
        Admission {
            reject_hold: hold,
            ..self
        }
    }

    /// How long to hold a refusal, `held_now` being held at once (this one included):
    /// `--reject-hold-ms`, or longer while many are held: as long as it takes to
    /// answer those at [`REFUSALS_PER_SECOND`] (at most [`LONGEST_HOLD`] times the
    /// hold). A client that does not back off resends the moment it is answered, so
    /// the refusals a flood costs per second are what the instance answers per second:
    /// with the rate capped, a flood of more connections costs no more CPU (up to the
    /// rate times the longest hold of them), its clients only wait longer. Jittered to between half and one and a half of
    /// it: without that, a flood's connections, refused in the same instant, would all
    /// come back in the same instant, a herd arriving in step.
    fn hold_for(&self, held_now: usize) -> Duration {
        let base = self.reject_hold.as_secs_f64();
        let paced = (held_now as f64 / REFUSALS_PER_SECOND).clamp(base, base * LONGEST_HOLD);
        Duration::from_secs_f64(paced * rand::random_range(0.5..1.5))
    }

    /// Holds one refusal on its timer ([`Admission::hold_for`]) and says how long it
    /// held it; zero without a hold. For a refusal that no place can turn into a sale
    /// (a product known sold out); a deduction past the limit waits in
    /// [`Admission::enter`] instead.
    ///
    /// Cancellation safe: a refusal whose client went away stops counting as held.
    pub async fn hold_refusal(&self) -> Duration {
        if self.reject_hold.is_zero() {
            return Duration::ZERO;
        }
        let held = Held::enter(&self.held);
        let hold = self.hold_for(held.now);
        tokio::time::sleep(hold).await;
        hold
    }

    /// Admits one deduction. Past the limit: refused at once without a hold; with
    /// one, it waits its hold in line for a place (and joins the line's end whenever
    /// anyone waits, under the limit too): a place that frees meanwhile goes to the
    /// oldest in line (so a client that sends again the moment it is answered does not
    /// keep the place it just freed ahead of those already waiting), and one still
    /// waiting when its hold ends is refused.
    ///
    /// Cancellation safe: a deduction whose client went away leaves the line, and a
    /// place handed to it as it left is passed on or given back.
    pub async fn enter(&self) -> Result<Permit<'_>, Refused> {
        if self.reject_hold.is_zero() {
            return self.try_enter();
        }
        let (place, mut handed) = oneshot::channel();
        let refused = {
            let mut waiting = self.waiting.lock().expect("line poisoned");
            // Those at the front who left (timed out, went away) leave now.
            while waiting.front().is_some_and(oneshot::Sender::is_closed) {
                waiting.pop_front();
            }
            // A free place is this one's only when nobody waits: those in line go
            // first (`Permit::drop` hands them every place that frees, and the ones the
            // adaptive limit grows by). Under the lock: a place that frees is either
            // seen here or handed to this one.
            let refused = if waiting.is_empty() {
                match self.try_enter() {
                    Ok(permit) => return Ok(permit),
                    Err(refused) => refused,
                }
            } else {
                Refused {
                    limit: self.limit().unwrap_or_default(),
                    held: Duration::ZERO,
                }
            };
            waiting.push_back(place);
            refused
        };
        let held = Held::enter(&self.held);
        let hold = self.hold_for(held.now);
        let mut handed = Handed(&mut handed, self);
        match tokio::time::timeout(hold, &mut *handed.0).await {
            Ok(Ok(())) => Ok(handed.admitted()),
            // Handed a place just as the hold ended: it is this one's.
            _ if handed.take() => Ok(handed.admitted()),
            _ => Err(Refused {
                limit: refused.limit,
                held: hold,
            }),
        }
    }

    /// Refusals on their timer now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
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
    fn try_enter(&self) -> Result<Permit<'_>, Refused> {
        self.count_one().map_err(|limit| Refused {
            limit,
            held: Duration::ZERO,
        })?;
        Ok(Permit {
            admission: self,
            started: Instant::now(),
        })
    }

    /// Counts one more in flight if that stays within the limit; else the limit.
    /// Counted only when under it (a compare-and-set, not an add taken back): a place
    /// that frees is never read as "over the limit" by a passing refusal.
    fn count_one(&self) -> Result<(), usize> {
        let limit = self.limit();
        let counted = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                limit.is_none_or(|limit| n < limit).then_some(n + 1)
            });
        match (counted, limit) {
            (Err(_), Some(limit)) => Err(limit),
            _ => Ok(()),
        }
    }
}

/// A place in line ([`Admission::enter`]): dropped before it was admitted (its client
/// went away), a place handed to it goes to the next in line.
struct Handed<'r, 'a>(&'r mut oneshot::Receiver<()>, &'a Admission);

impl<'a> Handed<'_, 'a> {
    /// Closes the line's end of this place: was a place handed over before that?
    fn take(&mut self) -> bool {
        self.0.close();
        self.0.try_recv().is_ok()
    }

    /// The place handed over: a permit of this one's (the count in flight did not
    /// change when it was handed).
    fn admitted(self) -> Permit<'a> {
        let admission = self.1;
        std::mem::forget(self);
        Permit {
            admission,
            started: Instant::now(),
        }
    }
}

impl Drop for Handed<'_, '_> {
    fn drop(&mut self) {
        if self.take() {
            // A place was handed to this one as it left: pass it on (no deduction ran
            // in it, so the adaptive limit learns nothing from it).
            self.1.release(None);
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.admission.release(Some(self.started.elapsed()));
    }
}

impl Admission {
    /// Gives one place back; `took`: how long the deduction in it took (a sample for
    /// the adaptive limit), none when no deduction ran in it.
    fn release(&self, took: Option<Duration>) {
        // Without a hold there is no line: the place is given back.
        let line =
            (!self.reject_hold.is_zero()).then(|| self.waiting.lock().expect("line poisoned"));
        let in_flight = self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let (Limit::Adaptive(g), Some(took)) = (&self.limit, took) {
            g.lock().expect("limit poisoned").sample(took, in_flight);
        }
        // Every free place (this one, unless the adaptive limit fell below what is in
        // flight; and any it grew by) goes to the oldest still in line. Under the line's
        // lock, taken before this place was given back: a deduction about to join the
        // line sees the place or is handed it, and none overtakes those waiting.
        let Some(mut waiting) = line else { return };
        while let Some(next) = waiting.pop_front() {
            if next.is_closed() {
                continue;
            }
            if self.count_one().is_err() {
                waiting.push_front(next);
                break;
            }
            if next.send(()).is_err() {
                // It left just now: the place is free again for the next.
                self.in_flight.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// The admission layer: a deduction takes a place under the limit, or is refused
/// `429 overloaded` (after its hold in line), before anything below it runs.
pub struct Admit<D> {
    pub admission: Arc<Admission>,
    pub inner: D,
}

impl<D: Deduct> Deduct for Admit<D> {
    async fn deduct(&self, request: &Request<'_>) -> Answer {
        if request.unlimited {
            return self.inner.deduct(request).await;
        }
        let _permit = match self.admission.enter().await {
            Ok(permit) => permit,
            Err(Refused { limit, held }) => {
                return Answer::now(Err(ServiceError::Overloaded { limit, held }));
            }
        };
        self.inner.deduct(request).await
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

    /// A lone refusal is held its jittered hold; while many are held at once, longer
    /// (paced to [`REFUSALS_PER_SECOND`], at most [`LONGEST_HOLD`] times the hold).
    #[tokio::test]
    async fn a_hold_grows_while_many_refusals_are_held() {
        let admission = Admission::new(1, false).with_reject_hold(Duration::from_millis(10));
        let lone = admission.hold_refusal().await;
        assert!((5..=15).contains(&lone.as_millis()), "{lone:?}");
        assert_eq!(admission.held(), 0, "no longer held once answered");
        let many: Vec<_> = (0..2000).map(|_| Held::enter(&admission.held)).collect();
        let paced = admission.hold_refusal().await;
        assert!((20..=60).contains(&paced.as_millis()), "{paced:?}");
        drop(many);
        let off = Admission::new(1, false);
        assert_eq!(off.hold_refusal().await, Duration::ZERO);
    }

    /// Polls `f` once (a zero timeout polls the future before its timer).
    async fn poll_once<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
        tokio::time::timeout(Duration::ZERO, f).await.ok()
    }

    /// With a hold, a deduction past the limit waits in line: a place that frees goes
    /// to the oldest waiting, one that leaves the line passes its turn on, and one still
    /// waiting when its hold ends is refused, saying how long it was held.
    #[tokio::test]
    async fn past_the_limit_the_oldest_in_line_gets_the_next_place() {
        let admission = Admission::new(1, false).with_reject_hold(Duration::from_secs(60));
        let first = admission.try_enter().unwrap();
        let mut second = Box::pin(admission.enter());
        let mut third = Box::pin(admission.enter());
        let mut fourth = Box::pin(admission.enter());
        assert!(poll_once(&mut second).await.is_none(), "in line");
        assert!(poll_once(&mut third).await.is_none(), "in line");
        assert!(poll_once(&mut fourth).await.is_none(), "in line");
        assert_eq!(admission.held(), 3);
        drop(first);
        let permit = poll_once(&mut second).await.expect("the oldest gets it");
        assert!(permit.is_ok());
        assert!(poll_once(&mut fourth).await.is_none(), "not the youngest");
        assert_eq!(admission.in_flight(), 1, "the place was handed over");
        // The third leaves the line: the place freed next goes on to the fourth.
        drop(third);
        drop(permit);
        assert!(poll_once(&mut fourth).await.expect("passed on").is_ok());
        drop(fourth);
        assert_eq!(admission.in_flight(), 0);
        assert_eq!(admission.held(), 0);
        // A place handed to one in line that then goes away passes on to the next.
        let first = admission.try_enter().unwrap();
        let mut second = Box::pin(admission.enter());
        let mut third = Box::pin(admission.enter());
        assert!(poll_once(&mut second).await.is_none(), "in line");
        assert!(poll_once(&mut third).await.is_none(), "in line");
        drop(first); // handed to the second, which has not looked yet
        drop(second); // and goes away
        let permit = poll_once(&mut third).await.expect("passed on");
        assert!(permit.is_ok());
        assert_eq!(admission.in_flight(), 1);
        drop(permit);
        assert_eq!(admission.in_flight(), 0);
        // Nobody frees a place: refused when the hold ends.
        let short = Admission::new(1, false).with_reject_hold(Duration::from_millis(10));
        let _taken = short.try_enter().unwrap();
        let refused = short.enter().await.err().expect("refused");
        assert!(
            refused.held >= Duration::from_millis(5),
            "{:?}",
            refused.held
        );
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

    /// An arrival waits behind those in line, and every free place goes to them: the
    /// one that frees and the ones the adaptive limit grows by.
    #[tokio::test]
    async fn places_the_adaptive_limit_grows_by_go_to_the_line_first() {
        let admission = Admission::new(0, true).with_reject_hold(Duration::from_secs(60));
        let limit = admission.limit().unwrap();
        let mut permits: Vec<_> = (0..limit).map(|_| admission.try_enter().unwrap()).collect();
        let mut line: Vec<_> = (0..3).map(|_| Box::pin(admission.enter())).collect();
        for waiting in &mut line {
            assert!(poll_once(waiting).await.is_none(), "in line");
        }
        // The limit grows by two while three wait: a newcomer does not take those
        // places ahead of them.
        if let Limit::Adaptive(g) = &admission.limit {
            g.lock().unwrap().limit += 2.0;
        }
        let mut newcomer = Box::pin(admission.enter());
        assert!(poll_once(&mut newcomer).await.is_none(), "behind the line");
        // A place frees: it and the two new ones go to the three in line.
        drop(permits.pop());
        for waiting in &mut line {
            let admitted = poll_once(waiting).await.expect("admitted");
            permits.push(admitted.expect("a place"));
        }
        // The freed place's sample may grow the limit again: then the newcomer, next
        // in line, is let in too.
        if let Some(admitted) = poll_once(&mut newcomer).await {
            permits.push(admitted.expect("a place"));
        }
        assert!(permits.len() >= limit + 2);
        assert_eq!(admission.in_flight(), permits.len());
        assert!(admission.in_flight() <= admission.limit().unwrap());
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
