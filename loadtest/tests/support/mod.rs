//! Shared by the loadtest test binaries (`mod support;`).

use loadtest::report::Report;
use std::path::PathBuf;

/// The `stock-app` binary of this build (built here if `cargo nextest run -p
/// loadtest` did not build it).
#[allow(dead_code)] // not every test binary starts instances
pub fn app_bin() -> PathBuf {
    if let Ok(path) = loadtest::lab::app_bin(None) {
        return path;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let status = std::process::Command::new(cargo)
        .args(["build", "-p", "stock-app", "--bin", "stock-app"])
        .current_dir(root)
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build -p stock-app failed");
    loadtest::lab::app_bin(None).expect("stock-app built")
}

/// Asserts that `report`, as written to disk, matches the documented schema
/// (`loadtest/report.schema.json`, JSON Schema 2020-12); `what` names it on failure.
#[allow(dead_code)] // not every test binary writes a report
pub fn assert_matches_schema(report: &Report, what: &str) {
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../report.schema.json")).expect("the schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let instance = serde_json::to_value(report).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&instance)
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not match its schema: {errors:?}"
    );
}
