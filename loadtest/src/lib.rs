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
//! - [`html`]: the self-contained HTML page: its first screen, tables and SVG charts.
//! - [`markdown`]: what the book's generated pages are made of (tables, the banner,
//!   the facts, what every page says of a row).
//!
//! **Running a strategy.**
//! - [`lab`]: `stock-app` instances as child processes (start, respawn).
//! - [`baseline`]: the reference (conditional UPDATE) transaction over sqlx, no HTTP:
//!   the service's overhead.
//! - [`claims`]: the source articles' claims checked against a run's sales per second,
//!   round by round ([`rate::decisive`]).
//! - [`plan`]: how one strategy is loaded ([`plan::Plan`]) and the defaults every run
//!   shares.
//! - [`live`]: the live page (`demo --serve`): server-sent events of every run's
//!   progress read from the database, the page embedded.
//! - [`runner`]: one strategy's run, start to verdict ([`runner::Runner`]), and runs
//!   measured in rounds.
//!
//! **The sections**: what each measures, its table and its part of the HTML report
//! (`mod.rs`), and its book page (`page.rs`), in a folder of its own (the flood, one
//! file, has its page in the overload section's):
//! - [`sweep`]: every strategy across concurrency 1-256, one hot product vs 100
//!   (`loadtest sweep`), drawn as lines.
//! - [`flash`]: the flash sale (one hot product at high concurrency, a sell-out,
//!   the split stock by number of buckets), with what limits each strategy.
//! - [`flood`]: past capacity against a client that does not back off (`wrk`): each
//!   setting's goodput, admitted p99, 429/s, `/health` and the CPU split (its page is
//!   the overload section's).
//! - [`chaos`]: fault scenarios under load (`loadtest chaos`), judged by the ledger;
//!   one file per fault (`chaos/faults/`) holding its injection and its judgement.
//! - [`distance`]: the sweep at round-trip times (`sweep --rtt-ms`): round trips per
//!   request counted and waited, sales/s against RTT, the ranking claim.
//! - [`overload`]: past capacity: each strategy's capacity, then an open loop at a
//!   multiple of it, with and without an admission limit (goodput, p99, `/health`).
//!
//! **On top.**
//! - [`book`]: gathers the book's generated pages from the reference run's data (read
//!   into the report's own types): each section's `page`, the demo's own sections
//!   (`book::demo`), the pages that read several runs (`strategies`, `checking`), and
//!   the pages from the code (`reference`, the HTTP API's `api`).
//! - the binary: `main.rs` parses the command line; each subcommand lives in
//!   `src/cli/` (`run` against running services; `demo`, what `./scripts/demo` runs,
//!   one file per demo section in `cli/demo/`; `sweep`; `chaos`), which start
//!   everything themselves.

pub mod baseline;
pub mod book;
pub mod catalogue;
pub mod chaos;
pub mod claims;
pub mod cost;
pub mod distance;
pub mod engine;
pub mod flash;
pub mod flood;
pub mod history;
pub mod html;
pub mod lab;
pub mod live;
pub mod markdown;
pub mod overload;
pub mod plan;
pub mod rate;
pub mod report;
pub mod runner;
pub mod section;
pub mod sweep;
pub mod timing;
pub mod verify;
