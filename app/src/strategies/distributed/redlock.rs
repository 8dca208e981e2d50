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
use crate::domain::error::DeductError;
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

/// `redlock`'s own settings.
#[derive(Debug, Clone)]
pub struct RedLockSettings {
    /// How long RedLock waits for one Redis node before counting it out: much
    /// smaller than the lease, so a slow node costs little of it.
    pub node_timeout: Duration,
}

impl Default for RedLockSettings {
    fn default() -> Self {
        RedLockSettings {
            node_timeout: Duration::from_millis(100),
        }
    }
}

const NAME: &str = "redlock";

/// How the service registers it: its card for the catalogue and its flags
/// (`redlock/served.rs`; a copy leaves it out).
#[cfg(feature = "service")]
mod served;

/// Where this strategy is written, from the repository's root (its card's `source`).
pub const SOURCE: &str = file!();

impl<S: RedLockShared> Declare<S> for RedLock {
    type Settings = RedLockSettings;

    /// RedLock over every one of the Redis nodes.
    fn build(settings: &RedLockSettings, context: &Context<'_, S>) -> Arc<dyn Strategy> {
        let config = (context.shared.redis_urls(), settings.node_timeout);
        let connect = connector(config, async |(urls, node_timeout)| {
            let backend = locks::redlock::RedLock::new(&urls)
                .map_err(|e| DeductError::unavailable("redlock", format!("{e} (REDIS_URLS)")))?
                .with_node_timeout(node_timeout);
            Ok(Box::new(backend) as Box<dyn LockBackend>)
        });
        let strategy =
            LockStrategy::new(NAME, "redlock", "redlock:stock:", connect, context.shared);
        Arc::new(strategy)
    }
}
