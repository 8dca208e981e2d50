//! A lock that always grants. **Broken on purpose.**
//!
//! It claims everything a real lock claims (reentrant, leased, monotonic tokens) and
//! does none of it: every attempt succeeds at once, renewal always "works", unlock
//! never complains, and there is no token. It exists so that every lock test also
//! runs against a lock that cannot work and must fail there: a test that a broken
//! lock passes proves nothing. The chaos runner also uses it for "fence only, no
//! lock": with fencing on, the resource stays safe even with this.
//!
//! ```no_run
//! # async fn example() -> Result<(), locks::LockError> {
//! use locks::{HolderId, LockOptions, Locker};
//! let locker = Locker::new(locks::noop::NoopLock);
//! let a = locker.try_acquire("k", &HolderId::random(), &LockOptions::default()).await?;
//! let b = locker.try_acquire("k", &HolderId::random(), &LockOptions::default()).await?;
//! assert!(a.is_some() && b.is_some()); // both "hold" it
//! # Ok(())
//! # }
//! ```

use crate::lock::{Acquired, HolderId, LockBackend, LockError};
use async_trait::async_trait;
use std::time::Duration;
use tokio::time::Instant;

/// Grants every request. Never use it to protect anything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopLock;

#[async_trait]
impl LockBackend for NoopLock {
    fn name(&self) -> &'static str {
        "noop"
    }

    async fn acquire(
        &self,
        _key: &str,
        _holder: &HolderId,
        _lease: Duration,
        _wait: Duration,
    ) -> Result<Option<Acquired>, LockError> {
        let since = Instant::now();
        Ok(Some(Acquired { token: None, since }))
    }

    async fn renew(
        &self,
        _key: &str,
        _holder: &HolderId,
        _lease: Duration,
    ) -> Result<Option<Instant>, LockError> {
        Ok(Some(Instant::now()))
    }

    async fn unlock(&self, _key: &str, _holder: &HolderId) -> Result<(), LockError> {
        Ok(())
    }
}
