//! How the service registers the strategy: its card for the catalogue (it has no
//! flags). A copy of the strategy leaves this file out.

use super::{FenceOnly, NAME, SOURCE};
use crate::strategies::card::{
    CellVerdict, ChaosCell, Family, Scenario, Served, Statements, StrategyInfo, Trait,
};
use crate::strategies::contract::NoSettings;
use crate::strategies::registered::{NoFlags, Registered};

static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: SOURCE,
    description: "No lock: a ticket from a database sequence, a claim on the product's fence row, a write guarded by the claim; overtaken requests are refused (lock_lost).",
    family: Family::Control,
    when_to_use: "To see that the fence alone is safe: a lock in front of it only makes it efficient.",
    explanation: "No lock at all: a ticket from a database sequence, a claim on the product's fence row (only if newer than every claim before), a write guarded by the claim. No update lost between writers (a read from a lagging replica is another matter); refuses every request a newer ticket overtook. The fence alone is safe; a lock in front of it only makes it efficient.",
    backend: "database",
    safe_across_instances: true,
    fencing: "token (ticket)",
    statements: Statements {
        sale: 8,
        refusal: 4,
    },
    traits: &[Trait::RefusesOvertaken],
    chaos: &[
        ChaosCell::new(Scenario::FenceAlone, None, &[CellVerdict::Refused]),
        ChaosCell::extra(
            Scenario::AmbiguousCommit,
            None,
            &[
                CellVerdict::Safe,
                CellVerdict::Unavailable,
                CellVerdict::Refused,
            ],
        ),
    ],
};

/// Every hook at its default.
impl Served for FenceOnly {}

impl Registered for FenceOnly {
    type Flags = NoFlags;

    fn card() -> &'static StrategyInfo {
        &INFO
    }

    fn settings(flags: &NoFlags) -> NoSettings {
        flags.settings()
    }
}
