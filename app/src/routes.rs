//! HTTP handlers, the request-context middleware and the extractor configuration.

use crate::error::{AnsweredId, ApiError, AppError};
use crate::hooks::{Failpoint, Setting};
use crate::startup::AppState;
use crate::strategies::{Deduction, idempotency};
use crate::{order, ready, stock};
use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::error::{JsonPayloadError, PathError};
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{FromRequest, HttpMessage, HttpRequest, HttpResponse, web};
use serde_json::{Value, json};
use std::future::{Ready, ready as ready_future};
use tracing::Instrument;

/// The response header that names the request (the body's `request_id` for a deduction).
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Largest accepted JSON body. A 100-item order is about 4 KiB.
pub const JSON_LIMIT: usize = 64 * 1024;

/// Every route of the service.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/health")
            .get(health)
            .default_service(web::to(not_allowed("GET"))),
    )
    .service(
        web::resource("/ready")
            .get(ready_route)
            .default_service(web::to(not_allowed("GET"))),
    )
    .service(
        web::resource("/metrics")
            .get(metrics)
            .default_service(web::to(not_allowed("GET"))),
    )
    .service(
        web::resource("/strategies")
            .get(list_strategies)
            .default_service(web::to(not_allowed("GET"))),
    )
    .service(
        web::resource("/stock/{product_id}")
            .get(get_stock)
            .put(put_stock)
            .default_service(web::to(not_allowed("GET, PUT"))),
    )
    .service(
        web::scope("/hooks")
            .route("", web::get().to(hooks_state))
            .route("/{failpoint}", web::put().to(hooks_set))
            .route("/{failpoint}/release", web::post().to(hooks_release))
            .route("/{failpoint}/paused", web::get().to(hooks_paused)),
    )
    .service(
        web::resource("/deduct/{strategy}")
            .post(deduct)
            .default_service(web::to(not_allowed("POST"))),
    );
}

/// The JSON extractor's settings: size limit, and its errors in our error shape.
pub fn json_config() -> web::JsonConfig {
    web::JsonConfig::default()
        .limit(JSON_LIMIT)
        .error_handler(|err, req| {
            let error = match &err {
                JsonPayloadError::Overflow { limit }
                | JsonPayloadError::OverflowKnownLength { limit, .. } => {
                    AppError::PayloadTooLarge(format!("the body is larger than {limit} bytes"))
                }
                JsonPayloadError::ContentType => AppError::InvalidRequest(
                    "the body must be JSON, sent with Content-Type: application/json".into(),
                ),
                JsonPayloadError::Deserialize(e) => {
                    AppError::InvalidRequest(format!("the body is not valid JSON: {e}"))
                }
                other => AppError::InvalidRequest(format!("could not read the body: {other}")),
            };
            // A deduction answered here never reaches its handler: count it here.
            if let (Some(state), Some(name)) = (
                req.app_data::<web::Data<AppState>>(),
                req.match_info().get("strategy"),
            ) && let Some(strategy) = state.strategies.get(name)
            {
                let served = strategy.info().name;
                state.metrics.refused_unread(served, error.code());
            }
            ApiError::new(error, RequestId::of(req).0).into()
        })
}

/// Query strings we cannot parse come back in our error shape too.
pub fn query_config() -> web::QueryConfig {
    web::QueryConfig::default().error_handler(|err, req| {
        ApiError::new(
            AppError::InvalidRequest(format!("bad query string: {err}")),
            RequestId::of(req).0,
        )
        .into()
    })
}

/// Path segments we cannot parse come back in our error shape too.
pub fn path_config() -> web::PathConfig {
    web::PathConfig::default().error_handler(|err: PathError, req| {
        ApiError::new(
            AppError::InvalidRequest(format!("bad path: {err}")),
            RequestId::of(req).0,
        )
        .into()
    })
}

/// The request's id: `X-Request-Id` from the client when it is a valid request id,
/// else a new UUID. A deduction whose body has no `request_id` uses it as its
/// idempotency key; one whose body has one answers with that instead.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

impl RequestId {
    fn of(req: &HttpRequest) -> RequestId {
        req.extensions()
            .get::<RequestId>()
            .cloned()
            .unwrap_or_else(|| RequestId(uuid::Uuid::new_v4().to_string()))
    }
}

impl FromRequest for RequestId {
    type Error = actix_web::Error;
    type Future = Ready<Result<RequestId, actix_web::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready_future(Ok(RequestId::of(req)))
    }
}

/// Middleware: gives every request an id and a tracing span, and sets the headers every
/// answer carries, here and nowhere else: `X-Request-Id` (the id the answer names, if
/// it named one, else the request's) and, on a 503, `Retry-After`.
pub async fn request_context(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = req
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| crate::order::is_valid_request_id(v))
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    req.extensions_mut().insert(RequestId(id.clone()));
    // One span per request (a deduction records its strategy, its order's id and
    // its outcome on it): at ten thousand requests a second, every span costs.
    let span = tracing::info_span!(
        "request",
        method = %req.method(),
        path = %req.path(),
        request_id = %id,
        strategy = tracing::field::Empty,
        order_id = tracing::field::Empty,
        outcome = tracing::field::Empty,
        status = tracing::field::Empty,
    );
    let mut res = next.call(req).instrument(span.clone()).await?;
    let answered = res.response().extensions().get::<AnsweredId>().cloned();
    let answered = answered.map_or(id, |AnsweredId(id)| id);
    if let Ok(value) = HeaderValue::from_str(&answered) {
        res.headers_mut().insert(X_REQUEST_ID, value);
    }
    if res.status() == actix_web::http::StatusCode::SERVICE_UNAVAILABLE {
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    span.record("status", res.status().as_u16());
    tracing::debug!(parent: &span, "done");
    Ok(res)
}

/// Requires `Authorization: Bearer <ADMIN_TOKEN>`. Listed before the body in a
/// handler's arguments, so a request without the token is refused before its body is
/// even read.
pub struct Admin;

impl FromRequest for Admin {
    type Error = ApiError;
    type Future = Ready<Result<Admin, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let id = RequestId::of(req).0;
        let expected = req
            .app_data::<web::Data<AppState>>()
            .and_then(|state| state.settings.admin_token.clone());
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        ready_future(match (expected, given) {
            (None, _) => Err(ApiError::new(AppError::AdminDisabled, id)),
            (Some(expected), Some(given))
                if constant_time_eq(expected.as_bytes(), given.as_bytes()) =>
            {
                Ok(Admin)
            }
            _ => Err(ApiError::new(AppError::Unauthorized, id)),
        })
    }
}

/// Compares without returning early on the first differing byte, so response time
/// does not tell an attacker how much of the token they guessed.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn not_allowed(
    allowed: &'static str,
) -> impl Fn(HttpRequest, RequestId) -> Ready<Result<HttpResponse, ApiError>> + Clone {
    move |req: HttpRequest, id: RequestId| {
        ready_future(Err(ApiError::new(
            AppError::MethodNotAllowed {
                method: req.method().to_string(),
                allowed,
            },
            id.0,
        )))
    }
}

/// Any unknown path.
pub async fn not_found(req: HttpRequest, id: RequestId) -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(
        AppError::NotFound(req.path().to_string()),
        id.0,
    ))
}

/// `GET /health`: the process is up.
async fn health(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "test_hooks": state.hooks.enabled(),
        "hold_ms": state.hooks.server_hold_ms(),
    }))
}

/// The failpoint named in the path, when hooks are enabled; 404 otherwise (the hooks
/// endpoint does not exist without `--enable-test-hooks`).
fn failpoint(
    state: &AppState,
    req: &HttpRequest,
    name: &str,
    id: &str,
) -> Result<Failpoint, ApiError> {
    if !state.hooks.enabled() {
        return Err(ApiError::new(
            AppError::NotFound(req.path().to_string()),
            id,
        ));
    }
    Failpoint::parse(name)
        .ok_or_else(|| ApiError::new(AppError::UnknownFailpoint(name.to_string()), id))
}

/// `GET /hooks`: every failpoint's mode, pending count, paused requests and hits.
async fn hooks_state(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: RequestId,
) -> Result<HttpResponse, ApiError> {
    if !state.hooks.enabled() {
        return Err(ApiError::new(
            AppError::NotFound(req.path().to_string()),
            id.0,
        ));
    }
    Ok(HttpResponse::Ok().json(json!({
        "failpoints": state.hooks.states(),
        "hold_ms": state.hooks.server_hold_ms(),
    })))
}

/// `PUT /hooks/{failpoint}` `{"mode": "off" | "pause" | "sleep", "ms": N, "count": N}`.
async fn hooks_set(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    id: RequestId,
    body: web::Json<Setting>,
) -> Result<HttpResponse, ApiError> {
    let point = failpoint(&state, &req, &path, &id.0)?;
    let now = state.hooks.set(point, body.into_inner());
    tracing::info!(failpoint = point.name(), ?now, "failpoint set");
    Ok(HttpResponse::Ok().json(now))
}

/// `POST /hooks/{failpoint}/release`: lets every request paused there go on.
async fn hooks_release(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    id: RequestId,
) -> Result<HttpResponse, ApiError> {
    let point = failpoint(&state, &req, &path, &id.0)?;
    let released = state.hooks.release(point);
    Ok(HttpResponse::Ok().json(json!({ "released": released })))
}

#[derive(serde::Deserialize)]
struct PausedQuery {
    #[serde(default = "one")]
    at_least: usize,
    #[serde(default = "five_seconds")]
    timeout_ms: u64,
}

fn one() -> usize {
    1
}

fn five_seconds() -> u64 {
    5000
}

/// `GET /hooks/{failpoint}/paused?at_least=N&timeout_ms=M`: answers once at least N
/// requests are paused there (408 `hook_timeout` after M ms): the handshake that
/// tells a test its request is exactly at the failpoint.
async fn hooks_paused(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    id: RequestId,
    query: web::Query<PausedQuery>,
) -> Result<HttpResponse, ApiError> {
    let point = failpoint(&state, &req, &path, &id.0)?;
    let timeout = std::time::Duration::from_millis(query.timeout_ms.min(120_000));
    match state
        .hooks
        .wait_paused(point, query.at_least, timeout)
        .await
    {
        Ok(paused) => Ok(HttpResponse::Ok().json(json!({ "paused": paused }))),
        Err(paused) => Err(ApiError::new(
            AppError::HookTimeout(format!(
                "{paused} request(s) paused at {} after {timeout:?}, waited for {}",
                point.name(),
                query.at_least
            )),
            id.0,
        )),
    }
}

/// `GET /ready`: every configured backend answers.
async fn ready_route(state: web::Data<AppState>, id: RequestId) -> Result<HttpResponse, ApiError> {
    let report = ready::check(&state.pool, &state.settings).await;
    if report.ready {
        Ok(HttpResponse::Ok().json(report))
    } else {
        let down: Vec<&str> = report
            .backends
            .iter()
            .filter(|b| b.configured && !b.ok)
            .map(|b| b.backend.as_str())
            .collect();
        let error = AppError::BackendUnavailable {
            backend: down.join(", "),
            detail: "not reachable".into(),
        };
        let backends = serde_json::to_value(&report.backends).unwrap_or_default();
        Err(ApiError::new(error, id.0).with("backends", backends))
    }
}

/// `GET /strategies`.
async fn list_strategies(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(state.strategies.infos())
}

fn parse_product_id(raw: &str, id: &str) -> Result<i64, ApiError> {
    match raw.parse::<i64>() {
        Ok(product_id) if product_id >= 1 => Ok(product_id),
        _ => Err(ApiError::new(
            AppError::InvalidRequest(format!(
                "product_id in the path must be a positive integer, got `{raw}`"
            )),
            id,
        )),
    }
}

/// `GET /stock/{product_id}`.
async fn get_stock(
    state: web::Data<AppState>,
    path: web::Path<String>,
    id: RequestId,
) -> Result<HttpResponse, ApiError> {
    let product_id = parse_product_id(&path, &id.0)?;
    let mut view = match stock::find(&state.pool, product_id).await {
        Ok(Some(view)) => view,
        Ok(None) => return Err(ApiError::new(AppError::UnknownProduct(product_id), id.0)),
        Err(e) => return Err(ApiError::new(e.into(), id.0)),
    };
    // `redis-stock`: what Redis sold that the database has not recorded yet.
    let redis_stock = &state.strategies.redis_stock;
    if redis_stock.configured() {
        match redis_stock.counter(product_id).await {
            Ok(counter) => {
                view.pending = Some(counter.as_ref().map_or(0, |c| c.pending));
                view.redis = counter;
            }
            Err(e) => tracing::warn!(product_id, error = %e, "redis-stock counter unreadable"),
        }
    }
    Ok(HttpResponse::Ok().json(view))
}

/// `PUT /stock/{product_id}` `{"quantity": N, "buckets": K}` (admin): create, or
/// restock into a new epoch; `buckets` (optional) splits the units for `bucketed`.
async fn put_stock(
    _admin: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    id: RequestId,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let product_id = parse_product_id(&path, &id.0)?;
    let invalid =
        |detail: &str| ApiError::new(AppError::InvalidRequest(detail.to_string()), id.0.clone());
    let Value::Object(fields) = &*body else {
        return Err(invalid(
            "the body must be a JSON object: {\"quantity\": N} or {\"quantity\": N, \"buckets\": K}",
        ));
    };
    if let Some(unknown) = fields.keys().find(|k| *k != "quantity" && *k != "buckets") {
        return Err(invalid(&format!(
            "unknown field `{unknown}`; allowed: quantity, buckets"
        )));
    }
    let quantity = match fields.get("quantity").and_then(Value::as_i64) {
        Some(q) if (0..=i64::from(i32::MAX)).contains(&q) => q as i32,
        _ => return Err(invalid("quantity must be an integer from 0 to 2147483647")),
    };
    let buckets = match fields.get("buckets") {
        None => 0,
        Some(v) => match v.as_u64() {
            Some(k) if k <= u64::from(stock::MAX_BUCKETS) => k as u16,
            _ => {
                return Err(invalid(&format!(
                    "buckets must be an integer from 0 (not split) to {}",
                    stock::MAX_BUCKETS
                )));
            }
        },
    };
    let view = stock::restock(&state.pool, product_id, quantity, buckets)
        .await
        .map_err(|e| ApiError::new(e.into(), id.0.clone()))?;
    tracing::info!(
        product_id,
        quantity,
        buckets,
        epoch = view.epoch,
        "restocked"
    );
    // `redis-stock`'s counter starts the new epoch from the database at its next sale.
    state.strategies.redis_stock.forget(product_id).await;
    Ok(HttpResponse::Ok().json(view))
}

/// `POST /deduct/{strategy}`.
async fn deduct(
    state: web::Data<AppState>,
    path: web::Path<String>,
    id: RequestId,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let started = std::time::Instant::now();
    let name = path.into_inner();
    let Some(strategy) = state.strategies.get(&name) else {
        return Err(ApiError::new(
            AppError::UnknownStrategy {
                name,
                known: state.strategies.names().join(", "),
            },
            id.0,
        ));
    };
    let served = strategy.info().name;
    let (order, knobs) = order::parse_body(&body, &id.0, state.hooks.enabled()).map_err(|e| {
        state.metrics.deduction(served, e.code(), started.elapsed());
        ApiError::new(e, id.0.clone())
    })?;
    // The request's span (the middleware's): this deduction's fields go on it.
    let span = tracing::Span::current();
    span.record("strategy", name.as_str());
    if order.request_id != id.0 {
        span.record("order_id", order.request_id.as_str());
    }
    let phases = crate::metrics::Phases::default();
    let d = Deduction {
        pool: &state.pool,
        reads: &state.reads,
        order: &order,
        knobs: &knobs,
        hooks: &state.hooks,
        strategy: strategy.info().name,
        fingerprint: order.fingerprint(strategy.info().name),
        phases: &phases,
    };
    let result = match knobs.mistake {
        None => {
            let work = phases.strategy(strategy.deduct(&d));
            idempotency::once(&state.in_flight, &d, work).await
        }
        Some(mistake) if mistake.strategy() == d.strategy => {
            let mistaken = phases.strategy(state.strategies.mistakes.deduct(mistake, &d));
            idempotency::once(&state.in_flight, &d, mistaken).await
        }
        Some(mistake) => Err(AppError::InvalidRequest(format!(
            "mistake `{}` is made in `{}`, not in `{}`",
            mistake.name(),
            mistake.strategy(),
            d.strategy
        ))),
    };
    state.metrics.phases(served, &phases);
    match result {
        Ok(done) => {
            let outcome = if done.duplicate {
                "duplicate"
            } else {
                "deducted"
            };
            span.record("outcome", outcome);
            state.metrics.deduction(served, outcome, started.elapsed());
            if !done.duplicate {
                state.metrics.sale(served, done.attempts, done.batch_size);
            }
            let mut response = HttpResponse::Ok().json(done);
            response
                .extensions_mut()
                .insert(AnsweredId(order.request_id.clone()));
            Ok(response)
        }
        Err(e) => {
            span.record("outcome", e.code());
            state.metrics.deduction(served, e.code(), started.elapsed());
            Err(ApiError::new(e, order.request_id))
        }
    }
}

/// `GET /metrics`: the Prometheus text format ([`crate::metrics`]).
async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let now = crate::metrics::Scrape {
        locks: state.strategies.lock_stats(),
        pool: (
            state.pool.size(),
            state.pool.num_idle(),
            state.settings.db_pool_size,
        ),
        backlog: state.strategies.redis_stock.backlog().await,
    };
    HttpResponse::Ok()
        .content_type(prometheus::TEXT_FORMAT)
        .body(state.metrics.render(&now))
}
