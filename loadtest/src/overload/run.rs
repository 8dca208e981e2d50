//! Past capacity: the strategies as they run by default and with an admission limit
//! (fixed, adaptive, each with and without a reject hold) on two instances each, an
//! open loop at a multiple of each one's capacity; the sell-out with the sold-out fast
//! path on and off; and the flood of a client that never backs off.

use crate::chapter::{Chapter, Read};
use crate::demo::Stage;
use crate::flood::{FloodRow, Target};
use crate::lab::Instance;
use crate::markdown::{Facts, Pages};
use crate::overload::{Mode, OverloadPart, OverloadRow, SellOutRow};
use crate::plan::{first_product, plan};
use crate::report::{Expect, InstanceInfo, Report, Row};
use crate::runner::Runner;
use crate::section::Section;
use anyhow::bail;
use stock_wire::Trait;

/// The overload section: what it measured beyond rows, and the instances it started.
pub struct Overload {
    /// The open loop's multiple of each strategy's capacity.
    factor: f64,
    /// How long each open loop offers its load, in seconds.
    seconds: f64,
    /// The strategies loaded past capacity, the reference first.
    strategies: Vec<String>,
    /// The strategy the flood is sent to, and its capacity: the first one's.
    flooded: Option<(String, f64)>,
    /// Each strategy in each mode, past capacity.
    results: Vec<OverloadRow>,
    /// The sell-out with the fast path on and off.
    sell_outs: Vec<SellOutRow>,
    /// The flood on each setting.
    floods: Vec<FloodRow>,
    /// The instances the section started, read before they stopped.
    info: Vec<InstanceInfo>,
}

impl Overload {
    /// The section at `--overload-factor` times capacity, for `--overload-strategies` (by
    /// default the reference, the conditional UPDATE, and the strategy that batches
    /// sales: a database one and a hot-product one); none when there is nothing to
    /// load.
    pub fn new(stage: &Stage) -> Option<Overload> {
        let factor = stage.overload_factor;
        let strategies: Vec<String> = if stage.args.overload_strategies.is_empty() {
            [Trait::ConditionalUpdate, Trait::Batches]
                .into_iter()
                .filter_map(|t| stage.catalogue.first_with(t).map(|c| c.name.clone()))
                .collect()
        } else {
            stage.args.overload_strategies.clone()
        };
        (factor > 0.0 && !strategies.is_empty()).then(|| Overload {
            factor,
            seconds: stage.args.overload_seconds,
            strategies,
            flooded: None,
            results: Vec::new(),
            sell_outs: Vec::new(),
            floods: Vec::new(),
            info: Vec::new(),
        })
    }
}

/// Two instances started with one setting's flags, and its name: the flags, joined
/// (with a limit, the service holds a refusal a second unless told, so the hold is
/// always named).
struct Setting {
    /// The flags, joined: `--max-in-flight 32 --reject-hold-ms 0`.
    name: String,
    /// `stock-app-<label>-1` and `-2`.
    instances: Vec<Instance>,
}

impl Setting {
    /// Starts `stock-app-<label>-1` and `-2` with `flags`.
    async fn start(stage: &Stage, label: &str, flags: &[&str]) -> anyhow::Result<Setting> {
        Ok(Setting {
            name: flags.join(" "),
            instances: stage.start_pair(&stage.env, label, flags).await?,
        })
    }
}

/// Every setting the section compares, beside the plain instances (no limit).
struct Settings {
    limited: Setting,
    adaptive: Setting,
    held: Setting,
    adaptive_held: Setting,
    /// The fixed limit with the sold-out fast path off.
    unfast: Setting,
}

impl Settings {
    /// Starts each limit as it answers a refusal at once (a hold of 0, said
    /// outright) and with the reject hold, and the fixed limit without the fast path.
    async fn start(stage: &Stage) -> anyhow::Result<Settings> {
        let limit = stage.args.overload_max_in_flight.to_string();
        let hold = stage.args.overload_reject_hold_ms.to_string();
        let fixed = |hold| vec!["--max-in-flight", &limit, "--reject-hold-ms", hold];
        let adaptive_with = |hold| {
            vec![
                "--adaptive-limit",
                "--max-in-flight",
                "256",
                "--reject-hold-ms",
                hold,
            ]
        };
        let unfast = [fixed("0").as_slice(), &["--sold-out-cache-ms", "0"]].concat();
        Ok(Settings {
            limited: Setting::start(stage, "limited", &fixed("0")).await?,
            adaptive: Setting::start(stage, "adaptive", &adaptive_with("0")).await?,
            held: Setting::start(stage, "limited-held", &fixed(&hold)).await?,
            adaptive_held: Setting::start(stage, "adaptive-held", &adaptive_with(&hold)).await?,
            unfast: Setting::start(stage, "no-fast-path", &unfast).await?,
        })
    }

    /// The instances as the report lists them, read while they run.
    fn info(&self) -> Vec<InstanceInfo> {
        [
            &self.unfast,
            &self.limited,
            &self.adaptive,
            &self.held,
            &self.adaptive_held,
        ]
        .iter()
        .flat_map(|setting| setting.instances.iter().map(Instance::info))
        .collect()
    }
}

/// A runner on each setting's instances.
struct Runners {
    plain: Runner,
    limited: Runner,
    adaptive: Runner,
    held: Runner,
    adaptive_held: Runner,
    unfast: Runner,
}

impl Runners {
    /// A runner on the plain instances and one on each setting's.
    fn on(stage: &Stage, settings: &Settings) -> Runners {
        Runners {
            plain: stage.runner_on(&stage.plain),
            limited: stage.runner_on(&settings.limited.instances),
            adaptive: stage.runner_on(&settings.adaptive.instances),
            held: stage.runner_on(&settings.held.instances),
            adaptive_held: stage.runner_on(&settings.adaptive_held.instances),
            unfast: stage.runner_on(&settings.unfast.instances),
        }
    }

    /// The open loop's modes: each setting with the client's retries after a 429,
    /// and the fixed limit again with them off (what they add, and cost).
    fn modes<'a>(&'a self, settings: &Settings) -> Vec<(&'a Runner, Mode)> {
        let mode = |name: &str, retries| Mode {
            name: name.into(),
            retries,
        };
        vec![
            (&self.plain, mode("no limit", 0)),
            (&self.limited, mode(&settings.limited.name, 3)),
            (&self.adaptive, mode(&settings.adaptive.name, 3)),
            (&self.held, mode(&settings.held.name, 3)),
            (&self.adaptive_held, mode(&settings.adaptive_held.name, 3)),
            (
                &self.limited,
                mode(&format!("{}, no retries", settings.limited.name), 0),
            ),
        ]
    }

    /// The flood's targets: every setting with the fast path on.
    fn targets<'a>(&'a self, settings: &Settings) -> Vec<Target<'a>> {
        let target = |mode: &str, runner| Target {
            mode: mode.into(),
            runner,
        };
        vec![
            target("no limit", &self.plain),
            target(&settings.limited.name, &self.limited),
            target(&settings.adaptive.name, &self.adaptive),
            target(&settings.held.name, &self.held),
            target(&settings.adaptive_held.name, &self.adaptive_held),
        ]
    }
}

impl Overload {
    /// Strategy number `index` past capacity: its capacity, the open loop on every
    /// mode, and for the first strategy the sell-out with the fast path on and off.
    ///
    /// Its capacity is the best of the no-limit rows this run already measured (one
    /// setup, one figure); it is measured here only if no section ran it.
    async fn past_capacity(
        &mut self,
        stage: &Stage,
        settings: &Settings,
        runners: &Runners,
        index: usize,
        strategy: &str,
        before: &[Row],
    ) -> anyhow::Result<Vec<Row>> {
        if !stage.catalogue.0.iter().any(|c| c.name == strategy) {
            bail!("--overload-strategies: unknown strategy {strategy:?}");
        }
        let mut rows = Vec::new();
        let measured: Vec<&Row> = before
            .iter()
            .filter(|r| {
                r.strategy == strategy
                    && matches!(r.section, Section::Throughput | Section::FlashSale)
            })
            .collect();
        let capacity = match crate::overload::capacity(&measured) {
            Some(capacity) => capacity,
            None => {
                let plan = stage.timed(plan(
                    Section::OverloadCapacity,
                    strategy,
                    first_product(6, index * 10 + 9),
                    &stage.args.load,
                    Expect::Safe,
                ));
                let row = runners.plain.run(&plan).await?;
                let capacity = crate::overload::capacity(&[&row]).expect("one row");
                rows.push(row);
                capacity
            }
        };
        let modes = runners.modes(settings);
        stage.say(&format!(
            "{strategy} past capacity: {}x its capacity for {} s, {} ways ...",
            self.factor,
            self.seconds,
            modes.len()
        ));
        let (results, overload_rows) = crate::overload::run(
            strategy,
            capacity,
            &modes,
            self.factor,
            self.seconds,
            &|n| first_product(6, index * 10 + n),
        )
        .await?;
        // The sell-out at the same offered rate on limited instances, the fast path
        // on and off (the reference strategy only: its refusal is a transaction on
        // the hot row).
        if index == 0 {
            let offered = results.first().map_or(1000.0, |r| r.offered_per_second);
            let fast = format!("{}, fast path on", settings.limited.name);
            let (sold_out, sell_out_rows) = crate::overload::sell_out(
                strategy,
                &[
                    (&runners.limited, &fast),
                    (&runners.unfast, &settings.unfast.name),
                ],
                offered,
                self.seconds,
                100,
                &|n| first_product(7, n),
            )
            .await?;
            self.sell_outs.extend(sold_out);
            rows.extend(sell_out_rows);
            self.flooded = results
                .first()
                .map(|r| (strategy.to_string(), r.capacity_sales_per_second));
        }
        self.results.extend(results);
        rows.extend(overload_rows);
        Ok(rows)
    }
}

impl Chapter for Overload {
    type Stage = Stage;
    type Part = OverloadPart;
    const KEY: Option<&'static str> = Some(super::KEY);

    fn title(&self, _stage: &Stage) -> String {
        format!("past capacity: {}x each strategy's capacity", self.factor)
    }

    async fn run(&mut self, stage: &Stage, before: &[Row]) -> anyhow::Result<Vec<Row>> {
        let settings = Settings::start(stage).await?;
        let runners = Runners::on(stage, &settings);
        let mut rows = Vec::new();
        let strategies = std::mem::take(&mut self.strategies);
        for (index, strategy) in strategies.iter().enumerate() {
            rows.extend(
                self.past_capacity(stage, &settings, &runners, index, strategy, before)
                    .await?,
            );
        }
        self.strategies = strategies;
        // The flood on every setting, the reference strategy only, after every polite
        // row (a flood leaves the adaptive limits where it drove them).
        if let Some((strategy, capacity)) = self.flooded.clone()
            && stage.args.flood_connections > 0
        {
            stage.say(&format!(
                "{strategy} flooded: wrk at {} connections on each setting ...",
                stage.args.flood_connections
            ));
            self.floods = crate::flood::run(
                &strategy,
                capacity,
                &runners.targets(&settings),
                stage.args.flood_connections,
                self.seconds.max(6.0),
                &|n| first_product(9, n + 1),
            )
            .await?;
        }
        self.info = settings.info();
        Ok(rows)
    }

    fn print(&self, _stage: &Stage, _rows: &[Row]) {
        crate::overload::print_table(&self.results, self.factor);
        crate::overload::print_sell_out(&self.sell_outs);
        crate::flood::print_table(&self.floods);
    }

    fn report(&self, report: &mut Report) {
        report.parts.push(crate::overload::part(
            &self.results,
            &self.sell_outs,
            &self.floods,
            self.factor,
            self.seconds,
        ));
        report.instances.extend(self.info.iter().cloned());
    }

    fn draws(section: &Section) -> bool {
        matches!(
            section,
            Section::OverloadCapacity | Section::Overload { .. } | Section::OverloadSellOut { .. }
        )
    }

    fn html(report: &Read<'_, OverloadPart>) -> String {
        report.part.map_or(String::new(), super::html)
    }

    fn pages(report: &Read<'_, OverloadPart>, pages: &mut Pages, _facts: &mut Facts) {
        if let Some(part) = report.part {
            super::page::pages(part, pages);
        }
    }
}
