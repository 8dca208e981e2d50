//! How the service registers the strategy: its card for the catalogue (it has no
//! flags). A copy of the strategy leaves this file out.

use super::{NAME, SOURCE, ZooKeeper};
use crate::strategies::card::{
    CellVerdict, ChaosCell, Family, Scenario, Statements, StrategyInfo, Trait,
};
use crate::strategies::contract::NoSettings;
use crate::strategies::distributed::served::cells::{
    FROZEN_FENCED, FROZEN_UNFENCED, KILLED, KILLED_UNFENCED, MAYBE_REFUSED, PARTITIONED_FENCED,
    PARTITIONED_UNFENCED,
};
use crate::strategies::registered::{NoFlags, Registered};

static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: SOURCE,
    description: "Ephemeral sequential node per request, each waiter watching its predecessor (Curator-compatible), plain read-check-write; fenced by czxid by default.",
    family: Family::DistributedLock,
    when_to_use: "A consensus-backed lock with fair (FIFO) waiting, where ZooKeeper already runs.",
    explanation: "An ephemeral sequential node per request; each waiter watches only its predecessor (FIFO, no herd); the node's czxid is the fencing token. Consensus-backed, slower per acquisition than Redis.",
    backend: "zookeeper",
    safe_across_instances: true,
    fencing: "token (czxid)",
    statements: Statements {
        sale: 7,
        refusal: 3,
    },
    traits: &[Trait::SessionLock],
    chaos: &[
        FROZEN_UNFENCED,
        FROZEN_FENCED,
        KILLED,
        KILLED_UNFENCED,
        // Consensus survives its leader.
        ChaosCell::new(Scenario::ZkLeaderKilled, Some(true), ChaosCell::NO_LOSS),
        PARTITIONED_UNFENCED,
        PARTITIONED_FENCED,
        ChaosCell::extra(Scenario::AmbiguousCommit, Some(true), MAYBE_REFUSED),
        // The classic mistake the service makes in this strategy (`super::mistakes`).
        ChaosCell::new(
            Scenario::MistakePersistentNode,
            None,
            &[CellVerdict::Unavailable],
        ),
    ],
};

impl Registered for ZooKeeper {
    type Flags = NoFlags;

    fn card() -> &'static StrategyInfo {
        &INFO
    }

    fn settings(flags: &NoFlags) -> NoSettings {
        flags.settings()
    }
}
