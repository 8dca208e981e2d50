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
    when_to_use: "To see that the fence alone is safe, and that alone it may sell nothing: on a hot product a newer ticket overtakes nearly every request before it writes. The lock in front of a fence is what lets sales through.",
    explanation: "No lock at all: a ticket from a database sequence, a claim on the product's fence row (only if newer than every claim before), a write guarded by the claim. No update lost between writers (a read from a lagging replica is another matter); refuses every request a newer ticket overtook, which on a hot product is nearly every one: safe, and a livelock. The fence keeps it safe; the lock in front of it is what lets requests through one at a time, so that they sell.",
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
