//! The Redisson-style Redis lock: re-entry returns the same fencing token, and a
//! waiter is woken by the release's pub/sub message instead of polling.
//!
//! Run: `target/debug/testbed run -- cargo run -p locks --example redis`
//! (or set `REDIS_URLS` to a Redis URL).

use locks::redis::RedisLock;
use locks::{HolderId, LockOptions, Locker};
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls = std::env::var("REDIS_URLS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let url = urls.split(',').next().unwrap_or_default();
    let locker = Locker::new(RedisLock::connect(url).await?);
    let (options, wait) = (LockOptions::default(), Duration::from_secs(5));
    let holder = HolderId::new("order-17")?;

    let outer = locker
        .acquire("example:stock:42", &holder, &options, wait)
        .await?;
    let inner = locker
        .acquire("example:stock:42", &holder, &options, wait)
        .await?;
    println!(
        "order-17 entered twice, tokens {:?} and {:?}",
        outer.token(),
        inner.token()
    );

    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let other = HolderId::random();
            let guard = locker
                .acquire("example:stock:42", &other, &LockOptions::default(), wait)
                .await?;
            let woken = Instant::now();
            guard.release().await.map(|()| woken)
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    inner.release().await?; // one level left: still held
    let released = Instant::now();
    outer.release().await?; // count 0: deleted, and PUBLISH wakes the waiter
    let woken = waiter.await??;
    println!(
        "the waiter got the lock {:?} after the release",
        woken.saturating_duration_since(released)
    );
    Ok(())
}
