//! The bottom of the layers: the strategy itself, or the classic mistake it was asked
//! to make, timed by phase ([`super::phases`]) on a span of its own.

use super::layer::{Answer, Deduct, Request};
use crate::domain::error::DeductError;
use crate::strategies::Strategies;
use crate::strategies::contract::{Deducted, Deduction, Strategy};

/// Runs the request's strategy.
pub struct Run {
    /// The registry: which strategy makes which mistake.
    pub strategies: Strategies,
}

impl Deduct for Run {
    async fn deduct(&self, request: &Request<'_>) -> Answer {
        let d = request.deduction;
        let mistake = d.knobs.mistake.as_deref();
        if let Some(mistake) = mistake {
            let maker = self.strategies.maker_of(mistake);
            if maker.is_none_or(|maker| maker.name() != d.strategy) {
                return Answer::now(Err(DeductError::InvalidRequest(format!(
                    "mistake `{mistake}` is made in `{}`, not in `{}`",
                    maker.map_or("no strategy", |s| s.name()),
                    d.strategy
                ))));
            }
        }
        let work = call(request.strategy, d, mistake);
        Answer::now(request.phases.strategy(work).await)
    }
}

/// The strategy's own work (or the classic mistake it was asked to make), on a span of
/// its own with the outcome it gave (at debug level: a span per request costs).
#[tracing::instrument(level = "debug", name = "strategy", skip_all, fields(
    strategy = d.strategy,
    mistake,
    outcome = tracing::field::Empty,
))]
async fn call(
    strategy: &dyn Strategy,
    d: &Deduction<'_>,
    mistake: Option<&str>,
) -> Result<Deducted, DeductError> {
    let result = match mistake {
        None => strategy.deduct(d).await,
        Some(mistake) => strategy.deduct_mistaken(mistake, d).await,
    };
    let outcome = match &result {
        Ok(_) => "deducted",
        Err(e) => super::code_of(e).id(),
    };
    tracing::Span::current().record("outcome", outcome);
    result
}
