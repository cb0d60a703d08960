//! Observing the bridge from outside: what an operator, an orchestrator or a dashboard reads.
//!
//! - [`health`]: liveness and readiness state, shared between the pipelines and the endpoint;
//! - `http`: `/metrics`, `/healthz`, `/readyz`;
//! - [`metrics`]: the Prometheus names, families and per-pipeline handles;
//! - `history`: the oplog's headroom behind each committed position;
//! - [`status`]: the live terminal status of `run`;
//! - [`telemetry`]: logging, human or JSON.
//!
//! Invariant: nothing here decides what a pipeline does; the pipelines store numbers and
//! flags here (atomics and handles on the hot path), and readers only read them.

pub mod health;
pub(crate) mod history;
pub(crate) mod http;
pub mod metrics;
pub mod status;
pub(crate) mod status_page;
pub mod telemetry;
