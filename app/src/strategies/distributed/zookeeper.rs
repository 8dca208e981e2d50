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
#[cfg(feature = "service")]
use super::served::cells::{
    FROZEN_FENCED, FROZEN_UNFENCED, KILLED, KILLED_UNFENCED, MAYBE_REFUSED, PARTITIONED_FENCED,
    PARTITIONED_UNFENCED,
};
#[cfg(feature = "service")]
use crate::strategies::card::{ChaosCell, Family, Statements, StrategyInfo, Trait};
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

#[cfg(feature = "service")]
static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: file!(),
    description: "Ephemeral sequential node per request, each waiter watching its predecessor (Curator-compatible), plain read-check-write; fenced by czxid by default.",
    family: Family::DistributedLock,
    when_to_use: "A consensus-backed lock with fair (FIFO) waiting, where ZooKeeper already runs.",
    explanation: "An ephemeral sequential node per request; each waiter watches only its predecessor (FIFO, no herd); the node's czxid is the fencing token. Consensus-backed, slower per acquisition than Redis.",
    backend: "zookeeper",
    safe_across_instances: true,
    fencing: "token (czxid)",
    statements: Statements {
        sale: 7,
        refusal: 3,
    },
    traits: &[Trait::SessionLock],
    chaos: &[
        FROZEN_UNFENCED,
        FROZEN_FENCED,
        KILLED,
        KILLED_UNFENCED,
        // Consensus survives its leader.
        ChaosCell::new("zk-leader-killed", Some(true), ChaosCell::NO_LOSS),
        PARTITIONED_UNFENCED,
        PARTITIONED_FENCED,
        ChaosCell::new("ambiguous-commit", Some(true), MAYBE_REFUSED).extra(),
        // The classic mistake the service makes in this strategy (`super::mistakes`).
        ChaosCell::new("mistake-persistent-node", None, &["unavailable"]),
    ],
};

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
        #[cfg(feature = "service")]
        let strategy = strategy.with_card(&INFO);
        Arc::new(strategy)
    }
}
