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
//! Computed from the run's record of answers (sent, answered, outcome), never from a
//! total over the run's wall time, so refusals (a sold-out answer, `busy`, a 429)
//! never count as throughput.

use crate::engine::{Answer, Outcome};
use serde::{Deserialize, Serialize};

/// Equal slices of the steady window whose rates give the spread.
pub const SLICES: usize = 10;

/// The smallest relative difference that counts, besides the spreads: two runs of the
/// same strategy on this 2-core machine differ by up to about a tenth.
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
    /// The window, in seconds since the load started.
    pub from_s: f64,
    pub to_s: f64,
}

impl SalesRate {
    /// The interquartile range.
    pub fn spread(&self) -> f64 {
        self.q3 - self.q1
    }

    /// The window's length in seconds.
    pub fn seconds(&self) -> f64 {
        self.to_s - self.from_s
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

/// The rate of the events at `times` (microseconds) inside `[from, to)`, with the
/// spread of its [`SLICES`] slices.
pub fn rate_in(times: impl Iterator<Item = u64>, from: u64, to: u64) -> SalesRate {
    let length = to.saturating_sub(from).max(1);
    let mut slices = [0u64; SLICES];
    let mut sales = 0;
    for t in times.filter(|t| (from..to).contains(t)) {
        let slice = ((t - from) as u128 * SLICES as u128 / length as u128) as usize;
        slices[slice.min(SLICES - 1)] += 1;
        sales += 1;
    }
    let slice_seconds = length as f64 / 1e6 / SLICES as f64;
    let mut rates: Vec<f64> = slices.iter().map(|&n| n as f64 / slice_seconds).collect();
    rates.sort_by(f64::total_cmp);
    SalesRate {
        per_second: sales as f64 / (length as f64 / 1e6),
        q1: quantile(&rates, 0.25),
        q3: quantile(&rates, 0.75),
        sales,
        from_s: from as f64 / 1e6,
        to_s: to as f64 / 1e6,
    }
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
