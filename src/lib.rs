//! mongo-kafka-bridge: MongoDB change streams → Kafka, keyed by `documentKey`, with the resume
//! token committed to MongoDB only after Kafka acknowledged every event up to it.
//!
//! The design (rooms, the ordering proof, restarts, fencing, shutdown) is in
//! `docs/ARCHITECTURE.md`. Data flow per pipeline: [`source`] (change stream) → `relay`
//! ([`encode`], `kafka`, `window`) → `checkpoint` ([`offsets`] document), supervised by
//! `pipeline` and [`app`], with every failure decided by `pipeline/policy.rs`.

mod checkpoint;
pub mod cli;
pub mod config;
pub mod encode;
pub mod error;
mod event;
pub mod extjson;
pub mod kafka;
mod mongo;
pub mod observe;
pub mod offsets;
mod pipeline;
mod relay;
pub mod snapshot;
pub mod source;
pub mod supervisor;

pub use config::Config;
pub use error::BridgeError;
pub use supervisor::app::Bridge;
