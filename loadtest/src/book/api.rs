//! The HTTP API page, from the service's `GET /openapi.json`: an index of the
//! endpoints, each one's parameters, body and answers, then the schemas.
//!
//! The document is read as [`Value`]: `utoipa` writes it in the service, not a type
//! of `loadtest`'s, and the page walks only the few OpenAPI fields it shows.

use crate::markdown::{banner, table, yes_no};
use serde_json::Value;
use std::fmt::Write as _;

fn text(v: &Value) -> String {
    v.as_str().map(str::to_string).unwrap_or_default()
}

/// `reference/http-api.md`.
pub fn page(doc: &Value) -> String {
    let mut page = banner("the service's `GET /openapi.json`");
    let _ = writeln!(page, "{}\n", text(&doc["info"]["description"]));
    let mut index = Vec::new();
    let mut details = String::new();
    if let Some(paths) = doc["paths"].as_object() {
        for (path, ops) in paths {
            let Some(ops) = ops.as_object() else { continue };
            for (method, op) in ops {
                let method = method.to_uppercase();
                // The summary opens with the route itself (`GET /health`: ...): the
                // index keeps what follows it.
                let summary = text(&op["summary"]);
                let what = summary
                    .strip_prefix(&format!("`{method} {path}`"))
                    .unwrap_or(&summary)
                    .trim_start_matches([':', '.', ' '])
                    .to_string();
                // Nothing after the route: the description's first sentence.
                let what = if what.is_empty() {
                    let description = text(&op["description"]);
                    description
                        .split_once(". ")
                        .map_or(description.clone(), |(first, _)| format!("{first}."))
                } else {
                    what
                };
                let what = without_doc_links(&what);
                index.push(vec![format!("`{method} {path}`"), what]);
                let _ = writeln!(details, "\n### `{method} {path}`\n");
                let description = without_doc_links(&text(&op["description"]));
                if !description.is_empty() {
                    let _ = writeln!(details, "{description}\n");
                }
                if let Some(params) = op["parameters"].as_array() {
                    let body: Vec<Vec<String>> = params
                        .iter()
                        .map(|p| {
                            vec![
                                format!("`{}`", text(&p["name"])),
                                text(&p["in"]),
                                yes_no(p["required"] == true),
                                text(&p["description"]),
                            ]
                        })
                        .collect();
                    details.push_str(&table(&["parameter", "in", "required", "meaning"], &body));
                    details.push('\n');
                }
                if let Some(content) = op["requestBody"]["content"].as_object() {
                    for (kind, media) in content {
                        let _ = writeln!(
                            details,
                            "Request body ({kind}): {}\n",
                            schema_name(&media["schema"])
                        );
                    }
                }
                if let Some(responses) = op["responses"].as_object() {
                    let body: Vec<Vec<String>> = responses
                        .iter()
                        .map(|(code, r)| {
                            let schema = r["content"]
                                .as_object()
                                .and_then(|c| c.values().next())
                                .map(|m| schema_name(&m["schema"]))
                                .unwrap_or_default();
                            vec![format!("{code}"), text(&r["description"]), schema]
                        })
                        .collect();
                    details.push_str(&table(&["status", "when", "body"], &body));
                }
            }
        }
    }
    page.push_str(&table(&["endpoint", "what it does"], &index));
    page.push_str(&details);
    if let Some(schemas) = doc["components"]["schemas"].as_object() {
        let _ = writeln!(page, "\n## Schemas\n");
        for (name, schema) in schemas {
            let _ = writeln!(page, "\n### `{name}`\n");
            let description = text(&schema["description"]);
            if !description.is_empty() {
                let _ = writeln!(page, "{description}\n");
            }
            schema_body(doc, schema, &mut page);
        }
    }
    page
}

/// A schema's fields: its own properties and every `allOf` member's (a `$ref`
/// followed) in one table; then each `oneOf`/`anyOf` alternative, with its fields, or
/// said in words when it only asks which fields are given (a rule between fields);
/// else an enumeration's values.
fn schema_body(doc: &Value, schema: &Value, page: &mut String) {
    let mut rows = Vec::new();
    fields(doc, schema, &mut rows);
    if !rows.is_empty() {
        page.push_str(&table(&["field", "type", "required", "meaning"], &rows));
    }
    let forms = alternatives(doc, schema);
    if !forms.is_empty() {
        let _ = writeln!(page, "\nOne of these forms:");
        for (i, form) in forms.iter().enumerate() {
            let form = resolve(doc, form);
            let mut rows = Vec::new();
            fields(doc, form, &mut rows);
            if rows.is_empty() {
                let _ = writeln!(page, "{}. {}", i + 1, given(form));
            } else {
                let description = text(&form["description"]);
                let said = if description.is_empty() {
                    String::new()
                } else {
                    format!(" {description}")
                };
                let _ = writeln!(page, "\n**Form {}.**{said}\n", i + 1);
                page.push_str(&table(&["field", "type", "required", "meaning"], &rows));
            }
        }
    }
    if rows.is_empty()
        && forms.is_empty()
        && let Some(values) = schema["enum"].as_array()
    {
        let values: Vec<String> = values.iter().map(|v| format!("`{}`", text(v))).collect();
        let _ = writeln!(page, "One of: {}.", values.join(", "));
    }
}

/// The schema a `$ref` points to in the document's components (any other as it is).
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str().and_then(|r| r.strip_prefix("#/")) {
        Some(path) => path.split('/').fold(doc, |at, key| &at[key]),
        None => schema,
    }
}

/// The rows of `schema`'s own properties and its `allOf` members'.
fn fields(doc: &Value, schema: &Value, rows: &mut Vec<Vec<String>>) {
    let schema = resolve(doc, schema);
    if let Some(props) = schema["properties"].as_object() {
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (field, p) in props {
            rows.push(vec![
                format!("`{field}`"),
                schema_name(p),
                yes_no(required.contains(&field.as_str())),
                text(&p["description"]),
            ]);
        }
    }
    for member in schema["allOf"].as_array().into_iter().flatten() {
        fields(doc, member, rows);
    }
}

/// The `oneOf`/`anyOf` alternatives of `schema` and of its `allOf` members.
fn alternatives<'a>(doc: &'a Value, schema: &'a Value) -> Vec<&'a Value> {
    let schema = resolve(doc, schema);
    let mut forms: Vec<&Value> = ["oneOf", "anyOf"]
        .iter()
        .filter_map(|key| schema[*key].as_array())
        .flatten()
        .collect();
    for member in schema["allOf"].as_array().into_iter().flatten() {
        forms.extend(alternatives(doc, member));
    }
    forms
}

/// An alternative that only asks which fields are given: "with `a`, without `b`, `c`".
fn given(form: &Value) -> String {
    let names = |required: &Value| -> Vec<String> {
        let list = required.as_array().into_iter().flatten();
        list.map(|f| format!("`{}`", text(f))).collect()
    };
    let with = names(&form["required"]);
    let mut without = names(&form["not"]["required"]);
    for any in form["not"]["anyOf"].as_array().into_iter().flatten() {
        without.extend(names(&any["required"]));
    }
    let mut said = format!("with {}", with.join(", "));
    if !without.is_empty() {
        let _ = write!(said, ", without {}", without.join(", "));
    }
    said
}

/// Rustdoc's intra-doc links (``[`Type`]``) as the plain code they read as here.
fn without_doc_links(doc: &str) -> String {
    doc.replace("[`", "`").replace("`]", "`")
}

/// `DeductRequest`, `integer`, `array of ItemRequest`, `string or null`.
fn schema_name(schema: &Value) -> String {
    if let Some(r) = schema["$ref"].as_str() {
        return format!("`{}`", r.rsplit('/').next().unwrap_or(r));
    }
    if let Some(items) = schema.get("items") {
        return format!("array of {}", schema_name(items));
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        if let Some(all) = schema[key].as_array() {
            let names: Vec<String> = all.iter().map(schema_name).collect();
            return names.join(" or ");
        }
    }
    if let Some([only]) = schema["enum"].as_array().map(Vec::as_slice) {
        return format!("`{only}`");
    }
    match &schema["type"] {
        Value::String(t) => t.clone(),
        Value::Array(ts) => ts.iter().map(text).collect::<Vec<_>>().join(" or "),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every field a schema has, however the document composes it (`$ref`, `allOf`,
    /// `oneOf`, `anyOf`).
    fn every_field(doc: &Value, schema: &Value, seen: &mut BTreeSet<String>) {
        let schema = resolve(doc, schema);
        if let Some(props) = schema["properties"].as_object() {
            seen.extend(props.keys().cloned());
        }
        for key in ["allOf", "oneOf", "anyOf"] {
            for member in schema[key].as_array().into_iter().flatten() {
                every_field(doc, member, seen);
            }
        }
    }

    /// The page shows every field of every schema in the service's document in that
    /// schema's own section, `allOf` and `oneOf` followed; and the deduct body's rule
    /// between fields, in words.
    #[test]
    fn every_schema_shows_all_its_fields() {
        let doc: Value = serde_json::from_str(&stock_app::http::openapi::json()).unwrap();
        let page = page(&doc);
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut composed = 0;
        for (name, schema) in schemas {
            let start = page
                .find(&format!("\n### `{name}`\n"))
                .unwrap_or_else(|| panic!("no section for {name}"));
            let rest = &page[start + 1..];
            let section = &rest[..rest.find("\n### ").unwrap_or(rest.len())];
            let mut fields = BTreeSet::new();
            every_field(&doc, schema, &mut fields);
            for field in &fields {
                assert!(
                    section.contains(&format!("`{field}`")),
                    "{name}: `{field}` is not shown:\n{section}"
                );
            }
            if ["allOf", "oneOf", "anyOf"]
                .iter()
                .any(|k| schema.get(*k).is_some())
            {
                composed += 1;
            }
            assert!(
                !fields.is_empty() || section.contains("One of"),
                "{name} shows nothing:\n{section}"
            );
        }
        assert!(composed >= 2, "the document composes schemas: {composed}");
        assert!(
            page.contains("with `items`, without `product_id`, `quantity`"),
            "the deduct body's forms"
        );
    }
}
