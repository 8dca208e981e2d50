//! The API contract: an OpenAPI 3.1 document generated from the code by `utoipa`,
//! served at `GET /openapi.json`.
//!
//! The paths come from the `#[utoipa::path]` attribute on each handler in
//! [`crate::routes`], the response bodies from the types the handlers serialize
//! ([`Deducted`](crate::strategies::Deducted), [`StockView`](crate::stock::StockView),
//! [`ErrorBody`](crate::error::ErrorBody), ...). The two request bodies the service
//! reads by hand, so that a refusal names the field and the rule it broke
//! ([`crate::order::Order::parse`], the restock), are described by the types below,
//! which nothing parses with: `app/tests/api/openapi.rs` holds them, and every answer
//! the API gives, to the document.

use crate::error::{ErrorBody, ErrorCode};
use crate::hooks::{Mode, PointState, Setting};
use crate::ready::{BackendStatus, Readiness};
use crate::routes::{Health, HooksState, Paused, Released};
use crate::stock::StockView;
use crate::strategies::{Deducted, Family, ItemResult, StrategyCard, StrategyInfo};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "stock-locks",
        description = "Stock deduction without overselling, one endpoint per concurrency-control strategy. Every error body is an ErrorBody; every answer carries X-Request-Id, every 503 Retry-After. An error means nothing changed."
    ),
    paths(
        crate::routes::deduct,
        crate::routes::get_stock,
        crate::routes::put_stock,
        crate::routes::list_strategies,
        crate::routes::health,
        crate::routes::ready_route,
        crate::routes::metrics,
        crate::routes::openapi_json,
        crate::routes::hooks_state,
        crate::routes::hooks_set,
        crate::routes::hooks_release,
        crate::routes::hooks_paused,
    ),
    components(schemas(
        DeductRequest, OneProduct, SeveralProducts, ItemRequest, TestHooks, Barrier, Restock,
        Deducted, ItemResult, StockView, StrategyInfo, StrategyCard, Family, Health, Readiness,
        BackendStatus, ErrorBody, ErrorCode, Setting, Mode, PointState, HooksState, Released,
        Paused,
    )),
    modifiers(&AdminToken),
    tags(
        (name = "deduct", description = "Deducting stock, one strategy per path."),
        (name = "stock", description = "Products: restock (admin), read."),
        (name = "service", description = "What the service is and does: health, readiness, strategies, metrics, this document."),
        (name = "test-hooks", description = "Failpoints for tests and experiments; 404 unless the service runs with --enable-test-hooks."),
    )
)]
pub struct ApiDoc;

/// The admin routes' bearer token (`ADMIN_TOKEN`).
struct AdminToken;

impl Modify for AdminToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document as JSON (built once).
///
/// One touch utoipa has no attribute for: the deduct bodies refuse unknown fields,
/// like the parser (`deny_unknown_fields` is lost when the test hooks are flattened
/// in as an `allOf`); OpenAPI 3.1's JSON Schema says so with `unevaluatedProperties`.
pub fn json() -> &'static str {
    static JSON: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serializes");
        for closed in ["OneProduct", "SeveralProducts"] {
            doc["components"]["schemas"][closed]["unevaluatedProperties"] = false.into();
        }
        doc.to_string()
    });
    &JSON
}

/// `POST /deduct/{strategy}`'s body: one product, or several all or nothing.
#[derive(ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum DeductRequest {
    One(OneProduct),
    Several(SeveralProducts),
}

/// One product.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct OneProduct {
    #[schema(minimum = 1)]
    pub product_id: i64,
    /// Units; 1 when absent (an explicit `null` is refused).
    #[schema(minimum = 1, maximum = 1000000, nullable = false)]
    pub quantity: Option<i64>,
    /// The idempotency key: a retry with the same id never deducts twice. Generated
    /// when absent (or taken from a valid `X-Request-Id` header).
    #[schema(pattern = "^[A-Za-z0-9._:-]{1,64}$", nullable = false)]
    pub request_id: Option<String>,
    #[serde(flatten)]
    pub hooks: TestHooks,
}

/// Several products, deducted all or nothing (no product twice).
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct SeveralProducts {
    #[schema(min_items = 1, max_items = 100)]
    pub items: Vec<ItemRequest>,
    #[schema(pattern = "^[A-Za-z0-9._:-]{1,64}$", nullable = false)]
    pub request_id: Option<String>,
    #[serde(flatten)]
    pub hooks: TestHooks,
}

/// One line of an order.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct ItemRequest {
    #[schema(minimum = 1)]
    pub product_id: i64,
    /// Units; 1 when absent.
    #[schema(minimum = 1, maximum = 1000000, nullable = false)]
    pub quantity: Option<i64>,
}

/// Test hooks that ride in a deduct body: refused (400) unless the service runs with
/// `--enable-test-hooks`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct TestHooks {
    /// Wait this long between read and write (a slow business step).
    #[schema(minimum = 0, maximum = 60000, nullable = false)]
    pub hold_ms: Option<u64>,
    /// Take the items' locks in the order given, not by product id (a deadlock demo).
    #[schema(nullable = false)]
    pub unsorted: Option<bool>,
    /// Wait after the read until `parties` requests of this name have read.
    #[schema(nullable = false)]
    pub barrier: Option<Barrier>,
    /// Fence the write (lock strategies), overriding the service's `--fencing`.
    #[schema(nullable = false)]
    pub fencing: Option<bool>,
    /// Make a classic mistake instead of the strategy's algorithm (`lock-inside-transaction`, ...).
    #[schema(nullable = false)]
    pub mistake: Option<String>,
}

/// A test hook: a rendezvous of `parties` requests.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct Barrier {
    #[schema(min_length = 1, max_length = 64)]
    pub name: String,
    #[schema(minimum = 2, maximum = 64)]
    pub parties: u64,
}

/// `PUT /stock/{product_id}`'s body: create the product, or restock it into a new
/// epoch.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct Restock {
    #[schema(minimum = 0, maximum = 2147483647)]
    pub quantity: i64,
    /// Split the units into this many bucket rows (for `bucketed`); 0 or absent: not
    /// split.
    #[schema(minimum = 0, maximum = 1024, nullable = false)]
    pub buckets: Option<u64>,
}

#[cfg(test)]
mod tests {
    /// The document is OpenAPI 3.1 and parses as JSON.
    #[test]
    fn the_document_is_openapi_3_1() {
        let doc: serde_json::Value = serde_json::from_str(super::json()).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        if std::env::var_os("PRINT_OPENAPI").is_some() {
            println!("{}", serde_json::to_string_pretty(&doc).unwrap());
        }
    }
}
