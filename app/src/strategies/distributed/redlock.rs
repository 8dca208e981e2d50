//! `redlock`: the lock strategy ([`super::algorithm`]) on RedLock over every one of
//! `REDIS_URLS` ([`locks::redlock`]; at least 3, 5 in the testbed and compose).
//!
//! # How it fails
//! A majority of five must agree, so two nodes may die; three frozen nodes make it
//! unavailable. It has no token: it fences with an owner tag, so a stale holder that
//! claims late wins over a live one. A node restarted empty, or a clock jump on a
//! majority, lets two holders in.
//!
//! # Copying this file
//! A copy takes this file, the domain, the contract and the helpers it calls, under the
//! same module paths, with the schema: `copies.toml` lists them under
//! `[strategy.redlock]`, with the crates they need. Its lock is the `locks` crate's
//! RedLock backend, copied as a crate named `locks`. Say what it needs of the shared
//! settings by implementing [`RedLockShared`]. `./scripts/copy-check --strategy redlock
//! DIR` builds such a copy and sells from it on real servers.

use super::algorithm::{LockShared, LockStrategy, connector};
#[cfg(feature = "service")]
use super::served::cells::{
    DELAY_LONG, DELAY_SHORT, FROZEN_FENCED, FROZEN_UNFENCED, KILLED, KILLED_UNFENCED,
    PARTITIONED_FENCED, PARTITIONED_UNFENCED,
};
use crate::domain::error::DeductError;
#[cfg(feature = "service")]
use crate::strategies::card::{ChaosCell, Family, Statements, StrategyInfo, Trait};
use crate::strategies::contract::{Context, Declare, Strategy};
use locks::LockBackend;
use std::sync::Arc;
use std::time::Duration;

pub struct RedLock;

/// What `redlock` needs of the settings the strategies share: the lock options, and
/// its Redis nodes.
pub trait RedLockShared: LockShared {
    fn redis_urls(&self) -> Vec<String>;
}

/// `redlock`'s flags (named as their fields are).
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct RedLockSettings {
    /// How long RedLock waits for one Redis node before counting it out, in
    /// milliseconds (much smaller than the lease).
    #[arg(long, env, default_value_t = 100)]
    pub redlock_node_timeout_ms: u64,
}

const NAME: &str = "redlock";

#[cfg(feature = "service")]
static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: file!(),
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
        ChaosCell::new("redlock-2-of-5-paused", Some(true), &["safe", "refused"]),
        ChaosCell::new("redlock-3-of-5-paused", Some(true), &["unavailable"]),
        PARTITIONED_UNFENCED,
        PARTITIONED_FENCED,
        // Kleppmann's clock jump: a second majority.
        ChaosCell::new("redlock-clock-jump", Some(false), &["erased"]),
        ChaosCell::new("redlock-clock-jump", Some(true), &["refused"]),
    ],
};

impl<S: RedLockShared> Declare<S> for RedLock {
    type Settings = RedLockSettings;

    /// RedLock over every one of the Redis nodes.
    fn build(settings: &RedLockSettings, context: &Context<'_, S>) -> Arc<dyn Strategy> {
        let node_timeout = Duration::from_millis(settings.redlock_node_timeout_ms);
        let config = (context.shared.redis_urls(), node_timeout);
        let connect = connector(config, async |(urls, node_timeout)| {
            let backend = locks::redlock::RedLock::new(&urls)
                .map_err(|e| DeductError::unavailable("redlock", format!("{e} (REDIS_URLS)")))?
                .with_node_timeout(node_timeout);
            Ok(Box::new(backend) as Box<dyn LockBackend>)
        });
        let strategy =
            LockStrategy::new(NAME, "redlock", "redlock:stock:", connect, context.shared);
        #[cfg(feature = "service")]
        let strategy = strategy.with_card(&INFO);
        Arc::new(strategy)
    }
}
