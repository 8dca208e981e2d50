//! The strategy card's kinds: a strategy's family and the traits a client may ask it
//! for.

use serde::{Deserialize, Serialize};
use strum::IntoStaticStr;

/// The four kinds of strategy, in teaching order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, IntoStaticStr)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Family {
    /// What goes wrong without a (real) lock, and the fence alone.
    Control,
    /// The database's own concurrency control: a conditional UPDATE, row locks, CAS.
    Database,
    /// One product, many buyers: coalescing, split rows, Redis in front.
    HotProduct,
    /// A lock service around a plain read-check-write, fenced.
    DistributedLock,
}

/// A property a client may ask for, declared by the strategies that have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, IntoStaticStr)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Trait {
    /// No lock at all: read, check, write (the lost-update story).
    NoLock,
    /// A lock inside one process: safe with one instance only.
    ProcessLock,
    /// Every write guarded by the newest claim, so an overtaken request is refused: a
    /// control for the fencing experiments, not a way to sell.
    RefusesOvertaken,
    /// The database checks and decrements in one statement: the reference the others
    /// are measured against.
    ConditionalUpdate,
    /// The database's row lock, taken by a locking read.
    RowLock,
    /// A compare-and-set on a version, retried when another writer got there first
    /// (its transactions per sale measure the contention).
    CompareAndSet,
    /// Many sales share one transaction.
    Batches,
    /// Sells from rows the restock splits the stock into (`buckets`).
    SplitsStock,
    /// Answers before the database has the sale: a persister records it later (wait
    /// for `pending` before judging; its persister is what a killed holder is).
    RecordsLater,
    /// A lease that ends when its holder stops renewing it.
    LeaseLock,
    /// The lock server keeps leases in whole seconds, rounded up, and no shorter than
    /// its minimum TTL (etcd: one and a half election timeouts, 2 s with its default
    /// settings): a lock outlives the lease asked for (the holder still counts on the
    /// lease it asked for, so it gives up first).
    LeaseInWholeSeconds,
    /// A lock that lasts as long as its holder's session.
    SessionLock,
}

impl Family {
    /// Its name on the wire (`hot-product`).
    pub fn id(self) -> &'static str {
        self.into()
    }
}

impl Trait {
    /// Its name on the wire (`records-later`).
    pub fn id(self) -> &'static str {
        self.into()
    }
}
