//! `zookeeper`: the lock strategy ([`super::algorithm`]) on a queue of ephemeral
//! sequential nodes in the ensemble of `ZK_CONNECT` ([`locks::zookeeper`]), under
//! `<zk-root>/stock/<id>` (the path a Curator `InterProcessMutex` would use).
//!
//! # How it fails
//! A FIFO queue under consensus. A holder paused past its session loses its node;
//! unfenced, its late write is a lost update; fenced by czxid, it is refused. A killed
//! holder's lock comes back after the session timeout.
//!
//! # Copying this file
//! A copy takes this file, the domain, the contract and the helpers it calls, under the
//! same module paths, with the schema: `copies.toml` lists them under
//! `[strategy.zookeeper]`, with the crates they need. Its lock is the `locks` crate's
//! ZooKeeper backend, copied as a crate named `locks`. Say what it needs of the shared
//! settings by implementing [`ZooKeeperShared`]. `./scripts/copy-check --strategy
//! zookeeper DIR` builds such a copy and sells from it on a real ensemble.

use super::algorithm::{LockShared, LockStrategy, connector, not_set, unavailable};
use crate::strategies::contract::{Context, Declare, NoSettings, Strategy};
use locks::LockBackend;
use std::sync::Arc;
use std::time::Duration;

pub struct ZooKeeper;

/// What `zookeeper` needs of the settings the strategies share: the lock options, and
/// the ensemble.
pub trait ZooKeeperShared: LockShared {
    /// `host:port,...`; `None` when not configured.
    fn zk_connect(&self) -> Option<String>;
    /// The chroot its nodes live under.
    fn zk_root(&self) -> String;
    fn zk_session(&self) -> Duration;
}

const NAME: &str = "zookeeper";

/// How the service registers it: its card for the catalogue and its flags
/// (`zookeeper/served.rs`; a copy leaves it out).
#[cfg(feature = "service")]
mod served;

/// Where this strategy is written, from the repository's root (its card's `source`).
pub const SOURCE: &str = file!();

impl<S: ZooKeeperShared> Declare<S> for ZooKeeper {
    type Settings = NoSettings;

    /// The ZooKeeper lock; its "lease" is the holder's safety margin: give up after two
    /// thirds of the session timeout without reaching the ensemble.
    fn build(_: &NoSettings, context: &Context<'_, S>) -> Arc<dyn Strategy> {
        let shared = context.shared;
        let session = shared.zk_session();
        let config = (shared.zk_connect(), shared.zk_root(), session);
        let connect = connector(config, async |(connect_string, root, session)| {
            let connect_string =
                connect_string.ok_or_else(|| not_set("zookeeper", "ZK_CONNECT"))?;
            let backend = locks::zookeeper::ZooKeeperLock::connect(&connect_string, &root, session)
                .await
                .map_err(unavailable("zookeeper"))?;
            Ok(Box::new(backend) as Box<dyn LockBackend>)
        });
        let mut strategy = LockStrategy::new(NAME, "zookeeper", "stock/", connect, shared);
        strategy.options.lease = strategy.options.lease.min(session * 2 / 3);
        Arc::new(strategy)
    }
}
