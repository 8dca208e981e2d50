//! The error codes: the `error` of every error body, each with its HTTP status.

use serde::{Deserialize, Serialize};
use strum::{IntoStaticStr, VariantArray};

/// What went wrong, as a stable code: the error body's `error` and the metrics'
/// `outcome`. A 500 answer is always `internal`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, IntoStaticStr, VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ErrorCode {
    /// Bad input, naming the field and what is wrong with it (400; a body over the
    /// size limit: 413).
    InvalidRequest,
    /// An admin route without the right bearer token (401).
    Unauthorized,
    /// An admin route on a service started without an admin token (403).
    AdminDisabled,
    /// `POST /deduct/{name}` with a name the service does not serve (404).
    UnknownStrategy,
    /// A product that was never stocked (404).
    UnknownProduct,
    /// No route for the path (404).
    NotFound,
    /// A test hook's failpoint that does not exist (404).
    UnknownFailpoint,
    /// A known path with another method (405).
    MethodNotAllowed,
    /// A test hook's wait ran out (408).
    HookTimeout,
    /// Not enough stock: nothing was deducted (409).
    InsufficientStock,
    /// The request id was used before for a different request (422).
    RequestIdReused,
    /// Past the admission limit: nothing was done, retry after `Retry-After` (429).
    Overloaded,
    /// The lock was not acquired in time, or the retries ran out (503).
    Busy,
    /// The lock was lost before COMMIT, or the fencing token is stale (503).
    LockLost,
    /// COMMIT was sent and its reply lost: retry with the same request id (503).
    OutcomeUnknown,
    /// A backend the request needs is not configured or not reachable (503).
    BackendUnavailable,
    /// Anything else; the cause is logged, not sent (500).
    Internal,
}

impl ErrorCode {
    /// Every code.
    pub const ALL: &'static [ErrorCode] = <ErrorCode as VariantArray>::VARIANTS;

    /// Its name on the wire (`insufficient_stock`).
    pub fn id(self) -> &'static str {
        self.into()
    }

    /// The HTTP status it is answered with (an over-long body's `invalid_request`
    /// is the one exception: 413).
    pub fn status(self) -> u16 {
        use ErrorCode::*;
        match self {
            InvalidRequest => 400,
            Unauthorized => 401,
            AdminDisabled => 403,
            UnknownStrategy | UnknownProduct | NotFound | UnknownFailpoint => 404,
            MethodNotAllowed => 405,
            HookTimeout => 408,
            InsufficientStock => 409,
            RequestIdReused => 422,
            Overloaded => 429,
            Busy | LockLost | OutcomeUnknown | BackendUnavailable => 503,
            Internal => 500,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body's name and the metrics' label are the same string.
    #[test]
    fn ids_are_the_json_names() {
        for &code in ErrorCode::ALL {
            assert_eq!(serde_json::to_value(code).unwrap(), code.id(), "{code:?}");
        }
    }
}
