//! HTTP handlers, the request-context middleware and the extractor configuration.

use crate::domain::error::DeductError;
use crate::domain::probe::Failpoint;
use crate::http::bodies::{self, DeductRequest, Restock};
use crate::http::error::{AnsweredId, ApiError, AppError, ErrorBody, Served};
use crate::http::hooks::{self, Setting};
use crate::http::ready;
use crate::http::state::AppState;
use crate::http::strict_json::{DUPLICATE_KEY, StrictValue, clip, clip_to};
use crate::service::code_of;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::error::{JsonPayloadError, PathError};
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{FromRequest, HttpMessage, HttpRequest, HttpResponse, web};
use std::future::{Ready, ready as ready_future};
use subtle::ConstantTimeEq;
use tracing::Instrument;

/// The response header that names the request (the body's `request_id` for a deduction).
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Largest accepted JSON body. A 100-item order is about 4 KiB.
pub const JSON_LIMIT: usize = 64 * 1024;

/// Every route of the service.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(get_only("/health", health))
        .service(get_only("/ready", ready_route))
        .service(get_only("/metrics", metrics))
        .service(get_only("/openapi.json", openapi_json))
        .service(get_only("/strategies", list_strategies))
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

/// A path that answers GET with `handler`, and any other method with 405 naming GET.
fn get_only<F, Args>(path: &str, handler: F) -> actix_web::Resource
where
    F: actix_web::Handler<Args>,
    Args: FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    web::resource(path)
        .get(handler)
        .default_service(web::to(not_allowed("GET")))
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
                JsonPayloadError::Deserialize(e) if e.to_string().starts_with(DUPLICATE_KEY) => {
                    AppError::InvalidRequest(format!(
                        "the body gives a key twice ({e}); give each key once"
                    ))
                }
                JsonPayloadError::Deserialize(e) => {
                    AppError::InvalidRequest(format!("the body is not valid JSON: {e}"))
                }
                other => AppError::InvalidRequest(format!("could not read the body: {other}")),
            };
            // A deduction answered here never reaches its handler: count it here.
            if let (Some(state), Some(name)) = (
                req.app_data::<web::Data<AppState>>(),
                req.match_info().get("strategy"),
            ) && let Some(strategy) = state.service.strategies.get(name)
            {
                let served = strategy.name();
                state
                    .service
                    .metrics
                    .refused_unread(served, error.code().id());
            }
            ApiError::from(error).into()
        })
}

/// Query strings we cannot parse come back in our error shape too.
pub fn query_config() -> web::QueryConfig {
    web::QueryConfig::default().error_handler(|err, _| {
        ApiError::from(AppError::InvalidRequest(
            clip_to(&format!("bad query string: {err}"), 200).into_owned(),
        ))
        .into()
    })
}

/// Path segments we cannot parse come back in our error shape too.
pub fn path_config() -> web::PathConfig {
    web::PathConfig::default().error_handler(|err: PathError, _| {
        ApiError::from(AppError::InvalidRequest(
            clip_to(&format!("bad path: {err}"), 200).into_owned(),
        ))
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
/// it named one, else the request's) and, on a 503 or a 429, `Retry-After`.
pub async fn request_context(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = req
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| crate::domain::order::is_valid_request_id(v))
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    req.extensions_mut().insert(RequestId(id.clone()));
    // One span per request (a deduction's own, `deduct`, records its strategy, its
    // order's id and its outcome): at ten thousand requests a second, every span costs.
    let span = tracing::info_span!(
        "request",
        method = %req.method(),
        path = %clip(req.path()),
        request_id = %id,
        status = tracing::field::Empty,
    );
    let mut res = next.call(req).instrument(span.clone()).await?;
    let answered = res.request().extensions().get::<AnsweredId>().cloned();
    let answered = answered.map_or(id, |AnsweredId(id)| id);
    if let Ok(value) = HeaderValue::from_str(&answered) {
        res.headers_mut().insert(X_REQUEST_ID, value);
    }
    // An error answer: the error itself, kept in the response by actix, found by its
    // type; its body, naming the id it answers, is written here.
    let error = res
        .response()
        .error()
        .and_then(|e| e.as_error::<ApiError>());
    let waited = error.map(ApiError::waited).unwrap_or_default();
    let failure = error.map(|e| (e.body(answered.clone()), e.cause()));
    // One second, less what a refusal held on its timer already made the client wait,
    // in whole seconds to the nearest: a refusal held half a second or more says 0
    // (retry now), for the hold was its backoff. Rounded up, a polite client would wait
    // a hold and then a second, while a client that does not back off waits the hold
    // alone, and the polite would sell less than the flood.
    if matches!(
        res.status(),
        actix_web::http::StatusCode::SERVICE_UNAVAILABLE
            | actix_web::http::StatusCode::TOO_MANY_REQUESTS
    ) {
        let left = std::time::Duration::from_secs(1).saturating_sub(waited);
        let seconds = (left.as_millis() + 499) as u64 / 1000;
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    span.record("status", res.status().as_u16());
    let res = match failure {
        None => res.map_into_left_body(),
        Some((body, cause)) => {
            if let Some(cause) = cause {
                let served = res.request().extensions().get::<Served>().map(|s| s.0);
                tracing::error!(
                    parent: &span,
                    request_id = %answered,
                    strategy = served.unwrap_or("-"),
                    error = %cause,
                    "internal error"
                );
            }
            let json = serde_json::to_vec(&body).expect("an error body serializes");
            res.map_body(|_, _| EitherBody::right(json))
        }
    };
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
        let expected = req
            .app_data::<web::Data<AppState>>()
            .and_then(|state| state.settings.admin_token.clone());
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        ready_future(match (expected, given) {
            (None, _) => Err(ApiError::from(AppError::AdminDisabled)),
            (Some(expected), Some(given))
                // Without returning early on the first differing byte, so the answer's
                // time does not tell how much of the token was guessed.
                if bool::from(expected.as_bytes().ct_eq(given.as_bytes())) =>
            {
                Ok(Admin)
            }
            _ => Err(ApiError::from(AppError::Unauthorized)),
        })
    }
}

fn not_allowed(
    allowed: &'static str,
) -> impl Fn(HttpRequest) -> Ready<Result<HttpResponse, ApiError>> + Clone {
    move |req: HttpRequest| {
        ready_future(Err(ApiError::from(AppError::MethodNotAllowed {
            method: clip(req.method().as_str()).into_owned(),
            allowed,
        })))
    }
}

/// Any unknown path.
pub async fn not_found(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::from(AppError::NotFound(
        clip(req.path()).into_owned(),
    )))
}

/// `GET /health`'s body.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Health {
    /// Always `ok`: the process answers.
    pub status: &'static str,
    pub version: &'static str,
    /// Whether the test hooks are on (`--enable-test-hooks`).
    pub test_hooks: bool,
    /// The server-wide hold between read and write (`--hold-ms`).
    pub hold_ms: u64,
}

/// `GET /health`: the process is up.
#[utoipa::path(get, path = "/health", tag = "service",
    responses((status = 200, description = "The process answers.", body = Health)))]
async fn health(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
        test_hooks: state.hooks.enabled(),
        hold_ms: state.hooks.server_hold_ms(),
    })
}

/// `GET /openapi.json`: this service's OpenAPI 3.1 document ([`crate::http::openapi`]).
#[utoipa::path(get, path = "/openapi.json", tag = "service",
    responses((status = 200, description = "The OpenAPI 3.1 document.", body = Object)))]
async fn openapi_json(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(state.openapi.clone())
}

/// The failpoint named in the path, when hooks are enabled; 404 otherwise (the hooks
/// endpoint does not exist without `--enable-test-hooks`).
fn failpoint(state: &AppState, req: &HttpRequest, name: &str) -> Result<Failpoint, ApiError> {
    if !state.hooks.enabled() {
        return Err(ApiError::from(AppError::NotFound(
            clip(req.path()).into_owned(),
        )));
    }
    hooks::failpoint(name)
        .ok_or_else(|| ApiError::from(AppError::UnknownFailpoint(clip(name).into_owned())))
}

/// `GET /hooks`'s body.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct HooksState {
    /// Each failpoint by name.
    pub failpoints: std::collections::HashMap<&'static str, crate::http::hooks::PointState>,
    pub hold_ms: u64,
}

/// `POST /hooks/{failpoint}/release`'s body.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Released {
    /// Requests let go.
    pub released: usize,
}

/// `GET /hooks/{failpoint}/paused`'s body.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Paused {
    /// Requests paused there now.
    pub paused: usize,
}

/// `GET /hooks`: every failpoint's mode, pending count, paused requests and hits.
#[utoipa::path(get, path = "/hooks", tag = "test-hooks", responses(
    (status = 200, description = "Every failpoint's state.", body = HooksState),
    (status = 404, description = "Test hooks are off: `not_found`.", body = ErrorBody)))]
async fn hooks_state(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    if !state.hooks.enabled() {
        return Err(ApiError::from(AppError::NotFound(
            clip(req.path()).into_owned(),
        )));
    }
    Ok(HttpResponse::Ok().json(HooksState {
        failpoints: state.hooks.states(),
        hold_ms: state.hooks.server_hold_ms(),
    }))
}

/// `PUT /hooks/{failpoint}` `{"mode": "off" | "pause" | "sleep", "ms": N, "count": N}`.
#[utoipa::path(put, path = "/hooks/{failpoint}", tag = "test-hooks", params(("failpoint" = String, Path, description = "after_lock, after_read, before_commit, ... (GET /hooks lists them)")),
    request_body = Setting, responses(
    (status = 200, description = "The failpoint's new state.", body = crate::http::hooks::PointState),
    (status = 400, description = "A body that is not a setting: `invalid_request`.", body = ErrorBody),
    (status = 404, description = "Test hooks are off (`not_found`), or no such failpoint (`unknown_failpoint`).", body = ErrorBody)))]
async fn hooks_set(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    body: web::Json<StrictValue>,
) -> Result<HttpResponse, ApiError> {
    let point = failpoint(&state, &req, &path)?;
    let setting: Setting = bodies::read(body.into_inner().0)
        .map_err(|e| AppError::InvalidRequest(format!("not a failpoint setting: {e}")))?;
    let now = state.hooks.set(point, setting);
    tracing::info!(failpoint = point.name(), ?now, "failpoint set");
    Ok(HttpResponse::Ok().json(now))
}

/// `POST /hooks/{failpoint}/release`: lets every request paused there go on.
#[utoipa::path(post, path = "/hooks/{failpoint}/release", tag = "test-hooks", params(("failpoint" = String, Path, description = "after_lock, after_read, before_commit, ... (GET /hooks lists them)")), responses(
    (status = 200, description = "How many were let go.", body = Released),
    (status = 404, description = "Test hooks are off, or no such failpoint.", body = ErrorBody)))]
async fn hooks_release(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let point = failpoint(&state, &req, &path)?;
    let released = state.hooks.release(point);
    Ok(HttpResponse::Ok().json(Released { released }))
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
#[utoipa::path(get, path = "/hooks/{failpoint}/paused", tag = "test-hooks", params(("failpoint" = String, Path, description = "after_lock, after_read, before_commit, ... (GET /hooks lists them)"),
    ("at_least" = Option<u64>, Query, description = "Wait for this many (default 1)."),
    ("timeout_ms" = Option<u64>, Query, description = "Give up after this long (default 5000, at most 120000).")),
    responses(
    (status = 200, description = "At least that many are paused there.", body = Paused),
    (status = 400, description = "A query string that cannot be read: `invalid_request`.", body = ErrorBody),
    (status = 404, description = "Test hooks are off, or no such failpoint.", body = ErrorBody),
    (status = 408, description = "Fewer were paused when the time ran out: `hook_timeout`.", body = ErrorBody)))]
async fn hooks_paused(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    query: web::Query<PausedQuery>,
) -> Result<HttpResponse, ApiError> {
    let point = failpoint(&state, &req, &path)?;
    let timeout = std::time::Duration::from_millis(query.timeout_ms.min(120_000));
    match state
        .hooks
        .wait_paused(point, query.at_least, timeout)
        .await
    {
        Ok(paused) => Ok(HttpResponse::Ok().json(Paused { paused })),
        Err(paused) => Err(ApiError::from(AppError::HookTimeout(format!(
            "{paused} request(s) paused at {} after {timeout:?}, waited for {}",
            point.name(),
            query.at_least
        )))),
    }
}

/// `GET /ready`: every configured backend answers.
#[utoipa::path(get, path = "/ready", tag = "service", responses(
    (status = 200, description = "Every configured backend answers.", body = crate::http::ready::Readiness),
    (status = 503, description = "A configured backend does not: `backend_unavailable` naming it, with every backend's state in `backends`.", body = ErrorBody)))]
async fn ready_route(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let report = ready::check(
        &state.service.pool,
        &state.settings,
        &state.service.strategies,
    )
    .await;
    if report.ready {
        Ok(HttpResponse::Ok().json(report))
    } else {
        let down: Vec<&str> = report
            .backends
            .iter()
            .filter(|b| b.configured && !b.ok)
            .map(|b| b.backend.as_str())
            .collect();
        let error = DeductError::unavailable(&down.join(", "), "not reachable");
        Err(ApiError::from(error).with_backends(report.backends))
    }
}

/// `GET /strategies`: every strategy served, with its card (family, texts, source
/// file, traits, fault experiments), in teaching order.
#[utoipa::path(get, path = "/strategies", tag = "service", responses(
    (status = 200, description = "Every strategy served, in teaching order.", body = Vec<crate::strategies::StrategyCard>)))]
async fn list_strategies(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(state.service.strategies.cards())
}

fn parse_product_id(raw: &str) -> Result<i64, ApiError> {
    match raw.parse::<i64>() {
        Ok(product_id) if product_id >= 1 => Ok(product_id),
        _ => Err(ApiError::from(AppError::InvalidRequest(format!(
            "product_id in the path must be a positive integer, got `{}`",
            clip(raw)
        )))),
    }
}

/// `GET /stock/{product_id}`: what is left, and what the ledger says was sold this
/// epoch (a strategy may add its own view: buckets, a Redis counter).
#[utoipa::path(get, path = "/stock/{product_id}", tag = "stock", params(("product_id" = i64, Path, minimum = 1)), responses(
    (status = 200, description = "The product's stock and what its ledger says was sold this epoch.", body = crate::service::stock::StockView),
    (status = 400, description = "A product id that is not a positive integer: `invalid_request`.", body = ErrorBody),
    (status = 404, description = "No such product: `unknown_product`.", body = ErrorBody),
    (status = 500, description = "Anything else: `internal` (details only in the server log).", body = ErrorBody),
    (status = 503, description = "The database cannot be reached: `backend_unavailable`.", body = ErrorBody)))]
async fn get_stock(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let product_id = parse_product_id(&path)?;
    let view = state.service.stock(product_id).await?;
    Ok(HttpResponse::Ok().json(view))
}

/// `PUT /stock/{product_id}` `{"quantity": N, "buckets": K}` (admin): create, or
/// restock into a new epoch; `buckets` (optional) splits the units into rows (for a
/// strategy that sells from split rows).
#[utoipa::path(put, path = "/stock/{product_id}", tag = "stock", params(("product_id" = i64, Path, minimum = 1)),
    request_body = crate::http::bodies::Restock, security(("admin_token" = [])), responses(
    (status = 200, description = "The product as it is now (a new epoch).", body = crate::service::stock::StockView),
    (status = 400, description = "Bad input, naming the field: `invalid_request`.", body = ErrorBody),
    (status = 401, description = "Missing or wrong `Authorization: Bearer <ADMIN_TOKEN>`: `unauthorized`.", body = ErrorBody),
    (status = 403, description = "The service runs without ADMIN_TOKEN: `admin_disabled`.", body = ErrorBody),
    (status = 413, description = "A body over 64 KiB: `invalid_request`.", body = ErrorBody),
    (status = 500, description = "Anything else: `internal`.", body = ErrorBody),
    (status = 503, description = "The database cannot be reached: `backend_unavailable`.", body = ErrorBody)))]
async fn put_stock(
    _admin: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<StrictValue>,
) -> Result<HttpResponse, ApiError> {
    let product_id = parse_product_id(&path)?;
    let Restock { quantity, buckets } = bodies::read(body.into_inner().0)?;
    let (quantity, buckets) = (quantity.0, buckets.map_or(0, |b| b.0));
    let view = state.service.restock(product_id, quantity, buckets).await?;
    Ok(HttpResponse::Ok().json(view))
}

/// `POST /deduct/{strategy}`: deduct one order's items with that strategy, all or
/// nothing, once per `request_id`.
#[utoipa::path(post, path = "/deduct/{strategy}", tag = "deduct",
    params(("strategy" = String, Path, description = "A strategy's name (GET /strategies).")),
    request_body = crate::http::bodies::DeductRequest, responses(
    (status = 200, description = "Deducted; or, for a request_id that already succeeded with the same request, the stored answer with `duplicate: true` (nothing deducted twice).", body = crate::strategies::Deducted),
    (status = 400, description = "Bad input, naming the field: `invalid_request`.", body = ErrorBody),
    (status = 404, description = "No such strategy (`unknown_strategy`, listing them) or product (`unknown_product`).", body = ErrorBody),
    (status = 409, description = "Not enough stock: `insufficient_stock`.", body = ErrorBody),
    (status = 413, description = "A body over 64 KiB: `invalid_request`.", body = ErrorBody),
    (status = 422, description = "The request_id already succeeded for a different request: `request_id_reused`.", body = ErrorBody),
    (status = 500, description = "Anything else: `internal` (details only in the server log).", body = ErrorBody),
    (status = 429, description = "Nothing was deducted: `overloaded`, the instance's admission limit (`--max-in-flight`) was reached; retry after `Retry-After`.", body = ErrorBody),
    (status = 503, description = "Nothing was deducted: `busy` (the lock or the retries ran out), `lock_lost`, `backend_unavailable` (naming it); or `outcome_unknown` (COMMIT sent, no reply: retry with the same request_id).", body = ErrorBody)))]
#[tracing::instrument(level = "debug", name = "handler", skip_all, fields(strategy))]
async fn deduct(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    id: RequestId,
    body: web::Json<StrictValue>,
) -> Result<HttpResponse, ApiError> {
    let started = std::time::Instant::now();
    let service = &state.service;
    // The name is the client's: an unknown one is echoed no longer than needed.
    let strategy = service.strategy(&clip(&path))?;
    let served = strategy.name();
    // Named once it is one served here (the path is the client's, of any length).
    tracing::Span::current().record("strategy", served);
    req.extensions_mut().insert(Served(served));
    let (order, knobs) = DeductRequest::parse(
        body.into_inner().0,
        &id.0,
        state.hooks.enabled(),
        service.strategies.mistake_names(),
    )
    .inspect_err(|e| service.refused_input(served, code_of(e).id(), started))?;
    // From here the answer names the order's request id, whatever it is.
    req.extensions_mut()
        .insert(AnsweredId(order.request_id.clone()));
    let done = service.deduct(strategy, &order, &knobs, started).await?;
    Ok(HttpResponse::Ok().json(done))
}

/// `GET /metrics`: the Prometheus text format ([`crate::service::metrics`]).
#[utoipa::path(get, path = "/metrics", tag = "service", responses(
    (status = 200, description = "The Prometheus text format, version 0.0.4.", body = String, content_type = "text/plain; version=0.0.4")))]
async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    for strategy in state.service.strategies.iter() {
        strategy.scrape().await;
    }
    let now = crate::service::metrics::Scrape {
        pool: (
            state.service.pool.size(),
            state.service.pool.num_idle(),
            state.settings.db_pool_size,
        ),
        admission: (
            state.service.admission.limit(),
            state.service.admission.in_flight(),
        ),
    };
    HttpResponse::Ok()
        .content_type(prometheus::TEXT_FORMAT)
        .body(state.service.metrics.render(&now))
}
