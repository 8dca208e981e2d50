//! How the service registers the strategy: its card for the catalogue and its
//! flags. A copy of the strategy leaves this file out.

use super::{EtcdLock, EtcdLockSettings, NAME, SOURCE};
use crate::strategies::card::{ChaosCell, Family, Scenario, Statements, StrategyInfo, Trait};
use crate::strategies::distributed::served::cells::{
    DELAY_LONG, DELAY_SHORT, FROZEN_FENCED, FROZEN_UNFENCED, KILLED, KILLED_UNFENCED,
    PARTITIONED_FENCED, PARTITIONED_UNFENCED,
};
use crate::strategies::registered::Registered;

static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: SOURCE,
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
        ChaosCell::new(Scenario::EtcdLeaderKilled, Some(true), ChaosCell::NO_LOSS),
        PARTITIONED_UNFENCED,
        PARTITIONED_FENCED,
    ],
};

/// Its flags (named as their fields are).
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct Flags {
    /// etcd client URLs, comma-separated (`http://host:port`; every member of a
    /// cluster). Never waited on at start.
    #[arg(long, env, value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,

    /// Where `etcd-lock` keeps its lock keys in etcd.
    #[arg(long, env, default_value_t = EtcdLockSettings::default().prefix)]
    pub etcd_prefix: String,
}

impl Registered for EtcdLock {
    type Flags = Flags;

    fn card() -> &'static StrategyInfo {
        &INFO
    }

    fn settings(flags: &Flags) -> EtcdLockSettings {
        EtcdLockSettings {
            endpoints: flags.etcd_endpoints.clone(),
            prefix: flags.etcd_prefix.clone(),
        }
    }
}
