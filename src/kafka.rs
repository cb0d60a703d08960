//! Kafka: the one home of everything that talks to librdkafka.
//!
//! - [`sink`]: the pipeline's idempotent producer; enqueueing and flushing.
//! - [`delivery`]: what an enqueued record became (delivered, refused, cancelled), and the future
//!   that stands for one change event in the relay's ordered window.
//! - [`dead_letter`]: the oversize policy's stubs.
//! - [`admin`]: metadata, topic configurations and topic creation (`check`, `[kafka.topic_creation]`).
//! - [`context`]: the clients' librdkafka context: statistics as metrics, logs made actionable.
//! - [`topics`]: which topic a record goes to, and the rule for the bridge's own topics.
//! - [`group`]: the group membership's consumer (`[bridge] group_id`) and its thread.
//! - [`transactions`]: the Kafka transactions of an exactly-once pipeline's producer.
//! - [`progress`]: the progress topic of exactly-once pipelines, and its startup read.
//!
//! Invariants:
//! - The producer always runs with `enable.idempotence=true`, `acks=all`,
//!   `max.in.flight.requests.per.connection=5` and `partitioner=murmur2_random` (the Java
//!   clients' mapping, so a key lands on the same partition whichever client wrote it). Config
//!   validation rejects user properties that contradict them; they are set last so nothing
//!   overrides them (librdkafka `CONFIGURATION.md`, `INTRODUCTION.md` "Idempotent Producer").
//! - Every librdkafka client (producer, admin, consumer) is held in a [`Detached`], so its destroy
//!   (which blocks: purge, a flush of up to 500 ms, joining librdkafka's threads) runs on the
//!   blocking pool, never on a runtime thread that other pipelines and `/healthz` share.
//! - Every property of `[kafka.properties]` is checked by librdkafka itself when the configuration
//!   loads ([`validate_properties`]), so `check` and `run` agree on what is valid.

use std::ops::Deref;

use rdkafka::ClientConfig;

use crate::config::KafkaConfig;

pub(crate) mod admin;
pub(crate) mod context;
pub(crate) mod dead_letter;
pub(crate) mod delivery;
pub mod group;
pub mod limits;
pub mod progress;
pub(crate) mod sink;
pub mod topics;
pub(crate) mod transactions;

/// Properties the bridge sets after the user's, so they always hold.
pub const PROTECTED: [(&str, &str); 4] = [
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("max.in.flight.requests.per.connection", "5"),
    ("partitioner", "murmur2_random"),
];

/// Defaults the user may override in `[kafka.properties]`. `linger.ms = 5` is librdkafka's
/// own default, set explicitly because it is a measured choice: 10 ms doubled the median
/// write → consumer latency at 2 000 events/s with no catch-up gain, 1 ms tripled the p99
/// (more, smaller produce requests); see BENCHMARKS.md.
const DEFAULTS: [(&str, &str); 2] = [("linger.ms", "5"), ("client.id", "mongo-kafka-bridge")];

/// Properties of `[kafka.properties]` that every client (not only the producer) takes: the
/// connection and security settings. Producer-only ones would make an admin client warn.
const SHARED_PREFIXES: [&str; 7] = [
    "security.",
    "sasl.",
    "ssl.",
    "socket.",
    "broker.",
    "client.",
    "api.version",
];

/// The librdkafka producer configuration for `kafka`: the bridge's defaults (with
/// `message.timeout.ms` = `message_timeout_ms`, see [`crate::Config::message_timeout_ms`]), then
/// the user's properties, then the protected ones.
pub fn producer_config(kafka: &KafkaConfig, message_timeout_ms: u64) -> ClientConfig {
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

/// A configuration for metadata and admin calls (and any consumer the bridge adds): bootstrap
/// servers plus the connection and security properties of `[kafka.properties]`.
pub fn admin_config(kafka: &KafkaConfig) -> ClientConfig {
    let mut out = ClientConfig::new();
    out.set("bootstrap.servers", &kafka.bootstrap_servers);
    for (key, value) in &kafka.properties {
        if SHARED_PREFIXES.iter().any(|prefix| key.starts_with(prefix)) {
            out.set(key, value.to_string());
        }
    }
    out
}

/// Checks every property of the producer configuration with librdkafka itself
/// (`rd_kafka_conf_set` on a native configuration; no client is created, nothing is contacted).
///
/// Errors: librdkafka's sentence, e.g. `No such configuration property: "compresion.type"`.
pub fn validate_properties(kafka: &KafkaConfig) -> Result<(), String> {
    producer_config(kafka, 120_000)
        .create_native_config()
        .map(drop)
        .map_err(|e| match e {
            rdkafka::error::KafkaError::ClientConfig(_, description, key, value) => {
                format!("{description} (property {key:?}, value {value:?})")
            }
            other => other.to_string(),
        })
}

/// A value whose drop blocks (a librdkafka client), dropped on the blocking pool when the last
/// owner lets go inside a Tokio runtime, inline otherwise. Dereferences to the value.
pub struct Detached<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> Detached<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> Self {
        Self(Some(value))
    }
}

impl<T: Send + 'static> Deref for Detached<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0
            .as_ref()
            .expect("a Detached holds its value until it is dropped")
    }
}

impl<T: Send + 'static> Drop for Detached<T> {
    fn drop(&mut self) {
        let Some(value) = self.0.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || drop(value));
            }
            Err(_) => drop(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::config::PropertyValue;

    fn kafka(properties: &[(&str, PropertyValue)]) -> KafkaConfig {
        KafkaConfig {
            bootstrap_servers: "127.0.0.1:9".into(),
            topic_prefix: String::new(),
            properties: properties
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            topic_creation: Default::default(),
            transactional_id_prefix: None,
            group_properties: Default::default(),
        }
    }

    #[test]
    fn protected_properties_win_over_user_properties() {
        let kafka = kafka(&[
            ("acks", PropertyValue::Text("1".into())),
            ("linger.ms", PropertyValue::Integer(50)),
        ]);
        let config = producer_config(&kafka, 13_000);
        assert_eq!(config.get("acks"), Some("all"));
        assert_eq!(config.get("enable.idempotence"), Some("true"));
        assert_eq!(config.get("partitioner"), Some("murmur2_random"));
        assert_eq!(config.get("linger.ms"), Some("50"));
        assert_eq!(config.get("message.timeout.ms"), Some("13000"));
    }

    #[test]
    fn librdkafka_judges_every_property() {
        let typo = kafka(&[("compresion.type", PropertyValue::Text("lz4".into()))]);
        let error = validate_properties(&typo).expect_err("unknown property");
        assert_eq!(
            error,
            "No such configuration property: \"compresion.type\" (property \"compresion.type\", \
             value \"lz4\")"
        );
        let bad_value = kafka(&[("compression.type", PropertyValue::Text("brotli".into()))]);
        let error = validate_properties(&bad_value).expect_err("invalid value");
        assert!(error.contains("compression.type"), "{error}");
        let fine = kafka(&[("compression.type", PropertyValue::Text("zstd".into()))]);
        assert_eq!(validate_properties(&fine), Ok(()));
    }

    #[test]
    fn admin_config_takes_only_connection_and_security_properties() {
        let kafka = kafka(&[
            ("security.protocol", PropertyValue::Text("SSL".into())),
            ("linger.ms", PropertyValue::Integer(50)),
        ]);
        let config = admin_config(&kafka);
        assert_eq!(config.get("security.protocol"), Some("SSL"));
        assert_eq!(config.get("linger.ms"), None);
    }

    /// Records the name of the thread that drops it.
    struct Probe(mpsc::Sender<Option<String>>);

    impl Drop for Probe {
        fn drop(&mut self) {
            let name = std::thread::current().name().map(str::to_owned);
            let _ = self.0.send(name);
        }
    }

    #[test]
    fn a_detached_value_is_destroyed_on_the_blocking_pool() {
        // GIVEN a runtime whose only other threads are its blocking pool's, named so
        let runtime = tokio::runtime::Builder::new_current_thread()
            .thread_name("blocking-pool")
            .build()
            .expect("runtime");
        let (tx, rx) = mpsc::channel();
        // WHEN a Detached value is dropped on the runtime thread
        runtime.block_on(async {
            drop(Detached::new(Probe(tx.clone())));
        });
        // THEN its destructor ran on a blocking-pool thread
        let name = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("dropped");
        assert_eq!(name.as_deref(), Some("blocking-pool"));
        // AND outside a runtime it is dropped inline
        drop(Detached::new(Probe(tx)));
        let here = std::thread::current().name().map(str::to_owned);
        assert_eq!(rx.recv().expect("dropped"), here);
        drop(runtime);
    }
}
