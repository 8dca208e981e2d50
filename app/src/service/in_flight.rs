//! In-flight twins wait: inside one process, a request whose id is already being
//! served waits for its twin to finish, then goes (and is answered from `orders`),
//! instead of racing it for locks and rows only to roll back. Across instances the
//! `orders` key does the same job (`strategies::idempotency`).

use super::layer::{Answer, Deduct, Request};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// The map from request id to a per-id async mutex. Entries live only while a request
/// with that id is in flight.
#[derive(Default)]
pub struct InFlight {
    // A std mutex: it is held only to look up or remove an entry, never across an
    // `.await`, so it cannot block the runtime for long.
    ids: Mutex<HashMap<String, Arc<AsyncMutex<()>>>>,
}

/// Held while a request is being processed; dropping it lets the next twin in.
pub struct Entered<'a> {
    map: &'a InFlight,
    id: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl InFlight {
    /// Waits until no other request with this id is in flight here, then enters.
    pub async fn enter(&self, id: &str) -> Entered<'_> {
        let slot = {
            let mut ids = self.ids.lock().expect("in-flight map poisoned");
            ids.entry(id.to_string()).or_default().clone()
        };
        let guard = slot.lock_owned().await;
        Entered {
            map: self,
            id: id.to_string(),
            guard: Some(guard),
        }
    }

    /// How many ids are in flight (for tests).
    pub fn len(&self) -> usize {
        self.ids.lock().expect("in-flight map poisoned").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let mut ids = self.map.ids.lock().expect("in-flight map poisoned");
        self.guard.take();
        // Counts only change under the map lock: 1 means nobody else holds or awaits
        // this slot, so the entry can go.
        if ids
            .get(&self.id)
            .is_some_and(|slot| Arc::strong_count(slot) == 1)
        {
            ids.remove(&self.id);
        }
    }
}

/// The twin layer: a request waits here while its id is in flight in this process.
pub struct Twins<D> {
    pub in_flight: InFlight,
    pub inner: D,
}

impl<D: Deduct> Deduct for Twins<D> {
    async fn deduct(&self, request: &Request<'_>) -> Answer {
        let _entered = self
            .in_flight
            .enter(&request.deduction.order.request_id)
            .await;
        self.inner.deduct(request).await
    }
}
