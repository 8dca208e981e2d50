//! What the lock tests share: a way to watch a lock's renewals.

pub mod renewals;
