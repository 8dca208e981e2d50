//! The classic race, made to happen every time with the `after_read` failpoint:
//! request 1 reads the last unit and pauses before writing; request 2 arrives; then
//! request 1 resumes. What each strategy makes of it is the lesson:
//!
//! | strategy | instances | request 2 | outcome |
//! |---|---|---|---|
//! | `unsafe` | 1 or 2 | completes while 1 is paused | one unit sold twice |
//! | `local-mutex` | 2 | completes while 1 is paused (other process, other mutex) | one unit sold twice |
//! | `local-mutex` | 1 | waits for the mutex | 1 sells, 2 is sold out |
//! | `atomic-sql`, `pessimistic` | 1 or 2 | waits for the row lock | 1 sells, 2 is sold out |
//! | `optimistic` | 1 or 2 | completes; 1's compare-and-set fails, it retries | 2 sells, 1 is sold out |

use crate::helpers::{TestApp, fresh_database, spawn_app_on};
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;

/// A bound on waiting for a condition that should hold in milliseconds: reached only
/// when something is broken, never what decides a test.
const PATIENCE: Duration = Duration::from_secs(30);

fn send(app: &TestApp, strategy: &str, request_id: &str) -> tokio::task::JoinHandle<StatusCode> {
    let request = app
        .client
        .post(app.url(&format!("/deduct/{strategy}")))
        .json(&json!({ "product_id": 1, "request_id": request_id }));
    tokio::spawn(async move { request.send().await.unwrap().status() })
}

#[derive(Debug, PartialEq)]
enum Second {
    /// Request 2 finished while request 1 was paused.
    FinishedFirst,
    /// Request 2 was still waiting when request 1 was released.
    Waited,
}

/// How often `app`'s requests passed `before_lock` and `after_lock`, at one moment.
async fn lock_hits(app: &TestApp) -> (u64, u64) {
    let [before, after] = app.hits_of(["before_lock", "after_lock"]).await;
    (before, after)
}

/// Waits until request 2 is seen held up where request 1 holds the product: for a row
/// lock, InnoDB lists a lock on a table of this database (its lock table lists only
/// locks waited for and the locks they wait for); for a lock strategy (a mutex, a
/// distributed lock), request 2 passed `before_lock` on its instance and not
/// `after_lock` (`before` holds both counts from before it was sent): it is at the
/// lock. Panics after [`PATIENCE`]. Whether it was safe is decided by the outcome, not
/// by this.
async fn held_up(strategy: &str, app: &TestApp, before: (u64, u64)) {
    let started = std::time::Instant::now();
    let row_lock = matches!(strategy, "atomic-sql" | "pessimistic");
    loop {
        let seen = if row_lock {
            let waits: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.INNODB_LOCKS \
                 WHERE lock_table LIKE CONCAT('`', DATABASE(), '`.%')",
            )
            .fetch_one(&app.db)
            .await
            .unwrap();
            waits > 0
        } else {
            lock_hits(app).await == (before.0 + 1, before.1)
        };
        if seen {
            return;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "{strategy}: request 2 never seen held up"
        );
        // InnoDB refreshes its lock tables only after a tenth of a second with no read
        // of them: asked more often, they never change.
        let pause = if row_lock { 150 } else { 5 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// Runs the choreography with stock 1 on one or two instances and checks the outcome.
async fn choreography(strategy: &str, instances: usize, second: Second, oversells: bool) {
    let database = fresh_database().await;
    let first = spawn_app_on(&database).await;
    let other = if instances == 2 {
        Some(spawn_app_on(&database).await)
    } else {
        None
    };
    let second_app = other.as_ref().unwrap_or(&first);
    first.stock(1, 1).await;

    first
        .set_failpoint("after_read", json!({"mode": "pause", "count": 1}))
        .await;
    let request_1 = send(&first, strategy, "request-1");
    first.wait_paused("after_read", 1).await;
    let lock_hits_before = lock_hits(second_app).await;
    let mut request_2 = send(second_app, strategy, "request-2");
    // Request 2 either finishes while request 1 is paused, or is seen held up at the
    // lock request 1 holds: each is waited for as a condition, not decided by a delay.
    let early = match second {
        Second::FinishedFirst => tokio::time::timeout(PATIENCE, &mut request_2)
            .await
            .ok()
            .map(Result::unwrap),
        Second::Waited => {
            held_up(strategy, second_app, lock_hits_before).await;
            if request_2.is_finished() {
                Some((&mut request_2).await.unwrap())
            } else {
                None
            }
        }
    };
    let seen = if early.is_some() {
        Second::FinishedFirst
    } else {
        Second::Waited
    };
    if instances == 1 && seen == Second::Waited && strategy == "local-mutex" {
        // It waits at the lock itself: it never got past the mutex to `after_lock`.
        assert_eq!(
            first.hits("after_lock").await,
            1,
            "request 2 is blocked on the mutex"
        );
    }
    first.release("after_read").await;
    let status_1 = request_1.await.unwrap();
    let status_2 = match early {
        Some(status) => status,
        None => request_2.await.unwrap(),
    };

    let state = first.db_state(1).await;
    let label = format!("{strategy} on {instances} instance(s)");
    println!("{label}: request 2 {seen:?}; statuses {status_1} / {status_2}; {state:?}");
    assert_eq!(seen, second, "{label}: request 2");
    if oversells {
        assert_eq!(
            (status_1, status_2),
            (StatusCode::OK, StatusCode::OK),
            "{label}: both sold"
        );
        assert_eq!(
            (state.remaining, state.ledger_sum),
            (0, 2),
            "{label}: {state:?}"
        );
        assert_eq!(state.lost_updates(), 1, "{label}: one lost update");
    } else {
        let mut statuses = [status_1.as_u16(), status_2.as_u16()];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 409], "{label}: one sale, one sold out");
        assert_eq!(
            (state.remaining, state.ledger_sum, state.lost_updates()),
            (0, 1, 0),
            "{label}: {state:?}"
        );
    }
    first.stop().await;
    if let Some(app) = other {
        app.stop().await;
    }
}

/// The control oversells on one instance, every run: stock 1, sold twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_oversells_on_one_instance() {
    choreography("unsafe", 1, Second::FinishedFirst, true).await;
}

/// And on two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_oversells_on_two_instances() {
    choreography("unsafe", 2, Second::FinishedFirst, true).await;
}

/// A process-local mutex does not exclude a request on another instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_mutex_oversells_on_two_instances() {
    choreography("local-mutex", 2, Second::FinishedFirst, true).await;
}

/// On one instance the same choreography is safe: request 2 waits for the mutex.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_mutex_holds_on_one_instance() {
    choreography("local-mutex", 1, Second::Waited, false).await;
}

/// `atomic-sql`: request 1 holds the row lock from its UPDATE; request 2 waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_sql_holds_on_two_instances() {
    choreography("atomic-sql", 2, Second::Waited, false).await;
}

/// `pessimistic`: request 2 waits in its `SELECT ... FOR UPDATE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pessimistic_holds_on_two_instances() {
    choreography("pessimistic", 2, Second::Waited, false).await;
}

/// `optimistic`: nothing blocks request 2; request 1's compare-and-set then fails,
/// its retry reads 0 and it is told the product is sold out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_holds_on_two_instances() {
    choreography("optimistic", 2, Second::FinishedFirst, false).await;
}

/// The same three on one instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_strategies_hold_on_one_instance() {
    choreography("atomic-sql", 1, Second::Waited, false).await;
    choreography("pessimistic", 1, Second::Waited, false).await;
    choreography("optimistic", 1, Second::FinishedFirst, false).await;
}

/// The lock strategies: request 1 holds the lock while paused; request 2, on the other
/// instance, waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_strategies_hold_on_two_instances() {
    choreography("mysql-lock", 2, Second::Waited, false).await;
    choreography("redis-lock", 2, Second::Waited, false).await;
}
