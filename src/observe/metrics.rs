//! Prometheus metrics: every name is a `const` (`names`), every handle is resolved once per
//! pipeline ([`PipelineMetrics`], [`TopicMetrics`]).
//!
//! - `names.rs`: the names and labels, the public contract;
//! - `registry.rs`: [`Metrics`], the registry of every family, and the scrape-time gauges;
//! - `families.rs`: the per-pipeline families by stage; `handles.rs`: one pipeline's handles;
//! - `group.rs`, `snapshot.rs`, `exactly_once.rs`, `librdkafka.rs`, `heartbeat.rs`,
//!   `routing.rs`: those features' series;
//! - `read`: current values read back (the terminal status, tests).
//!
//! Invariants: labels are bounded sets (pipeline names from the config, operation types, topic
//! names, librdkafka error-code names, error kinds) — never a document id, a token or an error
//! message. A value the bridge cannot know is an absent series, never a made-up number (e.g.
//! [`HISTORY_HEADROOM`] when the server does not report its oldest oplog entry).

mod exactly_once;
mod families;
mod group;
mod handles;
mod heartbeat;
mod librdkafka;
mod names;
pub(crate) mod read;
mod registry;
mod routing;
mod snapshot;

pub use exactly_once::TransactionMetrics;
pub use group::GroupMetrics;
pub use handles::{PipelineMetrics, TopicMetrics};
pub use heartbeat::HeartbeatMetrics;
pub use librdkafka::RdkafkaGauges;
pub use names::*;
pub use registry::Metrics;
pub use snapshot::SnapshotMetrics;

#[cfg(test)]
mod tests;
