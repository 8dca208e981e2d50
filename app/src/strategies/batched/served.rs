//! How the service registers the strategy: its card for the catalogue and its
//! flags. A copy of the strategy leaves this file out.

use super::{BatchSettings, Batched, NAME, SOURCE};
use crate::strategies::card::{
    CellVerdict, ChaosCell, Family, Scenario, Served, Statements, StrategyInfo, Trait,
};
use crate::strategies::registered::Registered;
use std::time::Duration;

static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: SOURCE,
    description: "Request coalescing: the buyers of one product queue briefly and share one transaction (row locked once, units allocated in arrival order, multi-row INSERTs, one UPDATE).",
    family: Family::HotProduct,
    when_to_use: "One product sells to many buyers at once and no server besides the database is wanted.",
    explanation: "Request coalescing: the buyers of one product queue briefly in each instance and share one transaction (the row locked once, units allocated in arrival order, multi-row INSERTs, one UPDATE). Many sales per row-lock hand-over: the flash-sale strategy that needs no other server.",
    backend: "database",
    safe_across_instances: true,
    fencing: "not needed",
    // Per batch; a sequential request is a batch of one. Under load one batch
    // carries many sales (the flash-sale report counts statements per sale).
    statements: Statements {
        sale: 6,
        refusal: 4,
    },
    traits: &[Trait::Batches],
    chaos: &[
        // The paused request is a whole batch holding the row lock; a kill breaks every
        // member's connection mid-transaction, and a batch's COMMIT is the ambiguous one.
        ChaosCell::new(Scenario::HolderKilled, None, ChaosCell::NO_LOSS),
        ChaosCell::new(
            Scenario::AmbiguousCommit,
            None,
            &[CellVerdict::Safe, CellVerdict::Unavailable],
        ),
    ],
};

/// Every hook at its default.
impl Served for Batched {}

/// Its flags (named as their fields are).
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct Flags {
    /// How long a product's batch task waits for more buyers before it takes its
    /// queue, in microseconds.
    ///
    /// 0: it takes what is there at once. Under load, a batch is then whatever arrived
    /// while the previous one ran.
    #[arg(long, env, default_value_t = BatchSettings::default().window.as_micros() as u64)]
    pub batch_window_us: u64,

    /// The most requests one transaction carries.
    #[arg(long, env, default_value_t = BatchSettings::default().max_batch as u32, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch_max: u32,

    /// Transactions a batch may run (retries after a deadlock or a lock wait timeout)
    /// before its buyers are answered 503 busy.
    #[arg(long, env, default_value_t = BatchSettings::default().max_attempts)]
    pub batched_max_attempts: u32,
}

impl Registered for Batched {
    type Flags = Flags;

    fn card() -> &'static StrategyInfo {
        &INFO
    }

    fn settings(flags: &Flags) -> BatchSettings {
        BatchSettings {
            window: Duration::from_micros(flags.batch_window_us),
            max_batch: flags.batch_max as usize,
            max_attempts: flags.batched_max_attempts,
        }
    }
}
