//! `loadtest`: fires concurrent deductions at stock-app instances and proves from the
//! database whether anything oversold.
//!
//! # Layout
//! Bottom up (`layers/tests/layers.rs` holds each module to the layers below it):
//!
//! **What every run shares.**
//! - [`engine`]: firing a load (closed or open loop, for a count or a time), classifying
//!   answers ([`engine::Outcome`]), latency in an HdrHistogram, every request recorded.
//! - [`verify`]: the verdict from the database: lost updates, units sold beyond stock,
//!   acknowledged sales missing from the ledger.
//! - [`timing`]: where the time goes, from the instances' `/metrics` before and
//!   after a run (lock wait, transaction, release, the rest).
//! - [`cost`]: what a sale costs: CPU time per process from `/proc`, Redis's own
//!   time from `INFO commandstats`.
//! - [`catalogue`]: the strategies as the service lists them (order, family, colour,
//!   explanation): nothing here lists strategies by hand.
//! - [`section`]: which setup a row was measured in ([`section::Section`]), read and
//!   written as the text a reader sees.
//! - [`rate`]: sales per second over a run's steady window, with its spread: the one
//!   definition of throughput every table, chart and claim uses.
//! - [`history`]: a run's history in the checker's format (clients as lanes, unknown
//!   outcomes settled by the ledger), written under `reports/` and judged by the
//!   `stock-check` crate (a stock counter's model, linearizability by the
//!   Wing-Gong/Lowe search as Porcupine runs it; it depends on nothing of the service).
//! - [`report`]: rows, the table, the JSON report (its schema version in
//!   [`report::SCHEMA_VERSION`]). A leaf: what a subcommand adds beyond rows comes as
//!   a [`report::Part`] it builds itself.
//! - [`html`]: what the HTML report is drawn with (tables of rows, SVG charts,
//!   escaping) and its first screen.
//! - [`markdown`]: what the book's generated pages are made of (tables, the banner,
//!   the facts, what every page says of a row).
//!
//! **Running a strategy.**
//! - [`lab`]: `stock-app` instances as child processes (start, respawn), and the
//!   admin token they take.
//! - [`baseline`]: the reference (conditional UPDATE) transaction over sqlx, no HTTP:
//!   the service's overhead.
//! - [`claims`]: the source articles' claims checked against a run's sales per second,
//!   round by round ([`rate::decisive`]).
//! - [`plan`]: how one strategy is loaded ([`plan::Plan`]), the load options every
//!   subcommand takes ([`plan::LoadArgs`]), and the defaults every run shares.
//! - [`live`]: the live page (`demo --serve`): server-sent events of every run's
//!   progress read from the database, the page embedded.
//! - [`runner`]: one strategy's run, start to verdict ([`runner::Runner`]), and runs
//!   measured in rounds.
//! - [`demo`]: the demo's options and the [`demo::Stage`] its sections run on (the
//!   servers, two plain instances, the catalogue, the live page).
//! - [`chapter`]: what a section is ([`chapter::Chapter`]): run on its stage, printed,
//!   added to the report, drawn in the HTML page, and given its book pages, the last
//!   two from the report alone ([`chapter::Read`]).
//!
//! **The sections**, each a folder (or a file, when it fits in one) that implements
//! [`chapter::Chapter`]: how it runs, its tables, its HTML and its book pages. The
//! demo's, in the order it runs them:
//! - [`throughput`]: every seller on one hot product, the compare-and-set at little
//!   contention, the baseline without HTTP.
//! - [`one_instance`]: the in-process lock where it works.
//! - [`held`]: what breaks, every deduction held between read and write.
//! - [`far`]: the throughput section at `--far-rtt-ms` from every server.
//! - [`flash`]: the flash sale (one hot product at high concurrency, a sell-out,
//!   the split stock by number of buckets), with what limits each strategy
//!   (`flash::run::Flash`).
//! - [`overload`]: past capacity: each strategy's capacity, then an open loop at a
//!   multiple of it, with and without an admission limit (goodput, p99, `/health`),
//!   and the flood ([`flood`]: a client that does not back off, `wrk`; its page is
//!   the overload section's) (`overload::run::Overload`).
//!
//! And those a subcommand runs on a lab of its own:
//! - [`sweep`]: every strategy across concurrency 1-256, one hot product vs 100
//!   (`loadtest sweep`), drawn as lines (`sweep::run::Scaling`, in the lab
//!   `sweep::run::SweepLab`).
//! - [`distance`]: the sweep at round-trip times (`sweep --rtt-ms`): round trips per
//!   request counted and waited, sales/s against RTT, the ranking claim
//!   (`distance::run::AtDistance`, in the same lab).
//! - [`chaos`]: fault scenarios under load (`loadtest chaos`), judged by the ledger;
//!   one file per fault (`chaos/faults/`) holding its injection and its judgement
//!   (`chaos::run::Grid`: each cell starts the servers its scenario needs).
//!
//! **On top.**
//! - [`page`]: the HTML report: the first screen, then each chapter's part (the
//!   demo's sections of rows, any rows no chapter draws, the sections with parts),
//!   the claims and what each strategy is.
//! - [`book`]: gathers the book's generated pages from the reference run's data (read
//!   into the report's own types): each chapter's pages, the claims, the pages that
//!   read several runs (`strategies`, `checking`), and the pages from the code
//!   (`reference`, the HTTP API's `api`).
//! - the binary: `main.rs` parses the command line; each subcommand lives in
//!   `src/cli/` (`run` against running services; `demo`, what `./scripts/demo` runs;
//!   `sweep`; `chaos`; `book`; `check`): it starts a stage or a lab, runs its
//!   chapters, writes the reports.

pub mod baseline;
pub mod book;
pub mod catalogue;
pub mod chaos;
pub mod chapter;
pub mod claims;
pub mod cost;
pub mod demo;
pub mod distance;
pub mod durability;
pub mod engine;
pub mod far;
pub mod flash;
pub mod flood;
pub mod held;
pub mod history;
pub mod html;
pub mod lab;
pub mod live;
pub mod markdown;
pub mod one_instance;
pub mod overload;
pub mod page;
pub mod plan;
pub mod rate;
pub mod report;
pub mod runner;
pub mod section;
pub mod setup;
pub mod sweep;
pub mod throughput;
pub mod timing;
pub mod verify;
