//! One error enum for the service, mapped to HTTP in one place.
//!
//! Every error body is `{"error": CODE, "detail": TEXT, "request_id": ID}`; every 503
//! carries `Retry-After`. Database and other internal details are logged, never sent.

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;

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
    #[error("unknown failpoint `{0}`; failpoints: after_lock, after_read, before_commit")]
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
    /// Not enough stock: nothing was deducted. 409.
    #[error("product {product_id}: {requested} requested, {available} available")]
    InsufficientStock {
        product_id: i64,
        requested: i64,
        available: i64,
    },
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
    /// Anything else. 500; the cause is logged, not sent.
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl AppError {
    pub fn status(&self) -> StatusCode {
        use AppError::*;
        match self {
            InvalidRequest(_) => StatusCode::BAD_REQUEST,
            PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Unauthorized => StatusCode::UNAUTHORIZED,
            AdminDisabled => StatusCode::FORBIDDEN,
            UnknownStrategy { .. } | UnknownProduct(_) | NotFound(_) => StatusCode::NOT_FOUND,
            MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            UnknownFailpoint(_) => StatusCode::NOT_FOUND,
            HookTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            InsufficientStock { .. } => StatusCode::CONFLICT,
            RequestIdReused(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Busy(_) | LockLost(_) | OutcomeUnknown(_) | BackendUnavailable { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Unexpected(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable, machine-readable code in the body's `error` field.
    pub fn code(&self) -> &'static str {
        use AppError::*;
        match self {
            InvalidRequest(_) | PayloadTooLarge(_) => "invalid_request",
            Unauthorized => "unauthorized",
            AdminDisabled => "admin_disabled",
            UnknownStrategy { .. } => "unknown_strategy",
            UnknownProduct(_) => "unknown_product",
            NotFound(_) => "not_found",
            MethodNotAllowed { .. } => "method_not_allowed",
            UnknownFailpoint(_) => "unknown_failpoint",
            HookTimeout(_) => "hook_timeout",
            InsufficientStock { .. } => "insufficient_stock",
            RequestIdReused(_) => "request_id_reused",
            Busy(_) => "busy",
            LockLost(_) => "lock_lost",
            OutcomeUnknown(_) => "outcome_unknown",
            BackendUnavailable { .. } => "backend_unavailable",
            Unexpected(_) => "internal",
        }
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
}

impl ApiError {
    pub fn new(error: AppError, request_id: impl Into<String>) -> ApiError {
        ApiError {
            error,
            request_id: request_id.into(),
        }
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
            AppError::Unexpected(cause) => {
                tracing::error!(request_id = %self.request_id, error = ?cause, "internal error");
                "internal error; the request id is in the server log".to_string()
            }
            other => other.to_string(),
        };
        let mut response = HttpResponse::build(self.status_code());
        if let Ok(id) = HeaderValue::from_str(&self.request_id) {
            response.insert_header((crate::routes::X_REQUEST_ID, id));
        }
        if self.status_code() == StatusCode::SERVICE_UNAVAILABLE {
            response.insert_header((header::RETRY_AFTER, HeaderValue::from_static("1")));
        }
        if matches!(self.error, AppError::Unauthorized) {
            response.insert_header((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")));
        }
        response.json(json!({
            "error": self.error.code(),
            "detail": detail,
            "request_id": self.request_id,
        }))
    }
}
