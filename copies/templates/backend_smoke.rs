//! Smoke test of the copied lock against a real server (written by copy-check).
use __CRATE__ as copied;
use copied::lock::{HolderId, LockOptions, Locker};
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    __CONNECT__
    let locker = Locker::new(lock);
    let key = format!("copy-check-{}", std::process::id());
    let (a, b) = (HolderId::random(), HolderId::random());
    let options = LockOptions {
        lease: Duration::from_millis(600),
        renew: true,
        max_hold: None,
        lock_delay: Duration::ZERO,
    };
    let guard = locker.acquire(&key, &a, &options, Duration::from_secs(5)).await?;
    // Two leases long: only the watchdog's renewals keep the lock.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert!(!guard.is_lost(), "the lock was lost although renewed");
    let second = locker.try_acquire(&key, &b, &options).await?;
    assert!(second.is_none(), "a second holder got in");
    let first = guard.token();
    guard.release().await?;
    let next = locker.acquire(&key, &b, &options, Duration::from_secs(5)).await?;
    if let (Some(first), Some(second)) = (first, next.token()) {
        assert!(second > first, "token {second} after {first}");
    }
    let second = next.token();
    next.release().await?;
    println!(
        "copy-check {}: acquire, renew past two leases, refuse a second holder, release: ok \
         (tokens {first:?} then {second:?})",
        locker.name()
    );
    Ok(())
}
