//! How the service registers a strategy: its card for the catalogue, its flags on
//! the command line, and the settings those flags make.
//!
//! Each strategy answers [`Registered`] in the `served.rs` beside it; the registry
//! (`strategies/mod.rs`) flattens every strategy's flags into the service's command
//! line and lists each built strategy with its card. A copy of a strategy leaves all
//! of it out and builds its strategy from settings of its own.

use super::card::StrategyInfo;
use super::contract::{Declare, NoSettings};
use super::shared::Shared;

/// What the service knows of a strategy besides its algorithm.
pub trait Registered: Declare<Shared> {
    /// Its flags: a `clap::Args` struct marked `#[group(skip)]`, each flag a field
    /// named as the flag, or [`NoFlags`].
    type Flags: clap::Args + clap::FromArgMatches + Clone + std::fmt::Debug;

    /// Its card for the catalogue (`GET /strategies`). Its `name` is the strategy's
    /// own ([`Strategy::name`](super::contract::Strategy::name)): the registry refuses
    /// to start with a card naming another strategy.
    fn card() -> &'static StrategyInfo;

    /// The settings its flags make, which [`Declare::build`] builds it from.
    fn settings(flags: &Self::Flags) -> Self::Settings;
}

/// The flags of a strategy that has none.
#[derive(clap::Args, Debug, Clone, Default)]
#[group(skip)]
pub struct NoFlags {}

impl NoFlags {
    /// The settings of a strategy that has none.
    pub fn settings(&self) -> NoSettings {
        NoSettings {}
    }
}
