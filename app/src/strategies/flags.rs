//! How the service reads each strategy's settings from its command line: the
//! strategy's flags and the settings they make. Each strategy declares its own beside
//! it (its `served.rs`); the registry flattens them all into the service's command
//! line. A copy builds its strategy from settings of its own.

use super::contract::Declare;
use super::shared::Shared;

/// How the service reads a strategy's settings from its command line: its flags (a
/// `clap::Args` struct marked `#[group(skip)]`, each flag a field named as the flag,
/// or [`NoFlags`]) and the settings they make, which [`Declare`] builds it from.
pub trait Flagged: Declare<Shared> {
    type Flags: clap::Args + clap::FromArgMatches + Clone + std::fmt::Debug;

    fn settings(flags: &Self::Flags) -> Self::Settings;
}

/// The flags of a strategy that has none.
#[derive(clap::Args, Debug, Clone, Default)]
#[group(skip)]
pub struct NoFlags {}
