//! RedLock: one lock over N independent Redis masters (5 by default), held while a
//! majority agrees.
//!
//! # Copying this file
//! Take `src/lock.rs` (the core), this file and its scripts (`lua/simple_unlock.lua`,
//! `lua/simple_renew.lua`) into your crate, with `mod lock; mod redlock;` at its root,
//! and the crates `copies.toml` lists under `[backend.redlock]`. `./scripts/copy-check
//! redlock DIR` builds such a copy and runs it on real servers. Example: `cargo run -p
//! locks --example redlock`.
//!
//! # Algorithm (antirez, "Distributed locks with Redis")
//! 1. Note the time on a monotonic clock, *before* the first request.
//! 2. On **all** N nodes **concurrently**: `SET key value NX PX lease`, each with a
//!    per-node timeout much smaller than the lease (default 50 ms), so a dead or
//!    paused node costs one timeout, not one lease. `value` is random, fresh for each
//!    acquisition: release and extension compare against it. The attempt is decided
//!    as soon as a majority said yes (or a majority became impossible); slower nodes
//!    still get the command in the background.
//! 3. Acquired only if a **majority** (N/2 + 1) said OK **and** the lock is still
//!    valid: `validity = lease − elapsed − drift > 0`, with `drift = 1% of lease +
//!    2 ms` for the clocks of the servers running at slightly different rates.
//! 4. Otherwise: release on **every** node (also the ones that did not answer: their
//!    SET may have landed after the timeout), and retry after a random delay
//!    ([`RedLock::acquire`]), so that competing clients do not split the nodes again.
//!    Each node's delete must reach it *after* that node's SET, or the key outlives
//!    the attempt by a whole lease: see [`RedLock::attempt`] for how, and why.
//! 5. Extend (the watchdog, every lease/3): compare-and-`PEXPIRE` on all nodes; held
//!    only if a majority extended it in time. A majority answering "not yours" ends
//!    the lock.
//! 6. Release: compare-and-delete on every node (again after that node's SET).
//!
//! Not enough nodes answering at all is an error that says so ("only 2 of 5 nodes
//! answered"), not a plain "busy": the lock service is unavailable.
//!
//! # No fencing token
//! A monotonic token would need the nodes to agree on a counter, which is exactly the
//! consensus RedLock avoids; `INCR` on each node gives N unrelated counters. Martin
//! Kleppmann ("How to do distributed locking", 2016): without a token, a holder
//! paused past its validity can still write after another holder acquired, and
//! nothing can tell the two writes apart. antirez's answer: the random value can act
//! as a check-and-set tag: the resource remembers the value of the last holder that
//! claimed it and accepts writes only from that value. stock-locks does exactly that
//! (`stock_fence.owner`, DESIGN "Fencing"): safe, but it cannot order holders, so a
//! stale holder that claims late takes over from a live one instead of being refused.
//!
//! # How it fails
//! - **Pause past the validity** (GC, SIGSTOP): as for any lease lock; fence the writes.
//! - **A node restarted without persistence** while the lock is held: with 5 nodes, A
//!   holds 3; one of A's nodes restarts empty; B now gets 3 of 5 (the 2 A never had
//!   and the empty one) and **both hold the lock**. The test
//!   `redlock::restart_empty_lets_a_second_holder_in` shows it. Remedies: persistence
//!   with `appendfsync always`, or keep a restarted node out for longer than the
//!   longest lease ("delayed restarts").
//! - **Clock jumps** on a server (an NTP step, an admin) expire its keys early or late:
//!   the validity computation assumes clocks that *run* at about the same rate, and a
//!   jump on a node of a bare majority breaks mutual exclusion (Kleppmann's scenario:
//!   A holds nodes 1-3, node 3's clock jumps forward, B gets nodes 3-5). Monotonic
//!   clocks on the holders do not help with the servers' clocks. The chaos scenario
//!   `redlock-clock-jump` makes it happen against real `redis-server`s (node 3's wall
//!   clock moved 30 s by an `LD_PRELOAD` shim): unfenced, an update lost; fenced by
//!   owner tag, refused there only because it had claimed before B did (see above).
//! - Every operation costs N round trips in parallel: latency is the slowest node of
//!   the majority. `./scripts/chaos` shows these faults in the service under load.

use crate::lock::{Acquired, BackendKind, HolderId, LockBackend, LockError};
use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::Script;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

static UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/simple_unlock.lua")));
static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/simple_renew.lua")));

/// A held lock's random value, and the node tasks of the attempt that won it.
type Held = (String, Vec<JoinHandle<()>>);

/// RedLock over independent Redis masters.
pub struct RedLock {
    nodes: Vec<ConnectionManager>,
    node_timeout: Duration,
    /// Each lock we hold, by (key, holder): its random value (what extension and
    /// release compare against; one per acquisition, so a failed attempt's undo can
    /// never delete a lock the same holder already has) and the winning attempt's node
    /// tasks, which a node's release waits for (see [`RedLock::attempt`]).
    held: Mutex<HashMap<(String, String), Held>>,
}

fn backend(e: redis::RedisError) -> LockError {
    LockError::Backend("redlock", BackendKind::Failed, e.into())
}

/// Too few nodes: `why`.
fn short(kind: BackendKind, why: String) -> LockError {
    LockError::Backend("redlock", kind, why.into())
}

impl RedLock {
    /// One lazily connected client per node: nodes that are down now are simply
    /// counted out of each quorum. At least 3 nodes (5 recommended, an odd number).
    pub fn new(urls: &[String]) -> Result<RedLock, LockError> {
        if urls.len() < 3 {
            return Err(LockError::Invalid(format!(
                "RedLock needs at least 3 independent Redis nodes (5 recommended), got {}",
                urls.len()
            )));
        }
        let nodes = urls
            .iter()
            .map(|url| {
                let client = redis::Client::open(url.as_str()).map_err(backend)?;
                // No response timeout of the client's own: every call is bounded by
                // the node timeout here, which the caller chooses.
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(1)))
                    .set_response_timeout(None)
                    .set_number_of_retries(1);
                ConnectionManager::new_lazy_with_config(client, config).map_err(backend)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RedLock {
            nodes,
            node_timeout: Duration::from_millis(50),
            held: Mutex::new(HashMap::new()),
        })
    }

    /// How long one node may take to answer before it is counted out (default 50 ms).
    pub fn with_node_timeout(mut self, timeout: Duration) -> RedLock {
        self.node_timeout = timeout;
        self
    }

    /// Where a lease begun at `started` (our clock) counts from, if still valid:
    /// `lease − elapsed − drift > 0`, drift = 1% of the lease + 2 ms for the servers'
    /// clocks running at slightly different rates; it counts from `started − drift`.
    fn valid_since(started: Instant, lease: Duration) -> Option<Instant> {
        let drift = lease / 100 + Duration::from_millis(2);
        (lease > started.elapsed() + drift).then(|| started.checked_sub(drift).unwrap_or(started))
    }

    /// Nodes needed: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Runs one script per node (in node order) at once, each bounded by the node
    /// timeout, until a majority answered 1 or too many did not for a majority to be
    /// possible; the calls still under way go on in the background. Returns (nodes
    /// that answered 1, nodes that answered at all).
    async fn on_all(
        &self,
        calls: impl Iterator<Item = impl Future<Output = redis::RedisResult<i64>> + Send + 'static>,
    ) -> (usize, usize) {
        let timeout = self.node_timeout;
        let mut calls: FuturesUnordered<_> = calls
            .map(|call| tokio::spawn(tokio::time::timeout(timeout, call)))
            .collect();
        let (n, quorum) = (self.nodes.len(), self.quorum());
        let (mut heard, mut answered, mut yes) = (0, 0, 0);
        while let Some(answer) = calls.next().await {
            let answer = answer.ok().and_then(Result::ok).and_then(Result::ok);
            (heard, answered) = (heard + 1, answered + usize::from(answer.is_some()));
            yes += usize::from(answer == Some(1));
            if yes >= quorum || heard - yes > n - quorum {
                break;
            }
        }
        (yes, answered)
    }

    fn value_of(&self, key: &str, holder: &HolderId) -> Option<String> {
        let held = self.held.lock().expect("redlock locks poisoned");
        held.get(&(key.to_string(), holder.to_string()))
            .map(|(value, _)| value.clone())
    }

    /// One attempt on all nodes: `Some(since)` when a majority granted it in time.
    ///
    /// Each node's task sets the key, reports, waits for the verdict and, unless the
    /// attempt won, undoes its own SET: *after* it, on the same connection. A separate
    /// clean-up task could overtake a SET still unsent (tokio runs the newest task
    /// first) and leave the key for a whole lease; under load such leaks piled up on
    /// a majority of nodes and starved every contender (0 acquisitions in 5 s).
    async fn attempt(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
    ) -> Result<Option<Instant>, LockError> {
        // A fresh random value per attempt: the undo of a failed attempt deletes only
        // what this attempt set, never a lock the same holder already has.
        let value = format!("{holder}:{}", uuid::Uuid::new_v4().simple());
        let ms = (lease.as_millis() as u64).max(1);
        let (n, quorum, timeout) = (self.nodes.len(), self.quorum(), self.node_timeout);
        // `Some(true)`: won, keep the keys. `Some(false)`, or the attempt dropped before
        // a verdict (the sender gone): undo.
        let (verdict, decided) = watch::channel(None::<bool>);
        let (report, mut answers) = mpsc::unbounded_channel::<Option<bool>>();
        let started = Instant::now();
        let sets: Vec<_> = self
            .nodes
            .iter()
            .map(|node| {
                let (mut conn, key, value) = (node.clone(), key.to_string(), value.clone());
                let (report, mut decided) = (report.clone(), decided.clone());
                tokio::spawn(async move {
                    let mut set = redis::cmd("SET");
                    set.arg(&key).arg(&value).arg("NX").arg("PX").arg(ms);
                    let set = set.query_async::<Option<String>>(&mut conn);
                    let answer = tokio::time::timeout(timeout, set)
                        .await
                        .ok()
                        .and_then(Result::ok);
                    let _ = report.send(answer.as_ref().map(Option::is_some));
                    drop(report);
                    let won = decided.wait_for(Option::is_some).await;
                    if !won.is_ok_and(|v| *v == Some(true)) && !matches!(answer, Some(None)) {
                        let mut undo = UNLOCK.key(key);
                        let undo = undo.arg(value).invoke_async::<i64>(&mut conn);
                        let _ = tokio::time::timeout(timeout, undo).await;
                    }
                })
            })
            .collect();
        drop(report);
        // ANCHOR: majority
        // Decided once a majority said yes, or too many said no (or nothing) for a
        // majority to be possible; slower nodes still get the command.
        let (mut heard, mut answered, mut acquired) = (0, 0, 0);
        while let Some(answer) = answers.recv().await {
            (heard, answered) = (heard + 1, answered + usize::from(answer.is_some()));
            acquired += usize::from(answer == Some(true));
            if acquired >= quorum || heard - acquired > n - quorum {
                break;
            }
        }
        let elapsed = started.elapsed();
        if acquired >= quorum
            && let Some(since) = RedLock::valid_since(started, lease)
        {
            verdict.send_replace(Some(true));
            let mut held = self.held.lock().expect("redlock locks poisoned");
            held.insert((key.to_string(), holder.to_string()), (value, sets));
            return Ok(Some(since));
        }
        // ANCHOR_END: majority
        // Not ours: every node undoes its SET (the silent ones too: theirs may land
        // late). Wait for a majority of them only, so the retry's SETs come after most
        // of the undos without waiting for a frozen node.
        verdict.send_replace(Some(false));
        let mut nodes: FuturesUnordered<_> = sets.into_iter().collect();
        let mut finished = 0;
        while finished < quorum && nodes.next().await.is_some() {
            finished += 1;
        }
        if answered < quorum && acquired < quorum {
            return Err(short(
                BackendKind::Unreachable,
                format!(
                    "quorum unreachable: only {answered} of {n} nodes answered within {timeout:?} (need {quorum})"
                ),
            ));
        }
        if acquired >= quorum {
            return Err(short(
                BackendKind::Timeout,
                format!(
                    "acquired on {acquired} of {n} nodes but only after {elapsed:?}, past the lease of {lease:?} \
                 minus drift; released everywhere"
                ),
            ));
        }
        Ok(None)
    }
}

#[async_trait]
impl LockBackend for RedLock {
    fn name(&self) -> &'static str {
        "redlock"
    }

    /// Attempts on all nodes until a majority grants it in time or `wait` is over,
    /// a random 1-20 ms apart (so competing clients do not retry in lock-step).
    ///
    /// # Errors
    /// [`LockError::Backend`]: fewer than a majority of nodes answered within the
    /// node timeout ("quorum unreachable"), or the majority came too late for the lease.
    ///
    /// # Cancellation safety
    /// The per-node `SET`s run as tasks of their own: dropped mid-attempt (before
    /// the verdict), each node's task undoes its own `SET`, so nothing is left.
    async fn acquire(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
        wait: Duration,
    ) -> Result<Option<Acquired>, LockError> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(since) = self.attempt(key, holder, lease).await? {
                return Ok(Some(Acquired { token: None, since }));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let pause = Duration::from_micros(rand::random_range(1_000..=20_000));
            tokio::time::sleep(pause.min(deadline - now)).await;
        }
    }

    async fn renew(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
    ) -> Result<Option<Instant>, LockError> {
        let Some(value) = self.value_of(key, holder) else {
            return Ok(None);
        };
        let ms = (lease.as_millis() as u64).max(1);
        let (n, quorum) = (self.nodes.len(), self.quorum());
        let started = Instant::now();
        let extend = self.nodes.iter().map(|node| {
            let (mut conn, mut extend) = (node.clone(), EXTEND.key(key));
            extend.arg(&value).arg(ms);
            async move { extend.invoke_async::<i64>(&mut conn).await }
        });
        let (extended, answered) = self.on_all(extend).await;
        if extended >= quorum
            && let Some(since) = RedLock::valid_since(started, lease)
        {
            Ok(Some(since))
        } else if answered - extended > n - quorum {
            // A majority says it is not ours any more: the lock has ended.
            Ok(None)
        } else {
            Err(short(
                BackendKind::Unreachable,
                format!("extension reached only {extended} of {n} nodes"),
            ))
        }
    }

    /// # Errors
    /// [`LockError::NotHolder`] unless a majority still had our value;
    /// [`LockError::Backend`] when too few nodes answered (the lease ends the rest).
    async fn unlock(&self, key: &str, holder: &HolderId) -> Result<(), LockError> {
        let held = self
            .held
            .lock()
            .expect("redlock locks poisoned")
            .remove(&(key.to_string(), holder.to_string()));
        let Some((value, sets)) = held else {
            return Err(LockError::not_holder(key, holder));
        };
        // Each node's delete goes after that node's SET of the winning attempt (still
        // under way on a slow node, or its delete could overtake it and leave the key).
        // Released only if a majority still had our value; a minority of leftovers
        // (keys that had not expired yet on slower clocks) means the lock had ended.
        let (n, quorum) = (self.nodes.len(), self.quorum());
        let release = self.nodes.iter().zip(sets).map(|(node, set)| {
            let (mut conn, mut release) = (node.clone(), UNLOCK.key(key));
            release.arg(&value);
            async move {
                let _ = set.await;
                release.invoke_async::<i64>(&mut conn).await
            }
        });
        let (deleted, answered) = self.on_all(release).await;
        if deleted >= quorum {
            Ok(())
        } else if answered - deleted > n - quorum {
            Err(LockError::not_holder(key, holder))
        } else {
            Err(short(
                BackendKind::Unreachable,
                format!("release reached only {answered} of {n} nodes ({deleted} still ours)"),
            ))
        }
    }
}
