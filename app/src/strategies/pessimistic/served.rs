//! How the service registers the strategy: its card for the catalogue and its
//! flags. A copy of the strategy leaves this file out.

use super::{NAME, Pessimistic, PessimisticSettings, SOURCE};
use crate::strategies::card::{
    CellVerdict, ChaosCell, Family, Scenario, Served, Statements, StrategyInfo, Trait,
};
use crate::strategies::registered::Registered;

static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: SOURCE,
    description: "SELECT ... FOR UPDATE in product order, check, write, COMMIT; retried on deadlock or lock wait timeout.",
    family: Family::Database,
    when_to_use: "The decision needs several statements (read, compute, write) and contention per row is moderate.",
    explanation: "SELECT … FOR UPDATE locks the rows (in product order), then check and write; deadlocks and lock-wait timeouts are retried. Use it when the decision needs several statements.",
    backend: "database",
    safe_across_instances: true,
    fencing: "not needed",
    statements: Statements {
        sale: 6,
        refusal: 4,
    },
    traits: &[Trait::RowLock],
    chaos: &[
        // The row lock is held by the frozen request: everyone else waits.
        ChaosCell::new(Scenario::PausePastLease, None, &[CellVerdict::Unavailable]),
        ChaosCell::new(Scenario::HolderKilled, None, ChaosCell::NO_LOSS),
        ChaosCell::new(
            Scenario::AmbiguousCommit,
            None,
            &[CellVerdict::Safe, CellVerdict::Unavailable],
        ),
    ],
};

/// Every hook at its default.
impl Served for Pessimistic {}

/// Its flags (named as their fields are).
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct Flags {
    /// Transactions `pessimistic` may run for one request (retries after a deadlock or
    /// a lock wait timeout).
    #[arg(long, env, default_value_t = PessimisticSettings::default().max_attempts)]
    pub pessimistic_max_attempts: u32,
}

impl Registered for Pessimistic {
    type Flags = Flags;

    fn card() -> &'static StrategyInfo {
        &INFO
    }

    fn settings(flags: &Flags) -> PessimisticSettings {
        PessimisticSettings {
            max_attempts: flags.pessimistic_max_attempts,
        }
    }
}
