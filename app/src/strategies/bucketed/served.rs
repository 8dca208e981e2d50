//! How the service registers the strategy: its card for the catalogue and its
//! flags. A copy of the strategy leaves this file out.

use super::{Bucketed, BucketedSettings, NAME, SOURCE};
use crate::strategies::card::{
    CellVerdict, ChaosCell, Family, Scenario, Served, Statements, StrategyInfo, Trait,
};
use crate::strategies::registered::Registered;

static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: SOURCE,
    description: "The hot row split into K bucket rows (set at restock): one conditional UPDATE on a random bucket, the others tried when it is short, all of them locked only to gather a multi-unit request.",
    family: Family::HotProduct,
    when_to_use: "One hot product whose stock may be split at restock, and single units per order.",
    explanation: "The hot row split into K bucket rows at restock: a conditional UPDATE on a random bucket, the others tried when it is short, all of them locked only to gather a multi-unit request. K buyers proceed at once; the database's CPU becomes the limit.",
    backend: "database",
    safe_across_instances: true,
    fencing: "not needed",
    // An unsplit product is one bucket: a conditional UPDATE's five; a 409 adds
    // the read of the buckets that proves every bucket is short.
    statements: Statements {
        sale: 5,
        refusal: 5,
    },
    traits: &[Trait::SplitsStock],
    chaos: &[
        ChaosCell::new(Scenario::HolderKilled, None, ChaosCell::NO_LOSS),
        ChaosCell::new(
            Scenario::AmbiguousCommit,
            None,
            &[CellVerdict::Safe, CellVerdict::Unavailable],
        ),
    ],
};

/// Every hook at its default.
impl Served for Bucketed {}

/// Its flags (named as their fields are).
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct Flags {
    /// Transactions `bucketed` may run to gather a multi-unit request (retries after a
    /// deadlock or a lock wait timeout).
    #[arg(long, env, default_value_t = BucketedSettings::default().max_attempts)]
    pub bucketed_max_attempts: u32,
}

impl Registered for Bucketed {
    type Flags = Flags;

    fn card() -> &'static StrategyInfo {
        &INFO
    }

    fn settings(flags: &Flags) -> BucketedSettings {
        BucketedSettings {
            max_attempts: flags.bucketed_max_attempts,
        }
    }
}
