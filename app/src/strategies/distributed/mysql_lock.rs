//! `mysql-lock`: the lock strategy ([`super::algorithm`]) on a lock table in the
//! service's own database ([`locks::mysql`]), on pools of its own.
//!
//! # How it fails
//! The lease is judged by the database's clock. A holder paused past it loses the lock
//! to the next attempt (a steal); unfenced, its late write is a lost update; fenced, it
//! is refused. A killed holder's lock comes back after the lease. Every attempt is a
//! write on the primary: waiters cost database capacity, and a hot key is the slowest
//! of the four lock strategies.
//!
//! # Copying this file
//! A copy takes this file, the domain, the contract and the helpers it calls, under the
//! same module paths, with the schema: `copies.toml` lists them under
//! `[strategy.mysql-lock]`, with the crates they need. Its lock is the `locks` crate's
//! MySQL backend, copied as a crate named `locks`. Say what it needs of the shared
//! settings by implementing [`LockShared`]. `./scripts/copy-check mysql-lock DIR`
//! builds such a copy and sells from it on a real server.

use super::algorithm::{LockShared, LockStrategy, connector, unavailable};
use crate::strategies::contract::{Context, Declare, Strategy};
use locks::LockBackend;
use std::sync::Arc;

pub struct MysqlLock;

/// `mysql-lock`'s own settings.
#[derive(Debug, Clone)]
pub struct MysqlLockSettings {
    /// Connections for acquisition attempts: the lock has pools of its own, apart
    /// from the stock transactions'.
    pub pool_size: u32,
}

impl Default for MysqlLockSettings {
    fn default() -> Self {
        MysqlLockSettings { pool_size: 16 }
    }
}

const NAME: &str = "mysql-lock";

/// How the service registers it: its card for the catalogue and its flags
/// (`mysql_lock/served.rs`; a copy leaves it out).
#[cfg(feature = "service")]
mod served;

/// Where this strategy is written, from the repository's root (its card's `source`).
pub const SOURCE: &str = file!();

impl<S: LockShared> Declare<S> for MysqlLock {
    type Settings = MysqlLockSettings;

    /// The lock table, on pools of its own in the service's database.
    fn build(settings: &MysqlLockSettings, context: &Context<'_, S>) -> Arc<dyn Strategy> {
        let config = (context.database_url.to_string(), settings.pool_size);
        let connect = connector(config, async |(url, size)| {
            let backend = locks::mysql::MysqlLock::connect(&url, size)
                .await
                .map_err(unavailable("database"))?;
            Ok(Box::new(backend) as Box<dyn LockBackend>)
        });
        Arc::new(LockStrategy::new(
            NAME,
            "mysql",
            "stock:",
            connect,
            context.shared,
        ))
    }
}
