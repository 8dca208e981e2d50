//! The Redis lock's tokens stay ahead of every token handed out before, also after
//! Redis lost its data (restarted empty): the next holder is not refused by a fence
//! that saw the old tokens. On a private server it restarts.

use locks::redis::RedisLock;
use locks::{HolderId, LockOptions, Locker};
use std::time::Duration;

/// Three acquisitions, a restart with no persistence (the key's last token is gone),
/// and the next acquisition's token is still larger than all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_stay_ahead_after_redis_restarted_empty() {
    let mut server = testbed::Redis::start("redis-restart-tokens").unwrap();
    let locker = Locker::new(RedisLock::connect(&server.url()).await.unwrap());
    let options = LockOptions {
        lease: Duration::from_secs(5),
        renew: false,
        max_hold: None,
        lock_delay: Duration::ZERO,
    };
    let mut last = 0;
    for _ in 0..3 {
        let guard = locker
            .try_acquire("stock:restart", &HolderId::random(), &options)
            .await
            .unwrap()
            .expect("free");
        let token = guard.token().expect("the Redis lock fences");
        assert!(token > last, "{token} after {last}");
        last = token;
        guard.release().await.unwrap();
    }

    server.restart().unwrap();
    // The connection manager reconnects on the first command after the restart.
    let mut after = None;
    for _ in 0..50 {
        match locker
            .try_acquire("stock:restart", &HolderId::random(), &options)
            .await
        {
            Ok(acquired) => {
                after = acquired;
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    let guard = after.expect("free after the restart");
    let token = guard.token().unwrap();
    println!("last token before the restart {last}, first after {token}");
    assert!(token > last, "{token} after the restart, {last} before");
    guard.release().await.unwrap();
}
