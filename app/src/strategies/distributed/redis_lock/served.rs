//! How the service registers the strategy: its card for the catalogue (it has no
//! flags). A copy of the strategy leaves this file out.

use super::{NAME, RedisLock, SOURCE};
use crate::strategies::card::{
    CellVerdict, ChaosCell, Family, Scenario, Statements, StrategyInfo, Trait,
};
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
        ChaosCell::new(Scenario::RedisRestart, Some(false), &[CellVerdict::Erased]),
        ChaosCell::new(Scenario::RedisRestart, Some(true), &[CellVerdict::Refused]),
        PARTITIONED_UNFENCED,
        PARTITIONED_FENCED,
        ChaosCell::new(
            Scenario::AmbiguousCommit,
            Some(true),
            &[CellVerdict::Safe, CellVerdict::Unavailable],
        ),
        // The classic mistakes the service makes in this strategy (`super::mistakes`),
        // each showing its failure.
        ChaosCell::new(
            Scenario::MistakeLockInsideTransaction,
            None,
            &[CellVerdict::Erased],
        ),
        ChaosCell::new(
            Scenario::MistakeReleaseBeforeCommit,
            None,
            &[CellVerdict::Erased],
        ),
        ChaosCell::new(
            Scenario::MistakeSetnxThenExpire,
            None,
            &[CellVerdict::Unavailable],
        ),
        ChaosCell::new(Scenario::MistakeGetThenDel, None, &[CellVerdict::Erased]),
        // A failover loses the lock (two holders); waiting for the replica: no lock
        // only the primary had, and no sale without one.
        ChaosCell::new(Scenario::RedisFailover, Some(false), &[CellVerdict::Erased]),
        ChaosCell::new(Scenario::RedisFailover, Some(true), &[CellVerdict::Refused]),
        ChaosCell::new(
            Scenario::RedisFailoverWait,
            Some(false),
            &[CellVerdict::Unavailable],
        ),
        // The same on a Redis Cluster (a master of three, its replica promoted), and a
        // reshard of the lock's slot under load (a holder whose renewal meets the slot
        // half moved may be told its lock is lost: refused, nothing lost).
        ChaosCell::new(
            Scenario::RedisClusterFailover,
            Some(false),
            &[CellVerdict::Erased],
        ),
        ChaosCell::new(
            Scenario::RedisClusterFailover,
            Some(true),
            &[CellVerdict::Refused],
        ),
        ChaosCell::new(
            Scenario::RedisClusterFailoverWait,
            Some(false),
            &[CellVerdict::Unavailable],
        ),
        ChaosCell::new(
            Scenario::RedisClusterReshard,
            Some(true),
            &[CellVerdict::Safe, CellVerdict::Refused],
        ),
        // Reads from a lagging replica: a lock, fenced or not, writes from them.
        ChaosCell::new(Scenario::ReplicaLag, Some(false), &[CellVerdict::Erased]),
        ChaosCell::new(Scenario::ReplicaLag, Some(true), &[CellVerdict::Erased]),
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
