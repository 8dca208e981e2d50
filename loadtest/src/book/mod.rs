//! The book's generated pages: every measured figure the book shows, rendered from the
//! reference run's data (`book/data/*.json`, written by `scripts/book-data`), and the
//! reference chapters, rendered from the code (`--help`, `GET /openapi.json`,
//! `GET /strategies`, a `/metrics` scrape).
//!
//! The pages are markdown the chapters pull in with mdBook's `{{#include}}`; nothing
//! in them is typed by hand. `loadtest book` writes them, `loadtest book --check` (run
//! by `loadtest/tests/book.rs`) fails when a committed page differs from what the data
//! and the code give: a figure edited by hand, data re-measured without re-rendering,
//! a flag renamed without the reference following.
//!
//! Everything here is a pure function of its inputs, so the same data always renders
//! the same bytes. The data is read into the types that wrote it ([`Written`] reports' rows,
//! the sections' parts), so a field renamed on one side fails to load, not to show.
//!
//! # Layout
//! - this file: the data ([`Data`]) and the two drivers: [`figures`] (the data
//!   pages) and [`reference()`] (the pages from the code). The markdown every page is
//!   made of is [`crate::markdown`], below the sections.
//! - the sections' pages, each its chapter's ([`crate::chapter::Chapter::pages`]),
//!   in its section's folder: `throughput/page.rs` (the table, where the time goes,
//!   the compare-and-set under contention), `one_instance.rs`, `held.rs`,
//!   `far/page.rs`, `flash::page` (the demo's flash sale), `overload::page` (its
//!   past-capacity runs and the flood), `chaos::page` (the fault grid),
//!   `sweep::page` and `distance::page`.
//! - the pages gathered here: [`run`] (machine.json), [`demo`] (the demo's claims),
//!   [`mod@bench`] (the lock library's benchmark), [`checking`] (the histories' verdicts
//!   and a real example of each anomaly), [`strategies`] (the matrix and one page per
//!   strategy, from the demo and the grid together).
//! - the reference pages: [`reference()`] (`--help`, `GET /strategies`, `/metrics`),
//!   [`api`] (the HTTP API from the OpenAPI document), [`prometheus`] (the scrape's
//!   families), [`readme`] (the README's strategy map).

pub mod api;
pub mod bench;
pub mod checking;
pub mod demo;
pub mod one_run;
pub mod prometheus;
pub mod readme;
pub mod reference;
pub mod run;
pub mod strategies;
pub mod words;

pub use readme::{MAP_BEGIN, MAP_END, readme_map, splice};
pub use reference::{Live, reference};

use crate::chapter::{Chapter, Read};
use crate::distance::run::AtDistance;
use crate::far::Far;
use crate::flash::run::Flash;
use crate::held::Held;
use crate::markdown::{Facts, Pages};
use crate::one_instance::OneInstance;
use crate::overload::run::Overload;
use crate::report::{SCHEMA_VERSION, Written};
use crate::sweep::SweepParts;
use crate::throughput::Throughput;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// What the demo adds to its rows: the flash sale and the past-capacity runs.
#[derive(Debug, Clone, Deserialize)]
pub struct DemoParts {
    pub flash_sale: Option<crate::flash::FlashPart>,
    pub overload: Option<crate::overload::OverloadPart>,
}

/// What `loadtest chaos` adds: the fault grid.
#[derive(Debug, Clone, Deserialize)]
pub struct ChaosParts {
    pub faults: crate::chaos::ChaosReport,
}

/// The reference run's data, each file if present.
#[derive(Debug, Default)]
pub struct Data {
    pub machine: Option<run::Machine>,
    pub demo: Option<Written<DemoParts>>,
    pub chaos: Option<Written<ChaosParts>>,
    pub sweep: Option<Written<SweepParts>>,
    pub distance: Option<Written<SweepParts>>,
    pub bench: Option<bench::Bench>,
}

/// The data files, by name (`demo` for `demo.json`), in the order [`Data`] has them.
pub const FILES: [&str; 6] = ["machine", "demo", "chaos", "sweep", "distance", "bench"];

impl Data {
    /// Reads `machine.json`, `demo.json`, `chaos.json`, `sweep.json`, `distance.json`,
    /// `bench.json`.
    pub fn load(dir: &Path) -> anyhow::Result<Data> {
        Data::from_json(&Data::read_json(dir)?)
    }

    /// Each data file present under `dir`, as JSON, by name ([`FILES`]).
    pub fn read_json(dir: &Path) -> anyhow::Result<BTreeMap<&'static str, serde_json::Value>> {
        let mut files = BTreeMap::new();
        for name in FILES {
            let path = dir.join(format!("{name}.json"));
            if !path.exists() {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            let json = serde_json::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: not JSON: {e}", path.display()))?;
            files.insert(name, json);
        }
        Ok(files)
    }

    /// The data from its files' JSON ([`Data::read_json`]), each read into the types
    /// that wrote it; a report of another schema version is refused.
    pub fn from_json(files: &BTreeMap<&'static str, serde_json::Value>) -> anyhow::Result<Data> {
        fn read<T: serde::de::DeserializeOwned>(
            files: &BTreeMap<&'static str, serde_json::Value>,
            name: &str,
        ) -> anyhow::Result<Option<T>> {
            let Some(json) = files.get(name) else {
                return Ok(None);
            };
            if let Some(version) = json.get("version").and_then(serde_json::Value::as_u64) {
                anyhow::ensure!(
                    version == u64::from(SCHEMA_VERSION),
                    "{name}.json is a version {version} report; this loadtest reads version {SCHEMA_VERSION} (re-measure it with scripts/book-data {name})"
                );
            }
            let data = T::deserialize(json)
                .map_err(|e| anyhow::anyhow!("{name}.json: not what loadtest writes: {e}"))?;
            Ok(Some(data))
        }
        Ok(Data {
            machine: read(files, "machine")?,
            demo: read(files, "demo")?,
            chaos: read(files, "chaos")?,
            sweep: read(files, "sweep")?,
            distance: read(files, "distance")?,
            bench: read(files, "bench")?,
        })
    }
}

/// Every file under `dir` (none if it does not exist), by path relative to it, with
/// its text: the generated pages as they are on disk.
pub fn read_tree(dir: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir)?.to_string_lossy().replace('\\', "/");
                out.insert(rel, std::fs::read_to_string(&path)?);
            }
        }
    }
    Ok(out)
}

/// Every page rendered from the data, by path under the generated directory.
pub fn figures(data: &Data) -> Pages {
    let mut pages = BTreeMap::new();
    let mut facts = Facts::default();
    if let Some(machine) = &data.machine {
        pages.insert("run.md".to_string(), run::page(machine));
        facts.add("run-date", machine.date.clone());
    }
    if let Some(demo) = &data.demo {
        let strategies = demo.strategies.names().count();
        facts.add("strategy-count", strategies.to_string());
        let (pages, facts) = (&mut pages, &mut facts);
        chapter::<Throughput, _>(demo, None, pages, facts);
        chapter::<crate::durability::Durability, _>(demo, None, pages, facts);
        chapter::<OneInstance, _>(demo, None, pages, facts);
        chapter::<Held, _>(demo, None, pages, facts);
        chapter::<Far, _>(demo, None, pages, facts);
        chapter::<Flash, _>(demo, demo.parts.flash_sale.as_ref(), pages, facts);
        chapter::<Overload, _>(demo, demo.parts.overload.as_ref(), pages, facts);
        with_setup(pages, &demo.machine, |pages| demo::claims_page(demo, pages));
    }
    if let Some(chaos) = &data.chaos {
        let grid = Some(&chaos.parts.faults);
        chapter::<crate::chaos::run::Grid, _>(chaos, grid, &mut pages, &mut facts);
    }
    if let Some(sweep) = &data.sweep {
        let info = Some(&sweep.parts.sweep);
        chapter::<crate::sweep::run::Scaling, _>(sweep, info, &mut pages, &mut facts);
    }
    if let Some(distance) = &data.distance {
        let info = Some(&distance.parts.sweep);
        chapter::<AtDistance, _>(distance, info, &mut pages, &mut facts);
    }
    if let Some(bench) = &data.bench {
        with_setup(&mut pages, &bench.machine, |pages| {
            bench::pages(bench, pages, &mut facts)
        });
    }
    checking::pages(data, &mut pages);
    strategies::pages(data, &mut pages);
    // The matrix compares the demo's figures: its setup.
    if let (Some(matrix), Some(demo)) = (strategies::matrix_page(data), &data.demo) {
        with_setup(&mut pages, &demo.machine, |pages| {
            pages.insert("matrix.md".to_string(), matrix);
        });
    }
    pages.insert("facts.md".to_string(), facts.render());
    pages
}

/// One chapter's pages, from a report the book read and the chapter's part of it.
fn chapter<C: Chapter, P>(
    written: &Written<P>,
    part: Option<&C::Part>,
    pages: &mut Pages,
    facts: &mut Facts,
) {
    let report = Read {
        results: &written.results,
        strategies: &written.strategies,
        claims: &written.claims,
        generated_at: written.generated_at,
        part,
    };
    with_setup(pages, &written.machine, |pages| {
        C::pages(&report, pages, facts)
    });
}

/// Adds pages with `add`, and opens every page it added with the setup its run
/// stated, under the page's banner: every comparison says what it ran on.
fn with_setup(pages: &mut Pages, machine: &crate::report::Machine, add: impl FnOnce(&mut Pages)) {
    let before: BTreeSet<String> = pages.keys().cloned().collect();
    add(pages);
    let Some(setup) = crate::setup::line(machine) else {
        return;
    };
    for (path, page) in pages.iter_mut() {
        if !before.contains(path) {
            let at = page.find('\n').map_or(0, |n| n + 1);
            page.insert_str(at, &format!("{setup}\n\n"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markdown::rows::tests::{report, row};

    /// The same data renders the same pages, and a changed figure changes its page.
    #[test]
    fn figures_follow_the_data() {
        let demo = report(vec![row("throughput", "s", 1234.4)]);
        let data = |demo: &serde_json::Value| {
            Data::from_json(&BTreeMap::from([("demo", demo.clone())])).unwrap()
        };
        let pages = figures(&data(&demo));
        assert!(
            pages["demo/throughput.md"].contains("| 1234 (1200–1250) |"),
            "{}",
            pages["demo/throughput.md"]
        );
        assert_eq!(pages, figures(&data(&demo)));
        let mut changed = demo;
        changed["results"][0]["sales"]["per_second"] = serde_json::json!(999.0);
        let other = figures(&data(&changed));
        assert_ne!(pages["demo/throughput.md"], other["demo/throughput.md"]);
        assert!(other["facts.md"].contains("ANCHOR: throughput-s\n999\n"));
    }

    /// A report of another schema version is refused, naming its file.
    #[test]
    fn another_schema_version_is_refused() {
        let mut demo = report(Vec::new());
        demo["version"] = serde_json::json!(1);
        let error = Data::from_json(&BTreeMap::from([("demo", demo)])).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("demo.json is a version 1 report"),
            "{error}"
        );
    }

    /// The RTT sweep's pages: sales/s per round-trip time with the far/near ratio, the
    /// round trips by kind of server, the claim under them, the run's own date.
    #[test]
    fn distance_pages_show_rates_ratios_and_round_trips() {
        let cell = |section: &str, sold: f64| {
            let mut r = row(section, "atomic-sql", sold);
            r["latency_ms"]["p99"] = serde_json::json!(9.0);
            r
        };
        let mut distance = report(vec![
            cell("sweep: 1 product, RTT 0 ms", 1000.0),
            cell("sweep: 1 product, RTT 2 ms", 130.0),
            cell("sweep: 1 product", 1800.0),
        ]);
        distance["sweep"] = serde_json::json!({"rtts_ms": [0.0, 2.0], "concurrencies": [64],
            "products": [1], "cell_seconds": 2.5, "requests_rule": "", "seconds": 9.0,
            "round_trips": [{"strategy": "atomic-sql", "sale": {"database": 7.0},
                "refusal": {"database": 8.0, "redis": 0.1},
                "sequential_sale": 6.4, "sequential_refusal": 6.3}]});
        distance["claims"] = serde_json::json!([{"claim": "C", "source": "S", "section": "",
            "load": "", "verdict": "inconclusive", "evidence": "E"}]);
        let data = Data::from_json(&BTreeMap::from([("distance", distance)])).unwrap();
        let pages = figures(&data);
        let rates = &pages["distance/1-product.md"];
        assert!(rates.contains("measured 2026-11-25"), "{rates}");
        assert!(rates.contains("no proxy †"), "{rates}");
        assert!(
            rates.contains(
                "| [`atomic-sql`](atomic-sql.md) | 1800 | 1000 | 130 | 0.13× | 9.0 | safe |"
            ),
            "{rates}"
        );
        let trips = &pages["distance/round-trips.md"];
        assert!(
            trips.contains("| database 7 | 6.4 | database 8, redis 0.1 | 6.3 |"),
            "{trips}"
        );
        assert!(
            trips.contains("**Claim**: C → **inconclusive**. E"),
            "{trips}"
        );
    }
}
