//! What each server of a stack keeps of a write it acknowledged, said in words: the
//! setup line every comparison of this project opens with.
//!
//! Figures side by side are only fair when the servers behind them keep their
//! promises alike: a database that confirms a COMMIT before its redo log is on disk
//! beats a lock service that fsyncs every write for a reason that has nothing to do
//! with locking. MariaDB's setting is asked of the server (a run may change it with
//! `SET GLOBAL`); Redis' is what the testbed started it with or switched it to
//! ([`Redis::set_persistence`]); ZooKeeper and etcd are never told to skip their
//! fsync.

use crate::{Etcd, MariaDb, Persistence, Redis, Stack, ZooKeeper};
use std::collections::BTreeMap;

impl Stack {
    /// Each running server's durability by name (`mariadb`, `redis`, `zookeeper`,
    /// `etcd`), in words.
    pub fn durability(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        if let Some(db) = self.get::<MariaDb>()
            && let Some(flush) = db.flush_log_at_trx_commit()
        {
            out.insert("mariadb".to_string(), mariadb(flush));
        }
        if let Some(redis) = self.redis().first() {
            out.insert("redis".to_string(), redis.persistence_text());
        }
        if self.get::<ZooKeeper>().is_some() {
            out.insert(
                "zookeeper".to_string(),
                "fsyncs its transaction log before it answers a write (zookeeper.forceSync left at yes)"
                    .to_string(),
            );
        }
        if self.get::<Etcd>().is_some() {
            out.insert(
                "etcd".to_string(),
                "fsyncs its write-ahead log before it answers a write".to_string(),
            );
        }
        out
    }
}

impl MariaDb {
    /// `innodb_flush_log_at_trx_commit` as the server has it now (`None` when it does
    /// not answer).
    pub fn flush_log_at_trx_commit(&self) -> Option<u8> {
        let answer = self
            .execute("SELECT @@GLOBAL.innodb_flush_log_at_trx_commit")
            .ok()?;
        answer.lines().last()?.trim().parse().ok()
    }
}

impl Redis {
    /// What it keeps on disk, in words: from its command line as started, or as
    /// [`Redis::set_persistence`] last switched it (the last of a repeated flag wins,
    /// as in Redis).
    pub fn persistence_text(&self) -> String {
        let args = self.process_ref().args();
        let value = |flag: &str| crate::redis::flag_value_at(args, flag).map(|i| args[i].clone());
        let fsync = value("--appendfsync");
        match (value("--appendonly").as_deref(), fsync.as_deref()) {
            (Some("yes"), Some("always")) => redis_text(Persistence::AofAlways),
            (Some("yes"), Some("everysec") | None) => redis_text(Persistence::AofEverySec),
            (Some("yes"), Some(other)) => {
                format!("appends every write to a file (appendfsync {other})")
            }
            _ => redis_text(Persistence::None),
        }
    }
}

/// MariaDB's `innodb_flush_log_at_trx_commit`, in words.
pub fn mariadb(flush: u8) -> String {
    match flush {
        1 => "fsyncs its redo log at every COMMIT (innodb_flush_log_at_trx_commit=1)".into(),
        2 => "writes its redo log at COMMIT and fsyncs it once a second (innodb_flush_log_at_trx_commit=2)".into(),
        other => format!("innodb_flush_log_at_trx_commit={other}"),
    }
}

/// A Redis' persistence, in words.
fn redis_text(persistence: Persistence) -> String {
    match persistence {
        Persistence::None => "keeps nothing on disk (no append-only file, no snapshots)",
        Persistence::AofEverySec => "appends every write to a file fsynced once a second",
        Persistence::AofAlways => "appends every write to a file fsynced before it answers",
    }
    .to_string()
}
