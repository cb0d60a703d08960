//! The operator's commands besides `run`: [`check`] (the preflight), [`offsets`] (list, show,
//! reset, accept-config) and [`snapshot`] (ask for a snapshot).
//!
//! Invariants: a command reads and writes only through the rooms below it (the offsets
//! document through `offsets/operator.rs`, Kafka through `kafka/`); none of them runs a
//! pipeline, and none prints a secret.

pub mod check;
pub mod offsets;
pub mod snapshot;
