//! Atomic SQL without the `quantity >= ?` guard (scenario 10).
//!
//! No fault is injected: the load runs until the product sells out, and the window is
//! that moment. Without the guard the UPDATE tries to go below zero, and the CHECK
//! constraint refuses it: nothing is oversold, the database is the last net.

use crate::chaos::{Cell, CellVerdict, Lab, Load, Window};
use crate::claims::source;
use anyhow::Context;
use std::time::Duration;

impl Lab {
    /// Scenario 10, atomic SQL without the `quantity >= ?` guard: no fault injected;
    /// the window is the moment the product sold out.
    pub(in crate::chaos) async fn inject_mistake_no_guard(
        &self,
        load: &Load,
        product: i64,
    ) -> anyhow::Result<Window> {
        // The guard's mistake shows only once the product sold out: the load
        // goes on until it has (a slow machine sells the stock later), then
        // meets the CHECK constraint for the rest of the cell.
        let sold_out = async {
            loop {
                let left: i64 =
                    sqlx::query_scalar("SELECT quantity FROM stock WHERE product_id = ?")
                        .bind(product)
                        .fetch_one(&self.db)
                        .await?;
                if left <= 0 {
                    return anyhow::Ok(());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let bound = Duration::from_secs(60);
        tokio::time::timeout(bound, sold_out)
            .await
            .with_context(|| format!("the product did not sell out within {bound:?}"))??;
        let now = load.now();
        Ok(Window::new(now, now))
    }
}

/// Scenario 10, atomic SQL without the guard: the CHECK constraint as the last net.
pub(in crate::chaos) fn why_mistake_no_guard(c: &Cell) -> Option<String> {
    use CellVerdict::*;
    match c.verdict {
        Safe => Some(format!(
            "Without `quantity >= ?` the UPDATE tried to go below zero once the {} units were sold; the CHECK constraint refused it (error 4025) for {} buyers, so nothing was oversold: the constraint is the last net, and the buyers got its error instead of a clean 0-rows refusal.",
            c.sold, c.sold_out
        )),
        _ => None,
    }
}

/// The claim of the write-ups a cell of atomic SQL without the guard speaks to.
pub(in crate::chaos) fn claim_mistake_no_guard(
    c: &Cell,
) -> Option<(&'static str, &'static str, bool)> {
    Some((
        "The database is the final guard: without the UPDATE's guard its CHECK constraint still stops overselling",
        source::MYSQL_LOCKS,
        c.beyond_stock == 0 && c.lost_updates == 0 && c.sold_out > 0,
    ))
}
