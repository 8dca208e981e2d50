//! A ZooKeeper lock: ephemeral sequential nodes, each waiter watching only its
//! predecessor. Names its nodes as Apache Curator's `InterProcessMutex` does, so a
//! Java service using Curator and a Rust service using this file exclude each other.
//!
//! # Copying this file
//! Take `src/lock.rs` (the core) and this file into your crate, with `mod lock; mod
//! zookeeper;` at its root, and the crates `copies.toml` lists under
//! `[backend.zookeeper]`. `./scripts/copy-check zookeeper DIR` builds such a copy and
//! runs it on a real server. Example: `cargo run -p locks --example zookeeper`.
//!
//! # Algorithm
//! The lock for key `stock/42` lives under the persistent parent `<root>/stock/42`
//! (created on first use, never deleted).
//! 1. Create an `EPHEMERAL_SEQUENTIAL` child `_c_<uuid>-lock-`; ZooKeeper appends a
//!    10-digit sequence number. The node lives as long as our session.
//! 2. List the children; order the `-lock-` ones by sequence number. Ours is the
//!    lowest: we hold the lock.
//! 3. Otherwise watch **only the node just before ours** and wait; when it goes, back
//!    to 2 (it may have given up rather than released). Also back to 2 every quarter
//!    session timeout: a watch can be lost when the client fails over to another
//!    server (seen with the leader killed mid-queue). One waiter woken per release: no herd.
//! 4. Release: delete our node (at the last release: reentrancy is counted in-process).
//!
//! Fencing token: the node's **czxid**, the id of the transaction that created it,
//! increasing across the whole ensemble. (The sequence number is not: it counts per
//! parent and restarts if the parent is re-created, as Curator's container parents are.)
//!
//! # How it fails
//! - **ConnectionLoss during create**: the node may or may not exist. It is found
//!   again by its `_c_<uuid>` prefix (why Curator puts a UUID in the name), so no
//!   orphan node blocks the lock forever.
//! - **Session expiry**: ZooKeeper deletes our node and the next waiter gets the lock;
//!   the watchdog's check (every lease/3) finds our node gone and signals the loss.
//! - **Disconnected**: the client cannot know whether its session still lives. The
//!   holder counts the lock as lost after the lock's lease (its safety margin, shorter
//!   than the session timeout) without a successful check.
//! - **A pause past the session timeout**: consensus (ZAB) orders every create and
//!   delete, but cannot stop a paused holder from waking up and writing after another
//!   client took the lock. Fence writes with the czxid. `./scripts/chaos` shows this
//!   and more under load (the book's "Faults and fencing").
//! - **The mistake: a PERSISTENT lock node.** It does not die with its holder's
//!   session, so a holder that crashes blocks everyone for good. Runnable in the
//!   service as the `persistent-node` mistake (`app/src/strategies/distributed/mistakes.rs`).

use crate::lock::{Acquired, BackendKind, HolderId, LockBackend, LockError};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;
use zookeeper_client as zk;

fn backend(e: zk::Error) -> LockError {
    use zk::Error::{ClientClosed, ConnectionLoss, NoHosts, SessionExpired, Timeout};
    let kind = match e {
        Timeout => BackendKind::Timeout,
        ConnectionLoss | NoHosts | SessionExpired | ClientClosed => BackendKind::Unreachable,
        _ => BackendKind::Failed,
    };
    LockError::Backend("zookeeper", kind, e.into())
}

/// How long an operation is retried through connection losses (a leader election
/// takes well under a second) before the loss is reported.
const RETRY_FOR: Duration = Duration::from_secs(10);

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
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        client.mkdir(&root, &persistent).await.map_err(backend)?;
        let (client, held, connect) = (Mutex::new(client), Mutex::default(), connect.to_string());
        Ok(ZooKeeperLock {
            client,
            connect,
            session_timeout,
            root,
            held,
        })
    }

    /// The current client (cheap to clone).
    fn client(&self) -> zk::Client {
        self.client.lock().expect("client poisoned").clone()
    }

    /// After the session expired, every request on the old client fails: start a new
    /// session for the acquisitions to come. (Locks held on the old one are lost; their
    /// holders are told by their next check.)
    async fn renew_session_if_expired(&self, error: &zk::Error) {
        if matches!(error, zk::Error::SessionExpired | zk::Error::ClientClosed)
            && let Ok(client) = new_client(&self.connect, self.session_timeout).await
        {
            *self.client.lock().expect("client poisoned") = client;
        }
    }
}

#[async_trait]
impl LockBackend for ZooKeeperLock {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    // ANCHOR: acquire
    /// Steps 1-3: queue, and wait for our turn at most `wait`. The lease is the
    /// holder's safety margin: it counts from the moment the node was ours, and the
    /// watchdog's checks must keep confirming the node within it.
    ///
    /// # Errors
    /// [`LockError::Backend`]: the ensemble failed or stayed unreachable (connection
    /// losses are retried for 10 s), or our node vanished while we waited (the
    /// session expired).
    ///
    /// # Cancellation safety
    /// Dropped while queued or mid-create, our node is deleted in the background
    /// (found by its marker if the create's answer never came). Dropped after the node
    /// became the lowest but before the guard exists, the node stays until our session
    /// ends (it is counted as held by `holder` in this process).
    async fn acquire(
        &self,
        key: &str,
        holder: &HolderId,
        _lease: Duration,
        wait: Duration,
    ) -> Result<Option<Acquired>, LockError> {
        let entry = (key.to_string(), holder.to_string());
        if let Some(node) = self.held.lock().expect("held poisoned").get_mut(&entry) {
            node.count += 1; // re-entered: same node, same token
            let (token, since) = (Some(node.czxid), Instant::now());
            return Ok(Some(Acquired { token, since }));
        }
        let deadline = Instant::now() + wait;
        let mut pending = Pending {
            client: self.client(),
            parent: format!("{}/{key}", self.root),
            marker: format!("_c_{}-", uuid::Uuid::new_v4()),
            path: None,
            armed: true,
        };
        let (client, parent, marker) = (&pending.client, &pending.parent, &pending.marker);
        // Step 1.
        let (path, czxid) = match create_node(client, parent, marker).await {
            Ok(created) => created,
            Err(e) => {
                self.renew_session_if_expired(&e).await;
                return Err(backend(e));
            }
        };
        pending.path = Some(path.clone());
        let ours = path.rsplit('/').next().expect("a child path").to_string();
        loop {
            // Step 2.
            let children = retry_on_connection_loss(|| client.list_children(parent))
                .await
                .map_err(backend)?;
            // Belt and braces: a second node with our marker can only be an orphan of
            // this attempt (a create we believed lost); it would block the queue.
            let orphans = children
                .iter()
                .filter(|c| c.starts_with(marker.as_str()) && **c != ours);
            for orphan in orphans {
                let _ = client.delete(&format!("{parent}/{orphan}"), None).await;
            }
            let queue = lock_nodes(children);
            let Some(position) = queue.iter().position(|c| *c == ours) else {
                let vanished = "our lock node vanished (session expired?)".into();
                let e = LockError::Backend("zookeeper", BackendKind::Failed, vanished);
                return Err(e);
            };
            if position == 0 {
                pending.armed = false;
                let node = Node {
                    path,
                    czxid,
                    count: 1,
                };
                self.held.lock().expect("held poisoned").insert(entry, node);
                let (token, since) = (Some(czxid), Instant::now());
                return Ok(Some(Acquired { token, since }));
            }
            // Step 3: watch only the node just before ours.
            let predecessor = format!("{parent}/{}", queue[position - 1]);
            let (stat, watcher) =
                retry_on_connection_loss(|| client.check_and_watch_stat(&predecessor))
                    .await
                    .map_err(backend)?;
            if stat.is_none() {
                continue; // it went between our list and our watch
            }
            // Wait for the watch, but look again at least every quarter session: a
            // lost watch must never make a waiter sleep through its turn.
            let recheck = (Instant::now() + self.session_timeout / 4).min(deadline);
            let woken = tokio::time::timeout_at(recheck, watcher.changed()).await;
            if woken.is_err() && Instant::now() >= deadline {
                let (client, parent, marker) = (client.clone(), parent.clone(), marker.clone());
                pending.armed = false; // deleted now, not in the background:
                cleanup(client, parent, marker, pending.path.take()).await;
                return Ok(None);
            }
        }
    }
    // ANCHOR_END: acquire

    /// "Renewal" is a check that our node is still there and ours (the session keeps
    /// it alive). The watchdog retries failures until the lease, the margin, runs out.
    async fn renew(
        &self,
        key: &str,
        holder: &HolderId,
        _lease: Duration,
    ) -> Result<Option<Instant>, LockError> {
        let entry = (key.to_string(), holder.to_string());
        let path = self
            .held
            .lock()
            .expect("held poisoned")
            .get(&entry)
            .map(|n| n.path.clone());
        let Some(path) = path else { return Ok(None) };
        let (client, since) = (self.client(), Instant::now());
        match client.check_stat(&path).await {
            Ok(Some(stat)) => Ok((stat.ephemeral_owner == client.session_id().0).then_some(since)),
            Ok(None) | Err(zk::Error::SessionExpired) => Ok(None),
            Err(e) => Err(backend(e)),
        }
    }

    /// Step 4.
    ///
    /// # Errors
    /// [`LockError::NotHolder`] when `holder` does not hold it (or the node was gone:
    /// the session expired); [`LockError::Backend`] when the delete failed (it is
    /// retried in the background, so the node does not block the lock).
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
                tokio::spawn(async move { delete_until_gone(&client, &path).await });
                Err(backend(e))
            }
        }
    }
}

async fn new_client(connect: &str, session_timeout: Duration) -> Result<zk::Client, LockError> {
    let connector = zk::Client::connector().with_session_timeout(session_timeout);
    let client = connector.with_fail_eagerly().connect(connect).await;
    client.map_err(backend)
}

/// Creates `<parent>/<marker>lock-NNNNNNNNNN`, creating the parent on first use and
/// finding the node again by its marker after a ConnectionLoss.
async fn create_node(
    client: &zk::Client,
    parent: &str,
    marker: &str,
) -> Result<(String, u64), zk::Error> {
    let prefix = format!("{parent}/{marker}lock-");
    let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    loop {
        match client.create(&prefix, b"", &ephemeral).await {
            Ok((stat, sequence)) => return Ok((format!("{prefix}{sequence}"), stat.czxid as u64)),
            Err(zk::Error::NoNode) => client.mkdir(parent, &persistent).await?,
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

/// The child of `parent` whose name starts with `marker`, if any.
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
    match retry_on_connection_loss(|| client.list_children(parent)).await {
        Ok(children) => Ok(children.into_iter().find(|c| c.starts_with(marker))),
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Our node while we do not hold the lock yet: dropped armed (cancelled, failed), it
/// is deleted in the background, found by its marker if its path never came back.
struct Pending {
    client: zk::Client,
    parent: String,
    /// `_c_<uuid>-`: Curator's "protected" prefix, unique to this attempt.
    marker: String,
    path: Option<String>,
    armed: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let (true, Ok(runtime)) = (self.armed, tokio::runtime::Handle::try_current()) {
            let (client, parent) = (self.client.clone(), self.parent.clone());
            let (marker, path) = (self.marker.clone(), self.path.take());
            runtime.spawn(cleanup(client, parent, marker, path));
        }
    }
}

async fn cleanup(client: zk::Client, parent: String, marker: String, path: Option<String>) {
    let path = match path {
        Some(path) => Some(path),
        None => find_marked(&client, &parent, &marker)
            .await
            .ok()
            .flatten()
            .map(|c| format!("{parent}/{c}")),
    };
    if let Some(path) = path {
        delete_until_gone(&client, &path).await;
    }
}

/// Deletes our node, retrying any failure but "gone" for up to 3 × [`RETRY_FOR`]: a
/// node of ours left behind (our session lives) would block the lock for everyone.
async fn delete_until_gone(client: &zk::Client, path: &str) {
    let give_up = Instant::now() + RETRY_FOR * 3;
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
