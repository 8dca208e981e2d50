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
#[cfg(feature = "service")]
use super::served::cells::{
    DELAY_LONG, DELAY_SHORT, FROZEN_FENCED, FROZEN_UNFENCED, KILLED, KILLED_UNFENCED,
    PARTITIONED_FENCED, PARTITIONED_UNFENCED,
};
#[cfg(feature = "service")]
use crate::strategies::card::{ChaosCell, Family, Statements, StrategyInfo, Trait};
use crate::strategies::contract::{Context, Declare, Strategy};
use locks::LockBackend;
use std::sync::Arc;

pub struct EtcdLock;

/// `etcd-lock`'s flags (named as their fields are).
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct EtcdLockSettings {
    /// etcd client URLs, comma-separated (`http://host:port`; every member of a
    /// cluster). Never waited on at start.
    #[arg(long, env, value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,

    /// Where `etcd-lock` keeps its lock keys in etcd.
    #[arg(long, env, default_value = "/stock-locks/")]
    pub etcd_prefix: String,
}

const NAME: &str = "etcd-lock";

#[cfg(feature = "service")]
static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: file!(),
    description: "A key per waiter in etcd attached to a lease, each waiter watching its predecessor by create revision, plain read-check-write; fenced by the key's revision by default.",
    family: Family::DistributedLock,
    when_to_use: "A consensus-backed lock with FIFO waiting where etcd already runs (Kubernetes), with the write fenced by the revision.",
    explanation: "A key per request under the lock's prefix, attached to a lease kept alive by the watchdog; each waiter watches only the key created before its own (FIFO, no herd); the key's create revision, increasing across the cluster, is the fencing token. Consensus-backed; a holder paused past its lease still loses the lock (Jepsen), which only the fence stops.",
    backend: "etcd",
    safe_across_instances: true,
    fencing: "token (revision)",
    statements: Statements {
        sale: 7,
        refusal: 3,
    },
    traits: &[Trait::LeaseLock, Trait::LeaseInWholeSeconds],
    chaos: &[
        FROZEN_UNFENCED,
        FROZEN_FENCED,
        DELAY_SHORT,
        DELAY_LONG,
        KILLED,
        KILLED_UNFENCED,
        ChaosCell::new("etcd-leader-killed", Some(true), ChaosCell::NO_LOSS),
        PARTITIONED_UNFENCED,
        PARTITIONED_FENCED,
    ],
};

impl<S: LockShared> Declare<S> for EtcdLock {
    type Settings = EtcdLockSettings;

    /// The etcd lock on `--etcd-endpoints`, keys under `--etcd-prefix`.
    fn build(settings: &EtcdLockSettings, context: &Context<'_, S>) -> Arc<dyn Strategy> {
        let config = (
            settings.etcd_endpoints.clone(),
            settings.etcd_prefix.clone(),
        );
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
        let unset = settings.etcd_endpoints.is_empty();
        strategy.own_servers = Some(if unset {
            Err("ETCD_ENDPOINTS is not set")
        } else {
            Ok(())
        });
        #[cfg(feature = "service")]
        let strategy = strategy.with_card(&INFO);
        Arc::new(strategy)
    }
}
