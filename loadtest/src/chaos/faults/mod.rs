//! The faults, one file each: how the fault is made (`Lab::inject_...`), why its cells
//! came out as they did (`why_...`), and the claim of the write-ups its cells speak to
//! (`claim_...`), where there is one.
//!
//! The dispatchers stay where they were: `Lab::inject` (`lab.rs`), `why`
//! (`judge.rs`, whose order of arms matters) and `ChaosReport::claim_of` (`mod.rs`)
//! match on the scenario and call in here. What several faults share stays there too:
//! the lab's hooks, proxies and ledger reads, the setup a scenario needs before its
//! cell (`Lab::run_cell`), the freeze's length (`Timing::freeze`), and `fmt_ms`.
//!
//! Scenarios that share one injection share one file (and so does the one fault with
//! two injections, the Redis failover):
//!
//! - [`pause_past_lease`]: 1 `PausePastLease`, 2 `FenceAlone`, 14 `LockDelayShortPause`
//!   and `LockDelayLongPause` (one injection, the freeze; its length is the cell's).
//! - [`holder_killed`]: 3 `HolderKilled`.
//! - [`redis_restart`]: 4 `RedisRestart`.
//! - [`redlock_paused`]: 5 `RedlockMinorityPaused` and `RedlockMajorityPaused` (one
//!   injection).
//! - [`zk_leader_killed`]: 6 `ZkLeaderKilled`.
//! - [`etcd_leader_killed`]: 6 `EtcdLeaderKilled`.
//! - [`lock_partition`]: 7 `LockPartition`.
//! - [`ambiguous_commit`]: 8 `AmbiguousCommit`.
//! - [`redis_killed`]: 9 `RedisKilledEverySec`, `RedisKilledAlways` and
//!   `RedisKilledNoPersistence` (one injection).
//! - [`mistake_lock_scope`]: 10 `MistakeLockInsideTransaction` and
//!   `MistakeReleaseBeforeCommit` (one injection).
//! - [`mistake_holder_killed`]: 10 `MistakeSetnxThenExpire` and `MistakePersistentNode`
//!   (one injection).
//! - [`mistake_get_then_del`]: 10 `MistakeGetThenDel`.
//! - [`mistake_no_guard`]: 10 `MistakeNoGuard`.
//! - [`redis_failover`]: 11 `RedisFailover` and `RedisFailoverWait` (two injections of
//!   one failover, and the helpers they share).
//! - [`redlock_clock_jump`]: 12 `RedlockClockJump`.
//! - [`replica_lag`]: 13 `ReplicaLag` and `ReplicaLagPrimaryReads` (one injection).
//! - [`redis_cluster_failover`]: 15 `RedisClusterFailover` and
//!   `RedisClusterFailoverWait` (one injection).
//! - [`redis_cluster_reshard`]: 15 `RedisClusterReshard`.

pub(in crate::chaos) mod ambiguous_commit;
pub(in crate::chaos) mod etcd_leader_killed;
pub(in crate::chaos) mod holder_killed;
pub(in crate::chaos) mod lock_partition;
pub(in crate::chaos) mod mistake_get_then_del;
pub(in crate::chaos) mod mistake_holder_killed;
pub(in crate::chaos) mod mistake_lock_scope;
pub(in crate::chaos) mod mistake_no_guard;
pub(in crate::chaos) mod pause_past_lease;
pub(in crate::chaos) mod redis_cluster_failover;
pub(in crate::chaos) mod redis_cluster_reshard;
pub(in crate::chaos) mod redis_failover;
pub(in crate::chaos) mod redis_killed;
pub(in crate::chaos) mod redis_restart;
pub(in crate::chaos) mod redlock_clock_jump;
pub(in crate::chaos) mod redlock_paused;
pub(in crate::chaos) mod replica_lag;
pub(in crate::chaos) mod zk_leader_killed;
