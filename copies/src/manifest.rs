//! `copies.toml`, read into types: which copies the repository promises, and for each
//! the files it takes and the crates it needs.

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// The whole manifest: the lock backends and the strategies, each by name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub backend: BTreeMap<Backend, BackendCopy>,
    pub strategy: BTreeMap<String, StrategyCopy>,
}

/// A lock backend of the `locks` crate. Each has its own smoke construction (how
/// the copy connects to its server), so a backend added to the manifest without one
/// does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    Mysql,
    Redis,
    RedisSimple,
    Redlock,
    Zookeeper,
    Etcd,
}

impl Backend {
    /// Its name in `copies.toml` and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Backend::RedisSimple => "redis-simple",
            other => other.module(),
        }
    }

    /// Its module: its file (`locks/src/{module}.rs`) and, but for `redis_simple`
    /// (part of the `redis` feature), its feature of `locks`.
    pub fn module(self) -> &'static str {
        match self {
            Backend::Mysql => "mysql",
            Backend::Redis => "redis",
            Backend::RedisSimple => "redis_simple",
            Backend::Redlock => "redlock",
            Backend::Zookeeper => "zookeeper",
            Backend::Etcd => "etcd",
        }
    }
}

/// The crates a copy depends on: name to the features it turns on.
pub type Crates = BTreeMap<String, Vec<String>>;

/// A lock backend's copy: a crate of its own.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendCopy {
    pub files: Vec<String>,
    pub crates: Crates,
}

/// A strategy's copy: its files under their module paths, and its lock backend (a
/// lock strategy) as a crate named `locks` beside it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StrategyCopy {
    /// Its module in the copy: `strategies::atomic_sql`.
    pub path: String,
    /// The type the copy builds (its `Declare` implementation).
    #[serde(rename = "type")]
    pub type_name: String,
    pub files: Vec<String>,
    pub crates: Crates,
    /// A lock strategy's lock backend.
    #[serde(default)]
    pub lock: Option<Backend>,
    /// What it asks of the settings the strategies share.
    #[serde(default)]
    pub asks: Vec<Ask>,
    /// Modules of its folder the copy leaves out (their `pub mod` lines removed).
    #[serde(default)]
    pub without: Vec<String>,
    /// Where the smoke program's settings come from.
    #[serde(default)]
    pub settings: SettingsFrom,
}

/// Where a copy's smoke program takes the strategy's settings from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SettingsFrom {
    /// Their `Default`: plain settings, or none.
    #[default]
    Default,
    /// Their `Default` with `endpoints` from the `ETCD_ENDPOINTS` testbed exports
    /// (`etcd-lock`: its servers are a setting of its own, not a shared one).
    EtcdEndpoints,
}

/// What a strategy asks of the settings the service's strategies share: a trait of
/// its own (or of the lock strategies'), which the smoke program answers from the
/// servers testbed exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ask {
    /// `redis_stock::RedisEndpoint`: the Redis it sells from.
    RedisEndpoint,
    /// `distributed::algorithm::LockShared`: the lock options, the wait, fencing.
    LockShared,
    /// `distributed::redis_lock::RedisLockShared`: how to reach its Redis.
    RedisLockShared,
    /// `distributed::redlock::RedLockShared`: its nodes.
    RedlockShared,
    /// `distributed::zookeeper::ZooKeeperShared`: the ensemble and the session.
    ZookeeperShared,
}

impl Manifest {
    /// Reads `copies.toml` at the repository's root.
    pub fn read(repo: &Path) -> Result<Manifest> {
        let path = repo.join("copies.toml");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// The copy called `name`: a backend unless `strategy` is set or no backend has
    /// that name (`redlock` and `zookeeper` are both).
    pub fn find(&self, name: &str, strategy: bool) -> Result<Entry<'_>> {
        if !strategy
            && let Some((backend, copy)) = self.backend.iter().find(|(b, _)| b.name() == name)
        {
            return Ok(Entry::Backend(*backend, copy));
        }
        match self.strategy.get_key_value(name) {
            Some((name, copy)) => Ok(Entry::Strategy(name, copy)),
            None => bail!(
                "no copy named {name} in copies.toml (backends: {}; strategies: {})",
                self.backend
                    .keys()
                    .map(|b| b.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                self.strategy.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        }
    }

    /// Every copy, the backends first.
    pub fn all(&self) -> Vec<Entry<'_>> {
        let backends = self
            .backend
            .iter()
            .map(|(b, copy)| Entry::Backend(*b, copy));
        let strategies = self
            .strategy
            .iter()
            .map(|(name, copy)| Entry::Strategy(name, copy));
        backends.chain(strategies).collect()
    }

    /// The backend copy a lock strategy builds its `locks` crate from.
    pub fn lock_of(&self, copy: &StrategyCopy) -> Result<Option<&BackendCopy>> {
        let Some(lock) = copy.lock else {
            return Ok(None);
        };
        match self.backend.get(&lock) {
            Some(backend) => Ok(Some(backend)),
            None => bail!("lock = {:?}: no [backend.{}]", lock.name(), lock.name()),
        }
    }
}

/// One copy of the manifest.
#[derive(Debug, Clone, Copy)]
pub enum Entry<'a> {
    Backend(Backend, &'a BackendCopy),
    Strategy(&'a str, &'a StrategyCopy),
}

impl Entry<'_> {
    /// How it is labelled in the output, and its directory under `--all`'s DIR:
    /// a backend's name, a strategy's with a `strategy-` prefix (`redlock` and
    /// `zookeeper` are both).
    pub fn label(&self) -> String {
        match self {
            Entry::Backend(backend, _) => backend.name().to_string(),
            Entry::Strategy(name, _) => format!("strategy-{name}"),
        }
    }
}
