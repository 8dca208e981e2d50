//! The fault grid: the scenarios `loadtest chaos` injects, the verdicts a cell can
//! get, and a cell as a strategy declares it on its card.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use strum::{IntoStaticStr, VariantArray};

/// The fault scenarios, numbered as the book's Faults chapter and `--scenario N` number them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Scenario {
    /// 1. A's request pauses after its read (holding the lock), then A is frozen for
    ///    3× the lease (or session timeout).
    PausePastLease,
    /// 2. The same freeze against the fence alone: a fence with no lock.
    FenceAlone,
    /// 3. A's request pauses after its read, then A is killed with SIGKILL.
    HolderKilled,
    /// 4. A's request pauses after its read, then the Redis node its lock lives on is
    ///    restarted empty (no persistence).
    RedisRestart,
    /// 5. RedLock with 2 of its 5 nodes frozen.
    #[serde(rename = "redlock-2-of-5-paused")]
    #[strum(serialize = "redlock-2-of-5-paused")]
    RedlockMinorityPaused,
    /// 5. RedLock with 3 of its 5 nodes frozen.
    #[serde(rename = "redlock-3-of-5-paused")]
    #[strum(serialize = "redlock-3-of-5-paused")]
    RedlockMajorityPaused,
    /// 6. The ZooKeeper leader killed (three-node ensemble).
    ZkLeaderKilled,
    /// 6. The etcd leader killed (three-member cluster).
    EtcdLeaderKilled,
    /// 7. A's request pauses after its read, then A's lock-service connections are
    ///    blackholed (its database path stays up); released after 3× the lease.
    LockPartition,
    /// 8. A's request pauses before COMMIT; it is let go and MariaDB is killed at
    ///    once; after the restart every unknown outcome is retried with its request_id.
    AmbiguousCommit,
    /// 9. The Redis that sells (a strategy that records later) killed (kill -9) under
    ///    load and restarted from
    ///    its append-only file, fsynced once a second.
    #[serde(rename = "redis-killed-everysec")]
    #[strum(serialize = "redis-killed-everysec")]
    RedisKilledEverySec,
    /// 9. The same, fsynced before every reply.
    RedisKilledAlways,
    /// 9. The same with no persistence at all (the testbed's default): it comes back
    ///    empty.
    RedisKilledNoPersistence,
    /// 10. The classic mistakes (the service's `mistake` test hook on every request
    ///     of the cell), each made to bite by a handshake: lock taken inside the
    ///     transaction (A holds the lock briefly while B's buyers begin and read).
    MistakeLockInsideTransaction,
    /// 10. Lock released before COMMIT (A paused between its release and COMMIT).
    MistakeReleaseBeforeCommit,
    /// 10. SETNX then EXPIRE, A killed between the two.
    MistakeSetnxThenExpire,
    /// 10. Unlock by GET then DEL, A's lease running out between the two.
    MistakeGetThenDel,
    /// 10. A ZooKeeper lock on a PERSISTENT node, its holder killed.
    MistakePersistentNode,
    /// 10. Atomic SQL without the `quantity >= ?` guard, selling out.
    MistakeNoGuard,
    /// 11. The Redis lock through Sentinel: replication held back, A holds a lock only
    ///     the primary has, the primary is killed, Sentinel promotes the replica.
    RedisFailover,
    /// 11. The same with `--redis-lock-min-replicas 1` (WAIT for the replica).
    RedisFailoverWait,
    /// 12. RedLock: A holds a majority of 3 (its links to the other two cut), then
    ///     one node of its majority has its clock jumped forward 30 s.
    RedlockClockJump,
    /// 13. Both instances read from a MariaDB replica (`--read-replica-url`), whose
    ///     SQL thread is stopped for 3x the lease: replication lag.
    ReplicaLag,
    /// 13. The same lag, with the instances reading from the primary (the control).
    ReplicaLagPrimaryReads,
    /// 14. Chubby's lock-delay (`--lock-delay-ms` 2x the lease): A's request pauses
    ///     after its read, then A is frozen past its lease but within lease + delay.
    LockDelayShortPause,
    /// 14. The same lock-delay, A frozen 3x lease + delay.
    LockDelayLongPause,
    /// 15. On a Redis Cluster: the master serving the cell's key killed while its
    ///     replica's link is held back (the lock, or the sales, only on the master).
    RedisClusterFailover,
    /// 15. The same with `WAIT` for one replica (the lock's and the sale's).
    RedisClusterFailoverWait,
    /// 15. On a Redis Cluster: the cell's slot moved to another master under load.
    RedisClusterReshard,
}

impl Scenario {
    /// Every scenario, in the book's order.
    pub const ALL: &'static [Scenario] = <Scenario as VariantArray>::VARIANTS;

    /// The name used on the command line and in the JSON.
    pub fn id(self) -> &'static str {
        self.into()
    }

    /// The scenario of an id (`pause-past-lease`).
    pub fn from_id(id: &str) -> Option<Scenario> {
        Scenario::VARIANTS.iter().copied().find(|s| s.id() == id)
    }

    /// The service's name of the mistake every request of the cell makes (the
    /// `mistake` test hook), for the scenarios of 10.
    pub fn mistake(self) -> Option<&'static str> {
        self.id().strip_prefix("mistake-")
    }

    pub fn number(self) -> u8 {
        match self {
            Scenario::PausePastLease => 1,
            Scenario::FenceAlone => 2,
            Scenario::HolderKilled => 3,
            Scenario::RedisRestart => 4,
            Scenario::RedlockMinorityPaused | Scenario::RedlockMajorityPaused => 5,
            Scenario::ZkLeaderKilled | Scenario::EtcdLeaderKilled => 6,
            Scenario::LockPartition => 7,
            Scenario::AmbiguousCommit => 8,
            Scenario::RedisKilledEverySec
            | Scenario::RedisKilledAlways
            | Scenario::RedisKilledNoPersistence => 9,
            Scenario::MistakeLockInsideTransaction
            | Scenario::MistakeReleaseBeforeCommit
            | Scenario::MistakeSetnxThenExpire
            | Scenario::MistakeGetThenDel
            | Scenario::MistakePersistentNode
            | Scenario::MistakeNoGuard => 10,
            Scenario::RedisFailover | Scenario::RedisFailoverWait => 11,
            Scenario::RedlockClockJump => 12,
            Scenario::ReplicaLag | Scenario::ReplicaLagPrimaryReads => 13,
            Scenario::LockDelayShortPause | Scenario::LockDelayLongPause => 14,
            Scenario::RedisClusterFailover
            | Scenario::RedisClusterFailoverWait
            | Scenario::RedisClusterReshard => 15,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Scenario::PausePastLease => "Holder frozen past its lease",
            Scenario::FenceAlone => "Fence only, no lock (same freeze)",
            Scenario::HolderKilled => "Holder killed (kill -9) mid-section",
            Scenario::RedisRestart => "Redis restarted empty while a holder is paused",
            Scenario::RedlockMinorityPaused => "RedLock: 2 of 5 nodes frozen",
            Scenario::RedlockMajorityPaused => "RedLock: 3 of 5 nodes frozen",
            Scenario::ZkLeaderKilled => "ZooKeeper leader killed (3-node ensemble)",
            Scenario::EtcdLeaderKilled => "etcd leader killed (3-member cluster)",
            Scenario::LockPartition => "Lock service partitioned from the holder",
            Scenario::AmbiguousCommit => "Ambiguous commit: MariaDB killed as COMMIT is sent",
            Scenario::RedisKilledEverySec => "Redis killed, append-only file fsynced every second",
            Scenario::RedisKilledAlways => "Redis killed, append-only file fsynced on every write",
            Scenario::RedisKilledNoPersistence => "Redis killed, no persistence",
            Scenario::MistakeLockInsideTransaction => "Mistake: lock taken inside the transaction",
            Scenario::MistakeReleaseBeforeCommit => "Mistake: lock released before COMMIT",
            Scenario::MistakeSetnxThenExpire => "Mistake: SETNX, then EXPIRE",
            Scenario::MistakeGetThenDel => "Mistake: unlock by GET, then DEL",
            Scenario::MistakePersistentNode => "Mistake: ZooKeeper lock on a PERSISTENT node",
            Scenario::MistakeNoGuard => "Mistake: atomic SQL without `quantity >= ?`",
            Scenario::RedisFailover => "Redis Sentinel failover to a replica that missed the lock",
            Scenario::RedisFailoverWait => {
                "The same failover, locks granted only once a replica has them (WAIT)"
            }
            Scenario::RedlockClockJump => "RedLock: a node's clock jumps forward",
            Scenario::ReplicaLag => "Replication lag under read/write splitting",
            Scenario::ReplicaLagPrimaryReads => "The same lag, reads from the primary",
            Scenario::LockDelayShortPause => {
                "Lock-delay: holder frozen past its lease, within lease + delay"
            }
            Scenario::LockDelayLongPause => "Lock-delay: holder frozen past lease + delay",
            Scenario::RedisClusterFailover => {
                "Redis Cluster failover to a replica that missed the lock or the sales"
            }
            Scenario::RedisClusterFailoverWait => {
                "The same cluster failover, with WAIT for the replica"
            }
            Scenario::RedisClusterReshard => "Redis Cluster reshard under load",
        }
    }

    /// How the fault is made, in one sentence.
    pub fn how(self) -> &'static str {
        match self {
            Scenario::PausePastLease => {
                "A request on instance A pauses between its read and its write (failpoint handshake), then A is SIGSTOPped for 3x the lease (ZooKeeper: 3x the session timeout), then continued."
            }
            Scenario::FenceAlone => {
                "As scenario 1, against the fence alone: a ticket from a database sequence, a claim, a guarded write, and no lock at all."
            }
            Scenario::HolderKilled => {
                "A request on instance A pauses between its read and its write, then A is killed with SIGKILL; B's buyers wait for the lock to come back."
            }
            Scenario::RedisRestart => {
                "A request on instance A pauses between its read and its write, then the Redis node its lock lives on is restarted without persistence (the lock and its last token are gone); A is let go after 3x the lease."
            }
            Scenario::RedlockMinorityPaused => {
                "Two of the five RedLock nodes are SIGSTOPped for 3x the lease, then continued."
            }
            Scenario::RedlockMajorityPaused => {
                "Three of the five RedLock nodes are SIGSTOPped for 3x the lease, then continued."
            }
            Scenario::ZkLeaderKilled => {
                "The leader of the three-node ensemble is killed with SIGKILL, and restarted after 3x the lease."
            }
            Scenario::EtcdLeaderKilled => {
                "The leader of the three-member etcd cluster is killed with SIGKILL while sales run, and restarted after 3x the lease; the survivors elect a new one."
            }
            Scenario::LockPartition => {
                "A request on instance A pauses between its read and its write, then every connection of A to Redis, ZooKeeper and etcd is blackholed (its database path stays up); the request is let go after 3x the lease (ZooKeeper: the session timeout), then the partition heals."
            }
            Scenario::AmbiguousCommit => {
                "A request on instance A pauses just before COMMIT; it is let go and MariaDB is killed at once (the COMMIT may or may not land), restarted, and every request whose outcome was unknown is retried with the same request_id. For a strategy that records later the COMMIT is its persister's."
            }
            Scenario::RedisKilledEverySec => {
                "The Redis that sells (for a strategy that records later) writes an append-only file fsynced once a second (appendonly yes, appendfsync everysec); under load it is killed with SIGKILL and restarted from the file; the persisters reconcile the counters. Acknowledged sales missing from the ledger afterwards are what it lost."
            }
            Scenario::RedisKilledAlways => {
                "As above with appendfsync always: Redis answers only after the fsync."
            }
            Scenario::RedisKilledNoPersistence => {
                "As above with no persistence (appendonly no, no snapshots): Redis comes back empty, and the counters start again from the database."
            }
            Scenario::MistakeLockInsideTransaction => {
                "Every request begins its transaction and reads before it takes its Redis lock. A request of A holds the lock, paused between its read and its write, for 300 ms while B's buyers begin, read and queue; then it writes and commits."
            }
            Scenario::MistakeReleaseBeforeCommit => {
                "Every request releases its Redis lock before its COMMIT. A request of A is paused for 300 ms between its release and its COMMIT (its write done, not visible), while B's buyers take the lock and read."
            }
            Scenario::MistakeSetnxThenExpire => {
                "Every request locks with SETNX, then EXPIRE. A request of A pauses between the two and A is killed with SIGKILL; the load goes on for 3x the lease."
            }
            Scenario::MistakeGetThenDel => {
                "Every request locks with SET NX PX and unlocks by GET, compare, DEL. A request of A pauses between its GET and its DEL until its lease ran out; a buyer of B takes the lock and pauses after its read; A's DEL goes ahead; 200 ms later B's paused buyer writes."
            }
            Scenario::MistakePersistentNode => {
                "Every request locks by creating a PERSISTENT node in a ZooKeeper session of its own. A request of A pauses holding it and A is killed with SIGKILL; the load goes on for 3x the session timeout."
            }
            Scenario::MistakeNoGuard => {
                "Every request runs UPDATE stock SET quantity = quantity - 1 with no quantity >= 1 guard, on a product with 200 units, until well after it sold out."
            }
            Scenario::RedisFailover => {
                "Both instances take their Redis locks on the primary that three Sentinels name (a primary, one replica). The replica's link is blackholed (replication held back); a request of A takes its lock (checked: not on the replica) and pauses between read and write; the primary is killed with SIGKILL; Sentinel promotes the replica; B's buyers follow and lock; A is let go."
            }
            Scenario::RedisFailoverWait => {
                "As above with --redis-lock-min-replicas 1: a lock is granted only once the replica acknowledged it (WAIT, 200 ms). The replica's link is blackholed (the fault starts), the primary killed after a lease, Sentinel promotes the replica, and the old primary is restarted (the heal) and rejoins as its replica when Sentinel next looks at it."
            }
            Scenario::RedlockClockJump => {
                "Instance A's links to RedLock nodes 4 and 5 are blackholed, so its locks are a majority of 3 (nodes 1-3). A request of A takes the lock (checked: not on nodes 4, 5) and pauses between read and write; node 3's wall clock jumps 30 s forward (an LD_PRELOAD shim moves what that redis-server reads, as an NTP step would), so A's key there expires at once; B's buyers get nodes 3, 4, 5; A is let go a lease later, and the clock is set back."
            }
            Scenario::ReplicaLag => {
                "A MariaDB replica follows the primary; both instances send their plain reads there (--read-replica-url: a compare-and-set's read of the version, the read under a lock). The replica's SQL thread is stopped for 3x the lease (it applies nothing: its reads show the stock as it was), then started again."
            }
            Scenario::ReplicaLagPrimaryReads => {
                "The same stopped replica, with both instances reading from the primary: what the strategy does without read/write splitting, under the same load."
            }
            Scenario::LockDelayShortPause => {
                "Both instances run with Chubby's lock-delay, --lock-delay-ms 2x the lease (the lock server keeps a lock lease + delay; the holder counts on the lease). A request on instance A pauses between its read and its write, then A is SIGSTOPped for 2x the lease: past its lease, within lease + delay; then continued. Unfenced."
            }
            Scenario::LockDelayLongPause => {
                "The same lock-delay, with A SIGSTOPped for 3x (lease + delay). Unfenced: what lock-delay cannot do."
            }
            Scenario::RedisClusterFailover => {
                "Both instances run on a Redis Cluster of their own (three masters, a replica each). The link of the replica of the master serving the cell's key is blackholed (replication held back). A lock: a request of A takes its lock (checked: not on the replica) and pauses between read and write; the master is killed with SIGKILL; the cluster promotes the replica; B's buyers lock; A is let go. A Redis counter that records later: A's persister is held before its COMMIT (B's waits behind it on the product's row lock), sales go on for a lease (acknowledged by the master alone), the master is killed and the replica promoted, the persisters let go. The old master is restarted and rejoins as a replica."
            }
            Scenario::RedisClusterFailoverWait => {
                "As above with --redis-lock-min-replicas 1 and --redis-stock-min-replicas 1: a lock is granted, and a sale answered, only once the replica has it (WAIT, 200 ms; a sale the replica did not confirm answers outcome_unknown, retried after the cell with its request_id). The link held back, a lease of load, the master killed, the replica promoted, the old master restarted as its replica."
            }
            Scenario::RedisClusterReshard => {
                "Both instances run on a Redis Cluster of their own. Under load, the slot of the cell's keys (the lock's, or the partition where the product is sold) is moved to another master as redis-cli --cluster reshard does: IMPORTING and MIGRATING set, its keys MIGRATEd ten at a time with 20 ms between batches, the slot given to the target."
            }
        }
    }
}

/// A fault cell's verdict, from the ledger and the clients' timeline: `safe`,
/// `refused` and `unavailable` lose nothing; `erased` (the stock row fell by less
/// than the ledger says) and `missing` (acknowledged sales the ledger has no row for)
/// name which record fell short. A cell with both is `missing`: a buyer was told
/// "sold" and nothing records it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr, VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum CellVerdict {
    /// No loss, no refusal, sales went on.
    Safe,
    /// No loss; some requests were refused (`503 lock_lost`).
    Refused,
    /// No loss; no sale at all while the fault lasted.
    Unavailable,
    /// Sales erased from the stock: the stock row fell by less than the ledger says
    /// (lost updates: a stale holder's write), and the units sold beyond the stock
    /// that follow from them (the row cannot go below zero, so a ledger past the stock
    /// means the row missed sales).
    Erased,
    /// Sales missing from the ledger: acknowledged sales it has no row for (a Redis
    /// counter that forgot them in a failover), or units that left the stock with no
    /// row (a deduction applied twice).
    Missing,
}

impl CellVerdict {
    /// Every verdict, from the best.
    pub const ALL: &'static [CellVerdict] = <CellVerdict as VariantArray>::VARIANTS;

    /// Its name as the strategies declare it, the report writes it and the tables show
    /// it.
    pub fn id(self) -> &'static str {
        self.into()
    }

    /// What it means, in a few words (the legends).
    pub fn meaning(self) -> &'static str {
        match self {
            CellVerdict::Safe => "no loss, sales went on",
            CellVerdict::Refused => "no loss, some requests answered lock_lost",
            CellVerdict::Unavailable => "no loss, no sale while the fault lasted",
            CellVerdict::Erased => "sales erased from the stock",
            CellVerdict::Missing => "sales missing from the ledger",
        }
    }

    /// Whether the ledger or the stock row is short of sales.
    pub fn is_loss(self) -> bool {
        match self {
            CellVerdict::Safe | CellVerdict::Refused | CellVerdict::Unavailable => false,
            CellVerdict::Erased | CellVerdict::Missing => true,
        }
    }

    /// The verdict of a name as the strategies declare it ([`CellVerdict::id`]).
    pub fn from_name(name: &str) -> Option<CellVerdict> {
        CellVerdict::ALL.iter().copied().find(|v| v.id() == name)
    }
}

/// One cell of the fault grid as a strategy declares it: a scenario of `loadtest
/// chaos`, with fencing on or off, and the verdicts it is expected to give.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChaosCell {
    /// The fault it injects.
    pub scenario: Scenario,
    /// `null`: the strategy has no fencing switch.
    pub fencing: Option<bool>,
    /// The verdicts that count as expected.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<CellVerdict>))]
    pub expect: Cow<'static, [CellVerdict]>,
    /// Run only with `loadtest chaos --all`.
    pub extra: bool,
}

impl ChaosCell {
    /// Expected to lose nothing: safe, refused or unavailable.
    pub const NO_LOSS: &'static [CellVerdict] = &[
        CellVerdict::Safe,
        CellVerdict::Refused,
        CellVerdict::Unavailable,
    ];

    pub const fn new(
        scenario: Scenario,
        fencing: Option<bool>,
        expect: &'static [CellVerdict],
    ) -> ChaosCell {
        ChaosCell::declared(scenario, fencing, expect, false)
    }

    /// A cell run only with `loadtest chaos --all`.
    pub const fn extra(
        scenario: Scenario,
        fencing: Option<bool>,
        expect: &'static [CellVerdict],
    ) -> ChaosCell {
        ChaosCell::declared(scenario, fencing, expect, true)
    }

    const fn declared(
        scenario: Scenario,
        fencing: Option<bool>,
        expect: &'static [CellVerdict],
        extra: bool,
    ) -> ChaosCell {
        ChaosCell {
            scenario,
            fencing,
            expect: Cow::Borrowed(expect),
            extra,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command line's id and the JSON's name are the same string.
    #[test]
    fn ids_are_the_json_names() {
        for &scenario in Scenario::ALL {
            let json = serde_json::to_value(scenario).unwrap();
            assert_eq!(json, scenario.id(), "{scenario:?}");
            assert_eq!(Scenario::from_id(scenario.id()), Some(scenario));
        }
        for &verdict in CellVerdict::ALL {
            let json = serde_json::to_value(verdict).unwrap();
            assert_eq!(json, verdict.id(), "{verdict:?}");
            assert_eq!(CellVerdict::from_name(verdict.id()), Some(verdict));
        }
        assert_eq!(CellVerdict::from_name("lost"), None, "one name per thing");
    }

    /// A cell read back from JSON is the cell that was written.
    #[test]
    fn a_cell_travels_unchanged() {
        let cell = ChaosCell::extra(Scenario::HolderKilled, Some(true), ChaosCell::NO_LOSS);
        let json = serde_json::to_string(&cell).unwrap();
        assert_eq!(serde_json::from_str::<ChaosCell>(&json).unwrap(), cell);
    }
}
