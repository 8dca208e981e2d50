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

use crate::{Attempt, Capabilities, Expiry, Fencing, HolderId, LockBackend, LockError};
use async_trait::async_trait;
use std::time::Duration;

/// Grants every request. Never use it to protect anything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopLock;

#[async_trait]
impl LockBackend for NoopLock {
    fn name(&self) -> &'static str {
        "noop"
    }

    fn capabilities(&self) -> Capabilities {
        // What it claims, not what it does.
        Capabilities {
            expiry: Expiry::Lease,
            fencing: Fencing::Monotonic,
            reentrant: true,
        }
    }

    async fn try_lock(
        &self,
        _key: &str,
        _holder: &HolderId,
        _lease: Duration,
    ) -> Result<Attempt, LockError> {
        Ok(Attempt::Acquired { token: None })
    }

    async fn renew(
        &self,
        _key: &str,
        _holder: &HolderId,
        _lease: Duration,
    ) -> Result<bool, LockError> {
        Ok(true)
    }

    async fn unlock(&self, _key: &str, _holder: &HolderId) -> Result<(), LockError> {
        Ok(())
    }
}
