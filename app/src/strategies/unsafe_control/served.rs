//! How the service registers the strategy: its card for the catalogue (it has no
//! flags). A copy of the strategy leaves this file out.

use super::{NAME, SOURCE, Unsafe};
use crate::strategies::card::{
    CellVerdict, ChaosCell, Family, Scenario, Served, Statements, StrategyInfo, Trait,
};
use crate::strategies::contract::NoSettings;
use crate::strategies::registered::{NoFlags, Registered};

static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: SOURCE,
    description: "No lock: plain read, check, write the computed value. The control group; it oversells.",
    family: Family::Control,
    when_to_use: "Never: it is the control group, the oversell every other strategy prevents.",
    explanation: "Reads the quantity, checks it, writes read − requested. Two buyers who read the same value both write the same result: one sale vanishes from the stock while the ledger keeps both. Never use it; it is the control group.",
    backend: "database",
    safe_across_instances: false,
    fencing: "none",
    statements: Statements {
        sale: 6,
        refusal: 2,
    },
    traits: &[Trait::NoLock],
    chaos: &[ChaosCell::extra(
        Scenario::PausePastLease,
        None,
        &[CellVerdict::Erased],
    )],
};

/// Every hook at its default.
impl Served for Unsafe {}

impl Registered for Unsafe {
    type Flags = NoFlags;

    fn card() -> &'static StrategyInfo {
        &INFO
    }

    fn settings(flags: &NoFlags) -> NoSettings {
        flags.settings()
    }
}
