//! The domain: what a deduction is, independent of how it is served or how it is
//! made safe. It uses no other module of the crate and knows no HTTP (no actix).
//!
//! - [`order`]: the deduction request, fingerprinted.
//! - [`error`]: what can go wrong in a deduction (not enough stock, the lock lost, a
//!   backend down, ...); the edge maps each to a status.
//! - [`probe`]: the named failpoints a strategy passes and the per-request test
//!   knobs: what the strategies are handed, a no-op unless the service runs its
//!   test hooks.

pub mod error;
pub mod order;
pub mod probe;
