//! The API contract: an OpenAPI 3.1 document generated from the code by `utoipa`,
//! served at `GET /openapi.json`.
//!
//! The paths come from the `#[utoipa::path]` attribute on each handler in
//! [`crate::http::routes`], the response bodies from the types the handlers serialize
//! ([`Deducted`](crate::strategies::Deducted), [`StockView`](crate::service::stock::StockView),
//! [`ErrorBody`](crate::http::error::ErrorBody), ...), the request bodies from the
//! types that parse them ([`crate::http::bodies`], [`Setting`]): the schema is the
//! parser. `app/tests/api/openapi.rs` holds every answer the API gives to the document.

use crate::http::bodies::{Barrier, DeductRequest, ItemRequest, Restock};
use crate::http::error::ErrorBody;
use crate::http::hooks::{Mode, PointState, Setting};
use crate::http::ready::{BackendStatus, Readiness};
use crate::http::routes::{Health, HooksState, Paused, Released};
use crate::service::stock::StockView;
use crate::strategies::card::{ChaosCell, Trait};
use crate::strategies::{Deducted, Family, ItemResult, StrategyCard, StrategyInfo};
use stock_wire::ErrorCode;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "stock-locks",
        description = "Stock deduction without overselling, one endpoint per concurrency-control strategy. Every error body is an ErrorBody; every answer carries X-Request-Id, every 503 Retry-After. An error means nothing changed."
    ),
    paths(
        crate::http::routes::deduct,
        crate::http::routes::get_stock,
        crate::http::routes::put_stock,
        crate::http::routes::list_strategies,
        crate::http::routes::health,
        crate::http::routes::ready_route,
        crate::http::routes::metrics,
        crate::http::routes::openapi_json,
        crate::http::routes::hooks_state,
        crate::http::routes::hooks_set,
        crate::http::routes::hooks_release,
        crate::http::routes::hooks_paused,
    ),
    components(schemas(
        DeductRequest, ItemRequest, Barrier, Restock,
        Deducted, ItemResult, StockView, StrategyInfo, StrategyCard, Family, Trait, ChaosCell, Health, Readiness,
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

/// The document as JSON (startup builds it once into the shared state), with the
/// deduct body's rule across its fields, which utoipa has no attribute for
/// ([`DeductRequest::one_form`]).
pub fn json() -> String {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serializes");
    let body = &mut doc["components"]["schemas"]["DeductRequest"];
    if let (Some(body), serde_json::Value::Object(rule)) =
        (body.as_object_mut(), DeductRequest::one_form())
    {
        body.extend(rule);
    }
    doc.to_string()
}

#[cfg(test)]
mod tests {
    /// The document is OpenAPI 3.1 and parses as JSON.
    #[test]
    fn the_document_is_openapi_3_1() {
        let doc: serde_json::Value = serde_json::from_str(&super::json()).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        if std::env::var_os("PRINT_OPENAPI").is_some() {
            println!("{}", serde_json::to_string_pretty(&doc).unwrap());
        }
    }
}
