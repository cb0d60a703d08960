//! mongo-kafka-bridge: MongoDB change streams → Kafka, keyed by `documentKey`, with the resume
//! token committed to MongoDB only after Kafka acknowledged every event up to it.
//!
//! The rooms, from the top floor down (each imports only rooms below it; the design, the
//! ordering proofs, restarts, fencing and shutdown are in `docs/ARCHITECTURE.md`):
//!
//! - [`cli`]: the operator's commands (`check`, `offsets`, `snapshot`);
//! - [`supervisor`]: the process and its replicas;
//! - `pipeline`: one pipeline's life and its runs;
//! - the stages, in the order data moves: [`source`] (the change stream and a snapshot's
//!   copies) → [`encode`] (records) → `relay` (the ordered window) → `kafka` (librdkafka) →
//!   `checkpoint` → [`offsets`] (the offsets document);
//! - what they share: [`snapshot`] (its types and proof), `event` (positions, items),
//!   [`observe`] (health, metrics, logs), `mongo` (the client), [`config`], [`error`],
//!   [`extjson`] (the Extended JSON transcoder), [`failpoint`] (where the fault suite makes a
//!   fault land).
//!
//! Public: what the binary, the integration tests and the benchmarks use; under `--cfg fuzzing`
//! (`cargo fuzz`) also `fuzzing`, the fuzz targets' entry points.

mod checkpoint;
pub mod cli;
pub mod config;
pub mod encode;
pub mod error;
mod event;
pub mod extjson;
pub mod failpoint;
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing;
mod kafka;
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
