//! The test hooks as a no-op: what a copied strategy takes instead of the service's
//! `app/src/domain/probe.rs` (the same names; every failpoint passed, every knob off).

use super::error::DeductError;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failpoint {
    AfterLock,
    AfterRead,
    BeforeLock,
    BeforeCommit,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Knobs {
    pub hold_ms: Option<u64>,
    pub unsorted: bool,
    pub fencing: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Lock,
    Transaction,
    Release,
}

pub trait Probe: Send + Sync {}

pub struct NoProbe;

impl Probe for NoProbe {}

impl dyn Probe + '_ {
    pub fn enabled(&self) -> bool {
        false
    }

    pub async fn at(&self, _point: Failpoint) {}

    pub async fn after_read(&self, _knobs: &Knobs) {}

    pub async fn barrier(&self, _knobs: &Knobs, _attempt: u32) -> Result<(), DeductError> {
        Ok(())
    }

    pub async fn time<T>(&self, _phase: Phase, work: impl Future<Output = T>) -> T {
        work.await
    }

    pub fn spent(&self, _phase: Phase, _took: Duration) {}

    pub fn pool_waited(&self, _took: Duration) {}
}
