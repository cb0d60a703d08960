//! The rules of `[bridge] group_id` and `[kafka.group_properties]`: the settings under which
//! group membership decides ownership safely, and the group consumer's librdkafka
//! configuration ([`consumer_config`]).
//!
//! Invariants (checked at load, each error naming the field and the fix):
//! - `lease_ms` ≤ the group's `session.timeout.ms`: an instance the coordinator evicted has
//!   stopped taking events (its lease is stale) by the time its pipelines are assigned to
//!   another member. Without an explicit `lease_ms`, a group lowers the default lease to the
//!   session timeout ([`default_lease`]).
//! - `shutdown_timeout_ms` < `max.poll.interval.ms`: the revoke callback blocks the consumer's
//!   poll while the revoked pipelines drain, for at most `shutdown_timeout_ms`.
//! - `group_id` is usable in a topic name (`[A-Za-z0-9._-]`, at most 200 characters): the
//!   control topic is named after it.

use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;

use super::kafka::admin_config;
use super::{Config, KafkaConfig};
use crate::error::BridgeError;

/// The bridge's default `session.timeout.ms` for the group (ms): an evicted member's slots
/// move after at most this long (librdkafka's own default is 45 000).
pub(crate) const DEFAULT_SESSION_TIMEOUT_MS: i64 = 8_000;
/// librdkafka's default `max.poll.interval.ms` (ms).
pub(crate) const MAX_POLL_INTERVAL_MS_DEFAULT: i64 = 300_000;

/// Defaults the user may override in `[kafka.group_properties]`. The session timeout and
/// heartbeat give failover within ~15 s of a `kill -9` (eviction after the session timeout, the
/// survivors learn of the rebalance at their next heartbeat); real brokers accept sessions from
/// `group.min.session.timeout.ms` (6 000 by default) on.
/// `topic.metadata.refresh.interval.ms`: how soon the group leader notices the control topic's
/// new partitions when another member extended it (librdkafka's default is 5 minutes).
const DEFAULTS: [(&str, &str); 5] = [
    ("session.timeout.ms", "8000"),
    ("heartbeat.interval.ms", "2000"),
    ("partition.assignment.strategy", "cooperative-sticky"),
    ("topic.metadata.refresh.interval.ms", "10000"),
    ("client.id", "mongo-kafka-bridge-group"),
];

/// `key` of `[kafka.group_properties]` as an integer, `None` when unset.
///
/// Errors: a value that is not an integer.
pub(crate) fn group_property_i64(kafka: &KafkaConfig, key: &str) -> Result<Option<i64>, String> {
    match kafka.group_properties.get(key) {
        None => Ok(None),
        Some(v) => v
            .to_string()
            .parse()
            .map(Some)
            .map_err(|_| "must be an integer (ms)".to_owned()),
    }
}

/// The group's `session.timeout.ms` (ms): `[kafka.group_properties]`'s when it is an integer,
/// else [`DEFAULT_SESSION_TIMEOUT_MS`].
pub(crate) fn session_timeout_ms(kafka: &KafkaConfig) -> i64 {
    group_property_i64(kafka, "session.timeout.ms")
        .ok()
        .flatten()
        .unwrap_or(DEFAULT_SESSION_TIMEOUT_MS)
}

/// The group consumer's configuration: connection and security properties of
/// `[kafka.properties]`, the bridge's defaults, `[kafka.group_properties]`, then `group.id` and
/// no offset commits.
pub(crate) fn consumer_config(kafka: &KafkaConfig, group_id: &str) -> ClientConfig {
    let mut config = admin_config(kafka);
    for (key, value) in DEFAULTS {
        config.set(key, value);
    }
    for (key, value) in &kafka.group_properties {
        config.set(key, value.to_string());
    }
    config.set("group.id", group_id);
    config.set("enable.auto.commit", "false");
    config.set("enable.auto.offset.store", "false");
    config
}

/// Checks the group consumer's configuration with librdkafka itself (no client is created).
///
/// Errors: librdkafka's sentence naming the property.
pub(crate) fn validate_properties(kafka: &KafkaConfig, group_id: &str) -> Result<(), String> {
    consumer_config(kafka, group_id)
        .create_native_config()
        .map(drop)
        .map_err(|e| match e {
            KafkaError::ClientConfig(_, description, key, value) => {
                super::kafka::rejected_property(&description, &key, &value)
            }
            other => other.to_string(),
        })
}

/// With a `group_id` and no explicit `lease_ms`: the lease is at most the session timeout.
pub(super) fn default_lease(config: &mut Config) {
    if config.bridge.group_id.is_some() {
        let session = u64::try_from(session_timeout_ms(&config.kafka)).unwrap_or(0);
        config.bridge.lease_ms = config.bridge.lease_ms.min(session);
    }
}

/// Checks the group settings; see the module's invariants.
pub(super) fn validate(config: &Config) -> Result<(), BridgeError> {
    let b = &config.bridge;
    let Some(group) = &b.group_id else {
        if config.kafka.group_properties.is_empty() {
            return Ok(());
        }
        return Err(BridgeError::config(
            "kafka.group_properties",
            "only used with bridge.group_id: set group_id, or remove the table",
        ));
    };
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if group.is_empty() || group.len() > 200 || !group.chars().all(legal) {
        return Err(BridgeError::config(
            "bridge.group_id",
            format!(
                "{group:?}: use 1 to 200 of A-Z a-z 0-9 . _ - (it names the group's control topic)"
            ),
        ));
    }
    let deployment = "0".repeat(super::names::DEPLOYMENT_ID_LEN);
    let topic = super::names::control(&config.mongodb.offsets_database, group, &deployment);
    if topic.len() > 249 {
        return Err(BridgeError::config(
            "bridge.group_id",
            format!(
                "the control topic {topic:?} would be {} characters long; Kafka allows 249: \
                 shorten group_id (or mongodb.offsets_database)",
                topic.len()
            ),
        ));
    }
    for key in ["group.id", "bootstrap.servers", "enable.auto.commit"] {
        if config.kafka.group_properties.contains_key(key) {
            return Err(BridgeError::config(
                format!("kafka.group_properties.\"{key}\""),
                "set by the bridge (bridge.group_id, kafka.bootstrap_servers; the control topic \
                 has no offsets to commit): remove it",
            ));
        }
    }
    if let Some(protocol) = config.kafka.group_properties.get("group.protocol")
        && protocol.to_string() != "classic"
    {
        return Err(BridgeError::config(
            "kafka.group_properties.\"group.protocol\"",
            format!(
                "{protocol}: the bridge runs its group on the classic protocol (README \"Running \
                 several replicas\": with KIP-848 the session timeout is the broker's, 45 s by \
                 default, and failover would take that long); remove it"
            ),
        ));
    }
    let int = |key: &str| {
        group_property_i64(&config.kafka, key).map_err(|reason| {
            BridgeError::config(format!("kafka.group_properties.\"{key}\""), reason)
        })
    };
    let session = int("session.timeout.ms")?.unwrap_or(DEFAULT_SESSION_TIMEOUT_MS);
    if i64::try_from(b.lease_ms).unwrap_or(i64::MAX) > session {
        return Err(BridgeError::config(
            "bridge.lease_ms",
            format!(
                "{} ms outlives the group's session.timeout.ms ({session} ms): an evicted member \
                 would keep publishing after its pipelines were assigned to another; lower \
                 lease_ms (or leave it unset) or raise session.timeout.ms",
                b.lease_ms
            ),
        ));
    }
    let poll = int("max.poll.interval.ms")?.unwrap_or(MAX_POLL_INTERVAL_MS_DEFAULT);
    if i64::try_from(b.shutdown_timeout_ms).unwrap_or(i64::MAX) >= poll {
        return Err(BridgeError::config(
            "bridge.shutdown_timeout_ms",
            format!(
                "{} ms is not below the group's max.poll.interval.ms ({poll} ms): a revocation \
                 drains for up to shutdown_timeout_ms inside the consumer's poll; lower it or \
                 raise kafka.group_properties.\"max.poll.interval.ms\"",
                b.shutdown_timeout_ms
            ),
        ));
    }
    validate_properties(&config.kafka, group).map_err(|reason| {
        BridgeError::config(
            "kafka.group_properties",
            format!(
                "{}. Remedy: fix the property's name or value (librdkafka CONFIGURATION.md, \
                 consumer properties)",
                config.redact(&reason)
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(bridge: &str, group_properties: &str) -> Result<Config, BridgeError> {
        let text = format!(
            "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
             {group_properties}\n[bridge]\n{bridge}\n[[pipelines]]\nname = \"p\"\n\
             database = \"d\"\ncollection = \"c\"\n"
        );
        Config::from_toml(&text, std::iter::empty())
    }

    fn field(result: Result<Config, BridgeError>) -> String {
        match result {
            Err(BridgeError::Config { field, .. }) => field,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn a_group_lowers_the_default_lease_to_the_session_timeout_but_keeps_an_explicit_one() {
        assert_eq!(load("group_id = \"g\"", "").unwrap().bridge.lease_ms, 8000);
        let session = "[kafka.group_properties]\n\"session.timeout.ms\" = 6000";
        assert_eq!(
            load("group_id = \"g\"", session).unwrap().bridge.lease_ms,
            6000
        );
        let explicit = load("group_id = \"g\"\nlease_ms = 5000", "").unwrap();
        assert_eq!(explicit.bridge.lease_ms, 5000);
        assert_eq!(load("", "").unwrap().bridge.lease_ms, 15_000);
    }

    #[test]
    fn unsafe_group_settings_are_refused_naming_the_field() {
        assert_eq!(
            field(load("group_id = \"g\"\nlease_ms = 9000", "")),
            "bridge.lease_ms"
        );
        let poll = "[kafka.group_properties]\n\"max.poll.interval.ms\" = 20000";
        assert_eq!(
            field(load("group_id = \"g\"\nshutdown_timeout_ms = 20000", poll)),
            "bridge.shutdown_timeout_ms"
        );
        assert_eq!(field(load("group_id = \"a/b\"", "")), "bridge.group_id");
        let kip848 = "[kafka.group_properties]\n\"group.protocol\" = \"consumer\"";
        assert_eq!(
            field(load("group_id = \"g\"", kip848)),
            "kafka.group_properties.\"group.protocol\""
        );
        assert_eq!(field(load("group_id = \"\"", "")), "bridge.group_id");
        // 188 characters of group_id fit with the default offsets_database and the deployment
        // identity (247), not with a longer database name.
        let long = format!("group_id = \"{}\"", "g".repeat(188));
        assert!(load(&long, "").is_ok());
        let text = format!(
            "[mongodb]\nuri = \"mongodb://h:1\"\noffsets_database = \"bridge_offsets_of_team\"\n\
             [kafka]\nbootstrap_servers = \"h:1\"\n[bridge]\n{long}\n[[pipelines]]\n\
             name = \"p\"\ndatabase = \"d\"\n"
        );
        assert_eq!(
            field(Config::from_toml(&text, std::iter::empty())),
            "bridge.group_id"
        );
        let alone = "[kafka.group_properties]\n\"session.timeout.ms\" = 6000";
        assert_eq!(field(load("", alone)), "kafka.group_properties");
        let ours = "[kafka.group_properties]\n\"group.id\" = \"x\"";
        assert_eq!(
            field(load("group_id = \"g\"", ours)),
            "kafka.group_properties.\"group.id\""
        );
        let typo = "[kafka.group_properties]\n\"sesion.timeout.ms\" = 6000";
        assert_eq!(
            field(load("group_id = \"g\"", typo)),
            "kafka.group_properties"
        );
        let text = "[kafka.group_properties]\n\"session.timeout.ms\" = \"soon\"";
        assert_eq!(
            field(load("group_id = \"g\"", text)),
            "kafka.group_properties.\"session.timeout.ms\""
        );
    }
}
