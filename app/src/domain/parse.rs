//! Parsing a deduction request from JSON, field by field.
//!
//! The body is read as a `serde_json::Value` and checked by hand rather than derived
//! with serde, so that every rejection names the field and the rule it broke
//! (`items[2].quantity must be an integer from 1 to 1000000`) instead of serde's
//! "invalid type at line 1 column 30". What a rejection repeats of the input is cut
//! ([`clip`]).

use super::error::DeductError;
use super::order::{Item, MAX_REQUEST_ID, Order, is_valid_request_id};
use serde_json::{Map, Value};
use std::borrow::Cow;

/// Largest quantity one item may ask for.
pub const MAX_QUANTITY: i64 = 1_000_000;
/// Most items one order may hold.
pub const MAX_ITEMS: usize = 100;

/// The most characters of client input an error body or a log line repeats.
pub const ECHO_LIMIT: usize = 64;

/// `s`, cut to [`ECHO_LIMIT`] characters (marked with `…` when cut): what an error
/// repeats of a value it did not choose (a path segment, a key, a name).
pub fn clip(s: &str) -> Cow<'_, str> {
    clip_to(s, ECHO_LIMIT)
}

/// `s`, cut to `limit` characters (marked with `…` when cut): for a whole message
/// that quotes input in ways the service does not control (a parser's error).
pub fn clip_to(s: &str, limit: usize) -> Cow<'_, str> {
    match s.char_indices().nth(limit) {
        None => Cow::Borrowed(s),
        Some((end, _)) => Cow::Owned(format!("{}…", &s[..end])),
    }
}

impl Order {
    /// Validates the fields of a deduct body. `generated_id` becomes the request id
    /// when the body has none; `also_read` names fields someone else reads (the test
    /// hooks), which are not refused as unknown.
    pub fn parse(
        fields: &Map<String, Value>,
        generated_id: &str,
        also_read: &[&str],
    ) -> Result<Order, DeductError> {
        const ALLOWED: &str = "product_id, quantity, items, request_id";
        for key in fields.keys() {
            match key.as_str() {
                "product_id" | "quantity" | "items" | "request_id" => {}
                other if also_read.contains(&other) => {}
                unknown => {
                    return Err(invalid(format!(
                        "unknown field `{}`; allowed: {ALLOWED}",
                        clip(unknown)
                    )));
                }
            }
        }
        let request_id = match fields.get("request_id") {
            None => generated_id.to_string(),
            Some(value) => parse_request_id(value)?,
        };
        let items = match (fields.get("items"), fields.contains_key("product_id")) {
            (Some(_), true) => {
                return Err(invalid(
                    "give either product_id (with quantity) or items, not both",
                ));
            }
            (Some(_), false) if fields.contains_key("quantity") => {
                return Err(invalid(
                    "quantity belongs inside each item when items is given",
                ));
            }
            (Some(items), false) => parse_items(items)?,
            (None, true) => vec![parse_item(fields, "")?],
            (None, false) => return Err(invalid("product_id is required (or items)")),
        };
        Ok(Order { request_id, items })
    }
}

fn invalid(detail: impl Into<String>) -> DeductError {
    DeductError::InvalidRequest(detail.into())
}

fn parse_request_id(value: &Value) -> Result<String, DeductError> {
    match value.as_str() {
        Some(s) if is_valid_request_id(s) => Ok(s.to_string()),
        _ => Err(invalid(format!(
            "request_id must be a string of 1 to {MAX_REQUEST_ID} characters from A-Z a-z 0-9 . _ : -"
        ))),
    }
}

fn parse_items(value: &Value) -> Result<Vec<Item>, DeductError> {
    let Some(list) = value.as_array() else {
        return Err(invalid(
            "items must be an array of {\"product_id\", \"quantity\"} objects",
        ));
    };
    if list.is_empty() || list.len() > MAX_ITEMS {
        return Err(invalid(format!(
            "items must hold 1 to {MAX_ITEMS} items, got {}",
            list.len()
        )));
    }
    let mut items = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let prefix = format!("items[{i}].");
        let Value::Object(fields) = entry else {
            return Err(invalid(format!("items[{i}] must be an object")));
        };
        if let Some(unknown) = fields
            .keys()
            .find(|k| !matches!(k.as_str(), "product_id" | "quantity"))
        {
            return Err(invalid(format!(
                "unknown field `{prefix}{}`; allowed: product_id, quantity",
                clip(unknown)
            )));
        }
        let item = parse_item(fields, &prefix)?;
        if items
            .iter()
            .any(|seen: &Item| seen.product_id == item.product_id)
        {
            return Err(invalid(format!(
                "items: product {} is listed twice; list each product once",
                item.product_id
            )));
        }
        items.push(item);
    }
    Ok(items)
}

fn parse_item(fields: &Map<String, Value>, prefix: &str) -> Result<Item, DeductError> {
    let product_id = match fields.get("product_id") {
        None => return Err(invalid(format!("{prefix}product_id is required"))),
        Some(v) => match v.as_i64() {
            Some(id) if id >= 1 => id,
            _ => {
                return Err(invalid(format!(
                    "{prefix}product_id must be a positive integer"
                )));
            }
        },
    };
    let quantity = match fields.get("quantity") {
        None => 1,
        Some(Value::Null) => {
            return Err(invalid(format!(
                "{prefix}quantity must not be null (omit it to deduct 1)"
            )));
        }
        Some(v) => match v.as_i64() {
            Some(q) if (1..=MAX_QUANTITY).contains(&q) => q as i32,
            _ => {
                return Err(invalid(format!(
                    "{prefix}quantity must be an integer from 1 to {MAX_QUANTITY}"
                )));
            }
        },
    };
    Ok(Item {
        product_id,
        quantity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Order, String> {
        let fields = v.as_object().expect("an object");
        Order::parse(fields, "generated", &[]).map_err(|e| e.to_string())
    }

    /// The single form defaults quantity to 1 and takes the generated id.
    #[test]
    fn single_item_defaults() {
        let order = parse(json!({"product_id": 7})).unwrap();
        assert_eq!(
            order.items,
            vec![Item {
                product_id: 7,
                quantity: 1
            }]
        );
        assert_eq!(order.request_id, "generated");
    }

    /// Each rejection names the field it is about.
    #[test]
    fn rejections_name_the_field() {
        let cases = [
            (json!({"product_id": 1, "colour": "red"}), "`colour`"),
            (json!({"quantity": 1}), "product_id is required"),
            (json!({"product_id": 1, "quantity": 0}), "quantity"),
            (json!({"product_id": 1, "quantity": -1}), "quantity"),
            (
                json!({"product_id": 1, "quantity": 2147483648_i64}),
                "quantity",
            ),
            (
                json!({"product_id": 1, "quantity": 9223372036854775808_u64}),
                "quantity",
            ),
            (json!({"product_id": 1, "quantity": "1"}), "quantity"),
            (json!({"product_id": 1, "quantity": 1.5}), "quantity"),
            (
                json!({"product_id": 1, "quantity": null}),
                "must not be null",
            ),
            (json!({"product_id": -1}), "product_id"),
            (json!({"items": []}), "items must hold"),
            (
                json!({"items": [{"product_id": 1}, {"product_id": 1}]}),
                "listed twice",
            ),
            (
                json!({"items": [{"product_id": 1}], "product_id": 1}),
                "not both",
            ),
            (
                json!({"items": [{"product_id": 1, "quantity": 0}]}),
                "items[0].quantity",
            ),
            (json!({"product_id": 1, "request_id": "a b"}), "request_id"),
            (
                json!({"product_id": 1, "request_id": "x".repeat(65)}),
                "request_id",
            ),
            (json!({"product_id": 1, "request_id": ""}), "request_id"),
            (json!({"product_id": 1, "hold_ms": 5}), "`hold_ms`"),
        ];
        for (body, expected) in cases {
            let err = parse(body.clone()).expect_err(&body.to_string());
            assert!(
                err.contains(expected),
                "{body}: `{err}` does not mention `{expected}`"
            );
        }
        let many: Vec<Value> = (1..=101).map(|i| json!({"product_id": i})).collect();
        assert!(
            parse(json!({ "items": many }))
                .unwrap_err()
                .contains("got 101")
        );
    }

    /// Two spellings of the same request share a fingerprint; a change does not.
    #[test]
    fn fingerprint_is_about_meaning() {
        let a = parse(json!({"product_id": 1})).unwrap();
        let b = parse(json!({"items": [{"product_id": 1, "quantity": 1}]})).unwrap();
        let c = parse(json!({"product_id": 1, "quantity": 2})).unwrap();
        let d = parse(json!({"items": [{"product_id": 2}, {"product_id": 1}]})).unwrap();
        let e = parse(json!({"items": [{"product_id": 1}, {"product_id": 2}]})).unwrap();
        assert_eq!(a.fingerprint("atomic-sql"), b.fingerprint("atomic-sql"));
        assert_ne!(a.fingerprint("atomic-sql"), c.fingerprint("atomic-sql"));
        assert_ne!(a.fingerprint("atomic-sql"), a.fingerprint("optimistic"));
        assert_eq!(d.fingerprint("x"), e.fingerprint("x"));
    }
}
