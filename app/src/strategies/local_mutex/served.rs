//! How the service registers the strategy: its card for the catalogue (it has no
//! flags). A copy of the strategy leaves this file out.

use super::{LocalMutex, NAME, SOURCE};
use crate::strategies::card::{
    CellVerdict, ChaosCell, Family, Scenario, Served, Statements, StrategyInfo, Trait,
};
use crate::strategies::contract::NoSettings;
use crate::strategies::registered::{NoFlags, Registered};

static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: SOURCE,
    description: "A per-product mutex in this process, taken before BEGIN and released after COMMIT. Safe on one instance only.",
    family: Family::Control,
    when_to_use: "One process only, never behind a load balancer: the lesson that a mutex is local.",
    explanation: "A per-product mutex inside one process, taken before BEGIN and released after COMMIT. Correct on one instance; with two, each has its own mutexes and it oversells like no lock at all.",
    backend: "process memory",
    safe_across_instances: false,
    fencing: "none",
    statements: Statements {
        sale: 6,
        refusal: 2,
    },
    traits: &[Trait::ProcessLock],
    chaos: &[ChaosCell::extra(
        Scenario::PausePastLease,
        None,
        &[CellVerdict::Erased],
    )],
};

/// Every hook at its default.
impl Served for LocalMutex {}

impl Registered for LocalMutex {
    type Flags = NoFlags;

    fn card() -> &'static StrategyInfo {
        &INFO
    }

    fn settings(flags: &NoFlags) -> NoSettings {
        flags.settings()
    }
}
