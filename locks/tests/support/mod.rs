//! What the lock tests share: a way to watch a lock's renewals, and a connect that
//! waits for a slow server.

use locks::{BackendKind, LockError};
use std::time::Duration;
use tokio::time::Instant;

pub mod renewals;

/// `connect()` until it connects, for up to `hung`: a server that was slow to answer
/// (a loaded machine) is asked again; any other error fails the test. ZooKeeper's
/// client, told to fail eagerly, gives up after 0.4 of its session timeout, which
/// beside a busy core was not always enough ("NoHosts").
pub async fn retried<T>(connect: impl AsyncFn() -> Result<T, LockError>, hung: Duration) -> T {
    let started = Instant::now();
    loop {
        match connect().await {
            Ok(connected) => return connected,
            Err(e) if started.elapsed() < hung && slow(&e) => {
                // A refused connection fails at once: pause before the next try.
                eprintln!("connect again: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no connection in {:?}: {e}", started.elapsed()),
        }
    }
}

fn slow(e: &LockError) -> bool {
    matches!(
        e.kind(),
        Some(BackendKind::Unreachable | BackendKind::Timeout)
    )
}
