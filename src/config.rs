//! Configuration: a TOML file, then `MONGO_KAFKA_BRIDGE__SECTION__KEY` environment overrides,
//! validated once at load. This file holds the sections' types; beside it:
//!
//! - `load.rs`: the file and the environment overrides;
//! - `validate.rs`: every rule, and the warnings; `snapshot.rs`, `group.rs`,
//!   `exactly_once.rs` and `debezium.rs`: the rules (and settings) of those features;
//! - `kafka`: what the bridge knows of librdkafka's properties (the one place that names
//!   them, with `group` and `exactly_once`);
//! - [`names`]: the names of the bridge's own topics and collections;
//! - `pipelines.rs`: `[[pipelines]]`; `values.rs`: the value types; `captured.rs`: which
//!   namespaces a pipeline captures; `images.rs`: how it gets its pre-images (and their rule).
//!
//! Invariants:
//! - A [`Config`] that exists has passed [`Config::validate`]: every error names the TOML path of
//!   the field and the fix, and maps to exit code 2.
//! - Unknown keys are errors (`deny_unknown_fields`), so a typo never silently changes behaviour.
//! - Secrets (the password in `mongodb.uri`, librdkafka `*password*`/`*secret*` properties) never
//!   appear in `Debug` output or error messages; see [`SecretUri`] and [`Config::secrets`].

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

pub mod captured;
pub(crate) mod debezium;
pub(crate) mod exactly_once;
pub(crate) mod fields;
pub(crate) mod group;
pub(crate) mod heartbeat;
pub(crate) mod images;
pub(crate) mod kafka;
mod load;
pub mod names;
mod pipelines;
pub(crate) mod routing;
mod snapshot;
mod suggest;
pub(crate) mod unwrap;
mod validate;
mod values;

pub use values::{
    CountCheck, Delivery, Format, FullDocument, FullDocumentBeforeChange, OnAmbiguous,
    OnHistoryLost, OnOversize, OnPipelineFailure, PropertyValue, SecretUri, SnapshotMode, StartAt,
    TopicCreation, ValueMode,
};

pub use debezium::DebeziumSettings;
pub(crate) use fields::FieldRules;
pub use fields::{EmptyUpdates, FieldSettings};
pub use images::PreImages;
pub use kafka::InFlightBounds;
use names::OffsetsLocation;
pub use pipelines::PipelineConfig;
pub use routing::{NamespaceRoute, RoutingSettings};
pub use unwrap::{AddedField, UnwrapDeletes, UnwrapSettings};

/// Prefix of environment overrides; `__` separates path segments.
pub const ENV_PREFIX: &str = "MONGO_KAFKA_BRIDGE__";

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the change streams are read and the offsets are stored.
    pub mongodb: MongoConfig,
    /// Where the records are produced.
    pub kafka: KafkaConfig,
    /// One change stream each; run concurrently.
    #[serde(default)]
    pub pipelines: Vec<PipelineConfig>,
    /// Process-wide tuning.
    #[serde(default)]
    pub bridge: BridgeConfig,
    /// The HTTP endpoint for `/metrics`, `/healthz`, `/readyz`.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// Every setting but `[[pipelines]]`, as loaded (environment overrides applied): a reload
    /// may change pipelines only (the supervisor's reload).
    #[serde(skip)]
    pub(crate) settings: Settings,
    /// The file it was loaded from ([`Config::load`]), for the remedies' `--config` argument.
    #[serde(skip)]
    pub(crate) source: Option<std::path::PathBuf>,
}

/// The loaded settings outside `[[pipelines]]`, compared by a reload. Its `Debug` shows
/// nothing: the table holds the raw URI and properties, secrets included.
#[derive(Clone, Default, PartialEq)]
pub(crate) struct Settings(pub(crate) toml::Table);

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Settings(..)")
    }
}

/// `[mongodb]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MongoConfig {
    /// Connection string; TLS and auth options go in it. Must reach a replica set or mongos.
    pub uri: SecretUri,
    /// Database of the offsets collection. Default `mongo_kafka_bridge`.
    #[serde(default = "default_offsets_database")]
    pub offsets_database: String,
    /// Collection holding one offsets document per pipeline. Default `offsets`.
    #[serde(default = "default_offsets_collection")]
    pub offsets_collection: String,
}

impl MongoConfig {
    /// Where the offsets live: `offsets_database` and `offsets_collection`.
    pub fn offsets(&self) -> OffsetsLocation {
        OffsetsLocation::from((&self.offsets_database, &self.offsets_collection))
    }
}

/// `[kafka]`. Its `Debug` masks secret properties (`*password*`, `*secret*`, `*jaas*`).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// librdkafka `bootstrap.servers`, e.g. `127.0.0.1:9092`.
    pub bootstrap_servers: String,
    /// Prepended to `<db>.<coll>` when a pipeline has no `topic`. Default empty.
    #[serde(default)]
    pub topic_prefix: String,
    /// Any librdkafka producer property; the ones that would break the guarantees are rejected.
    #[serde(default)]
    pub properties: BTreeMap<String, PropertyValue>,
    /// Topics the bridge creates itself before its first record to them (off by default).
    #[serde(default)]
    pub topic_creation: TopicCreation,
    /// With `delivery = "exactly_once"`: the `transactional.id` of a pipeline's producer is this
    /// prefix + the pipeline name. Default `mongo-kafka-bridge.<offsets_database>.` (unique per
    /// deployment as long as deployments keep their offsets apart). See
    /// [`Config::transactional_id`].
    #[serde(default)]
    pub transactional_id_prefix: Option<String>,
    /// librdkafka consumer properties of the group membership (`[bridge] group_id`), on top of
    /// the connection and security properties of `properties`. README "Running several
    /// replicas".
    #[serde(default)]
    pub group_properties: BTreeMap<String, PropertyValue>,
}

impl fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let masked = |table: &BTreeMap<String, PropertyValue>| -> BTreeMap<String, String> {
            table
                .iter()
                .map(|(k, v)| {
                    let shown = if kafka::is_secret_property(k) {
                        "***".to_owned()
                    } else {
                        v.to_string()
                    };
                    (k.clone(), shown)
                })
                .collect()
        };
        f.debug_struct("KafkaConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("topic_prefix", &self.topic_prefix)
            .field("properties", &masked(&self.properties))
            .field("group_properties", &masked(&self.group_properties))
            .field("topic_creation", &self.topic_creation)
            .field("transactional_id_prefix", &self.transactional_id_prefix)
            .finish()
    }
}

/// `[bridge]`: process-wide tuning. Durations in milliseconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BridgeConfig {
    /// How often the safe position is written (ms). Default 1000.
    pub commit_interval_ms: u64,
    /// Drain bound on SIGTERM (ms). Default 30000.
    pub shutdown_timeout_ms: u64,
    /// Per pipeline: enqueued but not yet delivered events. Default 10000.
    pub max_in_flight_events: usize,
    /// Per pipeline: bytes of encoded records enqueued but not delivered. Default 16 MiB.
    pub max_in_flight_bytes: usize,
    /// `maxAwaitTimeMS` of each `getMore` (ms); also how often an idle stream's token advances.
    /// Default 1000.
    pub max_await_time_ms: u64,
    /// Upper bound of the restart backoff (ms). Default 30000.
    pub max_restart_backoff_ms: u64,
    /// `/readyz` fails when the oldest undelivered record is older than this (ms). Default 60000.
    pub ready_max_delivery_age_ms: u64,
    /// How long an owner's lease holds without a renewal (ms); renewed every
    /// `commit_interval_ms`. A standby takes a pipeline over only after it lapsed, and an owner
    /// that could not renew it takes no new event (self-fencing). Longer tolerates slower
    /// offsets writes (a replica-set election takes ~10 s) without a handover; shorter hands a
    /// dead owner's pipeline over sooner. Default 15000.
    pub lease_ms: u64,
    /// `/healthz` fails when a running pipeline's loop (its relay, or its standby watch) has not
    /// ticked for this long (ms). Default 120000.
    pub liveness_timeout_ms: u64,
    /// Consecutive failed runs, for errors that need an operator although they can be momentary
    /// (a topic being created, a replica-set name mismatch), before the pipeline stops with the
    /// fix named. Outages (network, server selection, timeouts, brokers down) retry forever.
    /// Default 10.
    pub persistent_error_attempts: u32,
    /// The Kafka consumer group whose members share the pipelines: each pipeline runs on the
    /// one member the group assigns it to (README "Running several replicas"). Unset
    /// (default): this instance takes every pipeline, and stands by for the ones another
    /// instance took.
    pub group_id: Option<String>,
    /// Threads of the async runtime that runs the pipelines (reading, encoding, enqueueing);
    /// librdkafka runs its own threads besides. 0 (default) = one per pipeline, at most one
    /// per CPU. More threads than pipelines buy nothing: each pipeline's work is sequential,
    /// and work handed between threads costs wake-ups (see BENCHMARKS.md).
    pub worker_threads: usize,
    /// Per pipeline: change events encoded at once on threads beside the pipeline's own (tokio's
    /// blocking threads), ahead of the relay and in the order read. Default 0: every event is
    /// encoded in the pipeline's task. Only events of at least `encode_offload_min_bytes` go
    /// there: handing a smaller one to another thread costs more than its encoding. It can pay
    /// only when the pipeline's own thread is its bottleneck (BENCHMARKS.md, "The encode
    /// pool": on 2 cores shared with the servers it bought nothing measurable).
    pub encode_threads: usize,
    /// Raw change-event size (bytes) from which an event is encoded beside the pipeline's
    /// task (see `encode_threads`). Default 8192.
    pub encode_offload_min_bytes: usize,
    /// What a pipeline's failure that it cannot get past by itself (a fatal error, or a
    /// persistent one after `persistent_error_attempts`) does to the others: `"isolate"`
    /// (default) stops that pipeline only, not ready and named in `/readyz`, until SIGHUP or a
    /// restart runs it again; `"exit"` stops every pipeline and exits non-zero. Either way
    /// the process exits once no pipeline is left running.
    pub on_pipeline_failure: OnPipelineFailure,
}

/// The share of `shutdown_timeout_ms` kept from a stopping pipeline's drain for its final
/// commit and lease release (at most a quarter of the bound): a stop ends within
/// `shutdown_timeout_ms` whatever is down.
pub(crate) const STOP_RESERVE: std::time::Duration = std::time::Duration::from_secs(2);

impl BridgeConfig {
    /// How long a stopping pipeline's relay drains: `shutdown_timeout_ms` less
    /// [`STOP_RESERVE`] (at most a quarter of it).
    pub(crate) fn drain_bound(&self) -> std::time::Duration {
        let bound = std::time::Duration::from_millis(self.shutdown_timeout_ms);
        bound - STOP_RESERVE.min(bound / 4)
    }

    /// The runtime's thread count for `pipelines` pipelines on `cpus` CPUs
    /// (`worker_threads`, or its automatic value when 0); at least 1.
    pub fn runtime_threads(&self, pipelines: usize, cpus: usize) -> usize {
        match self.worker_threads {
            0 => pipelines.min(cpus).max(1),
            n => n,
        }
    }
}

/// `[metrics]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// `host:port` of the HTTP endpoint; port 0 picks a free port. Default `127.0.0.1:9464`.
    pub listen: String,
    /// How often the oplog's oldest and newest entry times are read for the history headroom
    /// metrics (ms); 0 = never (the series are then absent). Default 15000. Each sample is two
    /// one-document `find`s on `local.oplog.rs` (see `crate::observe::history`).
    pub history_interval_ms: u64,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        Self {
            commit_interval_ms: 1000,
            shutdown_timeout_ms: 30_000,
            max_in_flight_events: 10_000,
            max_in_flight_bytes: 16 * 1024 * 1024,
            max_await_time_ms: 1000,
            max_restart_backoff_ms: 30_000,
            ready_max_delivery_age_ms: 60_000,
            lease_ms: 15_000,
            liveness_timeout_ms: 120_000,
            persistent_error_attempts: 10,
            group_id: None,
            worker_threads: 0,
            encode_threads: 0,
            encode_offload_min_bytes: 8192,
            on_pipeline_failure: OnPipelineFailure::Isolate,
        }
    }
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:9464".to_owned(),
            history_interval_ms: 15_000,
        }
    }
}

fn default_offsets_database() -> String {
    "mongo_kafka_bridge".to_owned()
}
fn default_offsets_collection() -> String {
    "offsets".to_owned()
}
impl Config {
    /// `text` with every secret of this configuration replaced by `***` (see
    /// [`crate::error::redact`]), for messages from the driver or librdkafka.
    pub fn redact(&self, text: &str) -> String {
        self.secrets().iter().fold(text.to_owned(), |text, secret| {
            crate::error::redact(&text, secret)
        })
    }

    /// Every secret in this configuration, for redaction of third-party messages.
    pub fn secrets(&self) -> Vec<String> {
        let uri = &self.mongodb.uri;
        let mut out: Vec<String> = uri.password().into_iter().map(str::to_owned).collect();
        out.extend(uri.option_secrets().into_iter().map(str::to_owned));
        let keys = self
            .pipelines
            .iter()
            .filter_map(|p| p.fields.as_ref()?.key());
        out.extend(keys.map(str::to_owned));
        let kafka = &self.kafka;
        for (key, value) in kafka.properties.iter().chain(&kafka.group_properties) {
            if kafka::is_secret_property(key) {
                out.push(value.to_string());
            }
        }
        out
    }
}

impl KafkaConfig {
    /// The `[kafka]` of a minimal valid file with `[kafka.properties]` `properties` (for unit
    /// tests).
    #[cfg(test)]
    pub(crate) fn for_test(properties: &str) -> Self {
        Config::from_toml(
            &format!(
                "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"127.0.0.1:9\"\n\
                 [kafka.properties]\n{properties}\n[[pipelines]]\nname = \"p\"\ndatabase = \"d\"\n"
            ),
            std::iter::empty(),
        )
        .expect("valid")
        .kafka
    }
}

#[cfg(test)]
pub(crate) mod tests;
