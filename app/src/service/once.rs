//! The idempotency layer: a refusal asks `orders` once whether this request id
//! succeeded before ([`crate::strategies::idempotency`]). A retry of a success may
//! meet a refusal its first try did not (sold out since, a lock busy): it gets the
//! stored answer, not the refusal.

use super::ServiceError;
use super::layer::{Answer, Deduct, Request};
use crate::domain::error::DeductError;
use crate::strategies::idempotency;
use std::time::Instant;

/// Answers a refusal from `orders` when this request id succeeded before.
pub struct Once<D> {
    pub inner: D,
}

impl<D: Deduct> Deduct for Once<D> {
    async fn deduct(&self, request: &Request<'_>) -> Answer {
        let before = Instant::now();
        let answer = self.inner.deduct(request).await;
        let refusal = match answer.result {
            Err(ServiceError::Deduct(refusal)) if refusal.is_refusal() => refusal,
            _ => return answer,
        };
        // The evidence of "nothing left": the strategy's own read when it says what is
        // left (it read it after `before`), else the read below.
        let read_by_strategy = matches!(
            refusal,
            DeductError::InsufficientStock {
                available: Some(_),
                ..
            }
        );
        let evidence_at = if read_by_strategy {
            before
        } else {
            Instant::now()
        };
        let d = request.deduction;
        Answer {
            evidence_at,
            ..Answer::now(idempotency::after_refusal(d.pool, d, refusal).await)
        }
    }
}
