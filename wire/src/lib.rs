//! What the service and its clients say to each other, in types both sides use.
//!
//! The service (`stock-app`) writes these on the wire: a strategy's card in `GET
//! /strategies` ([`Family`], [`Trait`], the fault cells it declares), every error
//! body's code ([`ErrorCode`]). The load test (`loadtest`) reads them back into the
//! same types, so it matches enums, never strings, and a name that changes on one
//! side fails to compile on the other instead of failing a run.
//!
//! Small on purpose: `serde` and `strum` only (and `utoipa` with the `openapi`
//! feature, for the service's document).

pub mod card;
pub mod chaos;
pub mod error;

pub use card::{Family, Trait};
pub use chaos::{CellVerdict, ChaosCell, Scenario};
pub use error::ErrorCode;
