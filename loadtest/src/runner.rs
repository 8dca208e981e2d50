//! One strategy's run, start to verdict ([`Runner`]), and runs measured in rounds.

use crate::plan::{DRAIN_TIMEOUT, Plan};
use crate::{catalogue, cost, engine, history, live, rate, report, timing, verify};
use engine::Fired;
use engine::{Load, fire, restock};
use futures::{StreamExt, TryStreamExt};
use report::{Expect, Latency, Row};
use sqlx::MySqlPool;
use std::collections::{BTreeMap, HashSet};
use stock_wire::Trait;
use verify::Verdict;

/// The longest a run waits for the requests its clients gave up on to finish in the
/// instances ([`Runner::quiet`]).
const QUIET_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Restocks sent at once before a run (a sweep's cells restock a hundred products).
const RESTOCKS_AT_ONCE: usize = 16;

/// Runs strategies against running services, one at a time, each on fresh stock.
pub struct Runner {
    pub client: reqwest::Client,
    pub db: MySqlPool,
    pub bases: Vec<String>,
    pub admin_token: String,
    /// The live page, when one is served: each run's progress goes there.
    pub live: Option<live::Live>,
    /// The strategies as the first instance describes them, asked once
    /// ([`Runner::strategies`]).
    pub catalogue: tokio::sync::OnceCell<catalogue::Catalogue>,
    /// When the servers run behind the testbed's proxies: the round trip they add
    /// (ms) and their round-trip counters, read around each run.
    pub network: Option<(f64, testbed::RoundTrips)>,
    /// The processes whose CPU a run measures per sale (instances and servers, by
    /// name; this load generator always), and a Redis whose own time it reads.
    pub processes: Vec<(String, u32)>,
    pub redis_url: Option<String>,
    /// The folder each run's history is written to (`<section>.<strategy>.jsonl`,
    /// numbered from the second run of one setup), if any; every run is judged either way.
    pub histories: Option<std::path::PathBuf>,
    /// Whether each run's history is built and checked (on unless told otherwise).
    pub histories_checked: bool,
    /// Runs per history name so far (the runner's own count).
    pub written: std::sync::Mutex<std::collections::BTreeMap<String, u32>>,
}

impl Runner {
    /// A runner against `bases`, reading the verdict from `db`, on loopback and
    /// without a live page (set [`Runner::live`] and [`Runner::network`] for those).
    pub fn new(
        client: reqwest::Client,
        db: MySqlPool,
        bases: Vec<String>,
        admin_token: &str,
    ) -> Runner {
        Runner {
            client,
            db,
            bases,
            admin_token: admin_token.to_string(),
            live: None,
            catalogue: Default::default(),
            network: None,
            processes: Vec::new(),
            redis_url: None,
            histories: None,
            histories_checked: true,
            written: Default::default(),
        }
    }

    /// Restocks the plan's products (a new epoch each), warms up, fires the load,
    /// then verifies from the database.
    pub async fn run(&self, plan: &Plan) -> anyhow::Result<Row> {
        Ok(self.run_fired(plan).await?.0)
    }

    /// [`Runner::run`], also returning what the clients saw request by request.
    pub async fn run_fired(&self, plan: &Plan) -> anyhow::Result<(Row, Fired)> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let buckets = self.buckets(plan).await?;
        if plan.warmup > 0 {
            self.warm_up(plan, &id, buckets).await?;
        }
        self.restock_all(plan, buckets).await?;
        // The live page: the run announced, its answers counted, the database read
        // while it runs.
        let live = self.live.as_ref().map(|l| l.start(plan, self.bases.len()));
        let answered = live.as_ref().map(|run| run.answered.clone());
        let load = self.load(plan, &id, buckets, answered);
        let watch = live
            .as_ref()
            .map(|run| run.watch(self.db.clone(), plan.products.clone()));
        // The instances' own timings before and after: where the time goes. A run
        // whose instances cannot be scraped still runs, without the split.
        let before = timing::Snapshot::scrape(&self.client, &self.bases).await;
        let trips_before = self.network.as_ref().map(|(_, trips)| trips.snapshot());
        let cpu_before = cost::cpu_by_group(&self.processes);
        let redis_before = match &self.redis_url {
            Some(url) => cost::redis_time(url).await,
            None => None,
        };
        let mut fired = fire(&self.client, &load).await;
        let trips_answered = self.network.as_ref().map(|(_, trips)| trips.snapshot());
        let after = timing::Snapshot::scrape(&self.client, &self.bases).await;
        if let Some(watch) = watch {
            watch.abort();
        }
        // A request whose client gave up may still be running in an instance: the
        // verdict and the history's final read wait until none is.
        self.quiet().await;
        // A strategy that records later answers before the database has the sale: the
        // verdict waits for its persisters (nothing pending for the others).
        let (pending, drain) =
            engine::drained(&self.client, &self.bases[0], &plan.products, DRAIN_TIMEOUT).await?;
        fired.pending_at_end = pending;
        fired.drain = drain;
        // Quiet now: the history ends with a read of every product, and the ledger's
        // word on every request id, taken around it.
        let recorded = match self.histories_checked {
            true => Some(self.final_reads(plan, &mut fired).await?),
            false => None,
        };
        // Round trips until every sale is recorded: a strategy that records later makes
        // its database round trips after its answers (the drain's polling counts then).
        let trips_after = match pending {
            0 => trips_answered,
            _ => self.network.as_ref().map(|(_, trips)| trips.snapshot()),
        };
        // The verdict is read only now, after every request has finished.
        let verdict = verify::verify(
            &self.db,
            &plan.products,
            &fired.acknowledged,
            fired.unknown.len(),
        )
        .await?;
        let mut row = Row::new(plan, self.bases.len(), &fired, verdict);
        if self.histories_checked {
            let recorded = recorded.unwrap_or_default();
            let mut judged = self.judge(plan, &fired, &recorded).await?;
            judged.add_ledger(&row.verdict);
            // A safe strategy's answers must be explained by one order, too.
            if plan.expect == Expect::Safe && judged.verdict == history::Said::NotLinearizable {
                row.as_expected = false;
            }
            row.history = Some(judged);
        }
        // CPU per sale, until every sale was recorded (the drain included).
        let sales = fired.count(&engine::Outcome::Sold) as f64;
        if sales > 0.0 {
            self.add_cost(&mut row, sales, &cpu_before, redis_before)
                .await;
        }
        if let (Some((rtt_ms, _)), Some(before), Some(after)) =
            (&self.network, trips_before, trips_after)
        {
            add_round_trips(&mut row, sales, *rtt_ms, &before, &after);
        }
        row.time_split = match (before, after) {
            (Ok(before), Ok(after)) => {
                row.refused_by_fast_path = after.refused_by_fast_path(&before, &plan.strategy);
                after.since(&before, &plan.strategy, fired.latency_us.mean() / 1000.0)
            }
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("loadtest: no time split for {}: {e:#}", plan.strategy);
                None
            }
        };
        if let Some(run) = live {
            run.finish(&row);
        }
        Ok((row, fired))
    }

    /// The stock's buckets for the plan's strategy: the plan's, for a strategy that
    /// splits its stock; none for the others.
    async fn buckets(&self, plan: &Plan) -> anyhow::Result<u16> {
        let splits = self
            .strategies()
            .await?
            .has(&plan.strategy, Trait::SplitsStock);
        Ok(if splits { plan.buckets } else { 0 })
    }

    /// Fires the plan's warm-up (run `id`) at a product of its own, restocked with
    /// exactly as many units as there are warm-up requests.
    async fn warm_up(&self, plan: &Plan, id: &str, buckets: u16) -> anyhow::Result<()> {
        // Warm-up on a product of its own, not counted.
        let warm_product = plan.products[0] + 1_000_000;
        restock(
            &self.client,
            &self.bases[0],
            &self.admin_token,
            warm_product,
            plan.warmup as i64,
            buckets,
        )
        .await?;
        let warm = Load {
            bases: self.bases.clone(),
            strategy: plan.strategy.clone(),
            products: vec![warm_product],
            requests: plan.warmup,
            duration: None,
            concurrency: plan.concurrency,
            rate: None,
            quantity: 1,
            multi_item_share: 0.0,
            hold_ms: None,
            id_prefix: format!("warm-{id}"),
            answered: None,
            retries: plan.retries,
            beside: Default::default(),
        };
        fire(&self.client, &warm).await;
        Ok(())
    }

    /// Restocks every product of the plan with its stock.
    async fn restock_all(&self, plan: &Plan, buckets: u16) -> anyhow::Result<()> {
        // Every product restocked at once: each answer waits out the sold-out marks'
        // lifetime, which a hundred products one after another would add up.
        futures::stream::iter(&plan.products)
            .map(|&product| {
                restock(
                    &self.client,
                    &self.bases[0],
                    &self.admin_token,
                    product,
                    plan.stock,
                    buckets,
                )
            })
            .buffer_unordered(RESTOCKS_AT_ONCE)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// The plan's load (run `id`), its answers counted in `answered` for the live page.
    fn load(
        &self,
        plan: &Plan,
        id: &str,
        buckets: u16,
        answered: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    ) -> Load {
        Load {
            bases: self.bases.clone(),
            strategy: plan.strategy.clone(),
            products: plan.products.clone(),
            requests: plan.requests,
            duration: plan.duration,
            concurrency: plan.concurrency,
            rate: plan.rate,
            quantity: plan.quantity,
            multi_item_share: plan.multi_item_share,
            hold_ms: plan.request_hold_ms,
            id_prefix: format!("lt-{id}"),
            answered,
            retries: plan.retries,
            beside: engine::Beside {
                read_every: plan.read_every,
                restock: plan
                    .restock_during
                    .map(|(after_answers, stock)| engine::MidRestock {
                        after_answers,
                        stock,
                        buckets,
                        admin_token: self.admin_token.clone(),
                    }),
            },
        }
    }

    /// Adds to `row` the CPU each process group used per sale since `cpu_before`, and
    /// Redis's own time per sale since `redis_before` (when a Redis is measured).
    async fn add_cost(
        &self,
        row: &mut Row,
        sales: f64,
        cpu_before: &BTreeMap<String, f64>,
        redis_before: Option<cost::RedisTime>,
    ) {
        let cpu_after = cost::cpu_by_group(&self.processes);
        row.cpu_us_per_sale = cpu_after
            .iter()
            .filter_map(|(name, after)| {
                let used = after - cpu_before.get(name)?;
                Some((name.clone(), used * 1e6 / sales))
            })
            .collect();
        if let (Some(url), Some(before)) = (&self.redis_url, redis_before)
            && let Some(after) = cost::redis_time(url).await
        {
            row.redis_us_per_sale = Some((after.main_thread_us - before.main_thread_us) / sales);
            row.redis_commands_us_per_sale = after
                .commands_us
                .iter()
                .filter_map(|(cmd, usec)| {
                    let used =
                        usec.saturating_sub(before.commands_us.get(cmd).copied().unwrap_or(0));
                    (used > 0).then(|| (cmd.clone(), used as f64 / sales))
                })
                .collect();
        }
    }

    /// Reads every product once ([`engine::final_reads`]) into `fired`'s history, and
    /// returns the request ids the ledger holds, read before and after it. A sale that
    /// landed late (a COMMIT sent before its client gave up) between the two makes
    /// them differ: the read is taken again, up to three times, so that every sale the
    /// ledger holds came before the final read.
    async fn final_reads(&self, plan: &Plan, fired: &mut Fired) -> anyhow::Result<HashSet<String>> {
        let mut before = history::recorded(&self.db, &fired.id_prefix).await?;
        let mut tries = 1;
        loop {
            let (base, products) = (&self.bases[0], &plan.products);
            let last = engine::final_reads(&self.client, base, products, fired.clock_start_us);
            let last = last.await;
            let after = history::recorded(&self.db, &fired.id_prefix).await?;
            if after == before || tries == 3 {
                fired.beside.extend(last);
                return Ok(after);
            }
            (before, tries) = (after, tries + 1);
        }
    }

    /// Waits until no instance has a deduction in flight (their `/metrics`), 20 ms
    /// apart, for at most [`QUIET_TIMEOUT`]; past it, or when an instance cannot be
    /// scraped, says so and goes on (the history's final read may then see a sale
    /// land after it).
    async fn quiet(&self) {
        let started = std::time::Instant::now();
        loop {
            match timing::Snapshot::scrape(&self.client, &self.bases).await {
                Ok(now) if now.in_flight == 0 => return,
                Ok(now) if started.elapsed() > QUIET_TIMEOUT => {
                    eprintln!(
                        "loadtest: {} deduction(s) still in flight after {QUIET_TIMEOUT:?}",
                        now.in_flight
                    );
                    return;
                }
                Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
                Err(e) => {
                    eprintln!("loadtest: cannot tell whether the instances are quiet: {e:#}");
                    return;
                }
            }
        }
    }

    /// The run's history (its unknown outcomes settled by the ledger, read now that
    /// nothing is in flight and nothing pending), checked, and written to
    /// [`Runner::histories`].
    async fn judge(
        &self,
        plan: &Plan,
        fired: &Fired,
        recorded: &HashSet<String>,
    ) -> anyhow::Result<history::Judged> {
        let stock: Vec<(i64, i64)> = plan.products.iter().map(|&p| (p, plan.stock)).collect();
        let records = history::of_run(fired, &stock, recorded);
        let name = format!(
            "{}.{}",
            history::slug(&plan.section.to_string()),
            plan.strategy
        );
        let runs = {
            let mut written = self.written.lock().expect("not poisoned");
            let runs = written.entry(name.clone()).or_default();
            *runs += 1;
            *runs
        };
        let file = match runs {
            1 => format!("{name}.jsonl"),
            n => format!("{name}.{n}.jsonl"),
        };
        history::judge_and_write(records, self.histories.as_deref(), &file).await
    }

    /// Runs `plans` in `rounds` rounds ([`in_rounds`]); one row per plan, its sales
    /// pooled over the rounds ([`pooled_row`]). `progress(round, index)` is called
    /// before each run.
    pub async fn run_in_rounds(
        &self,
        plans: &[Plan],
        rounds: u32,
        mut progress: impl FnMut(u32, usize),
    ) -> anyhow::Result<Vec<Row>> {
        let runs = in_rounds(plans.len(), rounds, async |round, k| {
            progress(round, k);
            self.run_fired(&plans[k].in_round(round)).await
        })
        .await?;
        Ok(runs
            .into_iter()
            .filter_map(pooled_row)
            .map(|(_, row)| row)
            .collect())
    }

    /// The strategies the first instance serves ([`catalogue::Catalogue`]), asked
    /// on first use: every run decides from it (whether to split the stock).
    pub async fn strategies(&self) -> anyhow::Result<catalogue::Catalogue> {
        let fetch = || catalogue::Catalogue::fetch(&self.client, &self.bases[0]);
        Ok(self.catalogue.get_or_try_init(fetch).await?.clone())
    }
}

/// Adds to `row` the network's round trips of the run (`after` less `before`), in
/// all and per sale, at `rtt_ms`.
fn add_round_trips(
    row: &mut Row,
    sales: f64,
    rtt_ms: f64,
    before: &BTreeMap<&'static str, u64>,
    after: &BTreeMap<&'static str, u64>,
) {
    row.rtt_ms = Some(rtt_ms);
    row.round_trips = after
        .iter()
        .map(|(kind, n)| (kind.to_string(), n - before.get(kind).copied().unwrap_or(0)))
        .collect();
    row.round_trips_per_sale = row
        .round_trips
        .iter()
        .filter(|_| sales > 0.0)
        .map(|(kind, n)| (kind.clone(), *n as f64 / sales))
        .collect();
}

/// `round 2/3: ` before a run's progress line, when there are rounds.
pub fn round_text(round: u32, rounds: u32) -> String {
    if rounds > 1 {
        format!("round {}/{rounds}: ", round + 1)
    } else {
        String::new()
    }
}

/// `3 rounds`, or `1 round`.
pub fn rounds_text(rounds: u32) -> String {
    match rounds {
        1 => "1 round".to_string(),
        n => format!("{n} rounds"),
    }
}

/// Runs `count` measurements in `rounds` rounds: `run(round, index)` for every index,
/// one after another, then round after round, so that they all meet the same slow
/// and fast moments of the machine. Every other round runs them in the reverse
/// order ([`round_order`]). Each index's runs, in round order.
pub async fn in_rounds<T>(
    count: usize,
    rounds: u32,
    run: impl AsyncFnMut(u32, usize) -> anyhow::Result<T>,
) -> anyhow::Result<Vec<Vec<T>>> {
    in_rounds_each(&vec![rounds; count], run).await
}

/// [`in_rounds`], with a number of rounds per measurement: measurement `k` runs in
/// the first `rounds[k]` rounds (at least one) and is skipped in the rest.
pub async fn in_rounds_each<T>(
    rounds: &[u32],
    mut run: impl AsyncFnMut(u32, usize) -> anyhow::Result<T>,
) -> anyhow::Result<Vec<Vec<T>>> {
    let mut runs: Vec<Vec<T>> = rounds.iter().map(|_| Vec::new()).collect();
    let most = rounds.iter().copied().max().unwrap_or(1).max(1);
    for round in 0..most {
        for k in round_order(rounds.len(), round) {
            if round < rounds[k].max(1) {
                runs[k].push(run(round, k).await?);
            }
        }
    }
    Ok(runs)
}

/// The order of `count` measurements in `round`: first to last in the first round,
/// last to first in the second, and so on. A machine that slows down (or speeds up)
/// during the rounds then favours no measurement: the one that ran first in a round
/// runs last in the next, and the rounds disagree instead of all agreeing on a
/// difference the trend made ([`crate::rate::lead`]).
pub fn round_order(count: usize, round: u32) -> Vec<usize> {
    let mut order: Vec<usize> = (0..count).collect();
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

/// The round whose row stands for a setup measured in rounds: the first that did not
/// behave as expected, else the first with an answer that is neither a sale, a
/// refusal nor `busy` (an error, a lost lock, no answer at all), else the one whose
/// rate is the median: a failure or an error is never averaged away.
pub fn shown_round(rows: &[&Row]) -> Option<usize> {
    let troubled = |row: &Row| {
        !row.transport_errors.is_empty()
            || row
                .responses
                .keys()
                .any(|k| !matches!(k.as_str(), "200" | "409" | "503 busy"))
    };
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&a, &b| {
        rows[a]
            .sales
            .per_second
            .total_cmp(&rows[b].sales.per_second)
    });
    (0..rows.len())
        .find(|&i| !rows[i].as_expected)
        .or_else(|| (0..rows.len()).find(|&i| troubled(rows[i])))
        .or_else(|| order.get(order.len() / 2).copied())
}

/// One row for a setup measured in rounds ([`rate::pooled`]): the row of the round
/// [`shown_round`] picks (its latencies, answers, costs and verdict), with its sales
/// per second over every round; and that round's index.
pub fn pooled_row(rounds: Vec<(Row, Fired)>) -> Option<(usize, Row)> {
    let rows: Vec<&Row> = rounds.iter().map(|(row, _)| row).collect();
    let shown = shown_round(&rows)?;
    let records: Vec<(&[engine::Answer], rate::Pace)> = rounds
        .iter()
        .map(|(_, fired)| (&fired.record[..], fired.pace()))
        .collect();
    let sales = rate::pooled(&records, shown);
    let mut row = rounds.into_iter().nth(shown)?.0;
    row.sales = sales;
    Some((shown, row))
}

impl Row {
    /// A row from a plan, what the clients saw on `instances` instances, and the verdict.
    pub fn new(plan: &Plan, instances: usize, fired: &Fired, verdict: Verdict) -> Row {
        let expect = plan.expect;
        let oversold = !verdict.is_clean();
        let as_expected = verdict.missing_acknowledged == 0
            && match expect {
                Expect::Safe => !oversold,
                Expect::Oversells => oversold,
                Expect::Either => true,
            };
        Row {
            section: plan.section.clone(),
            strategy: plan.strategy.clone(),
            instances,
            products: plan.products.len(),
            hold_ms: plan.request_hold_ms.unwrap_or(plan.server_hold_ms),
            requests: fired.outcomes.values().sum::<u64>() as usize,
            concurrency: plan.concurrency,
            seconds: fired.elapsed.as_secs_f64(),
            sales: fired.sales(),
            answers_per_second: fired.answers_per_second(),
            refused_by_fast_path: 0,
            latency_ms: Latency {
                p50: fired.latency_ms(50.0),
                p90: fired.latency_ms(90.0),
                p99: fired.latency_ms(99.0),
                max: fired.latency_ms(100.0),
            },
            responses: fired.outcomes.clone(),
            attempts_per_success: fired.attempts_per_success(),
            verdict,
            expect,
            as_expected,
            time_split: None,
            rtt_ms: None,
            round_trips_per_sale: Default::default(),
            round_trips: Default::default(),
            cpu_us_per_sale: Default::default(),
            redis_us_per_sale: None,
            redis_commands_us_per_sale: Default::default(),
            transport_errors: fired.transport_errors.clone(),
            measured_in: None,
            timed_s: plan.duration.map(|d| d.as_secs_f64()),
            rate: plan.rate,
            quantity: plan.quantity,
            history: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_other_round_runs_in_reverse() {
        assert_eq!(round_order(3, 0), [0, 1, 2]);
        assert_eq!(round_order(3, 1), [2, 1, 0]);
        assert_eq!(round_order(3, 2), [0, 1, 2]);
    }

    /// Two strategies alike, measured while the machine slows down steadily: in
    /// order every round, the first would seem faster in all of them; with every
    /// other round reversed, the rounds disagree and nothing is claimed.
    #[test]
    fn a_machine_slowing_down_favours_no_strategy() {
        let rate_at = |step: usize| 1000.0 - 50.0 * step as f64;
        let mut per_round = [Vec::new(), Vec::new()];
        for round in 0..3 {
            for (position, k) in round_order(2, round).into_iter().enumerate() {
                per_round[k].push(rate_at(2 * round as usize + position));
            }
        }
        let [a, b] = per_round.map(|per_round| rate::SalesRate {
            rounds: 3,
            per_second: per_round.iter().sum::<f64>() / 3.0,
            per_round,
            ..Default::default()
        });
        let lead = rate::lead(&a, &b).expect("side by side");
        assert!(lead.low < 1.0 && lead.high > 1.0, "{lead:?}");
        assert_eq!(rate::compare(&a, &b), None);
    }
}
