//! A deduction as the service runs it: a stack of layers, each one concern around the
//! next, composed once at startup ([`super::Layers`]).
//!
//! This is tower's shape (a `ConcurrencyLimit` or a `LoadShed` wraps a service and
//! owns its state; the service underneath does not know it is there), without the
//! `tower` crate: a deduction borrows its order, its pools and its probe for its whole
//! run, and `tower::Service::call` hands back a future that may not borrow the
//! service or the request. So the stack is one small trait, [`Deduct`], implemented
//! by each layer over the next: generic, so the compiler sees the whole stack, and
//! with a native `async fn`, so no layer's future is boxed.

use super::ServiceError;
use super::phases::Phases;
use crate::strategies::contract::{Deducted, Deduction, Strategy};
use std::time::Instant;

/// One deduction on its way down the layers.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    /// The strategy that serves it.
    pub strategy: &'a dyn Strategy,
    /// The deduction as the strategy is handed it: the order, its knobs, the pools,
    /// the request's probe.
    pub deduction: &'a Deduction<'a>,
    /// Where its time goes, by phase (its probe adds them up).
    pub phases: &'a Phases,
    /// When the request arrived, for the latency the metrics count.
    pub started: Instant,
    /// Let through the admission line without a place: the one request looking again
    /// at an expired sold-out mark (the others wait for it, and would otherwise wait
    /// out its hold too).
    pub unlimited: bool,
}

/// What a layer answers.
pub struct Answer {
    pub result: Result<Deducted, ServiceError>,
    /// When the evidence of a refusal was read: a sold-out mark lasts from there.
    pub evidence_at: Instant,
    /// Answered from a sold-out mark, without the strategy.
    pub by_mark: bool,
}

impl Answer {
    /// `result`, its evidence (if a refusal) read now.
    pub fn now(result: Result<Deducted, impl Into<ServiceError>>) -> Answer {
        Answer {
            result: result.map_err(Into::into),
            evidence_at: Instant::now(),
            by_mark: false,
        }
    }

    /// The answer's stable code: the error body's `error`, the metrics' `outcome`.
    pub fn outcome(&self) -> &'static str {
        match &self.result {
            Ok(done) if done.duplicate => "duplicate",
            Ok(_) => "deducted",
            Err(e) => e.code().id(),
        }
    }
}

/// A layer of the deduction, or the strategy at the bottom of them.
///
/// Its future is not `Send`, and needs not be: actix serves each request on one
/// worker thread, and the layers are composed by type, never as `dyn Deduct`.
#[allow(async_fn_in_trait)]
pub trait Deduct {
    async fn deduct(&self, request: &Request<'_>) -> Answer;
}
