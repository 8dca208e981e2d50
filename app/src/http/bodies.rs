//! The request bodies, as the OpenAPI document describes them. The service reads
//! them by hand (`domain::order`, the restock in `routes`) so that a refusal names
//! the field and the rule it broke; nothing parses with these types.

use utoipa::ToSchema;

/// `POST /deduct/{strategy}`'s body: one product, or several all or nothing.
#[derive(ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum DeductRequest {
    One(OneProduct),
    Several(SeveralProducts),
}

/// One product.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct OneProduct {
    #[schema(minimum = 1)]
    pub product_id: i64,
    /// Units; 1 when absent (an explicit `null` is refused).
    #[schema(minimum = 1, maximum = 1000000, nullable = false)]
    pub quantity: Option<i64>,
    /// The idempotency key: a retry with the same id never deducts twice. Generated
    /// when absent (or taken from a valid `X-Request-Id` header).
    #[schema(pattern = "^[A-Za-z0-9._:-]{1,64}$", nullable = false)]
    pub request_id: Option<String>,
    #[serde(flatten)]
    pub hooks: TestHooks,
}

/// Several products, deducted all or nothing (no product twice).
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct SeveralProducts {
    #[schema(min_items = 1, max_items = 100)]
    pub items: Vec<ItemRequest>,
    #[schema(pattern = "^[A-Za-z0-9._:-]{1,64}$", nullable = false)]
    pub request_id: Option<String>,
    #[serde(flatten)]
    pub hooks: TestHooks,
}

/// One line of an order.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct ItemRequest {
    #[schema(minimum = 1)]
    pub product_id: i64,
    /// Units; 1 when absent.
    #[schema(minimum = 1, maximum = 1000000, nullable = false)]
    pub quantity: Option<i64>,
}

/// Test hooks that ride in a deduct body: refused (400) unless the service runs with
/// `--enable-test-hooks`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct TestHooks {
    /// Wait this long between read and write (a slow business step).
    #[schema(minimum = 0, maximum = 60000, nullable = false)]
    pub hold_ms: Option<u64>,
    /// Take the items' locks in the order given, not by product id (a deadlock demo).
    #[schema(nullable = false)]
    pub unsorted: Option<bool>,
    /// Wait after the read until `parties` requests of this name have read.
    #[schema(nullable = false)]
    pub barrier: Option<Barrier>,
    /// Fence the write (lock strategies), overriding the service's `--fencing`.
    #[schema(nullable = false)]
    pub fencing: Option<bool>,
    /// Make a classic mistake instead of the strategy's algorithm (`lock-inside-transaction`, ...).
    #[schema(nullable = false)]
    pub mistake: Option<String>,
}

/// A test hook: a rendezvous of `parties` requests.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct Barrier {
    #[schema(min_length = 1, max_length = 64)]
    pub name: String,
    #[schema(minimum = 2, maximum = 64)]
    pub parties: u64,
}

/// `PUT /stock/{product_id}`'s body: create the product, or restock it into a new
/// epoch.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct Restock {
    #[schema(minimum = 0, maximum = 2147483647)]
    pub quantity: i64,
    /// Split the units into this many bucket rows (for a strategy that sells from split
    /// rows); 0 or absent: not split.
    #[schema(minimum = 0, maximum = 1024, nullable = false)]
    pub buckets: Option<u64>,
}
