//! The deduction service called directly, with real servers and no HTTP: what the
//! handler runs after it parsed the body (`Service::deduct`), and the restock beside it.

use crate::helpers::{fresh_database, test_settings};
use locks::{BackendKind, LockError};
use std::error::Error;
use std::sync::Arc;
use std::time::Instant;
use stock_app::Settings;
use stock_app::domain::error::DeductError;
use stock_app::domain::order::{Item, Order};
use stock_app::domain::probe::{Knobs, NoProbe};
use stock_app::service::{Service, ServiceError};
use stock_wire::ErrorCode;

/// A service on a fresh database, its failpoints going nowhere (no test hooks).
async fn service() -> Service {
    service_with(|_| {}).await
}

/// The same, its settings changed by `change` first.
async fn service_with(change: impl FnOnce(&mut Settings)) -> Service {
    let mut settings = test_settings(&fresh_database().await);
    change(&mut settings);
    stock_app::startup::service(&settings, Arc::new(NoProbe))
        .await
        .expect("the service starts")
}

fn order(request_id: &str, product_id: i64, quantity: i32) -> Order {
    Order {
        request_id: request_id.into(),
        items: vec![Item {
            product_id,
            quantity,
        }],
    }
}

/// The sum of a counter family, over its labels.
fn counted(service: &Service, family: &str) -> f64 {
    service
        .metrics
        .registry()
        .gather()
        .iter()
        .filter(|f| f.name() == family)
        .flat_map(|f| f.get_metric())
        .map(|m| m.get_counter().get_value())
        .sum()
}

/// Three units sell to three orders, the fourth is refused with nothing deducted, a
/// retry of the first is answered with its stored sale, and the ledger holds exactly
/// the three: the whole deduction, idempotency included, without a request.
#[tokio::test]
async fn a_deduction_runs_without_http() {
    // Arrange
    let service = service().await;
    service.restock(1, 3, 0).await.expect("restocked");
    let strategy = service.strategy("atomic-sql").expect("served");
    let knobs = Knobs::default();

    // Act
    let mut sold = Vec::new();
    for id in ["a", "b", "c"] {
        let done = service
            .deduct(strategy, &order(id, 1, 1), &knobs, Instant::now())
            .await
            .expect("a unit is there");
        sold.push(done.items[0].remaining);
    }
    let fourth = service
        .deduct(strategy, &order("d", 1, 1), &knobs, Instant::now())
        .await;
    let retried = service
        .deduct(strategy, &order("a", 1, 1), &knobs, Instant::now())
        .await
        .expect("the stored answer");

    // Assert
    assert_eq!(sold, [2, 1, 0]);
    assert!(
        matches!(
            fourth,
            Err(ServiceError::Deduct(DeductError::InsufficientStock {
                product_id: 1,
                available: Some(0),
                ..
            }))
        ),
        "{fourth:?}"
    );
    assert!(retried.duplicate, "{retried:?}");
    assert_eq!(retried.items[0].remaining, 2, "the first sale's own answer");
    let view = service.stock(1).await.expect("the product");
    assert_eq!((view.quantity, view.sold), (0, 3));
    assert_eq!(counted(&service, "stock_locks_deductions_total"), 5.0);
    service.close().await;
}

/// Once the strategy itself saw nothing left, the next refusal comes from the sold-out
/// fast path (the strategy does not run), and a restock ends the mark: the next order
/// sells.
#[tokio::test]
async fn the_fast_path_refuses_and_a_restock_ends_it() {
    // Arrange
    let service = service().await;
    service.restock(7, 1, 0).await.expect("restocked");
    let strategy = service.strategy("pessimistic").expect("served");
    let knobs = Knobs::default();
    service
        .deduct(strategy, &order("only", 7, 1), &knobs, Instant::now())
        .await
        .expect("the one unit");

    // Act
    let by_strategy = service
        .deduct(strategy, &order("late-1", 7, 1), &knobs, Instant::now())
        .await;
    let fast_before = counted(&service, "stock_locks_sold_out_fast_total");
    let by_mark = service
        .deduct(strategy, &order("late-2", 7, 1), &knobs, Instant::now())
        .await;
    let fast_after = counted(&service, "stock_locks_sold_out_fast_total");
    service.restock(7, 1, 0).await.expect("restocked");
    let after_restock = service
        .deduct(strategy, &order("new", 7, 1), &knobs, Instant::now())
        .await;

    // Assert
    for refusal in [&by_strategy, &by_mark] {
        assert!(
            matches!(
                refusal,
                Err(ServiceError::Deduct(DeductError::InsufficientStock { .. }))
            ),
            "{refusal:?}"
        );
    }
    assert_eq!(
        (fast_before, fast_after),
        (0.0, 1.0),
        "the second refusal, not the first, came from the mark"
    );
    assert!(after_restock.is_ok(), "{after_restock:?}");
    service.close().await;
}

/// A name the registry does not hold is refused, naming the strategies served.
#[tokio::test]
async fn an_unknown_strategy_is_named() {
    let service = service().await;

    let refused = service.strategy("no-such-lock").err().expect("refused");

    assert_eq!(refused.code(), ErrorCode::UnknownStrategy);
    assert!(refused.to_string().contains("atomic-sql"), "{refused}");
    service.close().await;
}

/// A lock backend nothing answers for: 503 `backend_unavailable`, and under it the
/// lock's own error, which says it was unreachable (a caller retries later, without
/// reading a message).
#[tokio::test]
async fn a_backend_failure_keeps_its_cause() {
    let service = service_with(|settings| {
        settings.shared.redis_urls = vec!["redis://127.0.0.1:1".into()];
        settings.shared.redis_sentinels.clear();
    })
    .await;
    service.restock(1, 3, 0).await.expect("restocked");
    let strategy = service.strategy("redis-lock").expect("served");

    let refused = service
        .deduct(
            strategy,
            &order("a", 1, 1),
            &Knobs::default(),
            Instant::now(),
        )
        .await
        .expect_err("no lock without Redis");

    assert_eq!(refused.code(), ErrorCode::BackendUnavailable, "{refused}");
    let ServiceError::Deduct(refused) = refused else {
        panic!("{refused:?}");
    };
    let cause = refused.source().and_then(|s| s.downcast_ref::<LockError>());
    let cause = cause.unwrap_or_else(|| panic!("the lock's error kept: {refused:?}"));
    assert_eq!(cause.kind(), Some(BackendKind::Unreachable), "{cause}");
    assert_eq!(service.stock(1).await.expect("the product").quantity, 3);
    service.close().await;
}
