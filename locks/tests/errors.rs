//! A backend's failure keeps the backend's own error as its `source` and says its kind
//! ([`LockError::kind`]): a caller tells "not reachable" from "answered with a failure"
//! without reading a message.

use locks::redis::RedisLock;
use locks::{BackendKind, HolderId, LockError, LockOptions, Locker};
use std::error::Error;

/// The Redis client's error under a lock error.
fn redis_source(e: &LockError) -> &redis::RedisError {
    e.source()
        .and_then(|source| source.downcast_ref::<redis::RedisError>())
        .unwrap_or_else(|| panic!("the client's error is kept as the source: {e:?}"))
}

/// Nothing listens on the port: unreachable, with the client's refused connection.
#[tokio::test]
async fn a_server_that_is_not_there_is_unreachable() {
    let Err(e) = RedisLock::connect("redis://127.0.0.1:1").await else {
        panic!("connected to a port nothing listens on");
    };
    assert_eq!(e.kind(), Some(BackendKind::Unreachable), "{e}");
    assert!(redis_source(&e).is_connection_refusal(), "{e:?}");
    assert!(e.to_string().starts_with("lock backend: redis: "), "{e}");
}

/// The lock's key holds a string: Redis answers WRONGTYPE, a failure it replied with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_reply_is_a_failure() {
    let server = testbed::Redis::start("lock-errors").unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("SET")
        .arg("stock:not-a-hash")
        .arg("a string")
        .query_async(&mut conn)
        .await
        .unwrap();
    let locker = Locker::new(RedisLock::connect(&server.url()).await.unwrap());
    let options = LockOptions::default();
    let holder = HolderId::random();
    let Err(e) = locker
        .try_acquire("stock:not-a-hash", &holder, &options)
        .await
    else {
        panic!("a lock on a string key");
    };
    assert_eq!(e.kind(), Some(BackendKind::Failed), "{e}");
    assert_eq!(redis_source(&e).code(), Some("WRONGTYPE"), "{e:?}");
}
