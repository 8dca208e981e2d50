//! The etcd lock: waiters queue as keys under the lock's prefix, each attached to its
//! lease, and get the lock in arrival order, each woken by its predecessor's delete.
//! The fencing token is the key's create revision.
//!
//! Run: `target/debug/testbed run -- cargo run -p locks --example etcd`
//! (or set `ETCD_ENDPOINTS` to `http://host:port,...`).

use locks::etcd::EtcdLock;
use locks::{HolderId, LockOptions, Locker};
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoints =
        std::env::var("ETCD_ENDPOINTS").unwrap_or_else(|_| "http://127.0.0.1:2379".into());
    let endpoints: Vec<String> = endpoints.split(',').map(String::from).collect();
    let locker = Locker::new(EtcdLock::connect(&endpoints, "/stock-locks-example/").await?);

    // Three buyers queue one after the other; each holds the lock for 100 ms.
    let mut buyers = Vec::new();
    for n in 1..=3 {
        let locker = locker.clone();
        buyers.push(tokio::spawn(async move {
            let holder = HolderId::new(format!("buyer-{n}")).expect("a valid holder id");
            let guard = locker
                .acquire(
                    "stock/42",
                    &holder,
                    &LockOptions::default(),
                    Duration::from_secs(10),
                )
                .await?;
            println!("{holder} holds stock/42, revision {:?}", guard.token());
            tokio::time::sleep(Duration::from_millis(100)).await;
            guard.release().await
        }));
        tokio::time::sleep(Duration::from_millis(30)).await; // arrive in order
    }
    for buyer in buyers {
        buyer.await??;
    }
    Ok(())
}
