//! The MySQL lock table: create the table from the DDL the backend ships, then two
//! holders take turns; the second waits (jittered retries) and gets a larger fencing
//! token.
//!
//! Run: `target/debug/testbed run -- cargo run -p locks --example mysql`
//! (or set `DATABASE_URL` to a MySQL/MariaDB database you may create tables in).

use locks::mysql::MysqlLock;
use locks::{HolderId, LockOptions, Locker};
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/stocklocks".into());
    let lock = MysqlLock::connect(&url, 4).await?;
    lock.create_table().await?; // CREATE TABLE IF NOT EXISTS distributed_lock
    let locker = Locker::new(lock);
    let options = LockOptions::default();

    let first = locker
        .acquire(
            "example:stock:42",
            &HolderId::new("order-1")?,
            &options,
            Duration::from_secs(5),
        )
        .await?;
    println!("order-1 holds the lock, fencing token {:?}", first.token());

    // order-2 waits while order-1 works for 300 ms.
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let holder = HolderId::new("order-2").expect("a valid holder id");
            let guard = locker
                .acquire(
                    "example:stock:42",
                    &holder,
                    &LockOptions::default(),
                    Duration::from_secs(5),
                )
                .await?;
            println!(
                "order-2 got it after {:?}, fencing token {:?}",
                started.elapsed(),
                guard.token()
            );
            guard.release().await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.release().await?;
    waiter.await??;
    Ok(())
}
