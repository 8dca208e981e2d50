//! A ZooKeeper lock: ephemeral sequential nodes, each waiter watching only its
//! predecessor. Names its nodes as Apache Curator's `InterProcessMutex` does, so a Java
//! service using Curator and a Rust service using this file exclude each other.
//!
//! Written on `zookeeper-client`'s primitives (create, list, watch); that crate's own
//! `Client::lock` is the peer the benches compare against, not this implementation.
//!
//! # Algorithm
//! The lock for key `stock/42` lives under the persistent parent
//! `<root>/stock/42` (root `/stock-locks` in the service; parents are created on
//! first use and never deleted).
//! 1. Create an `EPHEMERAL_SEQUENTIAL` child `_c_<uuid>-lock-`; ZooKeeper appends a
//!    10-digit sequence number. The node lives as long as our session.
//! 2. List the children; order the `-lock-` ones by sequence number. Ours is the
//!    lowest: we hold the lock.
//! 3. Otherwise watch **only the node just before ours** (`exists` with a watch) and
//!    wait. When it goes, go back to 2 (re-check: a predecessor can vanish because it
//!    gave up, not because the lock was released). Also go back to 2 every quarter
//!    of the session timeout: a watch can be lost when the client fails over to another
//!    server (seen here with the leader killed mid-queue). Watching the predecessor instead
//!    of the parent means a release wakes exactly one waiter: no herd.
//! 4. Release: delete our node. Reentrancy is counted per holder in this process;
//!    only the last release deletes the node.
//!
//! Fencing token: the node's **czxid**, the id of the transaction that created it:
//! global and increasing across the whole ensemble. (The sequence number is not: it
//! counts per parent and restarts if the parent is re-created, as Curator's container
//! parents are.)
//!
//! # Failure handling
//! - **ConnectionLoss during create**: the node may or may not exist. It is found
//!   again by its `_c_<uuid>` prefix (why Curator puts a UUID in the name), so no
//!   orphan node blocks the lock forever.
//! - **Cancellation**: dropping an acquisition mid-wait or mid-create deletes our node
//!   in the background (found by prefix if the create's answer never came).
//! - **Session expiry**: ZooKeeper deletes our ephemeral node; another waiter gets the
//!   lock. The holder's check (every lease/3 by the shared watchdog) finds the node gone
//!   or the session expired and fires the lost-lock signal.
//! - **Disconnected**: while the client cannot reach the ensemble it cannot know
//!   whether its session still lives. The holder counts the lock as lost once it has
//!   gone a safety margin (the lock's lease, shorter than the session timeout) without
//!   a successful check, before the server would expire the session.
//!
//! # Guarantees and limits
//! ZooKeeper orders every create and delete through its quorum (ZAB): two clients can
//! never both see their node as the lowest. What it cannot do is stop a holder that
//! pauses longer than its session timeout: the session expires, the node goes, another
//! client holds the lock, and the paused one wakes up still believing it holds it.
//! Fence writes with the czxid.
//!
//! # Under faults
//! `./scripts/chaos` runs this lock in the `stock-app` service under load on two
//! instances, with the ledger as the judge (the figures of one run are in the README,
//! "Faults and fencing"):
//! - **holder frozen (SIGSTOP) for 3 session timeouts**: the server expires its session
//!   and deletes its node; the next waiter sells about one session timeout after the
//!   freeze. Fencing off, the woken holder writes anyway: lost updates (consensus does
//!   not stop a process that does not know it was expired). Fenced by czxid, refused,
//!   nothing lost.
//! - **holder killed**: nothing lost; the lock comes back after the session timeout (a
//!   dead client's ephemeral node lives until its session expires).
//! - **leader killed** (three-node ensemble): safe; sales resume within an election.
//! - **partitioned from the ensemble** (its database path up): fencing off, lost
//!   updates; fenced, refused, nothing lost.
//!
//! # When not to use it
//! When you do not run ZooKeeper already: an ensemble (3 JVMs) for a lock is a lot of
//! operations. Each acquisition costs a quorum write (create) and a release another
//! (delete): a few milliseconds, slower than Redis.
//!
//! # Example
//! ```no_run
//! # async fn example() -> Result<(), locks::LockError> {
//! use locks::{HolderId, LockOptions, Locker, zookeeper::ZooKeeperLock};
//! use std::time::Duration;
//!
//! let zk = ZooKeeperLock::connect("127.0.0.1:2181", "/stock-locks", Duration::from_secs(6)).await?;
//! let locker = Locker::new(zk);
//! let options = LockOptions { lease: Duration::from_secs(4), ..LockOptions::default() };
//! // The same node a Curator InterProcessMutex on /stock-locks/stock/42 would create.
//! let guard = locker.acquire("stock/42", &HolderId::random(), &options, Duration::from_secs(5)).await?;
//! println!("czxid {:?}", guard.token());
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

use crate::{Attempt, Capabilities, Expiry, Fencing, HolderId, LockBackend, LockError};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;
use zookeeper_client as zk;

fn backend(e: impl std::fmt::Display) -> LockError {
    LockError::Backend(format!("zookeeper: {e}"))
}

/// A lock node we hold: its path, czxid and how many times its holder entered.
struct Node {
    path: String,
    czxid: u64,
    count: u32,
}

/// The ZooKeeper lock, on one client session.
pub struct ZooKeeperLock {
    client: Mutex<zk::Client>,
    connect: String,
    session_timeout: Duration,
    root: String,
    /// Locks held through this process, by (key, holder).
    held: Mutex<HashMap<(String, String), Node>>,
}

impl ZooKeeperLock {
    /// Connects a session (failing at once if no server answers) and makes sure
    /// `root` exists.
    pub async fn connect(
        connect: &str,
        root: &str,
        session_timeout: Duration,
    ) -> Result<ZooKeeperLock, LockError> {
        let client = new_client(connect, session_timeout).await?;
        let root = root.trim_end_matches('/').to_string();
        client
            .mkdir(
                &root,
                &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
            )
            .await
            .map_err(backend)?;
        Ok(ZooKeeperLock {
            client: Mutex::new(client),
            connect: connect.to_string(),
            session_timeout,
            root,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// The current client (cheap to clone).
    pub fn client(&self) -> zk::Client {
        self.client
            .lock()
            .expect("zookeeper client poisoned")
            .clone()
    }

    /// The persistent parent of `key`'s lock nodes.
    pub fn parent(&self, key: &str) -> String {
        format!("{}/{key}", self.root)
    }

    /// After the session expired, every request on the old client fails: start a new
    /// session for the acquisitions to come. (Locks held on the old one are lost; their
    /// holders are told by their next check.)
    async fn renew_session_if_expired(&self, error: &zk::Error) {
        if matches!(error, zk::Error::SessionExpired | zk::Error::ClientClosed)
            && let Ok(client) = new_client(&self.connect, self.session_timeout).await
        {
            *self.client.lock().expect("zookeeper client poisoned") = client;
        }
    }

    fn reenter(&self, key: &str, holder: &HolderId) -> Option<u64> {
        let mut held = self.held.lock().expect("held poisoned");
        let node = held.get_mut(&(key.to_string(), holder.to_string()))?;
        node.count += 1;
        Some(node.czxid)
    }

    /// Steps 1-3: create our node, wait until it is the lowest, at most `wait`.
    async fn acquire_queued(
        &self,
        key: &str,
        holder: &HolderId,
        wait: Duration,
    ) -> Result<Attempt, LockError> {
        if let Some(token) = self.reenter(key, holder) {
            return Ok(Attempt::Acquired { token: Some(token) });
        }
        let deadline = Instant::now() + wait;
        let client = self.client();
        let parent = self.parent(key);
        let mut pending = Pending::new(client.clone(), parent.clone());
        let (path, czxid) = match self.create_node(&client, &parent, &pending.marker).await {
            Ok(created) => created,
            Err(e) => {
                self.renew_session_if_expired(&e).await;
                return Err(backend(e));
            }
        };
        pending.path = Some(path.clone());
        let ours = path.rsplit('/').next().expect("a child path").to_string();
        loop {
            let children = retry_on_connection_loss(|| client.list_children(&parent))
                .await
                .map_err(backend)?;
            // Belt and braces: a second node with our marker can only be an orphan of
            // this attempt (a create we believed lost); it would block the queue.
            for orphan in children
                .iter()
                .filter(|c| c.starts_with(&pending.marker) && **c != ours)
            {
                let _ = client.delete(&format!("{parent}/{orphan}"), None).await;
            }
            let queue = lock_nodes(children);
            let Some(position) = queue.iter().position(|c| *c == ours) else {
                // Our node is gone: the session expired while we waited.
                return Err(backend(
                    "our lock node disappeared while waiting (session expired?)",
                ));
            };
            if position == 0 {
                pending.disarm();
                let node = Node {
                    path,
                    czxid,
                    count: 1,
                };
                self.held
                    .lock()
                    .expect("held poisoned")
                    .insert((key.to_string(), holder.to_string()), node);
                return Ok(Attempt::Acquired { token: Some(czxid) });
            }
            // Watch only the node just before ours.
            let predecessor = format!("{parent}/{}", queue[position - 1]);
            let (stat, watcher) =
                retry_on_connection_loss(|| client.check_and_watch_stat(&predecessor))
                    .await
                    .map_err(backend)?;
            if stat.is_none() {
                continue; // it went between our list and our watch
            }
            // Wait for the watch, but look again at least every quarter session: a
            // watch can be lost when the client moves to another server while the
            // predecessor goes (seen with a leader killed mid-queue), and a waiter
            // must never sleep through its turn.
            let recheck = (Instant::now() + self.session_timeout / 4).min(deadline);
            if tokio::time::timeout_at(recheck, watcher.changed())
                .await
                .is_err()
                && Instant::now() >= deadline
            {
                pending.delete_now().await;
                return Ok(Attempt::Busy { retry_after: None });
            }
        }
    }

    /// Creates `<parent>/<marker>lock-NNNNNNNNNN`, creating the parent on first use and
    /// finding the node again by its marker after a ConnectionLoss.
    async fn create_node(
        &self,
        client: &zk::Client,
        parent: &str,
        marker: &str,
    ) -> Result<(String, u64), zk::Error> {
        let prefix = format!("{parent}/{marker}lock-");
        let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        loop {
            match client.create(&prefix, b"", &ephemeral).await {
                Ok((stat, sequence)) => {
                    return Ok((format!("{prefix}{sequence}"), stat.czxid as u64));
                }
                Err(zk::Error::NoNode) => {
                    client
                        .mkdir(
                            parent,
                            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
                        )
                        .await?;
                }
                Err(zk::Error::ConnectionLoss) => {
                    // Did the create happen before the connection broke?
                    if let Some(found) = find_marked(client, parent, marker).await? {
                        let path = format!("{parent}/{found}");
                        let stat = retry_on_connection_loss(|| client.check_stat(&path)).await?;
                        if let Some(stat) = stat {
                            return Ok((path, stat.czxid as u64));
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

async fn new_client(connect: &str, session_timeout: Duration) -> Result<zk::Client, LockError> {
    zk::Client::connector()
        .with_session_timeout(session_timeout)
        .with_fail_eagerly()
        .connect(connect)
        .await
        .map_err(backend)
}

/// How long an operation is retried through connection losses (a leader election
/// takes well under a second) before the loss is reported.
const RETRY_FOR: Duration = Duration::from_secs(10);

/// Retries `op` while it fails with ConnectionLoss (the client reconnects, possibly to
/// another server), for at most [`RETRY_FOR`]: never forever, so a release or a
/// clean-up cannot hang on a cluster that is gone.
async fn retry_on_connection_loss<T, F, Fut>(op: F) -> Result<T, zk::Error>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, zk::Error>>,
{
    let deadline = Instant::now() + RETRY_FOR;
    loop {
        match op().await {
            Err(zk::Error::ConnectionLoss) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            other => return other,
        }
    }
}

/// The lock nodes among `children`, in sequence order (the 10 digits after
/// `lock-`), as Curator's `StandardLockInternalsDriver` orders them.
fn lock_nodes(mut children: Vec<String>) -> Vec<String> {
    children.retain(|c| {
        c.rsplit_once("lock-")
            .is_some_and(|(_, seq)| seq.len() == 10 && seq.bytes().all(|b| b.is_ascii_digit()))
    });
    children.sort_by(|a, b| a[a.len() - 10..].cmp(&b[b.len() - 10..]));
    children
}

async fn find_marked(
    client: &zk::Client,
    parent: &str,
    marker: &str,
) -> Result<Option<String>, zk::Error> {
    // After a connection loss the client may be talking to a follower that has not
    // seen our create yet: `sync` first, or we would miss our node, create a second one,
    // and leave the first in the queue with nobody to release it.
    match retry_on_connection_loss(|| client.sync(parent)).await {
        Ok(()) | Err(zk::Error::NoNode) => {}
        Err(e) => return Err(e),
    }
    let children = match retry_on_connection_loss(|| client.list_children(parent)).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(children.into_iter().find(|c| c.starts_with(marker)))
}

/// Our node while we do not hold the lock yet: dropped (cancelled, failed), it is
/// deleted in the background, found by its marker if its path never came back.
struct Pending {
    client: zk::Client,
    parent: String,
    /// `_c_<uuid>-`: Curator's "protected" prefix, unique to this attempt.
    marker: String,
    path: Option<String>,
    armed: bool,
}

impl Pending {
    fn new(client: zk::Client, parent: String) -> Pending {
        Pending {
            client,
            parent,
            marker: format!("_c_{}-", uuid::Uuid::new_v4()),
            path: None,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    async fn delete_now(&mut self) {
        self.armed = false;
        cleanup(
            self.client.clone(),
            self.parent.clone(),
            self.marker.clone(),
            self.path.take(),
        )
        .await;
    }
}

async fn cleanup(client: zk::Client, parent: String, marker: String, path: Option<String>) {
    let path = match path {
        Some(path) => Some(path),
        None => find_marked(&client, &parent, &marker)
            .await
            .ok()
            .flatten()
            .map(|child| format!("{parent}/{child}")),
    };
    if let Some(path) = path {
        delete_until_gone(&client, &path, RETRY_FOR * 3).await;
    }
}

/// Deletes our node, retrying any failure but "gone" for up to `for_at_most`: a node
/// of ours left behind (our session lives) would block the lock for everyone.
async fn delete_until_gone(client: &zk::Client, path: &str, for_at_most: Duration) {
    let give_up = Instant::now() + for_at_most;
    loop {
        match client.delete(path, None).await {
            Ok(()) | Err(zk::Error::NoNode | zk::Error::SessionExpired) => return,
            Err(e) if Instant::now() < give_up => {
                tracing::debug!(%path, error = %e, "lock node delete retried");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                tracing::warn!(%path, error = %e, "could not delete the lock node; it goes with the session");
                return;
            }
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (client, parent, marker, path) = (
                self.client.clone(),
                self.parent.clone(),
                self.marker.clone(),
                self.path.take(),
            );
            runtime.spawn(cleanup(client, parent, marker, path));
        }
    }
}

#[async_trait]
impl LockBackend for ZooKeeperLock {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            expiry: Expiry::Session,
            fencing: Fencing::Monotonic,
            reentrant: true,
        }
    }

    async fn try_lock(
        &self,
        key: &str,
        holder: &HolderId,
        _lease: Duration,
    ) -> Result<Attempt, LockError> {
        self.acquire_queued(key, holder, Duration::ZERO).await
    }

    async fn acquire_waiting(
        &self,
        key: &str,
        holder: &HolderId,
        _lease: Duration,
        wait: Duration,
    ) -> Option<Result<Attempt, LockError>> {
        Some(self.acquire_queued(key, holder, wait).await)
    }

    /// "Renewal" is a check: the session keeps the node alive; we confirm our node is
    /// still there and still ours. Failures (Disconnected) are retried by the watchdog
    /// until the lease, the safety margin, runs out.
    async fn renew(
        &self,
        key: &str,
        holder: &HolderId,
        _lease: Duration,
    ) -> Result<bool, LockError> {
        let path = {
            let held = self.held.lock().expect("held poisoned");
            match held.get(&(key.to_string(), holder.to_string())) {
                Some(node) => node.path.clone(),
                None => return Ok(false),
            }
        };
        let client = self.client();
        match client.check_stat(&path).await {
            Ok(Some(stat)) => Ok(stat.ephemeral_owner == client.session_id().0),
            Ok(None) | Err(zk::Error::SessionExpired) => Ok(false),
            Err(e) => Err(backend(e)),
        }
    }

    async fn unlock(&self, key: &str, holder: &HolderId) -> Result<(), LockError> {
        let entry = (key.to_string(), holder.to_string());
        let path = {
            let mut held = self.held.lock().expect("held poisoned");
            let Some(node) = held.get_mut(&entry) else {
                return Err(LockError::not_holder(key, holder));
            };
            node.count -= 1;
            if node.count > 0 {
                return Ok(());
            }
            held.remove(&entry).expect("present").path
        };
        let client = self.client();
        match retry_on_connection_loss(|| client.delete(&path, None)).await {
            Ok(()) => Ok(()),
            // Gone already: the session expired, or it was deleted from outside.
            Err(zk::Error::NoNode | zk::Error::SessionExpired) => {
                Err(LockError::not_holder(key, holder))
            }
            Err(e) => {
                // The node is still ours and still there (our session lives): left
                // alone it would block the lock for everyone until the session ends.
                // Keep deleting it in the background until it is gone.
                tokio::spawn(async move { delete_until_gone(&client, &path, RETRY_FOR * 3).await });
                Err(backend(e))
            }
        }
    }
}
