//! mongo-kafka-bridge: MongoDB change streams → Kafka, keyed by `documentKey`, with the resume
//! token committed to MongoDB only after Kafka acknowledged every event up to it.
//!
//! Data flow per pipeline: [`source`] (change stream) → [`relay`] ([`encode`], [`sink`],
//! [`window`]) → [`checkpoint`] (offsets collection), supervised by [`pipeline`] and [`app`].

pub mod app;
pub mod check;
pub mod checkpoint;
pub mod config;
pub mod dead_letter;
pub mod delivery;
pub mod encode;
pub mod error;
pub mod event;
pub mod extjson;
pub mod gap;
pub mod health;
pub mod history;
pub mod http;
pub mod kafka_log;
pub mod metrics;
pub mod offsets_cli;
pub mod pipeline;
pub mod relay;
pub mod sink;
pub mod source;
pub mod split;
pub mod status;
pub mod telemetry;
pub mod window;

pub use app::Bridge;
pub use config::Config;
pub use error::BridgeError;
