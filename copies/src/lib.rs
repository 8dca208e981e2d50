//! copy-check: proves that each copy this repository promises can be taken out of it.
//!
//! `copies.toml` at the repository's root lists the copies: each lock backend of the
//! `locks` crate, and each strategy a reader may lift into a service of their own,
//! with the files a copy takes and the crates it needs. For each, copy-check makes a
//! standalone crate from exactly those files, with exactly those crates from
//! crates.io (at this workspace's versions, `Cargo.lock` copied), builds it, and runs
//! a smoke program against a real server from testbed. A crate the algorithm uses but
//! the list lacks fails the build; a file it needs but the list lacks fails it too.

pub mod count;
pub mod make;
pub mod manifest;
