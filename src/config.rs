//! Configuration: a TOML file, then `MONGO_KAFKA_BRIDGE__SECTION__KEY` environment overrides,
//! validated once at load.
//!
//! Invariants:
//! - A [`Config`] that exists has passed [`Config::validate`]: every error names the TOML path of
//!   the field and the fix, and maps to exit code 2.
//! - Unknown keys are errors (`deny_unknown_fields`), so a typo never silently changes behaviour.
//! - Secrets (the password in `mongodb.uri`, librdkafka `*password*`/`*secret*` properties) never
//!   appear in `Debug` output or error messages; see [`SecretUri`] and [`Config::secrets`].
//!
//! Environment overrides: `MONGO_KAFKA_BRIDGE__MONGODB__URI`, `…__KAFKA__BOOTSTRAP_SERVERS`,
//! `…__KAFKA__TOPIC_PREFIX`, `…__BRIDGE__COMMIT_INTERVAL_MS`, `…__METRICS__LISTEN`, and any
//! librdkafka property as `…__KAFKA__PROPERTIES__SASL_PASSWORD` (after `PROPERTIES__` the name is
//! lowercased and `_` becomes `.`: `sasl.password`). Pipelines are configured in the file only.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;

use crate::error::BridgeError;
use crate::extjson::JsonMode;

mod group;
mod rules;
pub mod transactions;
mod values;

pub use values::{
    Delivery, Format, FullDocument, FullDocumentBeforeChange, OnAmbiguous, OnHistoryLost,
    OnOversize, PropertyValue, SecretUri, SnapshotMode, StartAt, TopicCreation, ValueMode,
};

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
    /// may change pipelines only ([`crate::reload`]).
    #[serde(skip)]
    pub(crate) settings: Settings,
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
                    let shown = if rules::is_secret_property(k) {
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

/// One `[[pipelines]]` entry: one change stream.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// Unique; the offsets document's `_id`.
    pub name: String,
    /// Omit with `collection` to watch the whole deployment.
    pub database: Option<String>,
    /// Omit to watch the whole database.
    pub collection: Option<String>,
    /// Extended JSON array of aggregation stages appended after `$changeStream`.
    pub pipeline: Option<String>,
    /// Default `default`.
    #[serde(default = "default_full_document")]
    pub full_document: FullDocument,
    /// Default `off`.
    #[serde(default = "default_before_change")]
    pub full_document_before_change: FullDocumentBeforeChange,
    /// One topic for everything this pipeline reads; default `<topic_prefix><db>.<coll>`.
    pub topic: Option<String>,
    /// Default `change_event`.
    #[serde(default = "default_value_mode")]
    pub value: ValueMode,
    /// The value's encoding: `json` (default, Extended JSON v2 in the `json` mode) or `bson`
    /// (the server's bytes, untouched).
    #[serde(default = "default_format")]
    pub format: Format,
    /// The key's encoding: `json` (default, canonical Extended JSON) or `bson`.
    #[serde(default = "default_format")]
    pub key_format: Format,
    /// `relaxed` (default) or `canonical`; ignored with `format = "bson"`. See
    /// [`PipelineConfig::json_mode`].
    #[serde(default)]
    pub json: Option<JsonMode>,
    /// What to do with an event JSON cannot carry exactly (a document a parser would read as
    /// another type, invalid UTF-8): `fail` (default), `dead_letter`, `bson`.
    #[serde(default = "default_on_ambiguous")]
    pub on_ambiguous: OnAmbiguous,
    /// Write invalid UTF-8 as U+FFFD instead of applying `on_ambiguous` to it. Default false.
    #[serde(default)]
    pub replace_invalid_utf8: bool,
    /// Follow each delete with a null-value record of the same key. Default `true`.
    #[serde(default = "default_true")]
    pub tombstones: bool,
    /// `now` (default) or an RFC 3339 time; used only when no offset exists.
    #[serde(default = "default_start_at")]
    pub start_at: String,
    /// Default `fail`.
    #[serde(default = "default_on_history_lost")]
    pub on_history_lost: OnHistoryLost,
    /// Default `fail`.
    #[serde(default = "default_on_oversize")]
    pub on_oversize: OnOversize,
    /// Required when `on_oversize` or `on_ambiguous` is `"dead_letter"`.
    pub dead_letter_topic: Option<String>,
    /// `never` (default) or `initial`: a pipeline without a stream position copies its
    /// namespace(s) first (README, "Initial snapshot"), then streams.
    #[serde(default = "default_snapshot")]
    pub snapshot: SnapshotMode,
    /// Extended JSON find filter applied to the copied documents (not to change events).
    pub snapshot_filter: Option<String>,
    /// `at_least_once` (default) or `exactly_once`: Kafka transactions, each committing the
    /// records of up to `max_transaction_events` events with their resume token (README
    /// "Exactly once").
    #[serde(default)]
    pub delivery: Delivery,
    /// With `delivery = "exactly_once"`: a Kafka transaction commits after at most this many
    /// events (or `[bridge] commit_interval_ms`, whichever comes first), never inside a
    /// MongoDB transaction. Default 10000.
    #[serde(default = "default_max_transaction_events")]
    pub max_transaction_events: usize,
    /// Documents per `find`/`getMore` batch of a copy. Default 1000.
    #[serde(default = "default_snapshot_batch_size")]
    pub snapshot_batch_size: u32,
    /// Collections copied at once (database and deployment scopes). Default 2.
    #[serde(default = "default_snapshot_parallelism")]
    pub snapshot_parallelism: usize,
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
}

/// librdkafka's default `queue.buffering.max.messages`.
const RDKAFKA_QUEUE_MESSAGES: usize = 100_000;
/// librdkafka's default `queue.buffering.max.kbytes`.
const RDKAFKA_QUEUE_KBYTES: usize = 1_048_576;

/// The in-flight bounds a pipeline keeps: `[bridge]`'s, lowered to fit the producer queue the
/// user configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlightBounds {
    /// Events enqueued and not delivered: min(`max_in_flight_events`,
    /// ⌊`queue.buffering.max.messages` / 2⌋), as a delete with its tombstone is two records.
    pub events: usize,
    /// Record bytes enqueued and not delivered: min(`max_in_flight_bytes`,
    /// `queue.buffering.max.kbytes` × 1024).
    pub bytes: usize,
    /// `queue.buffering.max.kbytes` × 1024: a record larger than the producer's whole queue can
    /// never be enqueued, so it is refused as too large instead of waiting forever.
    pub queue_bytes: usize,
}

impl BridgeConfig {
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
    /// one-document `find`s on `local.oplog.rs` (see [`crate::history`]).
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
const fn default_full_document() -> FullDocument {
    FullDocument::Default
}
const fn default_before_change() -> FullDocumentBeforeChange {
    FullDocumentBeforeChange::Off
}
const fn default_value_mode() -> ValueMode {
    ValueMode::ChangeEvent
}
const fn default_format() -> Format {
    Format::Json
}
const fn default_on_ambiguous() -> OnAmbiguous {
    OnAmbiguous::Fail
}
const fn default_true() -> bool {
    true
}
fn default_start_at() -> String {
    "now".to_owned()
}
const fn default_on_history_lost() -> OnHistoryLost {
    OnHistoryLost::Fail
}
const fn default_on_oversize() -> OnOversize {
    OnOversize::Fail
}
const fn default_max_transaction_events() -> usize {
    10_000
}
const fn default_snapshot() -> SnapshotMode {
    SnapshotMode::Never
}
const fn default_snapshot_batch_size() -> u32 {
    1000
}
const fn default_snapshot_parallelism() -> usize {
    2
}

impl Config {
    /// Reads `path`, applies environment overrides from the process environment, validates.
    ///
    /// Errors: [`BridgeError::Config`] naming the field (or `--config` when the file cannot be
    /// read or is not TOML).
    pub fn load(path: &Path) -> Result<Self, BridgeError> {
        let text = std::fs::read_to_string(path).map_err(|e| BridgeError::Config {
            field: "--config".into(),
            reason: format!("cannot read {}: {e}", path.display()),
        })?;
        Self::from_toml(&text, std::env::vars())
    }

    /// Parses TOML text, applies `MONGO_KAFKA_BRIDGE__*` overrides from `env`, validates.
    pub fn from_toml(
        text: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, BridgeError> {
        let mut tree: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| BridgeError::Config {
                    field: "--config".into(),
                    reason: format!("not valid TOML: {e}"),
                })?;
        let overrides = rules::apply_env(&mut tree, env)?;
        let mut settings = tree.clone();
        settings.remove("pipelines");
        let lease_set = tree.get("bridge").and_then(|b| b.get("lease_ms")).is_some();
        let mut config: Config = serde_path_to_error::deserialize(toml::Value::Table(tree))
            .map_err(|e| {
                let path = e.path().to_string();
                let reason = e.into_inner().message().to_owned();
                overrides.name_variable(BridgeError::Config {
                    field: field_path(&path, &reason),
                    reason,
                })
            })?;
        config.settings = Settings(settings);
        if !lease_set {
            group::default_lease(&mut config);
        }
        config.validate().map_err(|e| overrides.name_variable(e))?;
        Ok(config)
    }

    /// Checks every rule a well-typed file can still break; see `config/rules.rs`.
    pub fn validate(&self) -> Result<(), BridgeError> {
        rules::validate(self)
    }

    /// Settings that are valid but probably not what was meant, one sentence each naming the
    /// field (`run` logs them at start, `check` prints them as ⚠).
    pub fn warnings(&self) -> Vec<String> {
        rules::warnings(self)
    }

    /// `text` with every secret of this configuration replaced by `***` (see
    /// [`crate::error::redact`]), for messages from the driver or librdkafka.
    pub fn redact(&self, text: &str) -> String {
        self.secrets().iter().fold(text.to_owned(), |text, secret| {
            crate::error::redact(&text, secret)
        })
    }

    /// The in-flight bounds of every pipeline (see [`InFlightBounds`]); valid after
    /// [`Config::validate`], which checks that the queue properties are integers.
    pub fn in_flight_bounds(&self) -> InFlightBounds {
        let queue = |key: &str, default: usize| {
            self.kafka
                .properties
                .get(key)
                .and_then(|v| v.to_string().parse::<usize>().ok())
                .unwrap_or(default)
        };
        // 0 messages means no limit (librdkafka CONFIGURATION.md).
        let messages = match queue("queue.buffering.max.messages", RDKAFKA_QUEUE_MESSAGES) {
            0 => usize::MAX,
            n => n,
        };
        let queue_bytes = queue("queue.buffering.max.kbytes", RDKAFKA_QUEUE_KBYTES)
            .saturating_mul(1024)
            .max(1024);
        let b = &self.bridge;
        InFlightBounds {
            events: b.max_in_flight_events.min(messages / 2).max(1),
            bytes: b.max_in_flight_bytes.min(queue_bytes).max(1),
            queue_bytes,
        }
    }

    /// The producer's default `message.timeout.ms`: `lease_ms − commit_interval_ms − 1000`
    /// (at least 1000), unless `[kafka.properties]` sets it.
    ///
    /// Why: librdkafka fails a queued record locally once it is older than this, checked before
    /// it transmits. A paused owner (SIGSTOP, a long GC-like stall) is taken over only after its
    /// lease lapsed, at least `lease_ms − commit_interval_ms` after its last enqueue; when it
    /// resumes, the records it had queued are then too old to be sent, so they cannot land
    /// after the new owner's newer records of the same documents (per-document order).
    pub fn message_timeout_ms(&self) -> u64 {
        let b = &self.bridge;
        b.lease_ms
            .saturating_sub(b.commit_interval_ms)
            .saturating_sub(1000)
            .max(1000)
    }

    /// `[kafka] transactional_id_prefix`, or its default `mongo-kafka-bridge.<offsets_database>.`.
    pub fn transactional_id_prefix(&self) -> String {
        self.kafka
            .transactional_id_prefix
            .clone()
            .unwrap_or_else(|| format!("mongo-kafka-bridge.{}.", self.mongodb.offsets_database))
    }

    /// The `transactional.id` of `pipeline`'s producer with `delivery = "exactly_once"`:
    /// [`Config::transactional_id_prefix`] + the pipeline name + `.` + the offsets document's
    /// `streamUid` (when known). Stable across restarts and take-overs, so a new producer fences
    /// the previous one (Kafka `transactional.id` semantics, KIP-98); the `streamUid` keeps two
    /// deployments that share a Kafka cluster, an offsets database name and a pipeline name
    /// from fencing each other. A prefix ACL (`--resource-pattern-type prefixed`) on the prefix
    /// covers it.
    pub fn transactional_id(&self, pipeline: &str, stream_uid: Option<&str>) -> String {
        match stream_uid {
            Some(uid) => format!("{}{pipeline}.{uid}", self.transactional_id_prefix()),
            None => format!("{}{pipeline}", self.transactional_id_prefix()),
        }
    }

    /// Whether any pipeline delivers exactly once.
    pub fn any_exactly_once(&self) -> bool {
        self.pipelines
            .iter()
            .any(|p| p.delivery == Delivery::ExactlyOnce)
    }

    /// Every secret in this configuration, for redaction of third-party messages.
    pub fn secrets(&self) -> Vec<String> {
        let uri = &self.mongodb.uri;
        let mut out: Vec<String> = uri.password().into_iter().map(str::to_owned).collect();
        out.extend(uri.option_secrets().into_iter().map(str::to_owned));
        let kafka = &self.kafka;
        for (key, value) in kafka.properties.iter().chain(&kafka.group_properties) {
            if rules::is_secret_property(key) {
                out.push(value.to_string());
            }
        }
        out
    }
}

/// The TOML path an error is about: serde reports a missing field at its parent (`mongodb`, or
/// `.` at the top), so the field's own name is appended from the message.
fn field_path(parent: &str, reason: &str) -> String {
    let parent = if parent == "." { "" } else { parent };
    let missing = reason
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name);
    match (parent, missing) {
        ("", Some(name)) => name.to_owned(),
        (parent, Some(name)) => format!("{parent}.{name}"),
        ("", None) => "(top level)".to_owned(),
        (parent, None) => parent.to_owned(),
    }
}

impl PipelineConfig {
    /// The only pipeline of a minimal valid file whose `[[pipelines]]` entry is `name = "p"`
    /// followed by `body` (for unit tests).
    #[cfg(test)]
    pub(crate) fn for_test(body: &str) -> Self {
        let text = format!(
            "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
             [[pipelines]]\nname = \"p\"\n{body}"
        );
        let mut config =
            Config::from_toml(&text, std::iter::empty()).expect("a valid test pipeline");
        config.pipelines.remove(0)
    }

    /// The Extended JSON mode of JSON values: `json`, or relaxed when unset.
    pub fn json_mode(&self) -> JsonMode {
        self.json.unwrap_or(JsonMode::Relaxed)
    }

    /// Parsed `start_at`; valid after [`Config::validate`].
    pub fn start_at(&self) -> StartAt {
        rules::parse_start_at(&self.start_at).unwrap_or(StartAt::Now)
    }
    /// Whether the pipeline may copy its namespace(s): `snapshot = "initial"` or
    /// `on_history_lost = "snapshot"`.
    pub fn snapshots(&self) -> bool {
        self.snapshot == SnapshotMode::Initial || self.on_history_lost == OnHistoryLost::Snapshot
    }

    /// Parsed `snapshot_filter`; an empty filter when unset. Valid after [`Config::validate`].
    pub fn snapshot_filter(&self) -> bson::Document {
        self.snapshot_filter
            .as_deref()
            .map(rules::parse_filter)
            .and_then(Result::ok)
            .unwrap_or_default()
    }
    /// Parsed `pipeline` stages; empty when unset. Valid after [`Config::validate`].
    pub fn stages(&self) -> Vec<bson::Document> {
        self.pipeline
            .as_deref()
            .map(rules::parse_stages)
            .and_then(Result::ok)
            .unwrap_or_default()
    }
    /// `db`, `db.coll`, or `*` for the whole deployment, for logs and errors.
    pub fn scope(&self) -> String {
        match (&self.database, &self.collection) {
            (Some(db), Some(coll)) => format!("{db}.{coll}"),
            (Some(db), None) => db.clone(),
            _ => "*".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests;
