//! The settings of `delivery = "exactly_once"`: the rules under which a pipeline's Kafka
//! transactions can commit (README "Exactly once"), the producers' `transactional.id`
//! ([`Config::transactional_id`]), and the librdkafka configuration of the progress topic and
//! its startup reader.
//!
//! Invariants (checked at load, each error naming the field and the fix):
//! - `transactional.id` is never set in `[kafka.properties]`: it is derived per pipeline
//!   ([`Config::transactional_id`]), so two pipelines never share one and a restart fences
//!   the previous producer.
//! - With an exactly-once pipeline, `message.timeout.ms` ≤ `transaction.timeout.ms`
//!   (librdkafka refuses a transactional producer otherwise, `CONFIGURATION.md`), and
//!   `transaction.timeout.ms` leaves room for a commit interval and a commit
//!   ([`min_transaction_timeout_ms`]).
//! - `max_transaction_events` is 1–1 000 000.
//! - librdkafka is at least [`MIN_LIBRDKAFKA`] (1.6.1): before it, `commit_transaction` could
//!   succeed although messages of the transaction had timed out (librdkafka 1.5.2 and 1.6.1
//!   changelogs), which would commit a position past records that never reached Kafka. The
//!   bundled one is 2.12.1; the check guards a build against an older system library.

use rdkafka::ClientConfig;

use super::kafka::admin_config;
use super::{Config, Delivery, KafkaConfig, PropertyValue, TopicCreation};
use crate::error::BridgeError;

/// librdkafka's default `transaction.timeout.ms`.
pub(crate) const DEFAULT_TRANSACTION_TIMEOUT_MS: u64 = 60_000;

fn property_u64(config: &Config, key: &str) -> Result<Option<u64>, BridgeError> {
    match config.kafka.properties.get(key) {
        None => Ok(None),
        Some(v) => v.to_string().parse().map(Some).map_err(|_| {
            BridgeError::config(
                format!("kafka.properties.\"{key}\""),
                "must be a non-negative integer (ms)",
            )
        }),
    }
}

/// `transaction.timeout.ms` of the producers (ms): `[kafka.properties]`'s, else librdkafka's
/// default. Valid after [`validate`].
pub(crate) fn transaction_timeout_ms(config: &Config) -> u64 {
    property_u64(config, "transaction.timeout.ms")
        .ok()
        .flatten()
        .unwrap_or(DEFAULT_TRANSACTION_TIMEOUT_MS)
}

/// The smallest `transaction.timeout.ms` accepted (ms): two commit intervals and 5 s for the
/// commit itself. A Kafka transaction spans at most one commit interval plus the wait for the
/// end of a MongoDB transaction; the coordinator aborts it after the timeout.
pub(crate) fn min_transaction_timeout_ms(config: &Config) -> u64 {
    config.bridge.commit_interval_ms.saturating_mul(2) + 5_000
}

/// `segment.ms` of the progress topic the bridge creates (10 minutes): compaction only cleans
/// closed segments, so this bounds what a startup read covers beyond one record per pipeline.
pub(crate) const SEGMENT_MS: i64 = 600_000;

/// How the bridge creates the progress topic: one partition, compacted with `segment.ms` =
/// [`SEGMENT_MS`], the configured replication factor.
pub(crate) fn progress_topic_creation(config: &Config) -> TopicCreation {
    TopicCreation {
        enabled: true,
        partitions: 1,
        replication_factor: config.kafka.topic_creation.replication_factor,
        cleanup_policy: "compact".to_owned(),
        configs: [("segment.ms".to_owned(), PropertyValue::Integer(SEGMENT_MS))]
            .into_iter()
            .collect(),
    }
}

/// The configuration of the progress topic's startup reader: the connection and security
/// properties ([`admin_config`]), a group id of its own (it commits nothing), the partition's
/// end reported, and `isolation.level` = `isolation`.
pub(crate) fn progress_reader_config(kafka: &KafkaConfig, isolation: &str) -> ClientConfig {
    let mut config = admin_config(kafka);
    config
        .set("group.id", "mongo-kafka-bridge.progress-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation);
    config
}

impl Config {
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
    pub(crate) fn any_exactly_once(&self) -> bool {
        self.pipelines
            .iter()
            .any(|p| p.delivery == Delivery::ExactlyOnce)
    }
}

/// The oldest librdkafka (`rd_kafka_version()`, 0xMMmmrrpp) an exactly-once pipeline runs on.
pub(crate) const MIN_LIBRDKAFKA: (i32, &str) = (0x0106_01ff, "1.6.1");

/// The running librdkafka against `min`: an error naming both, when it is older.
fn librdkafka_at_least(running: (i32, &str), min: (i32, &str)) -> Result<(), String> {
    if running.0 >= min.0 {
        return Ok(());
    }
    Err(format!(
        "librdkafka {} is older than {}, the first whose commit_transaction fails when a \
         message of the transaction timed out; build with the bundled librdkafka (rdkafka's \
         default features) or a system librdkafka {} or later",
        running.1, min.1, min.1
    ))
}

/// Checks the exactly-once settings; see the module's invariants.
pub(super) fn validate(config: &Config) -> Result<(), BridgeError> {
    if let Some(prefix) = &config.kafka.transactional_id_prefix
        && (prefix.is_empty() || prefix.len() > 200)
    {
        return Err(BridgeError::config(
            "kafka.transactional_id_prefix",
            "must be 1–200 characters (the pipeline name is appended); remove it for the \
             default mongo-kafka-bridge.<offsets_database>.",
        ));
    }
    for (i, p) in config.pipelines.iter().enumerate() {
        if !(1..=1_000_000).contains(&p.max_transaction_events) {
            return Err(BridgeError::config(
                format!("pipelines[{i}].max_transaction_events"),
                "events per Kafka transaction: use 1–1000000 (default 10000)",
            ));
        }
    }
    if !config
        .pipelines
        .iter()
        .any(|p| p.delivery == Delivery::ExactlyOnce)
    {
        return Ok(());
    }
    let (version, text) = rdkafka::util::get_rdkafka_version();
    if let Err(reason) = librdkafka_at_least((version, &text), MIN_LIBRDKAFKA) {
        let i = config
            .pipelines
            .iter()
            .position(|p| p.delivery == Delivery::ExactlyOnce)
            .unwrap_or(0);
        return Err(BridgeError::config(
            format!("pipelines[{i}].delivery"),
            reason,
        ));
    }
    let transaction = transaction_timeout_ms(config);
    property_u64(config, "transaction.timeout.ms")?;
    let least = min_transaction_timeout_ms(config);
    if transaction < least {
        return Err(BridgeError::config(
            "kafka.properties.\"transaction.timeout.ms\"",
            format!(
                "{transaction} is too short for delivery = \"exactly_once\": a transaction \
                 spans a commit interval and its commit; use at least {least} (2 × \
                 commit_interval_ms + 5000), or remove it for librdkafka's 60000"
            ),
        ));
    }
    if let Some(message) = property_u64(config, "message.timeout.ms")?
        && (message == 0 || message > transaction)
    {
        return Err(BridgeError::config(
            "kafka.properties.\"message.timeout.ms\"",
            format!(
                "{message} is above transaction.timeout.ms ({transaction}) or unbounded: \
                 librdkafka refuses that on a transactional producer (delivery = \
                 \"exactly_once\"); remove it (the bridge derives one) or lower it"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_older_librdkafka_is_refused_naming_both_versions() {
        let min = super::MIN_LIBRDKAFKA;
        assert!(super::librdkafka_at_least((0x020c_01ff, "2.12.1"), min).is_ok());
        assert!(super::librdkafka_at_least((0x0106_01ff, "1.6.1"), min).is_ok());
        let refused = super::librdkafka_at_least((0x0105_03ff, "1.5.3"), min).unwrap_err();
        assert!(
            refused.contains("1.5.3") && refused.contains("1.6.1"),
            "{refused}"
        );
        let (running, _) = rdkafka::util::get_rdkafka_version();
        assert!(running >= min.0, "the bundled librdkafka passes");
    }

    use super::*;

    fn parse(kafka: &str, pipeline: &str) -> Result<Config, BridgeError> {
        let text = format!(
            "[mongodb]\nuri = \"mongodb://h:1\"\noffsets_database = \"ops\"\n[kafka]\n\
             bootstrap_servers = \"h:1\"\n{kafka}\n[[pipelines]]\nname = \"orders\"\n\
             database = \"shop\"\n{pipeline}"
        );
        Config::from_toml(&text, std::iter::empty())
    }

    fn field_of(result: Result<Config, BridgeError>) -> (String, String) {
        match result {
            Err(BridgeError::Config { field, reason }) => (field, reason),
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn the_transactional_id_is_the_prefix_the_pipeline_name_and_the_stream_uid() {
        let config = parse("", "delivery = \"exactly_once\"").expect("valid");
        assert_eq!(config.pipelines[0].delivery, Delivery::ExactlyOnce);
        assert_eq!(config.pipelines[0].max_transaction_events, 10_000);
        assert_eq!(
            config.transactional_id("orders", Some("6740aa")),
            "mongo-kafka-bridge.ops.orders.6740aa"
        );
        let custom = parse("transactional_id_prefix = \"eu-1/\"", "").expect("valid");
        assert_eq!(custom.pipelines[0].delivery, Delivery::AtLeastOnce);
        assert_eq!(
            custom.transactional_id("orders", Some("6740aa")),
            "eu-1/orders.6740aa"
        );
    }

    #[test]
    fn a_message_timeout_above_the_transaction_timeout_is_refused_in_exactly_once_only() {
        let properties = "[kafka.properties]\n\"message.timeout.ms\" = 70000";
        let (field, reason) = field_of(parse(properties, "delivery = \"exactly_once\""));
        assert_eq!(field, "kafka.properties.\"message.timeout.ms\"");
        assert!(
            reason.contains("transaction.timeout.ms (60000)"),
            "{reason}"
        );
        parse(properties, "").expect("at-least-once keeps any message.timeout.ms");
        let raised = "[kafka.properties]\n\"message.timeout.ms\" = 70000\n\
                      \"transaction.timeout.ms\" = 90000";
        parse(raised, "delivery = \"exactly_once\"").expect("within the transaction timeout");
    }

    #[test]
    fn a_transaction_timeout_shorter_than_two_commit_intervals_is_refused() {
        let properties = "[kafka.properties]\n\"transaction.timeout.ms\" = 6000";
        let (field, reason) = field_of(parse(properties, "delivery = \"exactly_once\""));
        assert_eq!(field, "kafka.properties.\"transaction.timeout.ms\"");
        assert!(reason.contains("use at least 7000"), "{reason}");
    }

    #[test]
    fn bounds_and_prefix_are_checked() {
        let (field, _) = field_of(parse("", "max_transaction_events = 0"));
        assert_eq!(field, "pipelines[0].max_transaction_events");
        let (field, _) = field_of(parse("transactional_id_prefix = \"\"", ""));
        assert_eq!(field, "kafka.transactional_id_prefix");
        let (field, reason) = field_of(parse("", "delivery = \"twice\""));
        assert!(field.contains("delivery"), "{field}: {reason}");
    }
}
