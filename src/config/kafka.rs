//! What the bridge knows of librdkafka's properties: the producer's configuration (the bridge's
//! defaults, the user's `[kafka.properties]`, then the protected settings), the admin client's,
//! the rules `[kafka.properties]` must follow, and what the bridge derives from them: the
//! in-flight bounds, the default `message.timeout.ms`, the producer's batch bound, whether it
//! compresses. With `group.rs` (the group consumer) and `exactly_once.rs` (the transactional
//! producer, the progress reader) beside it, the one place that names librdkafka properties:
//! the Kafka clients (`kafka/`) take their configuration from here.
//!
//! Invariants:
//! - The producer always runs with `enable.idempotence=true`, `acks=all`,
//!   `max.in.flight.requests.per.connection=5` and `partitioner=murmur2_random` (the Java
//!   clients' mapping, so a key lands on the same partition whichever client wrote it). The
//!   rules refuse user properties that contradict them; they are set last so nothing overrides
//!   them (librdkafka `CONFIGURATION.md`, `INTRODUCTION.md` "Idempotent Producer").
//! - Every property of `[kafka.properties]` is checked by librdkafka itself when the
//!   configuration loads ([`validate_properties`]), so `check` and `run` agree on what is valid.
//! - The in-flight bounds fit librdkafka's own queue ([`InFlightBounds`]), so a full queue is
//!   backpressure, never a record that can never be enqueued.

use rdkafka::ClientConfig;

use super::{Config, KafkaConfig};
use crate::error::BridgeError;

/// Properties the bridge sets after the user's, so they always hold.
pub(crate) const PROTECTED: [(&str, &str); 4] = [
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("max.in.flight.requests.per.connection", "5"),
    ("partitioner", "murmur2_random"),
];

/// Defaults the user may override in `[kafka.properties]`. `linger.ms = 5` is librdkafka's
/// own default, set explicitly because it is a measured choice: 10 ms doubled the median
/// write → consumer latency at 2 000 events/s with no catch-up gain, 1 ms tripled the p99
/// (more, smaller produce requests); see BENCHMARKS.md.
/// `reconnect.backoff.max.ms` = [`RECONNECT_BACKOFF_MAX_MS`] for every client.
const DEFAULTS: [(&str, &str); 3] = [
    ("linger.ms", "5"),
    ("client.id", "mongo-kafka-bridge"),
    ("reconnect.backoff.max.ms", RECONNECT_BACKOFF_MAX_MS),
];

/// Every client's default `reconnect.backoff.max.ms` (librdkafka's is 10 000): after a broker
/// restart a client retries its connection at most this long after the broker listens again,
/// so commits resume within seconds (fault scenario `stall`, kill -9 and restart: up to 10.4 s
/// after the broker answered with librdkafka's default). A down broker then costs one connect
/// attempt per client every 2 s.
pub(crate) const RECONNECT_BACKOFF_MAX_MS: &str = "2000";

/// Properties of `[kafka.properties]` that every client (not only the producer) takes: the
/// connection and security settings. Producer-only ones would make an admin client warn.
const SHARED_PREFIXES: [&str; 8] = [
    "reconnect.",
    "security.",
    "sasl.",
    "ssl.",
    "socket.",
    "broker.",
    "client.",
    "api.version",
];

/// Default `statistics.interval.ms` the bridge sets when `[kafka.properties]` does not (ms).
pub(crate) const DEFAULT_STATISTICS_INTERVAL_MS: &str = "5000";

/// librdkafka's default `queue.buffering.max.messages`.
const RDKAFKA_QUEUE_MESSAGES: usize = 100_000;
/// librdkafka's default `queue.buffering.max.kbytes`.
const RDKAFKA_QUEUE_KBYTES: usize = 1_048_576;

/// librdkafka's default of `batch.size` and of `message.max.bytes` (bytes).
const LIBRDKAFKA_DEFAULT: usize = 1_000_000;

/// The librdkafka producer configuration for `kafka`: the bridge's defaults (with
/// `message.timeout.ms` = `message_timeout_ms`, see [`Config::message_timeout_ms`]), then
/// the user's properties, then the protected ones.
pub(crate) fn producer_config(kafka: &KafkaConfig, message_timeout_ms: u64) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &kafka.bootstrap_servers);
    for (key, value) in DEFAULTS {
        config.set(key, value);
    }
    config.set("message.timeout.ms", message_timeout_ms.to_string());
    for (key, value) in &kafka.properties {
        config.set(key, value.to_string());
    }
    for (key, value) in PROTECTED {
        config.set(key, value);
    }
    config
}

/// The configuration of a pipeline's producer: [`producer_config`], then `transactional.id`
/// when given (`delivery = "exactly_once"`), `batch.size` = `batch_size` when given (a topic's
/// limit), and `statistics.interval.ms` = [`DEFAULT_STATISTICS_INTERVAL_MS`] unless
/// `[kafka.properties]` sets it.
pub(crate) fn pipeline_producer_config(
    kafka: &KafkaConfig,
    message_timeout_ms: u64,
    transactional_id: Option<&str>,
    batch_size: Option<usize>,
) -> ClientConfig {
    let mut config = producer_config(kafka, message_timeout_ms);
    if let Some(id) = transactional_id {
        config.set("transactional.id", id);
    }
    if let Some(bytes) = batch_size {
        config.set("batch.size", bytes.to_string());
    }
    if !kafka.properties.contains_key("statistics.interval.ms") {
        config.set("statistics.interval.ms", DEFAULT_STATISTICS_INTERVAL_MS);
    }
    config
}

/// A configuration for metadata and admin calls (and any consumer the bridge adds): bootstrap
/// servers plus the connection and security properties of `[kafka.properties]`.
pub(crate) fn admin_config(kafka: &KafkaConfig) -> ClientConfig {
    let mut out = ClientConfig::new();
    out.set("bootstrap.servers", &kafka.bootstrap_servers)
        .set("reconnect.backoff.max.ms", RECONNECT_BACKOFF_MAX_MS);
    for (key, value) in &kafka.properties {
        if SHARED_PREFIXES.iter().any(|prefix| key.starts_with(prefix)) {
            out.set(key, value.to_string());
        }
    }
    out
}

/// The admin client's configuration: [`admin_config`] with a 5 s socket timeout.
pub(crate) fn admin_client_config(kafka: &KafkaConfig) -> ClientConfig {
    let mut config = admin_config(kafka);
    config.set("socket.timeout.ms", "5000");
    config
}

/// Checks every property of the producer configuration with librdkafka itself
/// (`rd_kafka_conf_set` on a native configuration; no client is created, nothing is contacted).
///
/// Errors: librdkafka's sentence, e.g. `No such configuration property: "compresion.type"`.
pub(crate) fn validate_properties(kafka: &KafkaConfig) -> Result<(), String> {
    producer_config(kafka, 120_000)
        .create_native_config()
        .map(drop)
        .map_err(|e| match e {
            rdkafka::error::KafkaError::ClientConfig(_, description, key, value) => {
                rejected_property(&description, &key, &value)
            }
            other => other.to_string(),
        })
}

/// librdkafka's refusal of property `key`, for an error message. The value is shown only for
/// a property librdkafka knows and whose name is not a secret's: an unknown name may be a
/// misspelled secret (`sasl.passwd`), so its value is never printed.
pub(super) fn rejected_property(description: &str, key: &str, value: &str) -> String {
    if is_secret_property(key) || description.contains("No such configuration property") {
        format!("{description} (property {key:?}; its value is not shown)")
    } else {
        format!("{description} (property {key:?}, value {value:?})")
    }
}

/// True for librdkafka properties whose value is a secret.
pub(super) fn is_secret_property(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("password") || k.contains("secret") || k.contains("jaas") || k == "ssl.key.pem"
}

fn property_i64(config: &Config, key: &str) -> Result<Option<i64>, BridgeError> {
    match config.kafka.properties.get(key) {
        None => Ok(None),
        Some(v) => v.to_string().parse().map(Some).map_err(|_| {
            BridgeError::config(format!("kafka.properties.\"{key}\""), "must be an integer")
        }),
    }
}

/// The rules of `[kafka.properties]` and `[kafka.topic_creation]`: the properties that would
/// break the guarantees are refused, the queue bounds must be integers, then librdkafka itself
/// judges every name and value.
pub(super) fn check_properties(config: &Config) -> Result<(), BridgeError> {
    for (key, value) in &config.kafka.properties {
        let field = format!("kafka.properties.\"{key}\"");
        let text = value.to_string();
        let bad = match key.as_str() {
            "enable.idempotence" if text != "true" => {
                Some("the bridge needs the idempotent producer; remove this property")
            }
            "acks" | "request.required.acks" if !matches!(text.as_str(), "all" | "-1") => {
                Some("must be all (the bridge commits only what every in-sync replica has)")
            }
            "max.in.flight" | "max.in.flight.requests.per.connection"
                if text.parse::<i64>().map_or(true, |n| !(1..=5).contains(&n)) =>
            {
                Some("must be between 1 and 5 (idempotence keeps order only up to 5)")
            }
            "partitioner" if text != "murmur2_random" => {
                Some("must be murmur2_random (the Java clients' key → partition mapping)")
            }
            "transactional.id" => Some(
                "derived per pipeline from [kafka] transactional_id_prefix + the pipeline name \
                 (delivery = \"exactly_once\"); remove it",
            ),
            "delivery.report.only.error" if text != "false" => Some(
                "the bridge commits a position only once Kafka acknowledged every record before \
                 it, which needs every delivery report: remove this property",
            ),
            "bootstrap.servers" | "metadata.broker.list" => {
                Some("set kafka.bootstrap_servers instead")
            }
            "enable.gapless.guarantee" if text != "true" && text != "false" => {
                Some("must be true or false")
            }
            _ => None,
        };
        if let Some(reason) = bad {
            return Err(BridgeError::config(field, reason));
        }
    }
    // The in-flight bounds derive from these (Config::in_flight_bounds).
    for key in ["queue.buffering.max.messages", "queue.buffering.max.kbytes"] {
        property_i64(config, key)?;
    }
    // Then librdkafka itself judges every name and value, so `check` and `run` agree.
    validate_properties(&config.kafka).map_err(|reason| {
        BridgeError::config(
            "kafka.properties",
            format!(
                "{}. Remedy: fix the property's name or value (librdkafka CONFIGURATION.md)",
                config.redact(&reason)
            ),
        )
    })?;
    validate_topic_creation(config)
}

/// librdkafka's durations are 32-bit milliseconds (about 24.8 days), and the producer's
/// `message.timeout.ms` is derived from `lease_ms` ([`Config::message_timeout_ms`]); a lease
/// holds at least 3 commit intervals.
pub(super) fn validate_durations(config: &Config) -> Result<(), BridgeError> {
    const MOST: u64 = i32::MAX as u64;
    let b = &config.bridge;
    let too_long = |field: &str, value: u64, most: u64| {
        BridgeError::config(field, format!("{value} ms is too long: use at most {most}"))
    };
    if b.commit_interval_ms > MOST / 3 {
        return Err(too_long(
            "bridge.commit_interval_ms",
            b.commit_interval_ms,
            MOST / 3,
        ));
    }
    if b.lease_ms > MOST {
        return Err(too_long("bridge.lease_ms", b.lease_ms, MOST));
    }
    Ok(())
}

fn validate_topic_creation(config: &Config) -> Result<(), BridgeError> {
    let t = &config.kafka.topic_creation;
    if !t.enabled {
        return Ok(());
    }
    // librdkafka's CreateTopics refuses more than 100 000 partitions and 10 000 replicas.
    if !(1..=100_000).contains(&t.partitions) {
        return Err(BridgeError::config(
            "kafka.topic_creation.partitions",
            "set the partition count of the topics the bridge creates (1 to 100000)",
        ));
    }
    if t.replication_factor == 0 || !(-1..=10_000).contains(&t.replication_factor) {
        return Err(BridgeError::config(
            "kafka.topic_creation.replication_factor",
            "use -1 (the broker's default.replication.factor) or 1 to 10000",
        ));
    }
    if !matches!(
        t.cleanup_policy.as_str(),
        "delete" | "compact" | "compact,delete" | "delete,compact"
    ) {
        return Err(BridgeError::config(
            "kafka.topic_creation.cleanup_policy",
            "use \"delete\", \"compact\" or \"compact,delete\"",
        ));
    }
    if t.configs.contains_key("cleanup.policy") {
        return Err(BridgeError::config(
            "kafka.topic_creation.configs.\"cleanup.policy\"",
            "set kafka.topic_creation.cleanup_policy instead",
        ));
    }
    Ok(())
}

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

impl Config {
    /// The in-flight bounds of every pipeline (see [`InFlightBounds`]); valid after
    /// [`Config::validate`], which checks that the queue properties are integers.
    pub(crate) fn in_flight_bounds(&self) -> InFlightBounds {
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
    pub(crate) fn message_timeout_ms(&self) -> u64 {
        let b = &self.bridge;
        b.lease_ms
            .saturating_sub(b.commit_interval_ms)
            .saturating_sub(1000)
            .max(1000)
    }
}

/// The most bytes one record batch of the producer holds: the least of `batch.size` and
/// `message.max.bytes` (each `[kafka.properties]` or librdkafka's default) and `cap` (a bound
/// the pipeline learned from a topic).
pub(crate) fn batch_bytes(kafka: &KafkaConfig, cap: Option<usize>) -> usize {
    let property = |key: &str| {
        kafka
            .properties
            .get(key)
            .and_then(|v| v.to_string().parse::<usize>().ok())
            .unwrap_or(LIBRDKAFKA_DEFAULT)
    };
    property("batch.size")
        .min(property("message.max.bytes"))
        .min(cap.unwrap_or(usize::MAX))
}

/// Whether the producer compresses (`compression.type` or its alias `compression.codec` set,
/// and not `none`): the broker then checks compressed batches against `max.message.bytes`, so
/// a record's uncompressed size says nothing about whether it fits.
pub(crate) fn compresses(kafka: &KafkaConfig) -> bool {
    ["compression.type", "compression.codec"].iter().any(|key| {
        kafka
            .properties
            .get(*key)
            .is_some_and(|v| v.to_string() != "none")
    })
}

/// A configuration error about `[kafka]`, from a librdkafka refusal.
pub(crate) fn refusal(config: &Config, what: &str, e: &rdkafka::error::KafkaError) -> BridgeError {
    BridgeError::Config {
        field: "kafka.properties".into(),
        reason: format!(
            "librdkafka refuses the {what}: {}",
            config.redact(&e.to_string())
        ),
    }
}

#[cfg(test)]
mod tests;
