//! RedLock over five independent Redis servers: a majority (3 of 5) must grant each
//! acquisition. There is no fencing token; the holder id is the owner tag a resource
//! can check instead.
//!
//! Run: `target/debug/testbed run -- cargo run -p locks --example redlock`
//! (or set `REDIS_URLS` to five comma-separated Redis URLs).

use locks::redlock::RedLock;
use locks::{HolderId, LockOptions, Locker};
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls: Vec<String> = match std::env::var("REDIS_URLS") {
        Ok(urls) => urls.split(',').map(String::from).collect(),
        Err(_) => (6379..6384)
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect(),
    };
    let redlock = RedLock::new(&urls)?.with_node_timeout(Duration::from_millis(100));
    println!("{} nodes, quorum {}", urls.len(), redlock.quorum());
    let locker = Locker::new(redlock);
    let options = LockOptions {
        lease: Duration::from_secs(2),
        ..LockOptions::default()
    };

    let holder = HolderId::random();
    let guard = locker
        .acquire(
            "example:redlock:42",
            &holder,
            &options,
            Duration::from_secs(5),
        )
        .await?;
    println!(
        "held by {} (token {:?}: none, use the holder as owner tag)",
        guard.holder(),
        guard.token()
    );
    let other = locker
        .try_acquire("example:redlock:42", &HolderId::random(), &options)
        .await?;
    println!(
        "a second holder while held: {}",
        if other.is_some() {
            "got in (bug!)"
        } else {
            "refused"
        }
    );
    // Longer than the lease: the watchdog extends it on a majority every lease/3.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    println!("after 2.5 s (lease 2 s): lost = {}", guard.is_lost());
    guard.release().await?;
    Ok(())
}
