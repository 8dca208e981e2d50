//! Smoke test of the copied `__NAME__` against a real database (written by
//! copy-check): three units sold, the fourth refused, a retry answered once.
use __CRATE__ as copied;
use copied::domain::error::DeductError;
use copied::domain::order::{Item, Order};
use copied::domain::probe::{Knobs, NoProbe, Probe};
use copied::strategies::contract::{Context, Declare, Deducted, Deduction, Started, Strategy};
__USE_IDEMPOTENCY__
use std::sync::Arc;
use std::time::Duration;

__ADAPTER__

__BUILD_FN__

async fn sell(
    strategy: &dyn Strategy,
    pool: &sqlx::MySqlPool,
    probe: &Arc<dyn Probe>,
    request_id: &str,
) -> Result<Deducted, DeductError> {
    let order = Order {
        request_id: request_id.to_string(),
        items: vec![Item { product_id: 1, quantity: 1 }],
    };
    let d = Deduction {
        pool,
        reads: pool,
        order: &order,
        knobs: &Knobs::default(),
        probe,
        strategy: strategy.name(),
        fingerprint: order.fingerprint(strategy.name()),
    };
    __RUN__
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A database of its own, with the schema.
    let server = std::env::var("DATABASE_URL")?;
    let server = server.rsplit_once('/').expect("a database URL").0.to_string();
    let name = format!("copy_check_{}", std::process::id());
    let admin = sqlx::MySqlPool::connect(&server).await?;
    let create = format!("DROP DATABASE IF EXISTS {name}; CREATE DATABASE {name}");
    sqlx::raw_sql(&create).execute(&admin).await?;
    let url = format!("{server}/{name}");
    let pool = sqlx::MySqlPool::connect(&url).await?;
    __SCHEMA__
    sqlx::query("INSERT INTO stock (product_id, quantity, initial_quantity) VALUES (1, 3, 3)")
        .execute(&pool)
        .await?;

    let strategy = build::<copied::__PATH__::__TYPE__, _>(&url, &__SHARED__);
    let probe: Arc<dyn Probe> = Arc::new(NoProbe);
    let started = Started { pool: &pool, probe: &probe };
    let background = strategy.start(&started);

    let mut left = Vec::new();
    for id in ["a", "b", "c"] {
        let sold = sell(&*strategy, &pool, &probe, id).await?;
        left.push(sold.items[0].remaining);
    }
    assert_eq!(left, [2, 1, 0], "three sales, what each left");
    match sell(&*strategy, &pool, &probe, "d").await {
        Err(DeductError::InsufficientStock { .. }) => {}
        other => panic!("the fourth sale: {other:?}"),
    }
    let again = sell(&*strategy, &pool, &probe, "a").await?;
    assert!(again.duplicate, "the retry is answered with the first sale: {again:?}");

    // The record: three orders, three ledger rows, nothing left (a strategy that
    // writes later, such as redis-stock's persister, gets 10 s).
    let mut ledger = 0;
    for _ in 0..100 {
        let count = sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM ledger");
        ledger = count.fetch_one(&pool).await?;
        if ledger == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = sqlx::query_scalar::<_, i32>("SELECT quantity FROM stock WHERE product_id = 1");
    let quantity = left.fetch_one(&pool).await?;
    assert_eq!((ledger, quantity), (3, 0), "ledger rows and what is left");
    if let Some(task) = background {
        task.abort();
    }
    sqlx::raw_sql(&format!("DROP DATABASE {name}")).execute(&admin).await?;
    println!(
        "copy-check {}: 3 sold, the 4th refused, a retry answered once, 3 ledger rows: ok",
        strategy.name()
    );
    Ok(())
}
