//! The five lock strategies: one algorithm, five locks. Each file is one strategy,
//! copyable on its own with [`algorithm`] (its "Copying this file" section says
//! exactly what to take).
//!
//! # Layout
//! - [`algorithm`]: lock, claim, read-check-write, release (one for all five), and
//!   what a lock strategy needs of the shared settings ([`algorithm::LockShared`]);
//! - [`served`] and [`counters`]: what only the service asks of all of them (the
//!   `service` feature): the fault cells every lock goes through, `/ready`'s look,
//!   the lock counters (which watch the locks through [`algorithm::LockWatch`]);
//! - [`mysql_lock`], [`redis_lock`], [`redlock`], [`zookeeper`], [`etcd_lock`]: each
//!   one's settings and connection, and how it fails; its card and flags in the
//!   `served.rs` beside it;
//! - [`mistakes`]: the classic lock mistakes, made on purpose (test knob only): how
//!   the service runs `redis-lock` and `zookeeper` ([`mistakes::Mistaken`]).
//!
//! They may touch the strategies' contract, the fence (`fencing`), the plain
//! read-check-write (`plain`), the transaction helpers and the `locks` crate; only
//! [`mistakes`] also knows the service's `shared` settings. Nothing of the service
//! around them.
//!
//! # How each one fails, in a line (what the chaos runner shows; the book's "Faults and
//! fencing")
//! - **`mysql-lock`**: a lease by the database's clock; every attempt a write on the
//!   primary (the slowest under a hot key).
//! - **`redis-lock`**: a restart or failover that forgets the lock lets a second
//!   holder in; only the fence stops its write.
//! - **`redlock`**: survives two of five nodes; no token, so an owner tag fences, and a
//!   clock jump on a majority admits two holders.
//! - **`zookeeper`**: consensus and FIFO; a holder paused past its session loses its
//!   node.
//! - **`etcd-lock`**: consensus and FIFO, with a lease: a holder paused past it loses
//!   its key (Jepsen); the revision fences.
//!
//! Frozen past the lease, every one loses updates unfenced and refuses the stale
//! write fenced.

pub mod algorithm;
pub mod counters;
pub mod etcd_lock;
pub mod mistakes;
pub mod mysql_lock;
pub mod redis_lock;
pub mod redlock;
pub mod served;
pub mod zookeeper;
