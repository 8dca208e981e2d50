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
//! the window: the middle half of what the strategy did from moment to moment.
//!
//! A run's slices see what changed within it, not what changes between runs: on a
//! shared machine the whole machine speeds up and slows down over tens of seconds, and
//! the same strategy measured again a minute later can land outside its own spread.
//! So a setup is measured in **rounds**, every strategy once per round, one after
//! another, then round after round, every other round in reverse order
//! ([`crate::runner::in_rounds`], [`pooled`]): the figure is the sales of every
//! round's window over their summed length, the spread the interquartile range of all
//! their slices together, and each round's own rate is kept. Strategies measured side
//! by side in the same rounds met the same slow and fast moments.
//!
//! Two figures differ only by **the rule** ([`lead`], [`decisive`]): measured side by
//! side, each round gives one figure's lead over the other; every round's lead points
//! the same way, the lead is more than [`MARGIN`], and either every round's lead is or
//! the lead is larger than what the rounds' leads moved. Figures of one round each
//! are compared over their quartiles instead.
//!
//! Computed from the run's record of answers (sent, answered, outcome), never from a
//! total over the run's wall time, so refusals (a sold-out answer, `busy`, a 429)
//! never count as throughput.

use crate::engine::{Answer, Fired, Outcome};
use serde::{Deserialize, Serialize};

/// Equal slices of the steady window whose rates give the spread.
pub const SLICES: usize = 10;

/// The smallest lead that counts, besides what the figures moved: a lead smaller
/// than this is not called a difference however steady the figures were.
pub const MARGIN: f64 = 0.15;

/// Sales per second over a run's steady window, with its spread.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    /// Sales per second of each round's own window, in the order the rounds ran,
    /// when the figure pools several rounds: what a claim compares round by round
    /// ([`decisively_larger`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_round: Vec<f64>,
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

    /// What the figure was taken over ([`windows_text`]).
    pub fn window_text(&self) -> String {
        windows_text(&[self])
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

/// What a claim shows of a figure: `445 (432–475)`, and when it was measured in
/// rounds each round's rate, in the order they ran: `445 (432–475; rounds 440, 380,
/// 470)`, so a reader sees every round's lead ([`lead`]).
pub fn judged_text(rate: &SalesRate) -> String {
    if rate.per_round.len() < 2 {
        return rate.text();
    }
    let rounds: Vec<String> = rate.per_round.iter().map(|r| round(*r)).collect();
    format!(
        "{} ({}–{}; rounds {})",
        round(rate.per_second),
        round(rate.q1),
        round(rate.q3),
        rounds.join(", ")
    )
}

/// What figures compared side by side were taken over, for a load's description:
/// `a 2.3 s steady window`, `steady windows of 1.7–2.4 s` when they differ, `3
/// rounds' steady windows, 6.9 s in all` (or `4.9–7.2 s in all`) when pooled, `1 to 3
/// rounds' steady windows, 2.3–6.9 s in all` when some were measured in fewer rounds.
pub fn windows_text(rates: &[&SalesRate]) -> String {
    if rates.is_empty() {
        return String::new();
    }
    let seconds = |f: fn(f64, f64) -> f64, init: f64| {
        let x = rates.iter().map(|r| r.seconds()).fold(init, f);
        format!("{x:.1}")
    };
    let (shortest, longest) = (seconds(f64::min, f64::INFINITY), seconds(f64::max, 0.0));
    let alike = shortest == longest;
    let span = if alike {
        longest
    } else {
        format!("{shortest}–{longest}")
    };
    let fewest = rates.iter().map(|r| r.rounds).min().unwrap_or(1);
    match rates.iter().map(|r| r.rounds).max().unwrap_or(1) {
        1 if alike => format!("a {span} s steady window"),
        1 => format!("steady windows of {span} s"),
        rounds if rounds == fewest => format!("{rounds} rounds' steady windows, {span} s in all"),
        rounds => format!("{fewest} to {rounds} rounds' steady windows, {span} s in all"),
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

/// How a run kept its load, which decides where its steady window starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// A closed loop keeping this many requests in flight: the window starts once the
    /// first wave, all sent at once, has been answered.
    Closed(usize),
    /// An open loop starting requests at a rate: no first wave; the window starts at
    /// the first answer.
    Open,
}

/// The steady window of a run kept at `pace`, from its answers: `(from, to)` in
/// microseconds since the load started. It ends when the last request was sent
/// (after that, a closed loop has fewer in flight and an open loop only drains what
/// queued) and starts at most a third of the way there.
pub fn steady_window(answers: &[Answer], pace: Pace) -> (u64, u64) {
    let last_sent = answers.iter().map(|a| a.sent_us).max().unwrap_or(0);
    let mut done: Vec<u64> = answers.iter().map(|a| a.done_us).collect();
    done.sort_unstable();
    let last_done = done.last().copied().unwrap_or(0);
    let (start, sent_over_time) = match pace {
        // The first wave answered: the concurrency-th answer; more requests than
        // in flight, or everything was sent at once.
        Pace::Closed(concurrency) => (
            done.get(concurrency.max(1) - 1).copied(),
            answers.len() > concurrency,
        ),
        Pace::Open => (done.first().copied(), true),
    };
    let from = start.unwrap_or(last_done).min(last_sent / 3);
    if sent_over_time && last_sent > from {
        (from, last_sent)
    } else {
        // Everything was sent at once (no more requests than in flight): no steady
        // part to find; the whole run (the window is half-open: to just past the last
        // answer).
        (0, last_done + 1)
    }
}

/// Sales per second over the steady window of a run kept at `pace`.
pub fn sales_rate(answers: &[Answer], pace: Pace) -> SalesRate {
    let (from, to) = steady_window(answers, pace);
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
    let (mut q1, mut q3) = (quantile(&rates, 0.25), quantile(&rates, 0.75));
    // A slice's rate is known to one sale in it: with few sales per slice the
    // quartiles can fall on the same count and the spread would read as none. It is
    // never narrower than one sale per slice, around the quartiles' middle (a run that
    // sold nothing has none).
    let resolution = (SLICES * windows.len()) as f64 / seconds.max(1e-6);
    if sales > 0 && q3 - q1 < resolution {
        let middle = (q1 + q3) / 2.0;
        (q1, q3) = (
            (middle - resolution / 2.0).max(0.0),
            middle + resolution / 2.0,
        );
    }
    let per_round = match windows {
        [] | [_] => Vec::new(),
        _ => windows
            .iter()
            .map(|w| w.sales as f64 / w.seconds.max(1e-6))
            .collect(),
    };
    SalesRate {
        per_second: sales as f64 / seconds.max(1e-6),
        q1,
        q3,
        sales,
        from_s: from as f64 / 1e6,
        to_s: to as f64 / 1e6,
        rounds: windows.len().max(1) as u32,
        pooled_s: (windows.len() > 1).then_some(seconds),
        per_round,
    }
}

/// The rate of the events at `times` (microseconds) inside `[from, to)`, with the
/// spread of its [`SLICES`] slices.
pub fn rate_in(times: impl Iterator<Item = u64>, from: u64, to: u64) -> SalesRate {
    rate_of(&[slices_in(times, from, to)], from, to)
}

/// Sales per second of one setup measured in several rounds, each round's answers
/// with the pace it kept: every round's steady window, their sales over their
/// summed length, the spread over all their slices. `shown` is the round whose window
/// the figure names (the one whose row is shown).
pub fn pooled(rounds: &[(&[Answer], Pace)], shown: usize) -> SalesRate {
    let windows: Vec<(Slices, (u64, u64))> = rounds
        .iter()
        .map(|(answers, pace)| {
            let (from, to) = steady_window(answers, *pace);
            let sold = answers
                .iter()
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

/// Whether `a` is decisively larger than `b`: its [`lead`] over `b` is
/// [`decisive`].
pub fn decisively_larger(a: &SalesRate, b: &SalesRate) -> bool {
    lead(a, b).is_some_and(|lead| decisive(&lead))
}

/// The lead of `a` over `b` as a claim reads it: how many times `b` it sold, and the
/// smallest and largest lead it could have had.
///
/// Measured side by side in the same rounds, each round gives its own lead (`a`'s
/// rate in that round over `b`'s). The lead is their geometric mean, so it always
/// lies between the smallest and the largest of them, whatever the rounds' window
/// lengths. A round in which `b` sold nothing and `a` did gives an infinite lead; one
/// in which neither sold, no number, and the rounds then do not agree.
///
/// Measured once each, not side by side: the pooled figures' ratio, ranging from
/// `a`'s q1 over `b`'s q3 to its q3 over `b`'s q1. `None` for figures measured in
/// different numbers of rounds: they cannot be compared round by round, nor as two
/// single windows.
pub fn lead(a: &SalesRate, b: &SalesRate) -> Option<Ratio> {
    match (a.per_round.len(), b.per_round.len()) {
        (0, 0) => Some(Ratio {
            times: a.per_second / b.per_second,
            low: a.q1 / b.q3,
            high: a.q3 / b.q1,
        }),
        (n, m) if n == m => {
            let leads: Vec<f64> = a
                .per_round
                .iter()
                .zip(&b.per_round)
                .map(|(a, b)| a / b)
                .collect();
            let low = match leads.iter().any(|l| l.is_nan()) {
                true => f64::NAN,
                false => leads.iter().copied().fold(f64::INFINITY, f64::min),
            };
            let logs: f64 = leads.iter().map(|l| l.ln()).sum();
            Some(Ratio {
                times: (logs / leads.len() as f64).exp(),
                low,
                high: leads.iter().copied().fold(0.0, f64::max),
            })
        }
        _ => None,
    }
}

/// The rule every claim is judged by. A lead is decisive when
/// 1. every round agrees: even its smallest lead is above 1;
/// 2. it is more than [`MARGIN`];
/// 3. and the rounds agree on its size: every round leads by more than [`MARGIN`], or
///    the lead is larger than what it moved between rounds (its largest over its
///    smallest, [`moved`]). A lead whose rounds range from a little to a lot, and not
///    by more than the margin in each, is not known.
pub fn decisive(lead: &Ratio) -> bool {
    lead.low > 1.0
        && lead.times > 1.0 + MARGIN
        && (lead.low > 1.0 + MARGIN || lead.times > moved(lead.low, lead.high))
}

/// [`decisive`] in words, for the pages that show claims: the one sentence every
/// report and book page gives under its claims.
pub fn rule_text() -> String {
    let margin = MARGIN * 100.0;
    format!(
        "A speed claim compares sales per second measured side by side, in the same \
         rounds; each round gives a lead, one figure's rate over the other's. It is \
         confirmed or refuted only when every round puts the two in the same order, the \
         lead (the rounds' geometric mean) is more than {margin:.0} %, and either every \
         round leads by more than {margin:.0} % or the lead is larger than it moved \
         between rounds (the largest round's lead over the smallest); otherwise it is \
         inconclusive. Figures measured in one round each are compared over their \
         quartiles instead."
    )
}

/// How much something that ranged from `low` to `high` moved, as a factor: `high /
/// low`; 1 when it did not move, infinite when only its lowest is zero or its highest
/// is infinite.
pub fn moved(low: f64, high: f64) -> f64 {
    if high <= low {
        1.0
    } else if low > 0.0 && high.is_finite() {
        high / low
    } else {
        f64::INFINITY
    }
}

/// How many times `reference` a figure is, with the range its spread allows: from its
/// q1 over the reference's q3 to its q3 over the reference's q1. Two runs' ratios
/// agree when their ranges overlap.
pub fn ratio(a: &SalesRate, reference: &SalesRate) -> Ratio {
    // Over a reference that sold nothing the ratio is no number (shown "–").
    let over = |x: f64, y: f64| if y > 0.0 { x / y } else { f64::NAN };
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
/// neither ([`decisive`]): the rounds disagree, or the lead is within the margin or
/// within what it moved.
pub fn compare(a: &SalesRate, b: &SalesRate) -> Option<bool> {
    if decisively_larger(a, b) {
        Some(true)
    } else if decisively_larger(b, a) {
        Some(false)
    } else {
        None
    }
}

/// A run's rates, kept here (the engine records; this module reads what it recorded).
impl Fired {
    /// Sales per second over the steady window, with its spread.
    pub fn sales(&self) -> SalesRate {
        sales_rate(&self.record, self.pace())
    }

    /// How the run kept its load.
    pub fn pace(&self) -> Pace {
        if self.open_loop {
            Pace::Open
        } else {
            Pace::Closed(self.concurrency)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(outcome: Outcome, sent_ms: u64, done_ms: u64) -> Answer {
        Answer {
            outcome,
            request_id: String::new(),
            items: vec![(1, 1)],
            duplicate: false,
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
        assert_eq!(steady_window(&answers, Pace::Closed(10)), (10_000, 990_000));
        let rate = sales_rate(&answers, Pace::Closed(10));
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
        let rate = sales_rate(&answers, Pace::Closed(10));
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
        let (a, b) = (
            sales_rate(&steady, Pace::Closed(10)),
            sales_rate(&stalled, Pace::Closed(10)),
        );
        assert!(b.spread() > 0.9 * a.per_second, "{b:?}");
        assert!(b.per_second < 0.6 * a.per_second, "{b:?}");
        // Twice the rate, but the stalled run's spread covers the gap: no verdict.
        assert_eq!(compare(&a, &b), None);
    }

    /// A figure with a spread of `spread` around it.
    fn rate(per_second: f64, spread: f64) -> SalesRate {
        SalesRate {
            per_second,
            q1: per_second - spread / 2.0,
            q3: per_second + spread / 2.0,
            ..SalesRate::default()
        }
    }

    #[test]
    fn a_difference_counts_only_beyond_what_each_moved_and_the_margin() {
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
        // Twice as fast, but its window reached down to the other's.
        assert_eq!(compare(&rate(2000.0, 1900.0), &rate(1000.0, 100.0)), None);
        // Its worst slices more than 15 % above the other's best: however wide.
        assert_eq!(
            compare(&rate(2000.0, 1500.0), &rate(1000.0, 100.0)),
            Some(true)
        );
    }

    /// A figure pooled from rounds of these rates, each round's window as long, with
    /// a tight spread within the windows.
    fn in_rounds(per_round: &[f64]) -> SalesRate {
        let per_second = per_round.iter().sum::<f64>() / per_round.len() as f64;
        SalesRate {
            rounds: per_round.len() as u32,
            per_round: per_round.to_vec(),
            ..rate(per_second, 10.0)
        }
    }

    #[test]
    fn rounds_that_agree_decisively_confirm() {
        // Twice as fast in every round.
        let (a, b) = (
            in_rounds(&[2000.0, 1800.0, 2100.0]),
            in_rounds(&[1000.0, 900.0, 1050.0]),
        );
        assert_eq!(compare(&a, &b), Some(true));
        assert_eq!(compare(&b, &a), Some(false));
    }

    #[test]
    fn rounds_that_disagree_are_inconclusive() {
        // Far apart pooled, but the second round put them the other way round.
        let (a, b) = (
            in_rounds(&[3000.0, 900.0, 3000.0]),
            in_rounds(&[1000.0, 1000.0, 1000.0]),
        );
        assert!(a.per_second > 2.0 * b.per_second, "{a:?}");
        let lead = lead(&a, &b).expect("side by side");
        assert!(lead.low < 1.0, "{lead:?}");
        assert_eq!(compare(&a, &b), None);
    }

    #[test]
    fn a_lead_is_read_round_by_round() {
        let lead = lead(
            &in_rounds(&[2000.0, 900.0, 3000.0]),
            &in_rounds(&[1000.0, 600.0, 1000.0]),
        )
        .expect("side by side");
        assert!((lead.low - 1.5).abs() < 1e-9, "{lead:?}");
        assert!((lead.high - 3.0).abs() < 1e-9, "{lead:?}");
        // The rounds' leads 2, 1.5 and 3: their geometric mean.
        assert!((lead.times - 9f64.cbrt()).abs() < 1e-9, "{lead:?}");
        // Measured once each: over the quartiles, as the tables' ratios.
        let (a, b) = (rate(2000.0, 100.0), rate(1000.0, 100.0));
        assert_eq!(super::lead(&a, &b), Some(ratio(&a, &b)));
    }

    #[test]
    fn a_lead_that_moved_more_than_itself_is_inconclusive() {
        // Ahead in every round, but the lead went from 1.06 to 2 between rounds:
        // more than the pooled lead itself.
        let (a, b) = (
            in_rounds(&[2000.0, 900.0, 2000.0]),
            in_rounds(&[1000.0, 850.0, 1000.0]),
        );
        let lead = lead(&a, &b).expect("side by side");
        assert!(
            lead.low > 1.0 && lead.times < moved(lead.low, lead.high),
            "{lead:?}"
        );
        assert_eq!(compare(&a, &b), None);
        // Ahead in every round, steady, but by less than the margin.
        let (a, b) = (
            in_rounds(&[1100.0, 1100.0, 1100.0]),
            in_rounds(&[1000.0, 1000.0, 1000.0]),
        );
        assert_eq!(compare(&a, &b), None);
    }

    #[test]
    fn every_round_past_the_margin_decides_however_the_lead_moved() {
        // Twice as fast in three rounds, ten times in the fourth: the lead moved more
        // than itself, but every round led by more than the margin.
        let (a, b) = (
            in_rounds(&[2000.0, 2000.0, 2000.0, 10_000.0]),
            in_rounds(&[1000.0, 1000.0, 1000.0, 1000.0]),
        );
        assert_eq!(compare(&a, &b), Some(true));
        // The slower sold nothing in one round: an infinite lead there, no doubt.
        let (a, b) = (
            in_rounds(&[500.0, 480.0, 510.0]),
            in_rounds(&[70.0, 0.0, 75.0]),
        );
        assert_eq!(compare(&a, &b), Some(true));
        assert_eq!(compare(&b, &a), Some(false));
        // Neither sold in one round: that round agrees with nothing.
        let (a, b) = (
            in_rounds(&[500.0, 0.0, 510.0]),
            in_rounds(&[70.0, 0.0, 75.0]),
        );
        assert_eq!(compare(&a, &b), None);
    }

    #[test]
    fn the_lead_lies_between_the_rounds_leads_whatever_the_windows() {
        // Pooled over windows of different lengths, the figures' ratio can leave the
        // rounds' range; the lead cannot.
        // Here 1 % ahead in every round; pooled, the fast rounds weigh more in `a`'s
        // figure (longer windows) than in `b`'s, and the figures are 80 % apart.
        let (a, b) = (
            SalesRate {
                per_second: 900.0,
                ..in_rounds(&[1010.0, 202.0, 1010.0])
            },
            SalesRate {
                per_second: 500.0,
                ..in_rounds(&[1000.0, 200.0, 1000.0])
            },
        );
        let lead = lead(&a, &b).expect("side by side");
        assert!((lead.times - 1.01).abs() < 1e-9, "{lead:?}");
        assert!(
            lead.low <= lead.times && lead.times <= lead.high,
            "{lead:?}"
        );
        assert_eq!(compare(&a, &b), None);
    }

    #[test]
    fn a_single_window_with_an_empty_quartile_can_still_be_beaten() {
        // Measured once each: the slow figure's first quartile is 0 (a slice with no
        // sale), the fast one seven times as fast.
        let slow = SalesRate {
            per_second: 90.0,
            q1: 0.0,
            q3: 150.0,
            ..SalesRate::default()
        };
        let fast = rate(650.0, 100.0);
        assert_eq!(compare(&fast, &slow), Some(true));
        assert_eq!(compare(&slow, &fast), Some(false));
    }

    #[test]
    fn a_machine_that_moves_both_figures_leaves_the_lead_alone() {
        // Five times as fast in every round, though the machine halved both in the
        // second: each figure moved twice over, the lead not at all.
        let (a, b) = (
            in_rounds(&[5000.0, 2500.0, 5000.0]),
            in_rounds(&[1000.0, 500.0, 1000.0]),
        );
        assert_eq!(compare(&a, &b), Some(true));
        // A strategy that sold nothing, beside one that sold.
        let none = in_rounds(&[0.0, 0.0, 0.0]);
        assert_eq!(compare(&in_rounds(&[10.0, 12.0, 11.0]), &none), Some(true));
        // A round in which neither sold agrees with nothing.
        let (a, b) = (
            in_rounds(&[0.0, 1200.0, 1100.0]),
            in_rounds(&[0.0, 100.0, 100.0]),
        );
        assert_eq!(compare(&a, &b), None);
    }

    #[test]
    fn figures_not_measured_in_the_same_rounds_are_inconclusive() {
        let a = in_rounds(&[3000.0, 3000.0, 3000.0]);
        assert_eq!(compare(&a, &in_rounds(&[1000.0, 1000.0])), None);
        assert_eq!(compare(&a, &rate(1000.0, 1.0)), None);
    }

    #[test]
    fn a_factor_moved_from_its_lowest_to_its_highest() {
        assert!((moved(900.0, 1200.0) - 1200.0 / 900.0).abs() < 1e-9);
        assert_eq!(moved(0.0, 1000.0), f64::INFINITY);
        assert_eq!(moved(0.0, 0.0), 1.0);
        assert_eq!(moved(f64::INFINITY, f64::INFINITY), 1.0);
    }

    #[test]
    fn a_claim_shows_every_round() {
        let a = in_rounds(&[440.0, 380.0, 470.0]);
        assert_eq!(judged_text(&a), "430 (425–435; rounds 440, 380, 470)");
        assert_eq!(judged_text(&rate(1000.0, 100.0)), "1000 (950–1050)");
    }

    #[test]
    fn a_ratio_spans_what_both_spreads_allow() {
        let r = ratio(&rate(9000.0, 1000.0), &rate(1000.0, 100.0));
        assert!((r.times - 9.0).abs() < 1e-9, "{r:?}");
        // q1 8500 over q3 1050, q3 9500 over q1 950.
        assert!((r.low - 8500.0 / 1050.0).abs() < 1e-9, "{r:?}");
        assert!((r.high - 10.0).abs() < 1e-9, "{r:?}");
        assert_eq!(r.text(), "9.0× (8.1–10.0)");
    }

    #[test]
    fn a_load_states_every_window_its_figures_were_taken_over() {
        let window = |from_s: f64, to_s: f64, rounds: u32, pooled_s: Option<f64>| SalesRate {
            from_s,
            to_s,
            rounds,
            pooled_s,
            ..SalesRate::default()
        };
        let (a, b) = (window(0.1, 2.4, 1, None), window(0.8, 2.5, 1, None));
        assert_eq!(windows_text(&[&a]), "a 2.3 s steady window");
        assert_eq!(windows_text(&[&a, &a]), "a 2.3 s steady window");
        assert_eq!(windows_text(&[&a, &b]), "steady windows of 1.7–2.3 s");
        let pooled = window(0.1, 2.4, 3, Some(6.9));
        assert_eq!(
            windows_text(&[&pooled]),
            "3 rounds' steady windows, 6.9 s in all"
        );
        let shorter = window(0.8, 2.5, 3, Some(5.1));
        assert_eq!(
            windows_text(&[&pooled, &shorter]),
            "3 rounds' steady windows, 5.1–6.9 s in all"
        );
        assert_eq!(
            windows_text(&[&pooled, &a]),
            "1 to 3 rounds' steady windows, 2.3–6.9 s in all"
        );
    }

    #[test]
    fn rounds_pool_their_windows_and_their_spread_holds_what_moved_between_them() {
        // The same load three times, the machine a third slower in the second round:
        // each round's own spread is tight, and the second lands outside the others'.
        let fast = closed_loop(10, 10, 1000, |_| Outcome::Sold);
        let slow = closed_loop(10, 15, 1000, |_| Outcome::Sold);
        let (a, b) = (
            sales_rate(&fast, Pace::Closed(10)),
            sales_rate(&slow, Pace::Closed(10)),
        );
        assert!(b.q3 < a.q1, "{a:?} {b:?}");
        let rounds = [
            (&fast[..], Pace::Closed(10)),
            (&slow[..], Pace::Closed(10)),
            (&fast[..], Pace::Closed(10)),
        ];
        let pooled = pooled(&rounds, 1);
        assert_eq!(pooled.rounds, 3);
        assert_eq!(pooled.sales, 2 * a.sales + b.sales);
        let seconds = 2.0 * a.seconds() + b.seconds();
        assert!((pooled.seconds() - seconds).abs() < 1e-9, "{pooled:?}");
        assert!((pooled.per_second - pooled.sales as f64 / seconds).abs() < 1e-6);
        // The pooled spread reaches from the slow round to the fast ones.
        assert!(pooled.q1 <= b.q3 && pooled.q3 >= a.q1, "{pooled:?}");
        // Each round's own rate, in the order they ran.
        let own: Vec<f64> = [&a, &b, &a].map(|r| r.per_second).to_vec();
        assert_eq!(pooled.per_round.len(), 3);
        for (pooled, own) in pooled.per_round.iter().zip(own) {
            assert!((pooled - own).abs() < 1e-6, "{pooled} {own}");
        }
        // The window named is the shown round's.
        assert_eq!((pooled.from_s, pooled.to_s), (b.from_s, b.to_s));
        // One round pooled is that round.
        assert_eq!(super::pooled(&[(&fast[..], Pace::Closed(10))], 0), a);
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
        assert_eq!(steady_window(&answers, Pace::Closed(5)), (0, 14_001));
        assert_eq!(sales_rate(&answers, Pace::Closed(5)).sales, 5);
    }

    #[test]
    fn an_open_loop_is_measured_until_its_last_request_not_through_its_drain() {
        // 100 requests started 10 ms apart (1 s), each queued longer than the last:
        // the service falls behind and answers the last one 2 s after it was sent.
        let answers: Vec<Answer> = (0..100)
            .map(|i| answer(Outcome::Sold, i * 10, 50 + i * 30))
            .collect();
        // Fewer answers than an open loop's in-flight ceiling would allow: still a
        // window from the first answer to the last request sent, the drain left out.
        let (from, to) = steady_window(&answers, Pace::Open);
        assert_eq!((from, to), (50_000, 990_000));
        let rate = sales_rate(&answers, Pace::Open);
        // Answered at 50, 80, ..., 980 ms: 32 of them inside [50, 990).
        assert_eq!(rate.sales, 32);
        // Taken as a closed loop of 8000 in flight, it would be the whole run, drain
        // and all.
        assert_eq!(steady_window(&answers, Pace::Closed(8000)), (0, 3_020_001));
    }

    #[test]
    fn a_spread_is_never_narrower_than_one_sale_per_slice() {
        // 10 in flight, 500 ms each: twenty sales in every 1 s slice of the 10 s
        // window, every slice alike; the quartiles alone would say no spread at all.
        let answers = closed_loop(10, 500, 220, |_| Outcome::Sold);
        let rate = sales_rate(&answers, Pace::Closed(10));
        let slice = rate.seconds() / SLICES as f64;
        assert!(rate.spread() >= 1.0 / slice - 1e-9, "{rate:?}");
        assert!(
            rate.q1 <= rate.per_second && rate.per_second <= rate.q3,
            "{rate:?}"
        );
    }
}
