//! What can go wrong in a deduction, in the domain's words. No codes and no HTTP here:
//! the service names each error to its clients (`service::code_of`, a code of the
//! wire's `ErrorCode`, which carries its HTTP status).

/// Why a deduction did not happen (or, for [`DeductError::OutcomeUnknown`], may not
/// have).
#[derive(Debug, thiserror::Error)]
pub enum DeductError {
    /// Bad input, naming the field and what is wrong with it.
    #[error("{0}")]
    InvalidRequest(String),
    /// A product that was never stocked.
    #[error("unknown product {0}")]
    UnknownProduct(i64),
    /// Not enough stock: nothing was deducted. `available` is `None` when the
    /// strategy's statement only said "not enough" (the refusal path reads it).
    #[error("product {product_id}: {requested} requested, {} available", available.map_or("fewer".to_string(), |a| a.to_string()))]
    InsufficientStock {
        product_id: i64,
        requested: i64,
        available: Option<i64>,
    },
    /// Not enough stock, found by the CHECK constraint instead of the statement's
    /// guard (the `no-guard` mistake only).
    #[error("{0}")]
    StockConstraint(String),
    /// The request_id was used before for a different request.
    #[error("request_id `{0}` was already used for a different request")]
    RequestIdReused(String),
    /// The lock was not acquired within the wait, or the retries ran out.
    #[error("{0}")]
    Busy(String),
    /// The lock was lost before COMMIT, or our fencing token is stale: nothing written.
    #[error("{0}")]
    LockLost(String),
    /// COMMIT was sent and its reply lost: it may or may not have happened; retry
    /// with the same request_id to find out (it is never applied twice).
    #[error("{0}")]
    OutcomeUnknown(String),
    /// A backend the request needs is not configured or not reachable; its own error,
    /// when it gave one, is the `source` ([`DeductError::caused_by`]).
    #[error("{backend} unavailable: {detail}")]
    BackendUnavailable {
        backend: String,
        detail: String,
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The `orders` insert hit the primary key: this request id committed meanwhile.
    /// Never answered as such: the idempotency layer answers the stored response.
    #[error("request_id `{0}` has already succeeded")]
    AlreadyDone(String),
    /// Anything else; the cause is logged, not sent.
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl DeductError {
    /// An answer a request that already succeeded could also get (its retry after the
    /// stock ran out, or racing its twin): answered from `orders` when it has one.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            DeductError::InsufficientStock { .. }
                | DeductError::Busy(_)
                | DeductError::LockLost(_)
                | DeductError::AlreadyDone(_)
        )
    }

    /// The product of a stock refusal that did not say what is left of it.
    pub fn stock_unsaid(&self) -> Option<i64> {
        match self {
            DeductError::InsufficientStock {
                product_id,
                available: None,
                ..
            } => Some(*product_id),
            _ => None,
        }
    }

    /// `backend` is not configured or not reachable, as `detail` says.
    pub fn unavailable(backend: &str, detail: impl Into<String>) -> DeductError {
        let (backend, detail) = (backend.into(), detail.into());
        DeductError::BackendUnavailable {
            backend,
            detail,
            source: None,
        }
    }

    /// This error with `cause` kept as its source (a backend's error only).
    pub fn caused_by(mut self, cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        if let DeductError::BackendUnavailable { source, .. } = &mut self {
            *source = Some(cause.into());
        }
        self
    }
}

impl From<sqlx::Error> for DeductError {
    fn from(e: sqlx::Error) -> DeductError {
        if is_connection_error(&e) {
            // The database is down or every pooled connection is busy.
            DeductError::unavailable("database", e.to_string()).caused_by(e)
        } else {
            DeductError::Unexpected(anyhow::Error::new(e).context("database error"))
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
