//! Watching the watchdog: a backend that passes every call to a real one and records
//! each renewal (whose, when it began, what the backend answered). A test waits for
//! renewals and counts them instead of guessing how many milliseconds they take: a
//! loaded machine makes a renewal slower, it does not change which renewal finds the
//! lock gone.

use async_trait::async_trait;
use locks::{Acquired, HolderId, LockBackend, LockError, LockGuard, Locker, LostReason};
use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// One renewal the watchdog asked the backend for.
#[derive(Debug, Clone)]
pub struct Renewal {
    pub holder: HolderId,
    pub began: Instant,
    pub answer: Answer,
}

/// What the backend answered a renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// No answer yet, or none before the watchdog stopped waiting (the lease's end).
    Pending,
    /// Still held: the lease was extended.
    Held,
    /// Not held any more (the watchdog's `NotHolder`).
    NotHeld,
    /// An error (the watchdog retries at its next tick).
    Failed(String),
}

/// `locker`'s backend, watched: the same lock, and its renewals as they happen.
pub fn watched(locker: &Locker) -> (Locker, Renewals) {
    let (log, seen) = watch::channel(Vec::new());
    let backend = locker.backend.clone();
    (Locker::new(Watched { backend, log }), Renewals(seen))
}

struct Watched {
    backend: Arc<dyn LockBackend>,
    log: watch::Sender<Vec<Renewal>>,
}

#[async_trait]
impl LockBackend for Watched {
    fn name(&self) -> &'static str {
        self.backend.name()
    }

    async fn acquire(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
        wait: Duration,
    ) -> Result<Option<Acquired>, LockError> {
        self.backend.acquire(key, holder, lease, wait).await
    }

    async fn renew(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
    ) -> Result<Option<Instant>, LockError> {
        let (holder, began) = (holder.clone(), Instant::now());
        let mut index = 0;
        self.log.send_modify(|log| {
            index = log.len();
            let answer = Answer::Pending;
            log.push(Renewal {
                holder: holder.clone(),
                began,
                answer,
            });
        });
        let renewed = self.backend.renew(key, &holder, lease).await;
        let answer = match &renewed {
            Ok(Some(_)) => Answer::Held,
            Ok(None) => Answer::NotHeld,
            Err(e) => Answer::Failed(e.to_string()),
        };
        self.log.send_modify(|log| log[index].answer = answer);
        renewed
    }

    async fn unlock(&self, key: &str, holder: &HolderId) -> Result<(), LockError> {
        self.backend.unlock(key, holder).await
    }
}

/// The renewals of a watched lock, as they happen.
pub struct Renewals(watch::Receiver<Vec<Renewal>>);

impl Renewals {
    /// `holder`'s renewals begun at or after `since`.
    pub fn of(&self, holder: &HolderId, since: Instant) -> Vec<Renewal> {
        let log = self.0.borrow();
        let mine = log
            .iter()
            .filter(|r| &r.holder == holder && r.began >= since);
        mine.cloned().collect()
    }

    /// Waits until `done` holds for `holder`'s renewals begun at or after `since`.
    pub async fn wait_for(
        &mut self,
        holder: &HolderId,
        since: Instant,
        done: impl Fn(&[Renewal]) -> bool,
    ) {
        let mine = |log: &Vec<Renewal>| {
            let mine = log
                .iter()
                .filter(|r| &r.holder == holder && r.began >= since);
            done(&mine.cloned().collect::<Vec<_>>())
        };
        self.0
            .wait_for(mine)
            .await
            .expect("the lock outlives the test");
    }
}

/// `renewals` for a failure message: when each began, counted from `since`, and its
/// answer.
pub fn describe(renewals: &[Renewal], since: Instant) -> String {
    let mut said = format!("{} renewal(s)", renewals.len());
    for r in renewals {
        let at = r.began.saturating_duration_since(since).as_millis();
        let _ = write!(said, "; +{at} ms: {:?}", r.answer);
    }
    said
}

/// Waits for `guard`'s lost-lock signal after its lock was removed from outside (the
/// removal began at `removing` and was done at `removed`), and judges it: `NotHolder`,
/// from a renewal among the first 3 begun since `removing`, and no renewal begun since
/// `removed` found the lock still held (it fails as soon as one does). `hung` only
/// ends a test that waits for nothing. `Ok`: what was seen, for the log.
pub async fn told_of_removal(
    guard: &LockGuard,
    renewals: &mut Renewals,
    (removing, removed): (Instant, Instant),
    hung: Duration,
) -> Result<String, String> {
    let holder = guard.holder();
    let held = |after: &[Renewal]| after.iter().any(|r| r.answer == Answer::Held);
    let outcome = tokio::time::timeout(hung, async {
        tokio::select! {
            reason = guard.lost() => Some(reason),
            () = renewals.wait_for(holder, removed, held) => None,
        }
    })
    .await;
    // Renewals begun while the removal ran may find the lock either way.
    let (during, after) = (renewals.of(holder, removing), renewals.of(holder, removed));
    let seen = format!("since the removal began, {}", describe(&during, removing));
    let reason = outcome
        .map_err(|_| format!("no lost-lock signal within {hung:?}; {seen}"))?
        .ok_or_else(|| format!("a renewal after the removal found the lock held; {seen}"))?;
    if reason != LostReason::NotHolder || held(&after) {
        return Err(format!("lost because {reason:?}; {seen}"));
    }
    // "Within 3 renewal periods", counted: a renewal found the lock gone, and at most 3
    // began (any before it failed and was retried).
    let told = during.iter().any(|r| r.answer == Answer::NotHeld);
    if !told || during.len() > 3 {
        return Err(format!("not told by one of the first 3 renewals; {seen}"));
    }
    Ok(format!(
        "signal after {:?} ({reason:?}); {seen}",
        removed.elapsed()
    ))
}
