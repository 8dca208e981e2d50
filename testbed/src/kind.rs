//! A kind of server, as the stack declares it (each server's file has its `KIND`), the
//! servers of one kind as the stack holds them, and what a stack is asked to start.
//! Below the servers' files, which declare themselves with it; [`crate::stack`] lists
//! them (`KINDS`) and starts them.

use crate::Result;
use crate::proxy::Latency;
use std::any::Any;
use std::collections::BTreeMap;

/// A kind of server: what the stack needs to start it, name it and reach it.
pub struct ServerKind {
    /// As the round-trip counts name it: `database`, `redis`, ...
    pub name: &'static str,
    /// The variable [`crate::Stack::env`] exports its addresses in (comma-separated), read by
    /// the service's flag of the same name (`REDIS_URLS` is `--redis-urls`).
    pub variable: &'static str,
    /// The Debian package its server comes from (`scripts/install-deps` installs it).
    pub package: &'static str,
    /// How many a default stack starts (a [`StackConfig`] may say otherwise).
    pub default_nodes: usize,
    /// Whether the chaos lab puts a proxy of its own between instance A and every
    /// node (the partition cells cut A off them): every lock server. Not the
    /// database, which the lab faults otherwise (kill, replica lag).
    pub behind_lab_proxies: bool,
    /// Whether a stack at a distance puts a proxy in front of every node: not for a
    /// Redis Cluster, whose clients follow the addresses the nodes announce and would
    /// bypass it (its variable then names the nodes themselves).
    pub behind_a_distance: bool,
    /// Starts `nodes` of them (at least one) for `config`, ready.
    pub start: fn(nodes: usize, config: &StackConfig) -> Result<Box<dyn Servers>>,
}

impl PartialEq for ServerKind {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for ServerKind {}

impl std::fmt::Debug for ServerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// The running servers of one kind (one server, a set of independent ones, or an
/// ensemble), as the stack holds them: [`crate::Stack::get`] gives back the type.
pub trait Servers: Any + Send {
    /// Every node's client address, in the form the kind's variable holds.
    fn addresses(&self, config: &StackConfig) -> Vec<String>;
    /// Every process's name and id.
    fn pids(&self) -> Vec<(String, u32)>;
}

/// What to start. The default is what stock-locks needs: every kind of [`crate::KINDS`],
/// its default number of nodes (MariaDB with a `stocklocks` database, five independent
/// Redis (the first also serves the single-Redis lock, all five form the RedLock), a
/// standalone ZooKeeper and a single etcd).
#[derive(Debug, Clone)]
pub struct StackConfig {
    pub database: String,
    /// Start MariaDB as a replication primary (a binary log), so that a
    /// [`crate::replication::Replica`] can follow it later.
    pub mariadb_primary: bool,
    /// How many nodes of a kind (by name), when not its default; 0 for none.
    pub nodes: BTreeMap<&'static str, usize>,
    /// Put every server behind a proxy with this latency (changeable later through
    /// [`crate::Stack::network`]); the environment then names the proxies. `None`:
    /// the servers' own ports, no proxy.
    pub network: Option<Latency>,
}

impl Default for StackConfig {
    fn default() -> Self {
        StackConfig {
            database: "stocklocks".into(),
            mariadb_primary: false,
            nodes: BTreeMap::new(),
            network: None,
        }
    }
}

impl StackConfig {
    /// `nodes` of `kind` (0: none; for Redis, independent servers; for ZooKeeper and
    /// etcd, one ensemble of that size).
    pub fn with_nodes(mut self, kind: &ServerKind, nodes: usize) -> Self {
        self.nodes.insert(kind.name, nodes);
        self
    }

    /// How many nodes of `kind` the stack starts.
    pub fn nodes(&self, kind: &ServerKind) -> usize {
        self.nodes
            .get(kind.name)
            .copied()
            .unwrap_or(kind.default_nodes)
    }
}
