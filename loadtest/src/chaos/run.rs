//! The fault grid as a section of a run ([`Grid`]): what `loadtest chaos` runs,
//! prints, reports, draws and gives the book.

use super::{ChaosReport, KEY, Scenario, Timing};
use crate::chapter::{Chapter, Read};
use crate::markdown::{Facts, Pages};
use crate::report::{Report, Row};
use crate::section::Section;
use std::path::PathBuf;

/// The fault grid: its scenarios and strategies, and what it measured once it ran.
pub struct Grid {
    pub timing: Timing,
    pub scenarios: Vec<Scenario>,
    /// Only these strategies (empty: every one of the matrix).
    pub strategies: Vec<String>,
    /// The extra cells too.
    pub all: bool,
    /// The stock-app binary every cell's instances run.
    pub app_bin: PathBuf,
    /// Where each cell's history is written.
    pub histories: Option<PathBuf>,
    grid: Option<ChaosReport>,
}

impl Grid {
    pub fn new(
        timing: Timing,
        scenarios: Vec<Scenario>,
        strategies: Vec<String>,
        all: bool,
        app_bin: PathBuf,
        histories: Option<PathBuf>,
    ) -> Grid {
        Grid {
            timing,
            scenarios,
            strategies,
            all,
            app_bin,
            histories,
            grid: None,
        }
    }

    /// What the grid measured, once it ran.
    pub fn measured(&self) -> Option<&ChaosReport> {
        self.grid.as_ref()
    }
}

/// The grid has no stage of its own to share: each cell starts the servers and
/// instances its scenario needs ([`super::run()`]).
impl Chapter for Grid {
    type Stage = ();
    type Part = ChaosReport;
    const KEY: Option<&'static str> = Some(KEY);

    fn title(&self, _stage: &()) -> String {
        "faults under load: every cell judged from the ledger".into()
    }

    /// Runs every cell; the grid's figures are its part, not rows.
    async fn run(&mut self, _stage: &(), _before: &[Row]) -> anyhow::Result<Vec<Row>> {
        let grid = super::run(
            self.app_bin.clone(),
            self.timing.clone(),
            &self.scenarios,
            &self.strategies,
            self.all,
            self.histories.clone(),
        )
        .await?;
        self.grid = Some(grid);
        Ok(Vec::new())
    }

    fn print(&self, _stage: &(), _rows: &[Row]) {
        if let Some(grid) = &self.grid {
            super::print_table(grid);
        }
    }

    /// The claims its cells speak to, its part, and the strategies as its lab's
    /// service listed them.
    fn report(&self, report: &mut Report) {
        if let Some(grid) = &self.grid {
            report.claims = grid.claims();
            report.parts.push(grid.part());
            report.strategies = grid.strategies.clone();
        }
    }

    fn draws(_section: &Section) -> bool {
        false
    }

    fn html(report: &Read<'_, ChaosReport>) -> String {
        report
            .part
            .map_or(String::new(), |grid| grid.html(report.strategies))
    }

    fn pages(report: &Read<'_, ChaosReport>, pages: &mut Pages, facts: &mut Facts) {
        if let Some(grid) = report.part {
            super::page::pages(grid, pages, facts);
        }
    }
}
