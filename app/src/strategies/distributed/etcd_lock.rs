//! `etcd-lock`: the lock strategy ([`super::algorithm`]) on etcd ([`locks::etcd`]): a
//! key per waiter under `<etcd-prefix>stock/<id>/`, attached to a lease, each waiter
//! watching the key created just before its own; fenced by the key's create revision.
//!
//! # How it fails
//! A lease lock under consensus. A holder paused past its lease loses its key: etcd
//! deletes it and the next waiter holds the lock while the first still believes it
//! does (Jepsen's etcd 3.4.3 finding); unfenced, its late write is a lost update;
//! fenced by the revision, it is refused. A killed holder's lock comes back after the
//! lease (etcd leases are whole seconds). A leader change keeps leases and revisions.
//!
//! # Copying this file
//! A copy takes this file, the domain, the contract and the helpers it calls, under the
//! same module paths, with the schema: `copies.toml` lists them under
//! `[strategy.etcd-lock]`, with the crates they need. Its lock is the `locks` crate's
//! etcd backend, copied as a crate named `locks`. Say what it needs of the shared
//! settings by implementing [`LockShared`]; its servers are its own flag.
//! `./scripts/copy-check etcd-lock DIR` builds such a copy and sells from it on a real
//! server.

use super::algorithm::{LockShared, LockStrategy, connector, not_set, unavailable};
use crate::strategies::contract::{Context, Declare, Strategy};
use locks::LockBackend;
use std::sync::Arc;

pub struct EtcdLock;

/// `etcd-lock`'s own settings: its servers are its own, not the shared ones.
#[derive(Debug, Clone)]
pub struct EtcdLockSettings {
    /// etcd client URLs (`http://host:port`; every member of a cluster). Never
    /// waited on at start.
    pub endpoints: Vec<String>,
    /// Where its lock keys live in etcd.
    pub prefix: String,
}

impl Default for EtcdLockSettings {
    fn default() -> Self {
        EtcdLockSettings {
            endpoints: Vec::new(),
            prefix: "/stock-locks/".into(),
        }
    }
}

const NAME: &str = "etcd-lock";

/// How the service registers it: its card for the catalogue and its flags
/// (`etcd_lock/served.rs`; a copy leaves it out).
#[cfg(feature = "service")]
mod served;

/// Where this strategy is written, from the repository's root (its card's `source`).
pub const SOURCE: &str = file!();

impl<S: LockShared> Declare<S> for EtcdLock {
    type Settings = EtcdLockSettings;

    /// The etcd lock on `--etcd-endpoints`, keys under `--etcd-prefix`.
    fn build(settings: &EtcdLockSettings, context: &Context<'_, S>) -> Arc<dyn Strategy> {
        let config = (settings.endpoints.clone(), settings.prefix.clone());
        let connect = connector(config, async |(endpoints, prefix)| {
            if endpoints.is_empty() {
                return Err(not_set("etcd", "ETCD_ENDPOINTS"));
            }
            let backend = locks::etcd::EtcdLock::connect(&endpoints, &prefix)
                .await
                .map_err(unavailable("etcd"))?;
            Ok(Box::new(backend) as Box<dyn LockBackend>)
        });
        let mut strategy = LockStrategy::new(NAME, "etcd", "stock/", connect, context.shared);
        // Its servers are its own flag: `/ready` checks them.
        let unset = settings.endpoints.is_empty();
        strategy.own_servers = Some(if unset {
            Err("ETCD_ENDPOINTS is not set")
        } else {
            Ok(())
        });
        Arc::new(strategy)
    }
}
