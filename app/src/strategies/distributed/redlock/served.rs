//! How the service registers the strategy: its card for the catalogue and its
//! flags. A copy of the strategy leaves this file out.

use super::{NAME, RedLock, RedLockSettings, SOURCE};
use crate::strategies::card::{
    CellVerdict, ChaosCell, Family, Scenario, Statements, StrategyInfo, Trait,
};
use crate::strategies::distributed::served::cells::{
    DELAY_LONG, DELAY_SHORT, FROZEN_FENCED, FROZEN_UNFENCED, KILLED, KILLED_UNFENCED,
    PARTITIONED_FENCED, PARTITIONED_UNFENCED,
};
use crate::strategies::registered::Registered;
use std::time::Duration;

static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: SOURCE,
    description: "RedLock over the Redis nodes (majority, validity = lease - elapsed - drift), plain read-check-write; fenced by owner tag by default.",
    family: Family::DistributedLock,
    when_to_use: "Rarely: it survives dead Redis nodes but gives no fencing token (see Kleppmann's critique).",
    explanation: "The lock on a majority of 5 independent Redis within the lease minus drift. No monotonic token: fenced by its random owner tag. Costs 5 round trips in parallel; a restarted node without persistence can admit a second holder.",
    backend: "redis x5 (RedLock)",
    safe_across_instances: true,
    fencing: "owner tag",
    statements: Statements {
        sale: 7,
        refusal: 3,
    },
    traits: &[Trait::LeaseLock],
    chaos: &[
        FROZEN_UNFENCED,
        FROZEN_FENCED,
        DELAY_SHORT,
        DELAY_LONG,
        KILLED,
        KILLED_UNFENCED,
        // The quorum: two of five frozen still lock; three do not.
        ChaosCell::new(
            Scenario::RedlockMinorityPaused,
            Some(true),
            &[CellVerdict::Safe, CellVerdict::Refused],
        ),
        ChaosCell::new(
            Scenario::RedlockMajorityPaused,
            Some(true),
            &[CellVerdict::Unavailable],
        ),
        PARTITIONED_UNFENCED,
        PARTITIONED_FENCED,
        // Kleppmann's clock jump: a second majority.
        ChaosCell::new(
            Scenario::RedlockClockJump,
            Some(false),
            &[CellVerdict::Erased],
        ),
        ChaosCell::new(
            Scenario::RedlockClockJump,
            Some(true),
            &[CellVerdict::Refused],
        ),
    ],
};

/// Its flags (named as their fields are).
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct Flags {
    /// How long RedLock waits for one Redis node before counting it out, in
    /// milliseconds (much smaller than the lease).
    #[arg(long, env, default_value_t = RedLockSettings::default().node_timeout.as_millis() as u64)]
    pub redlock_node_timeout_ms: u64,
}

impl Registered for RedLock {
    type Flags = Flags;

    fn card() -> &'static StrategyInfo {
        &INFO
    }

    fn settings(flags: &Flags) -> RedLockSettings {
        RedLockSettings {
            node_timeout: Duration::from_millis(flags.redlock_node_timeout_ms),
        }
    }
}
