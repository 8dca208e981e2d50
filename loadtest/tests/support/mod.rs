//! Shared by the loadtest test binaries (`mod support;`).

use loadtest::report::Report;

/// Asserts that `report`, as written to disk, matches the documented schema
/// (`loadtest/report.schema.json`, JSON Schema 2020-12); `what` names it on failure.
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
