//! Distributed locks for stock deduction, one self-contained file per backend.
//!
//! # Layout: a small core, backends you can lift out
//! - `lock.rs`, the core (re-exported here): [`LockError`] (a backend's with its
//!   [`BackendKind`] and its client's error as the source), [`LostReason`],
//!   [`HolderId`], [`LockOptions`], the [`LockBackend`] trait (acquire, renew,
//!   unlock), [`Locker`], the [`LockGuard`] with its lost-lock signal, and **one
//!   watchdog** that renews every lease/3 while a guard lives;
//! - one file per backend, each owning its whole acquisition, waiting included:
//!   - [`mysql`]: the lock table `distributed_lock` (of the article 解决 MySQL 库存超卖问题, done right), with its
//!     DDL in `sql/`; waits by jittered retry;
//!   - [`redis`]: the Redisson-style reentrant hash lock in Lua (`lua/`), waking
//!     waiters by pub/sub;
//!   - [`redis_sentinel`] and [`redis_cluster`] (optional in a copy): the same lock
//!     on Sentinel's primary, and on a Redis Cluster (hash tags, sharded pub/sub);
//!   - [`redis_simple`]: the minimal `SET NX PX` lock the hash lock grows from;
//!   - [`redlock`]: RedLock over N independent Redis masters (5 by default), fanning
//!     each step out to all nodes;
//!   - [`zookeeper`]: ephemeral sequential nodes, each waiter watching its
//!     predecessor, named like Apache Curator's `InterProcessMutex`;
//!   - [`etcd`]: a key per waiter attached to a lease, each waiter watching the key
//!     created just before its own; the create revision is the token;
//!   - [`noop`]: a lock that always grants, **broken on purpose**, to prove that the
//!     test suite catches a broken lock.
//!
//! Each backend file opens with **Copying this file**: what to take into your own
//! crate (always `lock.rs`, the backend, its Lua or SQL), whose exact files and
//! crates `copies.toml` at the repository's root lists. `./scripts/copy-check BACKEND
//! DIR` takes exactly those and runs the copy against a real server. Each backend is also a Cargo feature of the same name (`mysql`,
//! `redis`, `redlock`, `zookeeper`, `etcd`; all on by default): with
//! `default-features = false, features = ["redis"]` this crate builds without sqlx,
//! zookeeper-client and etcd-client.
//!
//! # Backends and what they guarantee
//!
//! | backend | file | expiry | reentrant | fencing token | waiting |
//! |---|---|---|---|---|---|
//! | MySQL lock table | [`mysql`] | lease (database clock), renewed | yes | row counter, survives release | jittered retry |
//! | Redis hash lock | [`redis`] | lease (`PEXPIRE`), renewed | yes | `max(last + 1, TIME µs)` per key (ahead even after Redis loses it) | pub/sub, one subscription per process |
//! | Redis `SET NX PX` | [`redis_simple`] | lease, renewed | no | none | jittered retry |
//! | RedLock, 5 Redis | [`redlock`] | lease − drift, majority-renewed | no | none (owner tag) | random retry |
//! | ZooKeeper | [`zookeeper`] | session (ephemeral node) | yes | czxid of the node | watch the predecessor, FIFO |
//! | etcd | [`etcd`] | lease (whole seconds, kept alive), renewed | yes | create revision of the key, cluster-wide | watch the predecessor, FIFO |
//! | no-op (tests only) | [`noop`] | none | claims to | claims to | never waits |
//!
//! # When not to use which
//! - [`mysql`]: when you have no relational database next to the data, or need
//!   thousands of lock operations per second per key. When the data is in the same
//!   database, lock the data itself (`SELECT ... FOR UPDATE`, the service's
//!   `pessimistic` strategy): simpler.
//! - [`redis`]: when a second holder for a few seconds would be a disaster and you
//!   cannot fence the resource: no lease lock is enough then. For a single counter in
//!   a database, let the database do it (the service's `atomic-sql`).
//! - [`redlock`]: for correctness-critical exclusion without a fence on the resource
//!   (use a consensus system: ZooKeeper, etcd); or when a single Redis is good enough
//!   for an efficiency lock ([`redis`] is simpler and cheaper).
//! - [`zookeeper`]: when you do not run ZooKeeper already: an ensemble (3 JVMs) for a
//!   lock is a lot of operations, and each acquisition costs a quorum write and its
//!   release another.
//! - [`etcd`]: the same, for an etcd cluster (3 Go processes); and its lease is a
//!   lease: a holder paused past it loses the lock (Jepsen, 2020). Fence the writes.
//!
//! # What a lease lock cannot promise
//! A holder that pauses longer than its lease (GC, SIGSTOP, swap, a long network
//! stall) wakes up believing it still holds the lock while another holder has it.
//! The watchdog cannot help: it is paused too. The [lost-lock signal](LockGuard::is_lost)
//! tells the holder as soon as it runs again, but a write already on its way is not
//! stopped. Only the resource can refuse it: pass the [fencing token](LockGuard::token)
//! with every write and let the resource reject tokens older than the newest it has
//! seen (the service's `stock_fence` table does this).
//!
//! # Example
//! ```no_run
//! # async fn example() -> Result<(), locks::LockError> {
//! use locks::{HolderId, LockOptions, Locker};
//! use std::time::Duration;
//!
//! let backend = locks::redis::RedisLock::connect("redis://127.0.0.1:6379").await?;
//! let locker = Locker::new(backend);
//! let holder = HolderId::random();
//! let guard = locker
//!     .acquire("stock:42", &holder, &LockOptions::default(), Duration::from_secs(5))
//!     .await?;
//! // ... read, decide, write with guard.token() as the fencing token ...
//! if guard.is_lost() {
//!     // the lease ran out or someone took the lock: do not trust what you read
//! }
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

mod lock;
pub use lock::*;

#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "mysql")]
pub mod mysql;
pub mod noop;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "redis")]
pub mod redis_cluster;
#[cfg(feature = "redis")]
pub mod redis_sentinel;
#[cfg(feature = "redis")]
pub mod redis_simple;
#[cfg(feature = "redlock")]
pub mod redlock;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;
