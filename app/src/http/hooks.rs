//! Test hooks: named failpoints, per-request holds and barriers, so that races are
//! made to happen on purpose instead of by luck.
//!
//! Compiled in, and **off** unless the service starts with `--enable-test-hooks`:
//! then the hooks endpoint answers and deduct bodies may carry hook fields; without
//! the flag the endpoint is a 404 and hook fields are a 400.
//!
//! # Failpoints
//! The places a deduction passes are [`crate::domain::probe::Failpoint`]s (each
//! strategy's file says where it passes them); this is the service's
//! [`Probe`](crate::domain::probe::Probe).
//!
//! Each is `off`, `sleep` (`ms`), or `pause`: the request blocks there until it is
//! released (`crash`, for the mistakes only: see [`Mode::Crash`]). A mode may be limited to the next `count` requests that reach it, which is
//! how a test pauses request 1 and lets request 2 through:
//!
//! ```text
//! PUT  /hooks/after_read            {"mode": "pause", "count": 1}
//! POST /deduct/{strategy}           request 1 -> blocks after its read
//! GET  /hooks/after_read/paused?at_least=1      returns once request 1 is there
//! POST /deduct/{strategy}           request 2 -> passes (count used up), completes
//! POST /hooks/after_read/release    request 1 resumes and writes its stale value
//! ```
//!
//! Because the pause is a handshake, a runner also knows exactly where a holder is
//! before it SIGSTOPs the process (the chaos scenarios).
//!
//! # Per-request fields (only with the flag)
//! - `hold_ms`: sleep this long between read and write (a slow business step);
//! - `unsorted`: a strategy that locks rows locks them in the order the items are
//!   listed instead of product order (to make real deadlocks);
//! - `barrier`: `{"name": "...", "parties": N}`: after locking its first row, the
//!   request waits until N requests reached the barrier of that name (first attempt
//!   only), so that two opposite-order orders each hold one row and want the other;
//! - `fencing`: `true` or `false`, overriding the server's `--fencing` for a lock
//!   strategy (the chaos experiments compare both on one server);
//! - `mistake`: the name of a classic mistake, run instead of the strategy's own
//!   algorithm: one the strategy lists (`Strategy::mistakes`; each made in the file of
//!   the strategy it breaks).
//!
//! The server flag `--hold-ms N` is not a hook: it holds every deduction between read
//! and write, with or without `--enable-test-hooks` (the demo uses it to make the
//! controls fail visibly).

use crate::domain::error::DeductError;
use crate::domain::probe::{Failpoint, Knobs, Passed, Probe};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Barrier, watch};

/// Every failpoint.
pub const FAILPOINTS: [Failpoint; 5] = [
    Failpoint::AfterLock,
    Failpoint::AfterRead,
    Failpoint::BeforeCommit,
    Failpoint::BeforeLock,
    Failpoint::BeforeRelease,
];

/// The failpoint of that name.
pub fn failpoint(name: &str) -> Option<Failpoint> {
    FAILPOINTS.into_iter().find(|f| f.name() == name)
}

/// The longest a request stays paused at a failpoint before it goes on by itself, so a
/// forgotten pause cannot wedge a service forever.
pub const MAX_PAUSE: Duration = Duration::from_secs(120);
/// The longest a request waits at a barrier for the other parties.
pub const BARRIER_TIMEOUT: Duration = Duration::from_secs(10);

/// What a failpoint does to a request that reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Mode {
    Off,
    Sleep {
        ms: u64,
    },
    Pause,
    /// The request ends here, as if its process had died: nothing after this point
    /// runs (no release, no expiry, no delete) and it answers 500. Honoured where a
    /// crash is the point, the mistakes' lock steps; elsewhere it counts as `off` (the
    /// chaos runner kills processes for real).
    Crash,
}

/// The body of `PUT /hooks/{failpoint}`.
#[derive(Debug, Clone, Copy, Deserialize, utoipa::ToSchema)]
pub struct Setting {
    #[serde(flatten)]
    pub mode: Mode,
    /// Apply to the next `count` requests only, then switch off (default: all).
    #[serde(default)]
    pub count: Option<u32>,
}

/// One failpoint's state, as `GET /hooks` shows it.
#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
pub struct PointState {
    #[serde(flatten)]
    pub mode: Mode,
    /// Requests the mode still applies to (`null`: all).
    pub remaining: Option<u32>,
    /// Requests blocked here right now.
    pub paused: usize,
    /// Requests that reached this failpoint since the service started.
    pub hits: u64,
    /// Bumped by every release; a paused request waits for it to change.
    #[serde(skip)]
    released: u64,
}

impl Default for PointState {
    fn default() -> Self {
        PointState {
            mode: Mode::Off,
            remaining: None,
            paused: 0,
            hits: 0,
            released: 0,
        }
    }
}

/// The hooks of one service instance.
pub struct Hooks {
    enabled: bool,
    /// `--hold-ms`: applies to every deduction, hooks enabled or not.
    hold_ms: u64,
    points: Mutex<HashMap<Failpoint, PointState>>,
    /// Bumped on every change of `points`; waiters re-check their condition on it.
    version: watch::Sender<u64>,
    barriers: Mutex<HashMap<String, Arc<Barrier>>>,
    /// `--lock-log`, open for appending (hooks on only).
    lock_log: Option<Mutex<std::fs::File>>,
}

impl Hooks {
    pub fn new(enabled: bool, hold_ms: u64) -> Hooks {
        Hooks {
            enabled,
            hold_ms,
            lock_log: None,
            points: Mutex::new(
                FAILPOINTS
                    .into_iter()
                    .map(|f| (f, PointState::default()))
                    .collect(),
            ),
            version: watch::Sender::new(0),
            barriers: Mutex::new(HashMap::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// These hooks, writing every lock hold to `path` (appended), if the hooks are on.
    pub fn with_lock_log(mut self, path: Option<&std::path::Path>) -> std::io::Result<Hooks> {
        if let Some(path) = path.filter(|_| self.enabled) {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?;
            self.lock_log = Some(Mutex::new(file));
        }
        Ok(self)
    }

    /// The server-wide hold (`--hold-ms`).
    pub fn server_hold_ms(&self) -> u64 {
        self.hold_ms
    }

    fn change<T>(&self, f: impl FnOnce(&mut HashMap<Failpoint, PointState>) -> T) -> T {
        // A std mutex: held for a few field updates, never across an `.await`.
        let result = f(&mut self.points.lock().expect("hooks poisoned"));
        self.version.send_modify(|v| *v += 1);
        result
    }

    /// Every failpoint's state.
    pub fn states(&self) -> HashMap<&'static str, PointState> {
        let points = self.points.lock().expect("hooks poisoned");
        points.iter().map(|(f, s)| (f.name(), *s)).collect()
    }

    /// Sets a failpoint's mode. Requests paused there are released unless the new
    /// mode is `pause` again.
    pub fn set(&self, point: Failpoint, setting: Setting) -> PointState {
        self.change(|points| {
            let state = points.entry(point).or_default();
            state.mode = setting.mode;
            state.remaining = setting.count;
            if setting.mode != Mode::Pause {
                state.released += 1;
            }
            *state
        })
    }

    /// Releases every request paused at `point`; returns how many there were.
    pub fn release(&self, point: Failpoint) -> usize {
        self.change(|points| {
            let state = points.entry(point).or_default();
            state.released += 1;
            state.paused
        })
    }

    /// Waits until at least `count` requests are paused at `point`, up to `timeout`.
    pub async fn wait_paused(
        &self,
        point: Failpoint,
        count: usize,
        timeout: Duration,
    ) -> Result<usize, usize> {
        let mut version = self.version.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let paused = self.points.lock().expect("hooks poisoned")[&point].paused;
            if paused >= count {
                return Ok(paused);
            }
            if tokio::time::timeout_at(deadline, version.changed())
                .await
                .is_err()
            {
                return Err(paused);
            }
        }
    }

    /// Counts the hit at `point`, then sleeps or pauses as set.
    async fn pass_here(&self, point: Failpoint) -> Mode {
        let (mode, released) = self.change(|points| {
            let state = points.entry(point).or_default();
            state.hits += 1;
            let mode = state.mode;
            if let Some(left) = state.remaining.as_mut()
                && mode != Mode::Off
            {
                *left = left.saturating_sub(1);
                if *left == 0 {
                    state.mode = Mode::Off;
                    state.remaining = None;
                }
            }
            if mode == Mode::Pause {
                state.paused += 1;
            }
            (mode, state.released)
        });
        match mode {
            Mode::Off | Mode::Crash => {}
            Mode::Sleep { ms } => tokio::time::sleep(Duration::from_millis(ms)).await,
            Mode::Pause => {
                // Counted out again when the wait ends or the request is cancelled.
                let _paused = PausedHere { hooks: self, point };
                tracing::info!(failpoint = point.name(), "paused at failpoint");
                let mut version = self.version.subscribe();
                let wait = async {
                    while self.points.lock().expect("hooks poisoned")[&point].released == released {
                        if version.changed().await.is_err() {
                            break;
                        }
                    }
                };
                if tokio::time::timeout(MAX_PAUSE, wait).await.is_err() {
                    tracing::warn!(
                        failpoint = point.name(),
                        "never released; going on after {MAX_PAUSE:?}"
                    );
                }
            }
        }
        mode
    }
}

#[async_trait]
impl Probe for Hooks {
    fn enabled(&self) -> bool {
        self.enabled
    }

    /// One JSON line in the lock log, written whole (an instance killed mid-run
    /// leaves every line it wrote).
    fn lock_held(&self, hold: &crate::domain::probe::LockHold<'_>) {
        use std::io::Write;
        let Some(log) = &self.lock_log else { return };
        let line = serde_json::json!({
            "key": hold.key,
            "holder": hold.holder,
            "token": hold.token,
            "event": hold.event,
            "at_us": monotonic_us(),
        });
        let mut line = line.to_string();
        line.push('\n');
        if let Err(e) = log
            .lock()
            .expect("lock log poisoned")
            .write_all(line.as_bytes())
        {
            tracing::warn!(error = %e, "lock log not written");
        }
    }

    /// Counts the hit, then sleeps or pauses as set (nothing with hooks off).
    async fn pass(&self, point: Failpoint) -> Passed {
        if self.enabled && self.pass_here(point).await == Mode::Crash {
            return Passed::Crash;
        }
        Passed::On
    }

    /// The request's `hold_ms`, else the server's `--hold-ms` (hooks on or off).
    async fn hold(&self, knobs: &Knobs) {
        let hold = knobs
            .hold_ms
            .filter(|_| self.enabled)
            .unwrap_or(self.hold_ms);
        if hold > 0 {
            tokio::time::sleep(Duration::from_millis(hold)).await;
        }
    }

    /// The request's barrier, on its first attempt only (a retry must not wait for
    /// parties that already left).
    async fn barrier(&self, knobs: &Knobs, attempt: u32) -> Result<(), DeductError> {
        let Some((name, parties)) = knobs
            .barrier
            .as_ref()
            .filter(|_| attempt == 1 && self.enabled)
        else {
            return Ok(());
        };
        let barrier = self
            .barriers
            .lock()
            .expect("hooks poisoned")
            .entry(name.clone())
            .or_insert_with(|| Arc::new(Barrier::new(*parties)))
            .clone();
        tokio::time::timeout(BARRIER_TIMEOUT, barrier.wait()).await.map_err(|_| {
            DeductError::InvalidRequest(format!(
                "barrier `{name}`: fewer than {parties} requests arrived within {BARRIER_TIMEOUT:?}"
            ))
        })?;
        Ok(())
    }
}

struct PausedHere<'a> {
    hooks: &'a Hooks,
    point: Failpoint,
}

impl Drop for PausedHere<'_> {
    fn drop(&mut self) {
        self.hooks.change(|points| {
            let state = points.entry(self.point).or_default();
            state.paused = state.paused.saturating_sub(1);
        });
    }
}

/// Microseconds on CLOCK_MONOTONIC, which every process on this host shares: the lock
/// log's times line up with the load tester's.
fn monotonic_us() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given, and CLOCK_MONOTONIC
    // exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000
}
