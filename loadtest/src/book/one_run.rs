//! One run behind every figure: the data files name the run they came from, and a
//! figure one page shows as another section's (the sweep's cells marked †, "the
//! demo's figure for the same setup") is that section's figure.
//!
//! `scripts/book-data` measures the parts one after another and names the run in
//! each file (`machine.json`'s `run`, each report's [`crate::report::Report::run`]);
//! a part re-measured alone gets a run of its own, so the book can say which of its
//! figures are not from the reference run. `loadtest book --check` fails on every
//! difference this module finds.

use super::Data;
use crate::report::Row;

/// Every way the data is not one run, each said in a line (none: one run).
pub fn problems(data: &Data) -> Vec<String> {
    let mut out = runs(data);
    if let Some(demo) = &data.demo {
        out.extend(baseline_bounds(&demo.results, &demo.strategies));
    }
    // The sources a copy may come from: the demo's rows, and the sweep's for the
    // distance (its loopback cells); a copy whose source file is missing is named.
    let demo = data.demo.as_ref().map(|d| &d.results);
    let sweep = data.sweep.as_ref().map(|s| &s.results);
    if let Some(sweep) = sweep {
        out.extend(copies(
            "sweep.json",
            sweep,
            &demo.into_iter().collect::<Vec<_>>(),
        ));
    }
    if let Some(distance) = &data.distance {
        let sources: Vec<&Vec<Row>> = demo.into_iter().chain(sweep).collect();
        out.extend(copies("distance.json", &distance.results, &sources));
    }
    out
}

/// Each data file's run against `machine.json`'s (without it, against the first
/// file's).
fn runs(data: &Data) -> Vec<String> {
    let files = [
        ("demo.json", data.demo.as_ref().map(|d| &d.run)),
        ("chaos.json", data.chaos.as_ref().map(|d| &d.run)),
        ("sweep.json", data.sweep.as_ref().map(|d| &d.run)),
        ("distance.json", data.distance.as_ref().map(|d| &d.run)),
        ("bench.json", data.bench.as_ref().map(|d| &d.run)),
    ];
    let present: Vec<(&str, &Option<String>)> = files
        .into_iter()
        .filter_map(|(file, of)| Some((file, of?)))
        .collect();
    let (against, run) = match &data.machine {
        Some(machine) => match &machine.run {
            Some(run) => ("machine.json", run),
            None => {
                return vec!["machine.json names no run (scripts/book-data names it)".into()];
            }
        },
        None => match present.first() {
            Some((file, Some(run))) => (*file, run),
            Some((file, None)) => return vec![format!("{file} names no run")],
            None => return Vec::new(),
        },
    };
    present
        .into_iter()
        .filter(|(_, of)| of.as_ref() != Some(run))
        .map(|(file, of)| {
            format!(
                "{file} is from run {}, {against} from run {run}: re-measure the whole book (scripts/book-data)",
                of.as_deref().unwrap_or("(none named)")
            )
        })
        .collect()
}

/// The book says the baseline (the reference's transaction with no HTTP) bounds the
/// reference from above: true of the run's throughput section, or said here.
fn baseline_bounds(rows: &[Row], strategies: &crate::catalogue::Catalogue) -> Vec<String> {
    let throughput = crate::report::section(rows, &crate::section::Section::Throughput);
    let rate = |name: &str| {
        throughput
            .iter()
            .find(|r| r.strategy == name)
            .map(|r| r.sales.per_second)
    };
    let reference = strategies.first_with(stock_wire::Trait::ConditionalUpdate);
    match (rate("baseline"), reference.and_then(|r| rate(&r.name))) {
        (Some(baseline), Some(reference)) if baseline < reference => vec![format!(
            "demo.json: the baseline sold {baseline:.1} sales/s, the reference {reference:.1}: the book says the baseline bounds it from above"
        )],
        _ => Vec::new(),
    }
}

/// Each row of `rows` shown as another section's (`measured_in`) against that
/// section's row of the same cell in `sources`: equal in every figure.
fn copies(file: &str, rows: &[Row], sources: &[&Vec<Row>]) -> Vec<String> {
    let mut out = Vec::new();
    for row in rows {
        let Some(measured_in) = &row.measured_in else {
            continue;
        };
        let original = sources
            .iter()
            .flat_map(|rows| rows.iter())
            .find(|s| same_cell(s, row) && s.section.to_string() == *measured_in);
        let cell = format!(
            "{file}: {} at {} in flight on {} product(s){}",
            row.strategy,
            row.concurrency,
            row.products,
            row.rtt_ms
                .map_or(String::new(), |r| format!(", RTT {r} ms"))
        );
        match original {
            None => out.push(format!(
                "{cell} says it is the {measured_in} section's figure; that section has no such row"
            )),
            Some(original) if !same(&figures(original), &figures(row)) => out.push(format!(
                "{cell} shows {:.1} sales/s as the {measured_in} section's figure, which is {:.1}",
                row.sales.per_second, original.sales.per_second
            )),
            Some(_) => {}
        }
    }
    out
}

/// Whether two rows measure the same cell: strategy, layout, load and distance.
fn same_cell(a: &Row, b: &Row) -> bool {
    a.strategy == b.strategy
        && a.products == b.products
        && a.concurrency == b.concurrency
        && a.rtt_ms == b.rtt_ms
        && a.timed_s == b.timed_s
}

/// Whether two rows' figures are the same: equal, numbers to the last digit or two a
/// JSON round trip may move (a copied row was read and written again).
fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// A row's figures: everything it says but where it is shown.
fn figures(row: &Row) -> serde_json::Value {
    let mut json = serde_json::to_value(row).unwrap_or_default();
    if let Some(fields) = json.as_object_mut() {
        fields.remove("section");
        fields.remove("measured_in");
    }
    json
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markdown::rows::tests::row;
    use crate::section::Section;

    fn demo_row() -> Row {
        serde_json::from_value(row("throughput", "atomic-sql", 939.0)).unwrap()
    }

    /// A sweep whose † cell is the demo's passes; one figure changed in it fails,
    /// naming the cell and both figures.
    #[test]
    fn a_copied_cell_must_equal_its_original() {
        let demo = vec![demo_row()];
        let copied = Row {
            section: Section::Sweep {
                products: 1,
                rtt_ms: None,
            },
            measured_in: Some("throughput".into()),
            ..demo[0].clone()
        };
        assert!(copies("sweep.json", std::slice::from_ref(&copied), &[&demo]).is_empty());
        let mut changed = copied.clone();
        changed.sales.per_second = 1572.0;
        let found = copies("sweep.json", &[changed], &[&demo]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("atomic-sql") && found[0].contains("1572.0"),
            "{found:?}"
        );
        assert!(found[0].contains("939.0"), "{found:?}");
        let elsewhere = Row {
            measured_in: Some("flash-sale".into()),
            ..copied
        };
        assert_eq!(copies("sweep.json", &[elsewhere], &[&demo]).len(), 1);
    }

    /// A data file from another run than machine.json's is named, with both runs.
    #[test]
    fn a_file_of_another_run_is_named() {
        let machine = serde_json::json!({"run": "r1", "date": "2026-11-29", "commit": "abc",
            "cores": 2, "cpu": "x", "memory_gib": 1, "os": "x", "kernel": "x", "rustc": "x",
            "servers": {}});
        let bench = |run: &str| {
            serde_json::json!({"run": run, "uncontended": [], "contended_seconds": 1.0,
                "contended": []})
        };
        let data = |run: &str| Data {
            machine: Some(serde_json::from_value(machine.clone()).unwrap()),
            bench: Some(serde_json::from_value(bench(run)).unwrap()),
            ..Data::default()
        };
        assert!(problems(&data("r1")).is_empty());
        let found = problems(&data("r2"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("bench.json is from run r2") && found[0].contains("r1"));
    }
}
