//! One error enum for the service, and the one table that maps it to HTTP.
//!
//! Every error body is `{"error": CODE, "detail": TEXT, "request_id": ID}`. The headers
//! every answer carries (`X-Request-Id`, and `Retry-After` on a 503) are set in one
//! place, the request-context middleware in `routes`; an error only says which request
//! id it answers. Database and other internal details are logged, never sent.

use crate::ready::BackendStatus;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

/// What went wrong while serving a request.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// Bad input, naming the field and what is wrong with it. 400.
    #[error("{0}")]
    InvalidRequest(String),
    /// The body is over the size limit. 413 (code `invalid_request`).
    #[error("{0}")]
    PayloadTooLarge(String),
    /// Admin route without the right bearer token. 401.
    #[error("missing or wrong admin token (Authorization: Bearer <ADMIN_TOKEN>)")]
    Unauthorized,
    /// Admin route on a service started without ADMIN_TOKEN. 403.
    #[error("admin routes are disabled: the service was started without ADMIN_TOKEN")]
    AdminDisabled,
    /// 404 for `/deduct/{name}` with a name we do not serve.
    #[error("unknown strategy `{name}`; strategies: {known}")]
    UnknownStrategy { name: String, known: String },
    /// 404 for a product that was never stocked.
    #[error("unknown product {0}")]
    UnknownProduct(i64),
    /// 404 for any other path.
    #[error("no route for {0}")]
    NotFound(String),
    /// 404 for a failpoint name that does not exist.
    #[error(
        "unknown failpoint `{0}`; failpoints: after_lock, after_read, before_commit, before_lock, before_release"
    )]
    UnknownFailpoint(String),
    /// 408: a test hook's wait ran out (e.g. fewer requests paused than awaited).
    #[error("{0}")]
    HookTimeout(String),
    /// 405 for a known path with another method.
    #[error("{method} is not allowed here; use {allowed}")]
    MethodNotAllowed {
        method: String,
        allowed: &'static str,
    },
    /// Not enough stock: nothing was deducted. 409. `available` is `None` when the
    /// strategy's statement only said "not enough" (a conditional UPDATE that matched
    /// nothing); the refusal path reads it.
    #[error("product {product_id}: {requested} requested, {} available", available.map_or("fewer".to_string(), |a| a.to_string()))]
    InsufficientStock {
        product_id: i64,
        requested: i64,
        available: Option<i64>,
    },
    /// Not enough stock, found by the CHECK constraint instead of the statement's
    /// guard (the `no-guard` mistake only). 409 (code `insufficient_stock`).
    #[error("{0}")]
    StockConstraint(String),
    /// The request_id was used before for a different request. 422.
    #[error("request_id `{0}` was already used for a different request")]
    RequestIdReused(String),
    /// The lock was not acquired within the wait, or the retries ran out. 503.
    #[error("{0}")]
    Busy(String),
    /// The lock was lost before COMMIT, or our fencing token is stale. 503, nothing written.
    #[error("{0}")]
    LockLost(String),
    /// COMMIT was sent and its reply lost: it may or may not have happened. 503; retry
    /// with the same request_id to find out (it is never applied twice).
    #[error("{0}")]
    OutcomeUnknown(String),
    /// A backend the request needs is not configured or not reachable. 503.
    #[error("{backend} unavailable: {detail}")]
    BackendUnavailable { backend: String, detail: String },
    /// The `orders` insert hit the primary key: this request id committed meanwhile
    /// (a twin on another instance, or an earlier try). Never sent: the idempotency
    /// layer answers it with the stored response.
    #[error("request_id `{0}` has already succeeded")]
    AlreadyDone(String),
    /// Anything else. 500; the cause is logged, not sent.
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl AppError {
    /// The table: each error's HTTP status ([`status`](Self::status)) and stable code
    /// ([`code`](Self::code)), side by side.
    pub fn status(&self) -> StatusCode {
        self.table().0
    }

    /// The stable, machine-readable code in the body's `error` field.
    pub fn code(&self) -> &'static str {
        self.table().1
    }

    /// Every code an error body may carry (the OpenAPI document's `ErrorCode`).
    pub const CODES: [&'static str; 16] = [
        "invalid_request",
        "unauthorized",
        "admin_disabled",
        "unknown_strategy",
        "unknown_product",
        "not_found",
        "unknown_failpoint",
        "method_not_allowed",
        "hook_timeout",
        "insufficient_stock",
        "request_id_reused",
        "busy",
        "lock_lost",
        "outcome_unknown",
        "backend_unavailable",
        "internal",
    ];

    fn table(&self) -> (StatusCode, &'static str) {
        use AppError::*;
        use StatusCode as S;
        match self {
            InvalidRequest(_) => (S::BAD_REQUEST, "invalid_request"),
            PayloadTooLarge(_) => (S::PAYLOAD_TOO_LARGE, "invalid_request"),
            Unauthorized => (S::UNAUTHORIZED, "unauthorized"),
            AdminDisabled => (S::FORBIDDEN, "admin_disabled"),
            UnknownStrategy { .. } => (S::NOT_FOUND, "unknown_strategy"),
            UnknownProduct(_) => (S::NOT_FOUND, "unknown_product"),
            NotFound(_) => (S::NOT_FOUND, "not_found"),
            UnknownFailpoint(_) => (S::NOT_FOUND, "unknown_failpoint"),
            MethodNotAllowed { .. } => (S::METHOD_NOT_ALLOWED, "method_not_allowed"),
            HookTimeout(_) => (S::REQUEST_TIMEOUT, "hook_timeout"),
            InsufficientStock { .. } | StockConstraint(_) => (S::CONFLICT, "insufficient_stock"),
            RequestIdReused(_) => (S::UNPROCESSABLE_ENTITY, "request_id_reused"),
            Busy(_) => (S::SERVICE_UNAVAILABLE, "busy"),
            LockLost(_) => (S::SERVICE_UNAVAILABLE, "lock_lost"),
            OutcomeUnknown(_) => (S::SERVICE_UNAVAILABLE, "outcome_unknown"),
            BackendUnavailable { .. } => (S::SERVICE_UNAVAILABLE, "backend_unavailable"),
            AlreadyDone(_) | Unexpected(_) => (S::INTERNAL_SERVER_ERROR, "internal"),
        }
    }

    /// An answer that a request which already succeeded could also get (its retry
    /// after the stock ran out, while another holds the lock, or racing its twin to
    /// the `orders` key): answered from `orders` when this request id has a stored
    /// response.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            AppError::InsufficientStock { .. }
                | AppError::Busy(_)
                | AppError::LockLost(_)
                | AppError::AlreadyDone(_)
        )
    }

    /// The database is down or every pooled connection is busy.
    pub fn database(detail: impl std::fmt::Display) -> AppError {
        AppError::BackendUnavailable {
            backend: "database".into(),
            detail: detail.to_string(),
        }
    }
}

impl From<sqlx::Error> for AppError {
    fn from(e: sqlx::Error) -> AppError {
        if is_connection_error(&e) {
            AppError::database(e)
        } else {
            AppError::Unexpected(anyhow::Error::new(e).context("database error"))
        }
    }
}

/// Errors that mean "the database could not be reached or the connection broke", as
/// opposed to an answer from the database.
pub fn is_connection_error(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
    )
}

/// The MariaDB error number of a database error (1062 duplicate key, 1213 deadlock,
/// 1205 lock wait timeout, ...).
pub fn mysql_error_number(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error()?
        .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .map(|e| e.number())
}

/// An [`AppError`] and the request id it answers: what handlers return.
#[derive(Debug)]
pub struct ApiError {
    pub error: AppError,
    pub request_id: String,
    /// `/ready`'s backends, listed in its 503.
    pub backends: Option<Vec<BackendStatus>>,
}

/// Every error's body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong, as a stable code.
    #[schema(value_type = ErrorCode)]
    pub error: &'static str,
    /// What went wrong, for a human: names the field or backend, never a database
    /// detail.
    pub detail: String,
    /// The request this answers (a deduction's `request_id`).
    pub request_id: String,
    /// `GET /ready` only: each backend's state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backends: Option<Vec<BackendStatus>>,
}

/// The codes of [`ErrorBody::error`] ([`AppError::CODES`]), as a string enum.
pub struct ErrorCode;

impl utoipa::PartialSchema for ErrorCode {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(AppError::CODES))
            .description(Some("The error's code; 500 answers are always `internal`."))
            .into()
    }
}

impl utoipa::ToSchema for ErrorCode {}

/// The request id a response answers, left in the response's extensions for the
/// middleware that sets `X-Request-Id` (a deduction answers with its body's
/// `request_id`, which may differ from the request's header).
#[derive(Debug, Clone)]
pub struct AnsweredId(pub String);

impl ApiError {
    pub fn new(error: AppError, request_id: impl Into<String>) -> ApiError {
        ApiError {
            error,
            request_id: request_id.into(),
            backends: None,
        }
    }

    /// Lists `/ready`'s backends in the body.
    pub fn with_backends(mut self, backends: Vec<BackendStatus>) -> ApiError {
        self.backends = Some(backends);
        self
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.error.status()
    }

    fn error_response(&self) -> HttpResponse {
        let detail = match &self.error {
            AppError::Unexpected(_) | AppError::AlreadyDone(_) => {
                tracing::error!(request_id = %self.request_id, error = ?self.error, "internal error");
                "internal error; the request id is in the server log".to_string()
            }
            // A bound on every detail, whatever quoted what: an error answer stays small.
            other => crate::strict_json::clip_to(&other.to_string(), 512).into_owned(),
        };
        let mut response = HttpResponse::build(self.status_code());
        if matches!(self.error, AppError::Unauthorized) {
            response.insert_header((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")));
        }
        let mut response = response.json(ErrorBody {
            error: self.error.code(),
            detail,
            request_id: self.request_id.clone(),
            backends: self.backends.clone(),
        });
        response
            .extensions_mut()
            .insert(AnsweredId(self.request_id.clone()));
        response
    }
}
