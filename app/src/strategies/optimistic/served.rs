//! How the service registers the strategy: its card for the catalogue and its
//! flags. A copy of the strategy leaves this file out.

use super::{NAME, Optimistic, OptimisticSettings, SOURCE};
use crate::strategies::card::{
    CellVerdict, ChaosCell, Family, Scenario, Served, Statements, StrategyInfo, Trait,
};
use crate::strategies::registered::Registered;

static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: SOURCE,
    description: "Read quantity and version, UPDATE ... WHERE version = read; a new transaction per retry, bounded, then busy.",
    family: Family::Database,
    when_to_use: "Conflicts are rare and a transaction must hold nothing while it thinks.",
    explanation: "Reads quantity and version, writes only WHERE version is unchanged, retries in a new transaction. Holds nothing while thinking; wastes attempts under contention (tries/sale).",
    backend: "database",
    safe_across_instances: true,
    fencing: "not needed",
    statements: Statements {
        sale: 6,
        refusal: 2,
    },
    traits: &[Trait::CompareAndSet],
    chaos: &[
        // Holds nothing: the frozen request's compare-and-set fails when it wakes.
        ChaosCell::new(Scenario::PausePastLease, None, &[CellVerdict::Safe]),
        ChaosCell::new(Scenario::HolderKilled, None, ChaosCell::NO_LOSS),
        ChaosCell::extra(
            Scenario::AmbiguousCommit,
            None,
            &[
                CellVerdict::Safe,
                CellVerdict::Unavailable,
                CellVerdict::Refused,
            ],
        ),
        // A lagging replica: every stale read is refused (safe, and unavailable).
        ChaosCell::new(
            Scenario::ReplicaLag,
            None,
            &[CellVerdict::Safe, CellVerdict::Unavailable],
        ),
        ChaosCell::new(Scenario::ReplicaLagPrimaryReads, None, &[CellVerdict::Safe]),
    ],
};

/// Every hook at its default.
impl Served for Optimistic {}

/// Its flags (named as their fields are).
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct Flags {
    /// Transactions `optimistic` may run for one request (retries after a failed
    /// compare-and-set) before it answers 503 busy.
    #[arg(long, env, default_value_t = OptimisticSettings::default().max_attempts)]
    pub optimistic_max_attempts: u32,
}

impl Registered for Optimistic {
    type Flags = Flags;

    fn card() -> &'static StrategyInfo {
        &INFO
    }

    fn settings(flags: &Flags) -> OptimisticSettings {
        OptimisticSettings {
            max_attempts: flags.optimistic_max_attempts,
        }
    }
}
