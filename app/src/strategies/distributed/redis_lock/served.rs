//! How the service registers the strategy: its card for the catalogue (it has no
//! flags). A copy of the strategy leaves this file out.

use super::{NAME, RedisLock, SOURCE};
use crate::strategies::card::{ChaosCell, Family, Statements, StrategyInfo, Trait};
use crate::strategies::contract::NoSettings;
use crate::strategies::distributed::served::cells::{
    DELAY_LONG, DELAY_SHORT, FROZEN_FENCED, FROZEN_UNFENCED, KILLED, KILLED_UNFENCED,
    PARTITIONED_FENCED, PARTITIONED_UNFENCED,
};
use crate::strategies::registered::{NoFlags, Registered};

static INFO: StrategyInfo = StrategyInfo {
    name: NAME,
    source: SOURCE,
    description: "Redisson-style reentrant hash lock in Redis (Lua, watchdog, pub/sub wake-up), plain read-check-write; fenced by default.",
    family: Family::DistributedLock,
    when_to_use: "The critical section spans more than the database and the final write can be fenced.",
    explanation: "A Redisson-style hash lock in Lua (reentrant, watchdog, waiters woken by pub/sub), then a plain read-check-write fenced by its token (max(last + 1, Redis clock in µs)). Fast; safe only with the fence.",
    backend: "redis",
    safe_across_instances: true,
    fencing: "token",
    statements: Statements {
        sale: 7,
        refusal: 3,
    },
    traits: &[Trait::LeaseLock],
    chaos: &[
        FROZEN_UNFENCED,
        FROZEN_FENCED,
        DELAY_SHORT,
        DELAY_LONG,
        KILLED,
        KILLED_UNFENCED,
        // Redis forgets the lock and the token counter.
        ChaosCell::new("redis-restart", Some(false), &["erased"]),
        ChaosCell::new("redis-restart", Some(true), &["refused"]),
        PARTITIONED_UNFENCED,
        PARTITIONED_FENCED,
        ChaosCell::new("ambiguous-commit", Some(true), &["safe", "unavailable"]),
        // The classic mistakes the service makes in this strategy (`super::mistakes`),
        // each showing its failure.
        ChaosCell::new("mistake-lock-inside-transaction", None, &["erased"]),
        ChaosCell::new("mistake-release-before-commit", None, &["erased"]),
        ChaosCell::new("mistake-setnx-then-expire", None, &["unavailable"]),
        ChaosCell::new("mistake-get-then-del", None, &["erased"]),
        // A failover loses the lock (two holders); waiting for the replica: no lock
        // only the primary had, and no sale without one.
        ChaosCell::new("redis-failover", Some(false), &["erased"]),
        ChaosCell::new("redis-failover", Some(true), &["refused"]),
        ChaosCell::new("redis-failover-wait", Some(false), &["unavailable"]),
        // The same on a Redis Cluster (a master of three, its replica promoted), and a
        // reshard of the lock's slot under load (a holder whose renewal meets the slot
        // half moved may be told its lock is lost: refused, nothing lost).
        ChaosCell::new("redis-cluster-failover", Some(false), &["erased"]),
        ChaosCell::new("redis-cluster-failover", Some(true), &["refused"]),
        ChaosCell::new("redis-cluster-failover-wait", Some(false), &["unavailable"]),
        ChaosCell::new("redis-cluster-reshard", Some(true), &["safe", "refused"]),
        // Reads from a lagging replica: a lock, fenced or not, writes from them.
        ChaosCell::new("replica-lag", Some(false), &["erased"]),
        ChaosCell::new("replica-lag", Some(true), &["erased"]),
    ],
};

impl Registered for RedisLock {
    type Flags = NoFlags;

    fn card() -> &'static StrategyInfo {
        &INFO
    }

    fn settings(flags: &NoFlags) -> NoSettings {
        flags.settings()
    }
}
