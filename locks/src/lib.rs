//! Distributed locks, one self-contained file per backend.
//!
//! **Placeholder.** The lock API and its backends arrive with the lock issues, each a
//! file meant to be read and copied:
//!
//! | backend | file | lease or session | fencing token |
//! |---|---|---|---|
//! | MySQL lock table (`distributed_lock`) | `mysql.rs` | lease, renewed | row counter |
//! | Redis, Redisson-style hash lock in Lua | `redis.rs` | lease, watchdog | `INCR` per key |
//! | RedLock over 5 independent Redis | `redlock.rs` | lease, majority | none (owner tag) |
//! | ZooKeeper ephemeral sequential node | `zookeeper.rs` | session | czxid |
//!
//! The schema this crate writes to (`distributed_lock`, `stock_fence`) is already in
//! the workspace's `migrations/`.
