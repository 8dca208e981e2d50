//! How the service registers the strategy: its card for the catalogue (it has no
//! flags). A copy of the strategy leaves this file out.

use super::{AtomicSql, NAME, SOURCE};
use crate::strategies::card::{
    CellVerdict, ChaosCell, Family, Scenario, Served, Statements, StrategyInfo, Trait,
};
use crate::strategies::contract::NoSettings;
use crate::strategies::registered::{NoFlags, Registered};

static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: SOURCE,
    description: "One conditional UPDATE per item: quantity = quantity - q WHERE quantity >= q; the row lock serializes buyers.",
    family: Family::Database,
    when_to_use: "Stock is a counter in one database: the first choice.",
    explanation: "One conditional UPDATE (quantity = quantity − q WHERE quantity ≥ q): the check and the write are one statement under the row lock. For a counter in one database, the first choice.",
    backend: "database",
    safe_across_instances: true,
    fencing: "not needed",
    statements: Statements {
        sale: 5,
        refusal: 4,
    },
    traits: &[Trait::ConditionalUpdate],
    chaos: &[
        // The row lock is held by the frozen request: everyone else waits.
        ChaosCell::new(Scenario::PausePastLease, None, &[CellVerdict::Unavailable]),
        ChaosCell::new(Scenario::HolderKilled, None, ChaosCell::NO_LOSS),
        ChaosCell::new(
            Scenario::AmbiguousCommit,
            None,
            &[CellVerdict::Safe, CellVerdict::Unavailable],
        ),
        // The CHECK constraint is the net: nothing oversold, the buyers get its error.
        ChaosCell::new(Scenario::MistakeNoGuard, None, &[CellVerdict::Safe]),
    ],
};

/// Every hook at its default.
impl Served for AtomicSql {}

impl Registered for AtomicSql {
    type Flags = NoFlags;

    fn card() -> &'static StrategyInfo {
        &INFO
    }

    fn settings(flags: &NoFlags) -> NoSettings {
        flags.settings()
    }
}
