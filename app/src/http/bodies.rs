//! The request bodies: each is one type that both parses (serde) and documents itself
//! in the OpenAPI document (utoipa), so the schema a client reads is the parser the
//! service runs. A refusal names the field by its path (`items[2].quantity`, from
//! `serde_path_to_error`) and the rule it broke; a field the type does not have is
//! refused, and a key given twice never reaches the types ([`super::strict_json`]
//! refuses it while the body is read).
//!
//! Every number, string and list with a rule of its own is a small type that checks it
//! ([`ProductId`], [`Quantity`], ...): read as any JSON and checked, so a refusal says
//! the rule, not serde's reading of the input, and repeats none of it.

use crate::domain::error::DeductError;
use crate::domain::order::{
    Item, MAX_ITEMS, MAX_QUANTITY, MAX_REQUEST_ID, Order, is_valid_request_id,
};
use crate::domain::probe::Knobs;
use crate::http::strict_json::{clip, clip_to};
use crate::service::stock::MAX_BUCKETS;
use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde_json::Value;
use serde_path_to_error::Segment;
use utoipa::ToSchema;

/// The longest per-request `hold_ms`.
pub const MAX_HOLD_MS: u64 = 60_000;
/// The most units a product may be restocked with.
pub const MAX_STOCK: i64 = i32::MAX as i64;

/// Reads `body` as a `T`, or says which field is wrong and why.
pub fn read<T: DeserializeOwned>(body: Value) -> Result<T, DeductError> {
    let read: Result<Object<T>, _> = serde_path_to_error::deserialize(body);
    read.map(|Object(body)| body).map_err(|e| {
        let mut segments: Vec<_> = e.path().iter().collect();
        let message = e.inner().to_string();
        // An unknown field's path ends in the field itself: the message names it, cut.
        let message = match message.split_once(", expected ") {
            Some((unknown, expected)) if unknown.starts_with("unknown field `") => {
                let field = match segments.pop() {
                    Some(Segment::Map { key }) => clip(key).into_owned(),
                    _ => "?".into(),
                };
                format!("unknown field `{field}`; {}", allowed(expected))
            }
            _ => without_input(&message),
        };
        let mut path = String::new();
        for segment in segments {
            match segment {
                Segment::Seq { index } => path.push_str(&format!("[{index}]")),
                Segment::Map { key } if path.is_empty() => path.push_str(&clip(key)),
                Segment::Map { key } => path.push_str(&format!(".{}", clip(key))),
                Segment::Enum { variant } => path.push_str(&format!("::{}", clip(variant))),
                Segment::Unknown => path.push_str(".?"),
            }
        }
        DeductError::InvalidRequest(if path.is_empty() {
            message
        } else {
            format!("{path}: {message}")
        })
    })
}

/// serde's list of a type's fields (`one of `a`, `b``, `` `a` or `b` ``, `` `a` ``) as
/// `allowed: a, b`: the names are the type's own, never the client's.
fn allowed(expected: &str) -> String {
    let names: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    format!("allowed: {}", names.join(", "))
}

/// serde's message without what it quotes of the input: `invalid type: string
/// "...", expected ...` says `invalid type: a string, expected ...`; an unknown variant
/// keeps the names it expected, not the one it was given; anything else is cut.
fn without_input(message: &str) -> String {
    let kinds = [
        ("string", "a string"),
        ("integer", "an integer"),
        ("floating point", "a number with a fraction"),
        ("boolean", "a boolean"),
        ("map", "an object"),
        ("sequence", "an array"),
        ("null", "null"),
    ];
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(prefix)
            && let Some((given, expected)) = rest.rsplit_once(", expected ")
        {
            let given = kinds
                .iter()
                .find(|(kind, _)| given.starts_with(kind))
                .map_or("something else", |(_, said)| said);
            return format!("{prefix}{given}, expected {}", clip(expected));
        }
    }
    if message.starts_with("unknown variant `")
        && let Some((_, expected)) = message.rsplit_once("`, expected ")
    {
        return format!("unknown variant; {}", allowed(expected));
    }
    clip_to(message, 200).into_owned()
}

/// A JSON object read as a `T`. serde's derive would also read a struct from an array
/// of its fields in order (`[7, 2]` as product 7, quantity 2): a reading the client may
/// not have meant, so every body and object in one is read through this instead.
#[derive(Debug)]
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Object<T>, D::Error> {
        struct Fields<T>(std::marker::PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for Fields<T> {
            type Value = Object<T>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Object<T>, M::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Object)
            }
        }

        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}

/// A field checked by a rule of its own: read as any JSON value, kept when the rule
/// holds, else refused with the rule (never the value).
macro_rules! checked {
    ($(#[$doc:meta])* $name:ident($inner:ty), |$value:ident| $check:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Deserialize)]
        #[serde(try_from = "Value")]
        pub struct $name(pub $inner);

        impl TryFrom<Value> for $name {
            type Error = String;

            fn try_from($value: Value) -> Result<$name, String> {
                $check.map($name)
            }
        }
    };
}

checked!(
    /// A product id: a positive integer.
    ProductId(i64),
    |value| match value.as_i64() {
        Some(id) if id >= 1 => Ok(id),
        _ => Err("must be a positive integer".to_string()),
    }
);

checked!(
    /// Units of one item: 1 to [`MAX_QUANTITY`]; absent means 1, `null` is refused.
    Quantity(i32),
    |value| match value {
        Value::Null => Err("must not be null (omit it to deduct 1)".to_string()),
        v => match v.as_i64() {
            Some(q) if (1..=MAX_QUANTITY).contains(&q) => Ok(q as i32),
            _ => Err(format!("must be an integer from 1 to {MAX_QUANTITY}")),
        },
    }
);

checked!(
    /// The idempotency key: 1 to 64 characters of `[A-Za-z0-9._:-]`.
    RequestId(String),
    |value| match value.as_str() {
        Some(s) if is_valid_request_id(s) => Ok(s.to_string()),
        _ => Err(format!(
            "must be a string of 1 to {MAX_REQUEST_ID} characters from A-Z a-z 0-9 . _ : -"
        )),
    }
);

checked!(
    /// `hold_ms`: 0 to [`MAX_HOLD_MS`].
    HoldMs(u64),
    |value| match value.as_u64() {
        Some(ms) if ms <= MAX_HOLD_MS => Ok(ms),
        _ => Err(format!("must be an integer from 0 to {MAX_HOLD_MS}")),
    }
);

checked!(
    /// A barrier's name: 1 to 64 characters.
    BarrierName(String),
    |value| match value.as_str() {
        Some(name) if !name.is_empty() && name.len() <= 64 => Ok(name.to_string()),
        _ => Err("must be a string of 1 to 64 characters".to_string()),
    }
);

checked!(
    /// A barrier's parties: 2 to 64.
    Parties(usize),
    |value| match value.as_u64() {
        Some(p) if (2..=64).contains(&p) => Ok(p as usize),
        _ => Err("must be an integer from 2 to 64".to_string()),
    }
);

checked!(
    /// Units to restock with: 0 to [`MAX_STOCK`].
    StockQuantity(i32),
    |value| match value.as_i64() {
        Some(q) if (0..=MAX_STOCK).contains(&q) => Ok(q as i32),
        _ => Err(format!("must be an integer from 0 to {MAX_STOCK}")),
    }
);

checked!(
    /// Buckets: 0 (not split) to [`MAX_BUCKETS`].
    Buckets(u16),
    |value| match value.as_u64() {
        Some(k) if k <= u64::from(MAX_BUCKETS) => Ok(k as u16),
        _ => Err(format!(
            "must be an integer from 0 (not split) to {MAX_BUCKETS}"
        )),
    }
);

checked!(
    /// A true or false.
    Flag(bool),
    |value| value.as_bool().ok_or_else(|| "must be true or false".to_string())
);

/// `POST /deduct/{strategy}`'s body: one product (`product_id`, `quantity`), or several
/// all or nothing (`items`), never both. The test hooks (`hold_ms` to `mistake`) are
/// refused unless the service runs with `--enable-test-hooks`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeductRequest {
    /// One product's id (or give `items`).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 1, nullable = false)]
    pub product_id: Option<ProductId>,
    /// Units of `product_id`; 1 when absent (an explicit `null` is refused).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 1000000, nullable = false)]
    pub quantity: Option<Quantity>,
    /// Several products, deducted all or nothing (no product twice); or give
    /// `product_id`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<ItemRequest>>, min_items = 1, max_items = 100, nullable = false)]
    pub items: Option<Items>,
    /// The idempotency key: a retry with the same id never deducts twice. Generated
    /// when absent (or taken from a valid `X-Request-Id` header).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, pattern = "^[A-Za-z0-9._:-]{1,64}$", nullable = false)]
    pub request_id: Option<RequestId>,
    /// Test hook: wait this long between read and write (a slow business step).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 60000, nullable = false)]
    pub hold_ms: Option<HoldMs>,
    /// Test hook: take the items' locks in the order given, not by product id (a
    /// deadlock demo).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<bool>, nullable = false)]
    pub unsorted: Option<Flag>,
    /// Test hook: wait after the read until `parties` requests of this name have read.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Barrier>, nullable = false)]
    pub barrier: Option<Object<Barrier>>,
    /// Test hook: fence the write (lock strategies), overriding the service's
    /// `--fencing`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<bool>, nullable = false)]
    pub fencing: Option<Flag>,
    /// Test hook: make a classic mistake instead of the strategy's algorithm
    /// (`lock-inside-transaction`, ...).
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false)]
    pub mistake: Option<String>,
}

/// One line of an order.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ItemRequest {
    #[schema(value_type = i64, minimum = 1)]
    pub product_id: ProductId,
    /// Units; 1 when absent.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 1000000, nullable = false)]
    pub quantity: Option<Quantity>,
}

/// An order's lines: 1 to [`MAX_ITEMS`], no product twice.
#[derive(Debug, Deserialize)]
#[serde(try_from = "Vec<Object<ItemRequest>>")]
pub struct Items(pub Vec<Item>);

impl TryFrom<Vec<Object<ItemRequest>>> for Items {
    type Error = String;

    fn try_from(list: Vec<Object<ItemRequest>>) -> Result<Items, String> {
        if list.is_empty() || list.len() > MAX_ITEMS {
            return Err(format!(
                "must hold 1 to {MAX_ITEMS} items, got {}",
                list.len()
            ));
        }
        let mut items: Vec<Item> = Vec::with_capacity(list.len());
        for Object(line) in list {
            let item = Item {
                product_id: line.product_id.0,
                quantity: line.quantity.map_or(1, |q| q.0),
            };
            if items.iter().any(|seen| seen.product_id == item.product_id) {
                return Err(format!(
                    "product {} is listed twice; list each product once",
                    item.product_id
                ));
            }
            items.push(item);
        }
        Ok(Items(items))
    }
}

/// A test hook: a rendezvous of `parties` requests.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Barrier {
    #[schema(value_type = String, min_length = 1, max_length = 64)]
    pub name: BarrierName,
    #[schema(value_type = u64, minimum = 2, maximum = 64)]
    pub parties: Parties,
}

/// `PUT /stock/{product_id}`'s body: create the product, or restock it into a new
/// epoch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Restock {
    #[schema(value_type = i64, minimum = 0, maximum = 2147483647)]
    pub quantity: StockQuantity,
    /// Split the units into this many bucket rows (for a strategy that sells from split
    /// rows); 0 or absent: not split.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 1024, nullable = false)]
    pub buckets: Option<Buckets>,
}

/// A field that may be absent but not `null`: present, it is read as its type (whose
/// rule refuses `null`: an explicit `null` would be a guess, absent or a mistake);
/// absent, `#[serde(default)]` makes it `None`. Every optional field is read so.
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// The deduct body's test hooks, in the order a refusal names them.
pub const TEST_HOOKS: [&str; 5] = ["barrier", "fencing", "hold_ms", "mistake", "unsorted"];

/// The deduct body's form, from which of its fields are given: `product_id` (with
/// `quantity`) or `items`, exactly one of the two ([`DeductRequest::one_form`] says
/// the same to the document).
fn form(product_id: bool, items: bool, quantity: bool) -> Result<(), String> {
    match (product_id, items) {
        (true, true) => Err("give either product_id (with quantity) or items, not both".into()),
        (false, true) if quantity => {
            Err("quantity belongs inside each item when items is given".into())
        }
        (false, false) => Err("product_id is required (or items)".into()),
        _ => Ok(()),
    }
}

impl DeductRequest {
    /// The one rule across fields that the derive cannot say, as JSON Schema for the
    /// document: `product_id` (with `quantity`) or `items`, exactly one of the two
    /// ([`DeductRequest::into_parts`] refuses the rest).
    pub fn one_form() -> Value {
        serde_json::json!({"oneOf": [
            {"required": ["product_id"], "not": {"required": ["items"]}},
            {"required": ["items"], "not": {"anyOf": [
                {"required": ["product_id"]},
                {"required": ["quantity"]},
            ]}},
        ]})
    }

    /// Reads a deduct body: the order and its test knobs. `generated_id`: the request id
    /// when the body has none; `hooks_enabled`: whether the test hooks may be used;
    /// `mistakes`: the names of the classic mistakes the strategies can make. What the
    /// fields' names alone decide comes first (a test hook with the hooks off, the
    /// form), so a refusal names the rule a client would break next, not a value it
    /// would fix in vain.
    pub fn parse(
        body: Value,
        generated_id: &str,
        hooks_enabled: bool,
        mistakes: &[&str],
    ) -> Result<(Order, Knobs), DeductError> {
        let invalid = |detail: String| DeductError::InvalidRequest(detail);
        if let Value::Object(fields) = &body {
            let hook = fields.keys().find(|k| TEST_HOOKS.contains(&k.as_str()));
            if !hooks_enabled && let Some(hook) = hook {
                return Err(invalid(format!(
                    "`{hook}` is a test hook: start the service with --enable-test-hooks to use it"
                )));
            }
            let given = |field| fields.contains_key(field);
            form(given("product_id"), given("items"), given("quantity")).map_err(invalid)?;
        }
        read::<DeductRequest>(body)?.into_parts(generated_id, mistakes)
    }

    fn into_parts(
        self,
        generated_id: &str,
        mistakes: &[&str],
    ) -> Result<(Order, Knobs), DeductError> {
        let invalid = |detail: String| Err(DeductError::InvalidRequest(detail));
        // The form was checked on the field names before the read (`parse`), and a
        // field given is never `None` (`present`): what is left is which form it is.
        let items = match (self.items, self.product_id) {
            (Some(items), _) => items.0,
            (None, Some(product_id)) => vec![Item {
                product_id: product_id.0,
                quantity: self.quantity.map_or(1, |q| q.0),
            }],
            (None, None) => unreachable!("parse's form() refuses a body with neither"),
        };
        let mistake = match self.mistake {
            Some(m) if !mistakes.contains(&m.as_str()) => {
                return invalid(format!("mistake must be one of: {}", mistakes.join(", ")));
            }
            m => m,
        };
        let order = Order {
            request_id: self
                .request_id
                .map_or_else(|| generated_id.to_string(), |r| r.0),
            items,
        };
        let knobs = Knobs {
            hold_ms: self.hold_ms.map(|h| h.0),
            unsorted: self.unsorted.is_some_and(|f| f.0),
            barrier: self.barrier.map(|Object(b)| (b.name.0, b.parties.0)),
            fencing: self.fencing.map(|f| f.0),
            mistake,
        };
        Ok((order, knobs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: Value, hooks: bool) -> Result<(Order, Knobs), String> {
        DeductRequest::parse(body, "generated", hooks, &["no-guard"]).map_err(|e| e.to_string())
    }

    /// The single form defaults quantity to 1 and takes the generated id.
    #[test]
    fn single_item_defaults() {
        let (order, knobs) = parse(json!({"product_id": 7}), false).unwrap();
        assert_eq!(
            order.items,
            vec![Item {
                product_id: 7,
                quantity: 1
            }]
        );
        assert_eq!(order.request_id, "generated");
        assert_eq!(knobs, Knobs::default());
    }

    /// Each rejection names the field it is about, by its path.
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
            (json!({"items": []}), "items: must hold"),
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
                "items[0].quantity: must be",
            ),
            (json!({"items": [{"product_id": 1, "qty": 1}]}), "`qty`"),
            (json!({"product_id": 1, "request_id": "a b"}), "request_id"),
            (
                json!({"product_id": 1, "request_id": "x".repeat(65)}),
                "request_id",
            ),
            (json!({"product_id": 1, "request_id": ""}), "request_id"),
            (json!([1]), "JSON object"),
            (
                json!({"items": [[1, 2]]}),
                "items[0]: invalid type: an array",
            ),
            (
                json!({"items": [{"product_id": 1}], "quantity": 0}),
                "quantity belongs inside",
            ),
            (json!({"items": "x", "product_id": 1}), "not both"),
        ];
        for (body, expected) in cases {
            let err = parse(body.clone(), true).expect_err(&body.to_string());
            assert!(
                err.contains(expected),
                "{body}: `{err}` does not mention `{expected}`"
            );
        }
        let many: Vec<Value> = (1..=101).map(|i| json!({"product_id": i})).collect();
        assert!(
            parse(json!({ "items": many }), true)
                .unwrap_err()
                .contains("got 101")
        );
    }

    /// A refusal repeats no value of the input, and a name only cut to its limit (a
    /// backquote inside it included).
    #[test]
    fn a_refusal_repeats_little() {
        let long = "x".repeat(10_000);
        let quoted = format!("a`{}`c", "b".repeat(200));
        for body in [
            json!({"product_id": 1, long.clone(): 1}),
            json!({"product_id": 1, quoted.clone(): 1}),
            json!({"product_id": 1, "request_id": long}),
            json!({"items": long}),
            json!({"items": [long]}),
            json!({"product_id": 1, "barrier": long}),
            json!({"product_id": 1, "mistake": {"a": long}}),
            json!(long),
        ] {
            let err = parse(body.clone(), true).unwrap_err();
            assert!(!err.contains(&"x".repeat(65)), "{err}");
            assert!(!err.contains(&"b".repeat(65)), "{err}");
            assert!(err.len() < 400, "{} characters: {err}", err.len());
        }
        let err = parse(json!({"product_id": 1, "colour": 1}), true).unwrap_err();
        assert!(
            err.starts_with("unknown field `colour`; allowed: product_id"),
            "{err}"
        );
    }

    /// With the hooks off, a hook is refused as a hook before its value is looked at,
    /// the first in name order; every name in [`TEST_HOOKS`] is a field of the body.
    #[test]
    fn hooks_off_are_refused_by_name_first() {
        let err = parse(json!({"product_id": 1, "hold_ms": -1, "barrier": 0}), false).unwrap_err();
        assert!(err.starts_with("`barrier` is a test hook"), "{err}");
        for hook in TEST_HOOKS {
            let err = parse(json!({"product_id": 1, hook: "?"}), true).unwrap_err();
            assert!(!err.contains("unknown field"), "{hook}: {err}");
        }
    }

    /// Without `--enable-test-hooks` a knob is refused, naming the flag; a mistake must
    /// be one the strategies make.
    #[test]
    fn knobs_need_the_flag() {
        for knob in [
            json!({"product_id": 1, "hold_ms": 5}),
            json!({"product_id": 1, "unsorted": true}),
        ] {
            let err = parse(knob.clone(), false).unwrap_err();
            assert!(err.contains("--enable-test-hooks"), "{knob}: {err}");
        }
        let err = parse(json!({"product_id": 1, "mistake": "x"}), true).unwrap_err();
        assert!(err.contains("one of: no-guard"), "{err}");
    }

    /// With hooks enabled the hook fields are parsed and checked.
    #[test]
    fn hook_fields_with_hooks_enabled() {
        let (_, knobs) = parse(
            json!({"product_id": 1, "hold_ms": 5, "unsorted": true, "barrier": {"name": "b", "parties": 2}}),
            true,
        )
        .unwrap();
        assert_eq!(knobs.hold_ms, Some(5));
        assert!(knobs.unsorted);
        assert_eq!(knobs.barrier, Some(("b".to_string(), 2)));
        for bad in [
            json!({"product_id": 1, "hold_ms": -1}),
            json!({"product_id": 1, "hold_ms": 60001}),
            json!({"product_id": 1, "unsorted": 1}),
            json!({"product_id": 1, "barrier": {"name": "b", "parties": 1}}),
            json!({"product_id": 1, "barrier": {"name": "b"}}),
            json!({"product_id": 1, "barrier": null}),
            json!({"product_id": 1, "barrier": ["b", 2]}),
            json!({"product_id": 1, "hold_ms": null}),
            json!({"product_id": 1, "unsorted": null}),
            json!({"product_id": 1, "fencing": null}),
            json!({"product_id": 1, "mistake": null}),
            json!({"product_id": 1, "request_id": null}),
        ] {
            assert!(parse(bad.clone(), true).is_err(), "{bad}");
        }
    }

    /// Two spellings of the same request share a fingerprint; a change does not.
    #[test]
    fn fingerprint_is_about_meaning() {
        let order = |body| parse(body, false).unwrap().0;
        let a = order(json!({"product_id": 1}));
        let b = order(json!({"items": [{"product_id": 1, "quantity": 1}]}));
        let c = order(json!({"product_id": 1, "quantity": 2}));
        let d = order(json!({"items": [{"product_id": 2}, {"product_id": 1}]}));
        let e = order(json!({"items": [{"product_id": 1}, {"product_id": 2}]}));
        assert_eq!(a.fingerprint("atomic-sql"), b.fingerprint("atomic-sql"));
        assert_ne!(a.fingerprint("atomic-sql"), c.fingerprint("atomic-sql"));
        assert_ne!(a.fingerprint("atomic-sql"), a.fingerprint("optimistic"));
        assert_eq!(d.fingerprint("x"), e.fingerprint("x"));
    }
}
