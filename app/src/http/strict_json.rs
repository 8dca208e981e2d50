//! JSON bodies the service would otherwise have to guess about: a key given twice.
//!
//! `serde_json::Value` keeps the last of two equal keys, so `{"product_id": 7,
//! "product_id": 8}` would deduct product 8 and `{"quantity": 1, "quantity": 2}` two
//! units: the client asked for something ambiguous and got one reading of it. Every
//! body the service reads goes through [`StrictValue`] instead, whose objects refuse
//! a key they already hold, at any depth; the extractor's error handler answers 400
//! naming the key (cut to [`clip`]'s length).
//!
//! The visitor is `serde_json::Value`'s own, with one check added where an object's
//! entries are collected (serde_json has no option for it: serde-rs/json#1112).

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::fmt;

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

/// The prefix of the error a duplicated key makes; the extractor's error handler
/// recognises it.
pub const DUPLICATE_KEY: &str = "duplicate key";

/// A JSON value whose objects never held a key twice.
#[derive(Debug, Clone, PartialEq)]
pub struct StrictValue(pub Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<StrictValue, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        StrictValue::deserialize(d).map(|v| v.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut list = Vec::new();
        while let Some(StrictValue(v)) = seq.next_element()? {
            list.push(v);
        }
        Ok(Value::Array(list))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut fields = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if fields.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "{DUPLICATE_KEY} `{}`",
                    clip(&key)
                )));
            }
            let StrictValue(value) = map.next_value()?;
            fields.insert(key, value);
        }
        Ok(Value::Object(fields))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Value, String> {
        serde_json::from_str::<StrictValue>(text)
            .map(|v| v.0)
            .map_err(|e| e.to_string())
    }

    /// What serde_json reads, this reads the same, unless a key repeats.
    #[test]
    fn reads_what_serde_json_reads() {
        for text in [
            r#"{"product_id": 7, "quantity": 1, "request_id": "a"}"#,
            r#"{"items": [{"product_id": 1}, {"product_id": 2, "quantity": 3}]}"#,
            r#"[1, -2, 3.5, 18446744073709551615, null, true, "x", {}]"#,
            r#"{"a": {"b": {"c": [{"d": null}]}}}"#,
        ] {
            let plain: Value = serde_json::from_str(text).unwrap();
            assert_eq!(parse(text).unwrap(), plain, "{text}");
        }
    }

    /// A repeated key is refused at any depth, naming the key.
    #[test]
    fn a_repeated_key_is_refused_at_any_depth() {
        for (text, key) in [
            (
                r#"{"product_id": 7, "product_id": 8, "quantity": 1}"#,
                "`product_id`",
            ),
            (
                r#"{"product_id": 7, "quantity": 1, "quantity": 2}"#,
                "`quantity`",
            ),
            (
                r#"{"items": [{"product_id": 1, "product_id": 2}]}"#,
                "`product_id`",
            ),
            (
                r#"{"barrier": {"name": "b", "parties": 2, "name": "c"}}"#,
                "`name`",
            ),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.starts_with(DUPLICATE_KEY), "{text}: {error}");
            assert!(error.contains(key), "{text}: {error}");
        }
    }

    /// An error repeats at most 64 characters of a key.
    #[test]
    fn a_long_key_is_cut() {
        let key = "k".repeat(10_000);
        let error = parse(&format!(r#"{{"{key}": 1, "{key}": 2}}"#)).unwrap_err();
        assert!(error.len() < 200, "{} bytes", error.len());
        assert_eq!(clip(&"é".repeat(100)).chars().count(), ECHO_LIMIT + 1);
        assert_eq!(clip("short"), "short");
    }
}
