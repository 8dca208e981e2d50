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
#[cfg(feature = "service")]
use super::served::cells::{
    DELAY_LONG, DELAY_SHORT, FROZEN_FENCED, FROZEN_UNFENCED, KILLED, KILLED_UNFENCED, MAYBE_REFUSED,
};
#[cfg(feature = "service")]
use crate::strategies::card::{ChaosCell, Family, Statements, StrategyInfo, Trait};
use crate::strategies::contract::{Context, Declare, Strategy};
use locks::LockBackend;
use std::sync::Arc;

pub struct MysqlLock;

/// `mysql-lock`'s flags (named as their fields are).
#[derive(clap::Args, Debug, Clone)]
#[group(skip)]
pub struct MysqlLockSettings {
    /// Connections the mysql-lock strategy uses for acquisition attempts (it has its
    /// own pools, apart from the stock transactions').
    #[arg(long, env, default_value_t = 16)]
    pub mysql_lock_pool_size: u32,
}

const NAME: &str = "mysql-lock";

#[cfg(feature = "service")]
static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: file!(),
    description: "Lock table in the database (reentrant, leased by the database clock, watchdog), plain read-check-write; fenced by default.",
    family: Family::DistributedLock,
    when_to_use: "A lock is needed, only the database is there, and the load is light.",
    explanation: "A lock row in the database (reentrant, leased by the database clock, renewed by a watchdog), then a plain read-check-write, fenced by the row's token. Slow: every attempt is a write transaction.",
    backend: "database (lock table)",
    safe_across_instances: true,
    fencing: "token",
    // Its lock's own two (take and release) besides the fenced path's seven.
    statements: Statements {
        sale: 9,
        refusal: 5,
    },
    traits: &[Trait::LeaseLock],
    chaos: &[
        FROZEN_UNFENCED,
        FROZEN_FENCED,
        DELAY_SHORT,
        DELAY_LONG,
        KILLED,
        KILLED_UNFENCED,
        ChaosCell::new("ambiguous-commit", Some(true), MAYBE_REFUSED).extra(),
    ],
};

impl<S: LockShared> Declare<S> for MysqlLock {
    type Settings = MysqlLockSettings;

    /// The lock table, on pools of its own in the service's database.
    fn build(settings: &MysqlLockSettings, context: &Context<'_, S>) -> Arc<dyn Strategy> {
        let config = (
            context.database_url.to_string(),
            settings.mysql_lock_pool_size,
        );
        let connect = connector(config, async |(url, size)| {
            let backend = locks::mysql::MysqlLock::connect(&url, size)
                .await
                .map_err(unavailable("database"))?;
            Ok(Box::new(backend) as Box<dyn LockBackend>)
        });
        let strategy = LockStrategy::new(NAME, "mysql", "stock:", connect, context.shared);
        #[cfg(feature = "service")]
        let strategy = strategy.with_card(&INFO);
        Arc::new(strategy)
    }
}
