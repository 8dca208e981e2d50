//! The ZooKeeper lock: waiters queue as ephemeral sequential nodes and get the lock in
//! arrival order, each woken by its predecessor's deletion. The fencing token is the
//! node's czxid.
//!
//! Run: `target/debug/testbed run -- cargo run -p locks --example zookeeper`
//! (or set `ZK_CONNECT` to a ZooKeeper connect string).

use locks::zookeeper::ZooKeeperLock;
use locks::{HolderId, LockOptions, Locker};
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let connect = std::env::var("ZK_CONNECT").unwrap_or_else(|_| "127.0.0.1:2181".into());
    let zk =
        ZooKeeperLock::connect(&connect, "/stock-locks-example", Duration::from_secs(6)).await?;
    let locker = Locker::new(zk);
    // The lease is the holder's safety margin while disconnected: below the session.
    let options = LockOptions {
        lease: Duration::from_secs(4),
        ..LockOptions::default()
    };

    // Three buyers queue one after the other; each holds the lock for 100 ms.
    let mut buyers = Vec::new();
    for n in 1..=3 {
        let (locker, options) = (locker.clone(), options.clone());
        buyers.push(tokio::spawn(async move {
            let holder = HolderId::new(format!("buyer-{n}")).expect("a valid holder id");
            let guard = locker
                .acquire("stock/42", &holder, &options, Duration::from_secs(10))
                .await?;
            println!(
                "{holder} holds /stock-locks-example/stock/42, czxid {:?}",
                guard.token()
            );
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
