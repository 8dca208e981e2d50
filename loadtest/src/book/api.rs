//! The HTTP API page, from the service's `GET /openapi.json`: an index of the
//! endpoints, each one's parameters, body and answers, then the schemas.
//!
//! The document is read as [`Value`]: `utoipa` writes it in the service, not a type
//! of `loadtest`'s, and the page walks only the few OpenAPI fields it shows.

use super::{banner, table, yes_no};
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
            if let Some(props) = schema["properties"].as_object() {
                let required: Vec<&str> = schema["required"]
                    .as_array()
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let body: Vec<Vec<String>> = props
                    .iter()
                    .map(|(field, p)| {
                        vec![
                            format!("`{field}`"),
                            schema_name(p),
                            yes_no(required.contains(&field.as_str())),
                            text(&p["description"]),
                        ]
                    })
                    .collect();
                page.push_str(&table(&["field", "type", "required", "meaning"], &body));
            } else if let Some(values) = schema["enum"].as_array() {
                let values: Vec<String> = values.iter().map(|v| format!("`{}`", text(v))).collect();
                let _ = writeln!(page, "One of: {}.", values.join(", "));
            }
        }
    }
    page
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
    match &schema["type"] {
        Value::String(t) => t.clone(),
        Value::Array(ts) => ts.iter().map(text).collect::<Vec<_>>().join(" or "),
        _ => String::new(),
    }
}
