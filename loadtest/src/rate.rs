//! Sales per second: the one definition every table, chart and claim uses.
//!
//! A comparison's headline is **sales per second while stock never limits**: the
//! deductions answered 200 (of one unit each in the demo, the sweep and the flash
//! sale; `--quantity` makes a deduction more units) whose answers came inside the
//! run's **steady window**, over the window's length. The window leaves out
//! - the ramp-up: until the first wave of requests in flight has been answered (the
//!   `concurrency`-th answer), at most a third of the way to the window's end, because
//!   the first wave starts all at once, on cold connections and caches;
//! - the drain: after the last request was sent, fewer requests are in flight than
//!   the load keeps, so the rate falls whatever the strategy does.
//!
//! Its **spread** is the interquartile range of the rate in [`SLICES`] equal slices of
//! the window: the middle half of what the strategy did from moment to moment. Two
//! figures differ only when they differ by more than both spreads and by more than
//! [`MARGIN`] ([`decisively_larger`]).
//!
//! A run's slices see what changed within it, not what changes between runs: on a
//! shared machine the whole machine speeds up and slows down over tens of seconds, and
//! the same strategy measured again a minute later can land outside its own spread.
//! So a setup can be measured in **rounds**, every strategy once per round, one after
//! another, then round after round ([`pooled`]): the figure is the sales of every
//! round's window over their summed length, the spread the interquartile range of all
//! their slices together, wide enough to hold what moved between the rounds. Strategies
//! measured side by side in the same rounds met the same slow and fast moments.
//!
//! Computed from the run's record of answers (sent, answered, outcome), never from a
//! total over the run's wall time, so refusals (a sold-out answer, `busy`, a 429)
//! never count as throughput.

use crate::engine::{Answer, Outcome};
use serde::{Deserialize, Serialize};

/// Equal slices of the steady window whose rates give the spread.
pub const SLICES: usize = 10;

/// The smallest relative difference that counts, besides the spreads: a gap smaller
/// than this is not called a difference however tight the spreads are.
pub const MARGIN: f64 = 0.15;

/// Sales per second over a run's steady window, with its spread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SalesRate {
    /// Sales answered inside the window, per second of it.
    pub per_second: f64,
    /// The first and third quartile of the rate over the window's slices.
    pub q1: f64,
    pub q3: f64,
    /// Sales answered inside the window.
    pub sales: u64,
    /// The window, in seconds since the load started (of the round whose row is
    /// shown, when the figure pools several rounds).
    pub from_s: f64,
    pub to_s: f64,
    /// Rounds pooled into the figure ([`pooled`]); 1 for a single run.
    #[serde(default = "one_round", skip_serializing_if = "is_one_round")]
    pub rounds: u32,
    /// The windows' summed length, in seconds, when the figure pools several rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooled_s: Option<f64>,
}

fn one_round() -> u32 {
    1
}

fn is_one_round(n: &u32) -> bool {
    *n <= 1
}

impl SalesRate {
    /// The interquartile range.
    pub fn spread(&self) -> f64 {
        self.q3 - self.q1
    }

    /// The window's length in seconds (all the rounds' windows together, when pooled).
    pub fn seconds(&self) -> f64 {
        self.pooled_s.unwrap_or(self.to_s - self.from_s)
    }

    /// What the figure was taken over, for a load's description: `2.3 s steady
    /// window`, or `3 rounds, 6.9 s of steady windows`.
    pub fn window_text(&self) -> String {
        if self.rounds > 1 {
            format!(
                "{} rounds, {:.1} s of steady windows",
                self.rounds,
                self.seconds()
            )
        } else {
            format!("{:.1} s steady window", self.seconds())
        }
    }

    /// `rate (q1–q3)`: the rate and its interquartile range, rounded as every
    /// table (the terminal's, the report's, the book's) rounds them.
    pub fn text(&self) -> String {
        format!(
            "{} ({}–{})",
            round(self.per_second),
            round(self.q1),
            round(self.q3)
        )
    }
}

/// A figure rounded as every table shows it: whole numbers from 100, one decimal
/// from 1, two below ("–" when there is none).
pub fn round(x: f64) -> String {
    if !x.is_finite() {
        "–".to_string()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 1.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// The steady window of a run with `concurrency` requests in flight, from its answers:
/// `(from, to)` in microseconds since the load started.
pub fn steady_window(answers: &[Answer], concurrency: usize) -> (u64, u64) {
    let last_sent = answers.iter().map(|a| a.sent_us).max().unwrap_or(0);
    let mut done: Vec<u64> = answers.iter().map(|a| a.done_us).collect();
    done.sort_unstable();
    let last_done = done.last().copied().unwrap_or(0);
    // The first wave answered: the concurrency-th answer.
    let wave = done
        .get(concurrency.max(1) - 1)
        .copied()
        .unwrap_or(last_done);
    let from = wave.min(last_sent / 3);
    if answers.len() > concurrency && last_sent > from {
        (from, last_sent)
    } else {
        // Everything was sent at once (no more requests than in flight): no steady
        // part to find; the whole run (the window is half-open: to just past the last
        // answer).
        (0, last_done + 1)
    }
}

/// Sales per second over the steady window of a run with `concurrency` in flight.
pub fn sales_rate(answers: &[Answer], concurrency: usize) -> SalesRate {
    let (from, to) = steady_window(answers, concurrency);
    let sold = answers
        .iter()
        .filter(|a| a.outcome == Outcome::Sold)
        .map(|a| a.done_us);
    rate_in(sold, from, to)
}

/// One run's steady window cut into [`SLICES`]: what [`rate_in`] and [`pooled`] are
/// computed from.
struct Slices {
    sales: u64,
    seconds: f64,
    rates: [f64; SLICES],
}

fn slices_in(times: impl Iterator<Item = u64>, from: u64, to: u64) -> Slices {
    let length = to.saturating_sub(from).max(1);
    let mut counts = [0u64; SLICES];
    let mut sales = 0;
    for t in times.filter(|t| (from..to).contains(t)) {
        let slice = ((t - from) as u128 * SLICES as u128 / length as u128) as usize;
        counts[slice.min(SLICES - 1)] += 1;
        sales += 1;
    }
    let seconds = length as f64 / 1e6;
    Slices {
        sales,
        seconds,
        rates: counts.map(|n| n as f64 / (seconds / SLICES as f64)),
    }
}

/// The sales and the spread of several windows' slices together.
fn rate_of(windows: &[Slices], from: u64, to: u64) -> SalesRate {
    let sales = windows.iter().map(|w| w.sales).sum();
    let seconds: f64 = windows.iter().map(|w| w.seconds).sum();
    let mut rates: Vec<f64> = windows.iter().flat_map(|w| w.rates).collect();
    rates.sort_by(f64::total_cmp);
    SalesRate {
        per_second: sales as f64 / seconds.max(1e-6),
        q1: quantile(&rates, 0.25),
        q3: quantile(&rates, 0.75),
        sales,
        from_s: from as f64 / 1e6,
        to_s: to as f64 / 1e6,
        rounds: windows.len().max(1) as u32,
        pooled_s: (windows.len() > 1).then_some(seconds),
    }
}

/// The rate of the events at `times` (microseconds) inside `[from, to)`, with the
/// spread of its [`SLICES`] slices.
pub fn rate_in(times: impl Iterator<Item = u64>, from: u64, to: u64) -> SalesRate {
    rate_of(&[slices_in(times, from, to)], from, to)
}

/// Sales per second of one setup measured in several rounds, each round's answers
/// with the concurrency it kept: every round's steady window, their sales over their
/// summed length, the spread over all their slices. `shown` is the round whose window
/// the figure names (the one whose row is shown).
pub fn pooled(rounds: &[(&[Answer], usize)], shown: usize) -> SalesRate {
    let windows: Vec<(Slices, (u64, u64))> = (rounds.iter())
        .map(|(answers, concurrency)| {
            let (from, to) = steady_window(answers, *concurrency);
            let sold = (answers.iter())
                .filter(|a| a.outcome == Outcome::Sold)
                .map(|a| a.done_us);
            (slices_in(sold, from, to), (from, to))
        })
        .collect();
    let (from, to) = windows.get(shown).map_or((0, 0), |(_, w)| *w);
    let slices: Vec<Slices> = windows.into_iter().map(|(s, _)| s).collect();
    rate_of(&slices, from, to)
}

/// The `q` quantile of sorted values, interpolated between neighbours.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n => {
            let at = q * (n - 1) as f64;
            let (low, high) = (at.floor() as usize, at.ceil() as usize);
            sorted[low] + (sorted[high] - sorted[low]) * (at - low as f64)
        }
    }
}

/// Whether `a` is larger than `b` by more than both spreads and by more than
/// [`MARGIN`] of `b`.
pub fn decisively_larger(a: &SalesRate, b: &SalesRate) -> bool {
    let gap = a.per_second - b.per_second;
    gap > a.spread() && gap > b.spread() && a.per_second > b.per_second * (1.0 + MARGIN)
}

/// How many times `reference` a figure is, with the range its spread allows: from its
/// q1 over the reference's q3 to its q3 over the reference's q1. Two runs' ratios
/// agree when their ranges overlap.
pub fn ratio(a: &SalesRate, reference: &SalesRate) -> Ratio {
    let over = |x: f64, y: f64| x / y.max(1e-9);
    Ratio {
        times: over(a.per_second, reference.per_second),
        low: over(a.q1, reference.q3),
        high: over(a.q3, reference.q1),
    }
}

/// A ratio of two figures and its range ([`ratio`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    pub times: f64,
    pub low: f64,
    pub high: f64,
}

impl Ratio {
    /// `7.8× (7.0–8.4)`.
    pub fn text(&self) -> String {
        format!(
            "{}× ({}–{})",
            round(self.times),
            round(self.low),
            round(self.high)
        )
    }
}

/// `Some(true)` when `a` is decisively larger, `Some(false)` when `b` is, `None` when
/// neither: within the spreads or the margin.
pub fn compare(a: &SalesRate, b: &SalesRate) -> Option<bool> {
    if decisively_larger(a, b) {
        Some(true)
    } else if decisively_larger(b, a) {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(outcome: Outcome, sent_ms: u64, done_ms: u64) -> Answer {
        Answer {
            outcome,
            request_id: String::new(),
            attempts: 1,
            micros: (done_ms - sent_ms) * 1000,
            instance: 0,
            sent_us: sent_ms * 1000,
            batch_size: None,
            retries: 0,
            done_us: done_ms * 1000,
            error: None,
        }
    }

    /// A closed loop of `c` in flight, each request `latency_ms` long, for `n` requests.
    fn closed_loop(
        c: usize,
        latency_ms: u64,
        n: usize,
        outcome: impl Fn(usize) -> Outcome,
    ) -> Vec<Answer> {
        (0..n)
            .map(|i| {
                let wave = (i / c) as u64;
                answer(outcome(i), wave * latency_ms, (wave + 1) * latency_ms)
            })
            .collect()
    }

    #[test]
    fn the_window_leaves_out_the_first_wave_and_the_drain() {
        // 10 in flight, 10 ms each, 1000 requests: 100 waves, the last sent at 990 ms.
        let answers = closed_loop(10, 10, 1000, |_| Outcome::Sold);
        assert_eq!(steady_window(&answers, 10), (10_000, 990_000));
        let rate = sales_rate(&answers, 10);
        // 98 waves answered at 10..=980 ms inside [10, 990): 980 sales in 0.98 s.
        assert_eq!(rate.sales, 980);
        assert!((rate.per_second - 1000.0).abs() < 1e-6, "{rate:?}");
        assert!(rate.spread() <= 0.1 * rate.per_second, "{rate:?}");
    }

    #[test]
    fn refusals_are_not_sales() {
        // Nine in ten answers are refusals: a tenth of the answers per second.
        let answers = closed_loop(10, 10, 1000, |i| {
            if i % 10 == 0 {
                Outcome::Sold
            } else {
                Outcome::SoldOut
            }
        });
        let rate = sales_rate(&answers, 10);
        assert!((rate.per_second - 100.0).abs() < 1e-6, "{rate:?}");
    }

    #[test]
    fn a_stall_widens_the_spread() {
        // Sales stop for the middle half of the run: the rate halves, the spread is
        // as wide as the rate itself.
        let steady = closed_loop(10, 10, 1000, |_| Outcome::Sold);
        let stalled = closed_loop(10, 10, 1000, |i| {
            if (250..750).contains(&i) {
                Outcome::busy()
            } else {
                Outcome::Sold
            }
        });
        let (a, b) = (sales_rate(&steady, 10), sales_rate(&stalled, 10));
        assert!(b.spread() > 0.9 * a.per_second, "{b:?}");
        assert!(b.per_second < 0.6 * a.per_second, "{b:?}");
        // Twice the rate, but the stalled run's spread covers the gap: no verdict.
        assert_eq!(compare(&a, &b), None);
    }

    #[test]
    fn a_difference_counts_only_beyond_the_spreads_and_the_margin() {
        let rate = |per_second: f64, spread: f64| SalesRate {
            per_second,
            q1: per_second - spread / 2.0,
            q3: per_second + spread / 2.0,
            ..SalesRate::default()
        };
        assert_eq!(
            compare(&rate(2000.0, 100.0), &rate(1000.0, 100.0)),
            Some(true)
        );
        assert_eq!(
            compare(&rate(1000.0, 100.0), &rate(2000.0, 100.0)),
            Some(false)
        );
        // 10 % apart: within the margin, however tight the spreads.
        assert_eq!(compare(&rate(1100.0, 1.0), &rate(1000.0, 1.0)), None);
        // Twice as fast, but one spread is wider than the gap.
        assert_eq!(compare(&rate(2000.0, 1500.0), &rate(1000.0, 100.0)), None);
    }

    #[test]
    fn a_ratio_spans_what_both_spreads_allow() {
        let rate = |per_second: f64, spread: f64| SalesRate {
            per_second,
            q1: per_second - spread / 2.0,
            q3: per_second + spread / 2.0,
            ..SalesRate::default()
        };
        let r = ratio(&rate(9000.0, 1000.0), &rate(1000.0, 100.0));
        assert!((r.times - 9.0).abs() < 1e-9, "{r:?}");
        // q1 8500 over q3 1050, q3 9500 over q1 950.
        assert!((r.low - 8500.0 / 1050.0).abs() < 1e-9, "{r:?}");
        assert!((r.high - 10.0).abs() < 1e-9, "{r:?}");
        assert_eq!(r.text(), "9.0× (8.1–10.0)");
    }

    #[test]
    fn rounds_pool_their_windows_and_their_spread_holds_what_moved_between_them() {
        // The same load three times, the machine a third slower in the second round:
        // each round's own spread is tight, and the second lands outside the others'.
        let fast = closed_loop(10, 10, 1000, |_| Outcome::Sold);
        let slow = closed_loop(10, 15, 1000, |_| Outcome::Sold);
        let (a, b) = (sales_rate(&fast, 10), sales_rate(&slow, 10));
        assert!(b.q3 < a.q1, "{a:?} {b:?}");
        let rounds = [(&fast[..], 10), (&slow[..], 10), (&fast[..], 10)];
        let pooled = pooled(&rounds, 1);
        assert_eq!(pooled.rounds, 3);
        assert_eq!(pooled.sales, 2 * a.sales + b.sales);
        let seconds = 2.0 * a.seconds() + b.seconds();
        assert!((pooled.seconds() - seconds).abs() < 1e-9, "{pooled:?}");
        assert!((pooled.per_second - pooled.sales as f64 / seconds).abs() < 1e-6);
        // The pooled spread reaches from the slow round to the fast ones.
        assert!(pooled.q1 <= b.q3 && pooled.q3 >= a.q1, "{pooled:?}");
        // The window named is the shown round's.
        assert_eq!((pooled.from_s, pooled.to_s), (b.from_s, b.to_s));
        // One round pooled is that round.
        assert_eq!(super::pooled(&[(&fast[..], 10)], 0), a);
    }

    #[test]
    fn a_run_sent_all_at_once_is_measured_whole() {
        // No more requests than in flight, sent a few microseconds apart.
        let answers: Vec<Answer> = (0..5)
            .map(|i| Answer {
                sent_us: i,
                ..answer(Outcome::Sold, 0, 10 + i)
            })
            .collect();
        assert_eq!(steady_window(&answers, 5), (0, 14_001));
        assert_eq!(sales_rate(&answers, 5).sales, 5);
    }
}
