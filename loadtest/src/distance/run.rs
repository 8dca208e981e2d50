//! The sweep at round-trip times as a section of a run ([`AtDistance`]): every cell
//! once per RTT, the servers behind proxies, then each strategy's round trips counted;
//! in the lab the loopback sweep runs in ([`SweepLab`]).

use super::claim;
use crate::chapter::{Chapter, Read};
use crate::markdown::{Facts, Pages};
use crate::report::{Report, Row};
use crate::runner::Runner;
use crate::section::Section;
use crate::sweep::run::{SweepLab, reused_loopback_rows, set_rtt, sweep_info};
use crate::sweep::{RoundTripCount, Sweep, SweepInfo};
use testbed::Distance;

/// The sweep at each of `rtts_ms`, and what it counted.
pub struct AtDistance {
    pub sweep: Sweep,
    /// The round-trip times to every server, in ms, one pass each.
    pub rtts_ms: Vec<f64>,
    info: Option<SweepInfo>,
}

impl AtDistance {
    pub fn new(sweep: Sweep, rtts_ms: Vec<f64>) -> AtDistance {
        AtDistance {
            sweep,
            rtts_ms,
            info: None,
        }
    }
}

impl Chapter for AtDistance {
    type Stage = SweepLab;
    type Part = SweepInfo;
    const KEY: Option<&'static str> = Some(crate::sweep::KEY);

    fn title(&self, _lab: &SweepLab) -> String {
        format!(
            "{} cells of {} s, over 2 instances",
            self.sweep.cells() * self.rtts_ms.len(),
            self.sweep.seconds
        )
    }

    /// The loopback cells another run measured (no proxy at all: not the same setup
    /// as 0 ms through the proxies), every pass, then the round trips of each path
    /// counted at concurrency 1 (at 0 and the largest RTT).
    async fn run(&mut self, lab: &SweepLab, _before: &[Row]) -> anyhow::Result<Vec<Row>> {
        let mut runner = lab.runner();
        let network = lab.stack.network();
        let mut rows = reused_loopback_rows(&self.sweep);
        rows.extend(
            measure_at_distances(&mut self.sweep, &mut runner, &self.rtts_ms, network, lab).await?,
        );
        let (round_trips, count_rows) =
            count_round_trips(&mut runner, &self.sweep, &self.rtts_ms, network, lab).await?;
        rows.extend(count_rows);
        self.info = Some(sweep_info(
            &self.rtts_ms,
            &self.sweep,
            round_trips,
            lab.started,
        ));
        Ok(rows)
    }

    fn print(&self, lab: &SweepLab, rows: &[Row]) {
        if let Some(info) = &self.info {
            crate::sweep::print_tables(info, rows, &lab.catalogue);
            super::print_tables(info, rows);
        }
    }

    /// The ranking claim (printed, one a line) and the sweep's part.
    fn report(&self, report: &mut Report) {
        let Some(info) = &self.info else { return };
        report.claims.extend(claim(info, &report.results));
        for claim in &report.claims {
            println!(
                "claim: {} -> {} ({})",
                claim.claim, claim.verdict, claim.evidence
            );
        }
        report.parts.push(info.part());
    }

    /// The passes' cells. The rows that counted the round trips stay plain tables of
    /// their own (its HTML shows only what they counted).
    fn draws(section: &Section) -> bool {
        matches!(
            section,
            Section::Sweep {
                rtt_ms: Some(_),
                ..
            }
        )
    }

    /// After the sweep's charts: sales/s and p99 against RTT, the round trips, the
    /// claim (nothing on loopback).
    fn html(report: &Read<'_, SweepInfo>) -> String {
        let Some(info) = report.part.filter(|info| !info.rtts_ms.is_empty()) else {
            return String::new();
        };
        let claim = claim(info, report.results);
        super::html(info, report.results, report.strategies, claim.as_ref())
    }

    fn pages(report: &Read<'_, SweepInfo>, pages: &mut Pages, _facts: &mut Facts) {
        super::page::pages(report, pages);
    }
}

/// Runs every cell once per round-trip time (none on loopback), the servers put
/// behind it first; each pass's cells get product ids after the passes before.
async fn measure_at_distances(
    sweep: &mut Sweep,
    runner: &mut Runner,
    rtts_ms: &[f64],
    network: Option<&Distance>,
    lab: &SweepLab,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (pass, &rtt) in rtts_ms.iter().enumerate() {
        set_rtt(network, rtt);
        sweep.rtt_ms = Some(rtt);
        runner.network = network.map(|n| (rtt, n.round_trips()));
        let offset = pass * sweep.cells();
        rows.extend(
            sweep
                .run(runner, |cell| lab.first_product(offset + cell))
                .await?,
        );
    }
    Ok(rows)
}

/// Counts each strategy's round trips per request at concurrency 1, at 0 and the
/// largest round-trip time, with the rows that counted them.
///
/// None on loopback, nor when the largest round-trip time is 0. The cells get
/// product ids after every pass's.
async fn count_round_trips(
    runner: &mut Runner,
    sweep: &Sweep,
    rtts_ms: &[f64],
    network: Option<&Distance>,
    lab: &SweepLab,
) -> anyhow::Result<(Vec<RoundTripCount>, Vec<Row>)> {
    if let Some(&far) = rtts_ms.iter().max_by(|a, b| a.total_cmp(b))
        && far > 0.0
    {
        let passes = rtts_ms.len().max(1);
        let first = passes * sweep.cells();
        return super::measure_round_trips(
            runner,
            &sweep.strategies,
            far,
            &|rtt| set_rtt(network, rtt),
            &|n| lab.first_product(first + n),
        )
        .await;
    }
    Ok((Vec::new(), Vec::new()))
}
