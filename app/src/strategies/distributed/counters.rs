//! The lock counters each backend registers in the service, and the lock log the
//! test hooks keep: what watches a lock strategy's locks ([`LockWatch`]). The
//! `service` feature; a copy leaves this file out.
#![cfg(feature = "service")]

use super::algorithm::LockWatch;
use crate::domain::probe::{LockHold, Probe};
use async_trait::async_trait;
use locks::{Acquired, HolderId, LockBackend, LockError, LockGuard, LostReason};
use prometheus::{IntCounter, IntCounterVec, Opts};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What a lock backend's watchdogs did, as Prometheus counters.
///
/// One pair per backend, each with a constant `backend` label (the registry merges
/// the backends' into one metric family each). Renewals are counted as the backend
/// answers them (`Counted`), losses when a lost guard is released.
pub struct LockCounters {
    renewals: IntCounterVec,
    lost: IntCounterVec,
    /// The service's probe: each hold is told to it ([`Probe::lock_held`]).
    probe: Arc<dyn Probe>,
}

impl LockCounters {
    pub fn register(
        registry: &prometheus::Registry,
        probe: &Arc<dyn Probe>,
        backend: &str,
    ) -> LockCounters {
        // Series appear at the first scrape after the backend connected.
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let opts = Opts::new(name, help).const_label("backend", backend);
            let counter = IntCounterVec::new(opts, labels).expect("a valid metric");
            let registered = registry.register(Box::new(counter.clone()));
            registered.expect("registered once per backend");
            counter
        };
        LockCounters {
            renewals: counter(
                "stock_locks_lock_renewals_total",
                "Lease renewals by the distributed locks' watchdogs, by backend.",
                &[],
            ),
            lost: counter(
                "stock_locks_locks_lost_total",
                "Locks lost while held (not_holder, expired, max_hold), by backend and reason.",
                &["reason"],
            ),
            probe: probe.clone(),
        }
    }

    /// The series, at zero, once the backend connected; the renewals counter.
    fn connected(&self) -> IntCounter {
        for reason in [
            LostReason::NotHolder,
            LostReason::Expired,
            LostReason::MaxHold,
        ] {
            self.lost.with_label_values(&[reason_label(reason)]);
        }
        self.renewals.with_label_values::<&str>(&[])
    }
}

impl LockWatch for LockCounters {
    /// The backend with its successful renewals counted, and every hold told to the
    /// service's probe (its lock log, with test hooks on).
    fn backend(&self, backend: Box<dyn LockBackend>) -> Box<dyn LockBackend> {
        Box::new(Counted {
            backend,
            renewals: self.connected(),
            probe: Some(self.probe.clone()).filter(|probe| probe.enabled()),
        })
    }

    /// A lost guard, counted by its reason.
    fn releasing(&self, guard: &LockGuard) {
        if let Some(reason) = guard.lost_reason() {
            self.lost.with_label_values(&[reason_label(reason)]).inc();
        }
    }
}

fn reason_label(reason: LostReason) -> &'static str {
    match reason {
        LostReason::NotHolder => "not_holder",
        LostReason::Expired => "expired",
        LostReason::MaxHold => "max_hold",
    }
}

/// A backend whose successful renewals are counted, and whose holds are told.
struct Counted {
    backend: Box<dyn LockBackend>,
    renewals: IntCounter,
    /// With test hooks on: where each hold is told.
    probe: Option<Arc<dyn Probe>>,
}

impl Counted {
    fn tell(&self, key: &str, holder: &HolderId, token: Option<u64>, event: &'static str) {
        if let Some(probe) = &self.probe {
            let holder = holder.as_str();
            probe.lock_held(&LockHold {
                key,
                holder,
                token,
                event,
            });
        }
    }
}

#[async_trait]
impl LockBackend for Counted {
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
        let acquired = self.backend.acquire(key, holder, lease, wait).await;
        if let Ok(Some(acquired)) = &acquired {
            self.tell(key, holder, acquired.token, "acquired");
        }
        acquired
    }

    async fn renew(
        &self,
        key: &str,
        holder: &HolderId,
        lease: Duration,
    ) -> Result<Option<Instant>, LockError> {
        let renewed = self.backend.renew(key, holder, lease).await;
        match &renewed {
            Ok(Some(_)) => self.renewals.inc(),
            Ok(None) => self.tell(key, holder, None, "lost"),
            Err(_) => {}
        }
        renewed
    }

    async fn unlock(&self, key: &str, holder: &HolderId) -> Result<(), LockError> {
        self.tell(key, holder, None, "released");
        self.backend.unlock(key, holder).await
    }
}
