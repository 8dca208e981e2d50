//! What only the service asks of every lock strategy: the fault cells every lock
//! goes through, the lock counters registered at start ([`super::counters`]) and
//! `/ready`'s look at a strategy's own servers. Each strategy's card and flags are in
//! its own `served.rs`. The `service` feature; a copy leaves this file out.
#![cfg(feature = "service")]

use super::algorithm::LockStrategy;
use crate::domain::probe::Probe;
use crate::strategies::card::{Reached, Served};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// The fault cells every lock goes through (each card lists them). Frozen past the
/// lease: unfenced it erases sales, fenced it refuses the stale write. Killed: a dead
/// holder never writes, fenced or not. Partitioned from the lock service (not from the
/// database): as frozen. Chubby's lock-delay (lease locks): frozen within lease + delay,
/// safe unfenced (no sale meanwhile); past it, an update lost: only fencing closes it.
pub mod cells {
    use crate::strategies::card::{CellVerdict, ChaosCell, Scenario};

    pub const FROZEN_UNFENCED: ChaosCell = ChaosCell::new(
        Scenario::PausePastLease,
        Some(false),
        &[CellVerdict::Erased],
    );
    pub const FROZEN_FENCED: ChaosCell = ChaosCell::new(
        Scenario::PausePastLease,
        Some(true),
        &[CellVerdict::Refused],
    );
    pub const KILLED: ChaosCell =
        ChaosCell::new(Scenario::HolderKilled, Some(true), ChaosCell::NO_LOSS);
    pub const KILLED_UNFENCED: ChaosCell =
        ChaosCell::extra(Scenario::HolderKilled, Some(false), ChaosCell::NO_LOSS);
    pub const PARTITIONED_UNFENCED: ChaosCell =
        ChaosCell::new(Scenario::LockPartition, Some(false), &[CellVerdict::Erased]);
    pub const PARTITIONED_FENCED: ChaosCell =
        ChaosCell::new(Scenario::LockPartition, Some(true), &[CellVerdict::Refused]);
    const SAFE: &[CellVerdict] = &[CellVerdict::Unavailable, CellVerdict::Safe];
    pub const DELAY_SHORT: ChaosCell =
        ChaosCell::new(Scenario::LockDelayShortPause, Some(false), SAFE);
    pub const DELAY_LONG: ChaosCell = ChaosCell::new(
        Scenario::LockDelayLongPause,
        Some(false),
        &[CellVerdict::Erased],
    );
    /// An ambiguous COMMIT under a lock that may also be lost meanwhile.
    pub const MAYBE_REFUSED: &[CellVerdict] = &[
        CellVerdict::Safe,
        CellVerdict::Unavailable,
        CellVerdict::Refused,
    ];
}

#[async_trait(?Send)]
impl Served for LockStrategy {
    /// The backend's lock counters ([`super::counters`]), which watch its locks.
    fn register(&self, registry: &prometheus::Registry, probe: &Arc<dyn Probe>) {
        let counters = super::counters::LockCounters::register(registry, probe, self.backend);
        let _ = self.watch.set(Box::new(counters));
    }

    /// Connects anew (and drops the connection) when its servers are its own.
    async fn ready(&self, limit: Duration) -> Option<Reached> {
        let answer = match self.own_servers? {
            Err(unset) => return Some(Reached::NotConfigured(unset)),
            Ok(()) => tokio::time::timeout(limit, (self.connect)()).await,
        };
        Some(Reached::Answered(match answer {
            Ok(Ok(_)) => Ok("connected".into()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {limit:?}")),
        }))
    }
}
