//! An etcd lock: a key per waiter under the lock's prefix, attached to a lease; each
//! waiter watches only the key created just before its own. The fencing token is the
//! key's **create revision**, which etcd's consensus makes increase across every
//! holder, leader changes included (what Jepsen's etcd 3.4.3 analysis recommends).
//!
//! # Copying this file
//! Take `src/lock.rs` (the core) and this file into your crate, with `mod lock; mod
//! etcd;` at its root, and the crates `copies.toml` lists under `[backend.etcd]` (the
//! client's build runs protoc: Debian's protobuf-compiler). `./scripts/copy-check etcd
//! DIR` builds such a copy and runs it on a real server. Example: `cargo run -p locks
//! --example etcd`.
//!
//! # Algorithm
//! The lock for key `stock/42` is the key range `<prefix>stock/42/`.
//! 1. Grant a lease of the lock's lease (whole seconds, rounded up; etcd may round a
//!    very short one up further, never down).
//! 2. Put `<prefix>stock/42/<lease id>` = the holder, attached to the lease, only if it
//!    does not exist (one transaction). Its create revision is our place in the queue
//!    and our fencing token.
//! 3. Read the newest key of the range created before ours (`max_create_revision`,
//!    one key). None: we hold the lock.
//! 4. Otherwise watch **only that key**, from the revision we read it at, and wait for
//!    its delete; then back to 3 (the one before it may have given up, not released).
//!    One waiter woken per release: no herd. A wait that runs out revokes our lease,
//!    which deletes our key, so the queue moves on.
//! 5. Renew: one keep-alive of the lease, and a read that our key is still there.
//! 6. Release: revoke the lease (its key goes with it). Reentrancy is counted per
//!    holder in this process; only the last release revokes.
//!
//! Why not etcd's own Lock RPC (`v3lock`, used by `etcd-client`'s `lock`)? It is this
//! same recipe run inside the server, but it blocks until the lock is free with no
//! bound of its own, and a cancelled call leaves the key queued until its lease ends.
//! Here the wait is ours to bound and to clean up, as for every other backend.
//!
//! # How it fails
//! - **A holder paused past its lease** (GC, SIGSTOP): etcd expires the lease, deletes
//!   the key, and the next waiter holds the lock while the first still believes it
//!   does. Jepsen found exactly this ("multiple processes can hold an etcd lock
//!   concurrently"), and etcd's docs say its locks "cannot be used as mutual exclusion
//!   mechanism by themselves". Fence writes with the revision; the chaos runner shows
//!   both sides.
//! - **Unreachable** (partition, every member down): keep-alives fail; the watchdog
//!   signals the loss when the lease would have ended on our clock, before etcd (whose
//!   lease is at least as long) can grant it to another.
//! - **A leader change**: requests fail or wait for the election; leases survive it
//!   (etcd extends them by the election time), and revisions keep increasing.
//! - **A lost put answer**: the key may exist. It is found again by its name (the
//!   lease id), and otherwise goes with the lease, which the failed acquire revokes.

use crate::lock::{Acquired, BackendKind, HolderId, LockBackend, LockError};
use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions, SortOrder,
    SortTarget, Txn, TxnOp, WatchOptions,
};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

fn backend(e: etcd_client::Error) -> LockError {
    use etcd_client::Error::{GRpcStatus, IoError, TransportError};
    let kind = match &e {
        // gRPC's DEADLINE_EXCEEDED and UNAVAILABLE (a member down, no leader yet).
        GRpcStatus(s) if i32::from(s.code()) == 4 => BackendKind::Timeout,
        GRpcStatus(s) if i32::from(s.code()) == 14 => BackendKind::Unreachable,
        TransportError(_) | IoError(_) => BackendKind::Unreachable,
        _ => BackendKind::Failed,
    };
    LockError::Backend("etcd", kind, e.into())
}

fn failed(message: &'static str) -> LockError {
    LockError::Backend("etcd", BackendKind::Failed, message.into())
}

/// How long a call is retried while etcd is unavailable, and how long one attempt may take.
const RETRY_FOR: Duration = Duration::from_secs(3);
const ATTEMPT: Duration = Duration::from_secs(1);

/// Runs `call` again while etcd answers Unavailable (gRPC code 14) or not at all
/// within [`ATTEMPT`]: the client balances over every endpoint and still picks a
/// member that is down (refused at once), the cluster answers so while it elects a
/// leader, and a write in flight to a leader that died waits for etcd's request
/// timeout (7 s). Measured with a three-member cluster's leader killed: without this,
/// almost every acquisition failed until the member came back. Every call retried
/// here is safe to repeat (a grant, the create-if-absent, reads, a watch, a
/// keep-alive, a revoke).
async fn retried<T, Fut>(client: &Client, call: impl Fn(Client) -> Fut) -> Result<T, LockError>
where
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let deadline = Instant::now() + RETRY_FOR;
    loop {
        let unavailable = match tokio::time::timeout(ATTEMPT, call(client.clone())).await {
            Ok(Err(etcd_client::Error::GRpcStatus(status))) if i32::from(status.code()) == 14 => {
                LockError::Backend("etcd", BackendKind::Unreachable, status.into())
            }
            Ok(other) => return other.map_err(backend),
            Err(_) => {
                let silent = format!("no answer within {ATTEMPT:?}");
                LockError::Backend("etcd", BackendKind::Timeout, silent.into())
            }
        };
        if Instant::now() >= deadline {
            return Err(unavailable);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A lock key we hold: its lease, full key, create revision, and how many times its
/// holder entered.
struct Held {
    lease: i64,
    key: String,
    revision: i64,
    count: u32,
}

/// The etcd lock, on one client (it balances over the endpoints).
pub struct EtcdLock {
    client: Client,
    prefix: String,
    /// Locks held through this process, by (key, holder).
    held: Mutex<HashMap<(String, String), Held>>,
}

impl EtcdLock {
    /// Connects to `endpoints` (`http://host:port`, several for a cluster), failing at
    /// once if none answers. Lock keys live under `prefix` (e.g. `/stock-locks/`).
    pub async fn connect(endpoints: &[String], prefix: &str) -> Result<EtcdLock, LockError> {
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2));
        let client = Client::connect(endpoints, Some(options))
            .await
            .map_err(backend)?;
        let mut probe = client.clone();
        probe.status().await.map_err(backend)?;
        Ok(EtcdLock {
            client,
            prefix: prefix.to_string(),
            held: Mutex::default(),
        })
    }

    fn held(&self, key: &str, holder: &HolderId) -> Option<(i64, String, i64)> {
        let held = self.held.lock().expect("held poisoned");
        let h = held.get(&(key.to_string(), holder.to_string()))?;
        Some((h.lease, h.key.clone(), h.revision))
    }
}

#[async_trait]
impl LockBackend for EtcdLock {
    fn name(&self) -> &'static str {
        "etcd"
    }

    // ANCHOR: acquire
    /// Steps 1-4: queue, and wait for our turn at most `wait`.
    ///
    /// # Errors
    /// [`LockError::Backend`]: etcd failed or could not be reached, or our key vanished
    /// while we waited (the lease expired: we were paused or cut off past it).
    ///
    /// # Cancellation safety
    /// Dropped while queued, our key stays in the queue until its lease ends (no
    /// keep-alive renews it), blocking later waiters for at most the lease. Dropped
    /// after we reached the head but before the guard exists, the same: the lock is
    /// ours until the lease runs out, with nobody to release it.
    async fn acquire(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
        wait: Duration,
    ) -> Result<Option<Acquired>, LockError> {
        let entry = (key.to_string(), holder.to_string());
        if let Some(held) = self.held.lock().expect("held poisoned").get_mut(&entry) {
            held.count += 1; // re-entered: same key, same token
            let (token, since) = (Some(held.revision as u64), Instant::now());
            return Ok(Some(Acquired { token, since }));
        }
        let deadline = Instant::now() + wait;
        let mut client = self.client.clone();
        // Step 1. The lease counts from before its grant, then from before each
        // keep-alive sent while we wait.
        let since = Instant::now();
        let ttl = lease.as_secs_f64().ceil().max(1.0) as i64;
        let grant = retried(
            &client,
            |mut c| async move { c.lease_grant(ttl, None).await },
        );
        let id = grant.await?.id();
        let mut granted = Lease { id, lease, since };
        let queued = queue(
            &mut client,
            &self.prefix,
            key,
            holder,
            deadline,
            &mut granted,
        )
        .await;
        let since = granted.since;
        match queued {
            Ok(Some((full, revision))) => {
                let held = Held {
                    lease: id,
                    key: full,
                    revision,
                    count: 1,
                };
                self.held.lock().expect("held poisoned").insert(entry, held);
                let token = Some(revision as u64);
                Ok(Some(Acquired { token, since }))
            }
            // Gave up, or failed: the lease takes our key with it.
            other => {
                let _ = retried(&client, |mut c| async move { c.lease_revoke(id).await }).await;
                other.map(|_| None)
            }
        }
    }
    // ANCHOR_END: acquire

    /// Step 5: `Some(since)` while the lease lives and our key is still ours.
    async fn renew(
        &self,
        key: &str,
        holder: &HolderId,
        _lease: Duration,
    ) -> Result<Option<Instant>, LockError> {
        let Some((lease, full, revision)) = self.held(key, holder) else {
            return Ok(None);
        };
        let (mut client, since) = (self.client.clone(), Instant::now());
        if !keep_alive(&mut client, lease).await? {
            return Ok(None); // the lease expired: etcd deleted our key
        }
        let ours = retried(&client, |mut c| {
            let full = full.clone();
            async move { c.get(full, None).await }
        });
        let ours = ours.await?;
        let still = ours.kvs().first().map(|kv| kv.create_revision()) == Some(revision);
        Ok(still.then_some(since))
    }

    /// Step 6.
    ///
    /// # Errors
    /// [`LockError::NotHolder`] when `holder` does not hold it (or the lease was gone:
    /// it expired); [`LockError::Backend`] when etcd could not be told (the key then
    /// goes with its lease, which nobody renews any more).
    async fn unlock(&self, key: &str, holder: &HolderId) -> Result<(), LockError> {
        let entry = (key.to_string(), holder.to_string());
        let lease = {
            let mut held = self.held.lock().expect("held poisoned");
            let Some(h) = held.get_mut(&entry) else {
                return Err(LockError::not_holder(key, holder));
            };
            h.count -= 1;
            if h.count > 0 {
                return Ok(());
            }
            held.remove(&entry).expect("present").lease
        };
        let revoke = retried(
            &self.client,
            |mut c| async move { c.lease_revoke(lease).await },
        );
        match revoke.await {
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("lease not found") => {
                Err(LockError::not_holder(key, holder))
            }
            Err(e) => Err(e),
        }
    }
}

/// A lease granted for one acquisition, and the instant it counts from on our clock.
struct Lease {
    id: i64,
    lease: Duration,
    since: Instant,
}

/// Steps 2-4 under `granted`: our key and its create revision once it heads the queue;
/// `None` when `deadline` passed first. Keeps the lease alive while it waits, moving
/// `since` to before each keep-alive.
async fn queue(
    client: &mut Client,
    prefix: &str,
    key: &str,
    holder: &HolderId,
    deadline: Instant,
    granted: &mut Lease,
) -> Result<Option<(String, i64)>, LockError> {
    let (id, lease) = (granted.id, granted.lease);
    let range = format!("{prefix}{key}/");
    let ours = format!("{range}{id:x}");
    // Step 2: create it if it is not there (a retried put after a lost answer finds
    // its own key), then read its create revision either way.
    let create = Txn::new()
        .when([Compare::create_revision(ours.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            ours.clone(),
            holder.as_str(),
            Some(PutOptions::new().with_lease(id)),
        )])
        .or_else([TxnOp::get(ours.clone(), None)]);
    let created = retried(client, |mut c| {
        let create = create.clone();
        async move { c.txn(create).await }
    });
    let created = created.await?;
    let revision = if created.succeeded() {
        created.header().map(|h| h.revision()).unwrap_or_default()
    } else {
        let found = retried(client, |mut c| {
            let ours = ours.clone();
            async move { c.get(ours, None).await }
        });
        let found = found.await?;
        let kv = found
            .kvs()
            .first()
            .ok_or_else(|| failed("our key vanished"))?;
        kv.create_revision()
    };
    let mut waited = false;
    loop {
        // Step 3: the newest key created before ours.
        let before = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(revision - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
            .with_keys_only();
        let read = retried(client, |mut c| {
            let (range, before) = (range.clone(), before.clone());
            async move { c.get(range, Some(before)).await }
        });
        let read = read.await?;
        let Some(predecessor) = read.kvs().first() else {
            // After a wait: still queued ourselves? (A lease that ran out took our key.)
            if waited {
                let mine = retried(client, |mut c| {
                    let ours = ours.clone();
                    async move { c.get(ours, None).await }
                });
                if mine.await?.count() == 0 {
                    let vanished = "our lock key vanished while we waited (lease expired)";
                    return Err(failed(vanished));
                }
            }
            return Ok(Some((ours, revision)));
        };
        waited = true;
        // Step 4: watch it from the revision we read at; a delete since then is seen.
        let at = read.header().map(|h| h.revision()).unwrap_or_default();
        let watched = predecessor.key().to_vec();
        let options = WatchOptions::new().with_start_revision(at + 1);
        let watch = retried(client, |mut c| {
            let (watched, options) = (watched.clone(), options.clone());
            async move { c.watch(watched, Some(options)).await }
        });
        let mut events = watch.await?;
        // Wake at least every third of the lease: keep our own lease alive while we
        // wait (nobody else renews it yet), and look again in case a watch was lost.
        let recheck = (Instant::now() + lease / 3).min(deadline);
        let deleted = async {
            while let Ok(Some(answer)) = events.message().await {
                if answer
                    .events()
                    .iter()
                    .any(|e| e.event_type() == EventType::Delete)
                {
                    return;
                }
                if answer.canceled() {
                    return;
                }
            }
        };
        let woken = tokio::time::timeout_at(recheck, deleted).await;
        drop(events); // the server cancels the watch with its stream
        if woken.is_err() && Instant::now() >= deadline {
            return Ok(None);
        }
        if granted.since.elapsed() >= lease / 3 {
            let sent = Instant::now();
            if keep_alive(client, id).await? {
                granted.since = sent;
            }
        }
    }
}

/// One keep-alive of lease `id`: whether it still lives.
async fn keep_alive(client: &mut Client, id: i64) -> Result<bool, LockError> {
    let (mut keeper, mut answers) =
        retried(client, |mut c| async move { c.lease_keep_alive(id).await }).await?;
    keeper.keep_alive().await.map_err(backend)?;
    let answer = answers.message().await.map_err(backend)?;
    Ok(answer.is_some_and(|a| a.ttl() > 0))
}
