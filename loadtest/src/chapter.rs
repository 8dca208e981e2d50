//! [`Chapter`]: what every section of a run is, from running it to its book page.

use crate::catalogue::Catalogue;
use crate::markdown::{Facts, Pages};
use crate::report::{Claim, Report, Row};
use crate::section::Section;

/// One section of a run: a setup it measures on its stage, then its tables in the
/// terminal, its part of the HTML report and its pages of the book.
///
/// Each section lives in a folder of its own (or one file, when it fits in one) that
/// implements this trait: the demo's
/// (`throughput`, `one_instance`, `held`, `far`, `flash`, `overload`) on the demo's
/// [`Stage`](crate::demo::Stage); the sweep's (`sweep::run::Scaling` on loopback,
/// `distance::run::AtDistance` at round-trip times) on a
/// [`SweepLab`](crate::sweep::run::SweepLab); the fault grid (`chaos::run::Grid`) on
/// none of its own (each cell starts the servers its scenario needs).
///
/// A run announces each section with its [`title`](Chapter::title), runs it, adds
/// its rows to the run's, prints its tables once every section has run, and lets it
/// add what it has beyond rows to the report (under [`Chapter::KEY`]). A section
/// that needs instances of its own starts them itself and lists them in the report
/// when it is done.
///
/// What it shows is drawn from the report alone, never from the section's memory: the
/// HTML page when the run ends ([`crate::page`]), the book from the reference run's
/// JSON years later ([`crate::book`]), both through [`Chapter::html`] and
/// [`Chapter::pages`] and the same [`Read`].
// The sections run one after another on the demo's own task, borrowing a stage that
// is not `Send` (its announcements count in `Cell`s): no caller needs the futures
// to be `Send`, which is what the lint warns a public trait cannot promise.
#[allow(async_fn_in_trait)]
pub trait Chapter {
    /// What the section runs on: the servers, the instances and the options it
    /// shares with the sections beside it.
    type Stage;

    /// What the section keeps beyond rows, as the report stores it under
    /// [`Chapter::KEY`] (`()`: its rows are all it keeps).
    type Part: serde::de::DeserializeOwned;

    /// The key its [`Chapter::Part`] is stored under in the JSON report.
    const KEY: Option<&'static str> = None;

    /// What the section's announcement says it measures.
    fn title(&self, stage: &Self::Stage) -> String;

    /// Runs the section: its rows. `before` holds the rows of the sections that ran
    /// earlier (one setup, one figure: a section that needs a figure measured already
    /// reads it there).
    async fn run(&mut self, stage: &Self::Stage, before: &[Row]) -> anyhow::Result<Vec<Row>>;

    /// Prints the section's tables from the run's rows.
    fn print(&self, stage: &Self::Stage, rows: &[Row]);

    /// Adds what the section has beyond rows to the report: its part, claims, the
    /// instances it started.
    fn report(&self, report: &mut Report) {
        let _ = report;
    }

    /// Whether rows of `section` are this section's: its HTML and its pages show
    /// them, and the page's plain tables leave them out. A chapter with a
    /// [`Chapter::Part`] draws them in a layout of its own, which the first screen
    /// gives no column.
    fn draws(section: &Section) -> bool;

    /// Its part of the HTML report: headings, tables and charts (empty when the
    /// report has none of it).
    fn html(report: &Read<'_, Self::Part>) -> String;

    /// Its pages of the book, by path under the generated directory, and the facts
    /// its figures give the prose.
    fn pages(report: &Read<'_, Self::Part>, pages: &mut Pages, facts: &mut Facts);
}

/// A report as a chapter reads it: every row of the run (a section may show another's
/// figure beside its own), the strategies as the service described them, the claims,
/// and the chapter's own part, if the run made one.
pub struct Read<'a, P> {
    pub results: &'a [Row],
    pub strategies: &'a Catalogue,
    pub claims: &'a [Claim],
    /// Unix seconds when the run ended.
    pub generated_at: u64,
    pub part: Option<&'a P>,
}

impl<P> Read<'_, P> {
    /// The rows of `section`, in the order they ran.
    pub fn section(&self, section: &Section) -> Vec<&Row> {
        crate::report::section(self.results, section)
    }
}
