//! How the service registers the strategy: its card for the catalogue and its
//! flags. A copy of the strategy leaves this file out.

use super::{MysqlLock, MysqlLockSettings, NAME, SOURCE};
use crate::strategies::card::{ChaosCell, Family, Scenario, Statements, StrategyInfo, Trait};
use crate::strategies::distributed::served::cells::{
    DELAY_LONG, DELAY_SHORT, FROZEN_FENCED, FROZEN_UNFENCED, KILLED, KILLED_UNFENCED, MAYBE_REFUSED,
};
use crate::strategies::registered::Registered;

static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: SOURCE,
    description: "Lock table in the database (reentrant, leased by the database clock, watchdog), plain read-check-write; fenced by default.",
    family: Family::DistributedLock,
    when_to_use: "A lock is needed, only the database is there, and the load is light.",
    explanation: "A lock row in the database (reentrant, leased by the database clock, renewed by a watchdog), then a plain read-check-write, fenced by the row's token. Slow: every attempt is a write transaction.",
    backend: "database (lock table)",
    safe_across_instances: true,
    fencing: "token",
    // Its lock's own two (take and release) besides the fenced path's seven.
    statements: Statements {
        sale: 9,
        refusal: 5,
    },
    traits: &[Trait::LeaseLock],
    chaos: &[
        FROZEN_UNFENCED,
        FROZEN_FENCED,
        DELAY_SHORT,
        DELAY_LONG,
        KILLED,
        KILLED_UNFENCED,
        ChaosCell::extra(Scenario::AmbiguousCommit, Some(true), MAYBE_REFUSED),
    ],
};

/// Its flags (named as their fields are).
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct Flags {
    /// Connections the mysql-lock strategy uses for acquisition attempts (it has its
    /// own pools, apart from the stock transactions').
    #[arg(long, env, default_value_t = MysqlLockSettings::default().pool_size)]
    pub mysql_lock_pool_size: u32,
}

impl Registered for MysqlLock {
    type Flags = Flags;

    fn card() -> &'static StrategyInfo {
        &INFO
    }

    fn settings(flags: &Flags) -> MysqlLockSettings {
        MysqlLockSettings {
            pool_size: flags.mysql_lock_pool_size,
        }
    }
}
