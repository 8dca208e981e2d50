//! The deduction request: what a client buys, and its fingerprint (`http::bodies`
//! reads it from JSON).

use sha2::{Digest, Sha256};

/// Longest request_id.
pub const MAX_REQUEST_ID: usize = 64;
/// Largest quantity one item may ask for.
pub const MAX_QUANTITY: i64 = 1_000_000;
/// Most items one order may hold.
pub const MAX_ITEMS: usize = 100;

/// One line of an order: how many units of which product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item {
    pub product_id: i64,
    pub quantity: i32,
}

/// A validated deduction request. All-or-nothing over its items.
#[derive(Debug, Clone)]
pub struct Order {
    /// The idempotency key: the client's, or one the service generated.
    pub request_id: String,
    /// The items in the order the client listed them (no product twice).
    pub items: Vec<Item>,
}

impl Order {
    /// The items sorted by product id: the order in which rows and locks are taken, so
    /// that two orders over the same products never wait on each other in a cycle.
    pub fn by_product(&self) -> Vec<Item> {
        let mut items = self.items.clone();
        items.sort_by_key(|item| item.product_id);
        items
    }

    /// SHA-256 (hex) of what the request asks for: the strategy and the items, in
    /// product order, with the default quantity filled in. Two bodies that ask for
    /// the same thing (`{"product_id": 1}` and `{"items": [{"product_id": 1,
    /// "quantity": 1}]}`) have the same fingerprint; a retry must match it.
    pub fn fingerprint(&self, strategy: &str) -> String {
        let mut hasher = Sha256::new();
        hasher.update(b"deduct/v1\n");
        hasher.update(strategy.as_bytes());
        for item in self.by_product() {
            hasher.update(format!("\n{}:{}", item.product_id, item.quantity).as_bytes());
        }
        hex::encode(hasher.finalize())
    }
}

/// 1 to 64 characters of `[A-Za-z0-9._:-]`.
pub fn is_valid_request_id(s: &str) -> bool {
    (1..=MAX_REQUEST_ID).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}
