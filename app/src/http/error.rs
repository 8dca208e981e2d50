//! The edge's errors: what the service said ([`ServiceError`], whose code
//! `service::code_of` gives) or what only the edge can say, each with a stable code of
//! the wire's [`ErrorCode`], which carries its HTTP status.
//!
//! Every error body is `{"error": CODE, "detail": TEXT, "request_id": ID}`. The request
//! id (in the body and in `X-Request-Id`) and `Retry-After` on a 503 or 429 are set in
//! one place, the request-context middleware in `routes`: an error says what went
//! wrong, not which request it answers. Database and other internal details are
//! logged, never sent.

use crate::domain::error::DeductError;
use crate::http::ready::BackendStatus;
use crate::http::strict_json::clip_to;
use crate::service::ServiceError;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use std::time::Duration;
use stock_wire::ErrorCode;

/// What went wrong while serving a request: what the service said of a deduction
/// ([`ServiceError`]), or what only the edge can say (a path, a method, a token).
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// What the service says: the domain's reasons (stock, locks, backends, the
    /// order's fields), an unknown strategy, no place under the admission limit.
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// Bad input the edge found (a body that is not JSON, a repeated key, a path or
    /// query parameter), naming what is wrong. 400.
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
}

impl From<DeductError> for AppError {
    fn from(e: DeductError) -> AppError {
        AppError::Service(e.into())
    }
}

impl From<sqlx::Error> for AppError {
    fn from(e: sqlx::Error) -> AppError {
        DeductError::from(e).into()
    }
}

impl AppError {
    /// The HTTP status: its code's ([`ErrorCode::status`]), but for a body over the
    /// size limit (413, code `invalid_request`).
    pub fn status(&self) -> StatusCode {
        let status = match self {
            AppError::PayloadTooLarge(_) => 413,
            other => other.code().status(),
        };
        StatusCode::from_u16(status).expect("every code's status is a valid status")
    }

    /// The stable, machine-readable code in the body's `error` field.
    pub fn code(&self) -> ErrorCode {
        use AppError::*;
        match self {
            Service(e) => e.code(),
            InvalidRequest(_) | PayloadTooLarge(_) => ErrorCode::InvalidRequest,
            Unauthorized => ErrorCode::Unauthorized,
            AdminDisabled => ErrorCode::AdminDisabled,
            NotFound(_) => ErrorCode::NotFound,
            UnknownFailpoint(_) => ErrorCode::UnknownFailpoint,
            MethodNotAllowed { .. } => ErrorCode::MethodNotAllowed,
            HookTimeout(_) => ErrorCode::HookTimeout,
        }
    }

    /// An answer whose cause is logged and not sent (500 `internal`).
    fn is_internal(&self) -> bool {
        self.code() == ErrorCode::Internal
    }
}

/// An [`AppError`] as handlers return it (any error converts with `?`); the request
/// id its body names is filled in by the request-context middleware, the one place
/// that knows which id a request answers under.
#[derive(Debug)]
pub struct ApiError {
    pub error: AppError,
    /// `/ready`'s backends, listed in its 503.
    pub backends: Option<Vec<BackendStatus>>,
}

impl<E> From<E> for ApiError
where
    AppError: From<E>,
{
    fn from(error: E) -> ApiError {
        ApiError {
            error: error.into(),
            backends: None,
        }
    }
}

/// Every error's body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong, as a stable code.
    pub error: ErrorCode,
    /// What went wrong, for a human: names the field or backend, never a database
    /// detail.
    pub detail: String,
    /// The request this answers (a deduction's `request_id`).
    pub request_id: String,
    /// `GET /ready` only: each backend's state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backends: Option<Vec<BackendStatus>>,
}

/// The request id a request answers under when it is not the request's own (a
/// deduction answers with its body's `request_id`): the handler leaves it in the
/// request's extensions, the middleware names it in `X-Request-Id` and the error body.
#[derive(Debug, Clone)]
pub struct AnsweredId(pub String);

/// The strategy a deduction was served by, left in the request's extensions by its
/// handler: the middleware names it when it logs an internal error.
#[derive(Debug, Clone, Copy)]
pub struct Served(pub &'static str);

impl ApiError {
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

    /// The status and headers; the body, which names the request id, is written by
    /// the request-context middleware from [`ApiError::body`] (actix hands
    /// `error_response` no request to read the id from, and keeps this error in the
    /// response, where the middleware finds it by its type).
    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        if matches!(self.error, AppError::Unauthorized) {
            response.insert_header((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")));
        }
        response.content_type("application/json").finish()
    }
}

impl ApiError {
    /// The body answering the request `request_id`: never a database detail (an
    /// internal error says where its cause is: the server log, under that id).
    pub fn body(&self, request_id: String) -> ErrorBody {
        let detail = if self.error.is_internal() {
            "internal error; the request id is in the server log".to_string()
        } else {
            // A bound on every detail, whatever quoted what: an error answer stays small.
            clip_to(&self.error.to_string(), 512).into_owned()
        };
        ErrorBody {
            error: self.error.code(),
            detail,
            request_id,
            backends: self.backends.clone(),
        }
    }

    /// The cause to log, never sent: an internal error's.
    pub fn cause(&self) -> Option<String> {
        self.error
            .is_internal()
            .then(|| format!("{:?}", self.error))
    }

    /// How long the refusal already made its client wait (a reject hold): what
    /// `Retry-After` leaves out.
    pub fn waited(&self) -> Duration {
        match &self.error {
            AppError::Service(ServiceError::Overloaded { held, .. }) => *held,
            _ => Duration::ZERO,
        }
    }
}
