//! The rules of `[bridge] group_id` and `[kafka.group_properties]`: the settings under which
//! group membership decides ownership safely.
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

use super::Config;
use crate::error::BridgeError;
use crate::kafka::group::{
    DEFAULT_SESSION_TIMEOUT_MS, MAX_POLL_INTERVAL_MS_DEFAULT, group_property_i64,
};

fn err(field: impl Into<String>, reason: impl Into<String>) -> BridgeError {
    BridgeError::Config {
        field: field.into(),
        reason: reason.into(),
    }
}

/// With a `group_id` and no explicit `lease_ms`: the lease is at most the session timeout.
pub(super) fn default_lease(config: &mut Config) {
    if config.bridge.group_id.is_some() {
        let session =
            u64::try_from(crate::kafka::group::session_timeout_ms(&config.kafka)).unwrap_or(0);
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
        return Err(err(
            "kafka.group_properties",
            "only used with bridge.group_id: set group_id, or remove the table",
        ));
    };
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if group.is_empty() || group.len() > 200 || !group.chars().all(legal) {
        return Err(err(
            "bridge.group_id",
            format!(
                "{group:?}: use 1 to 200 of A-Z a-z 0-9 . _ - (it names the group's control topic)"
            ),
        ));
    }
    let topic = crate::kafka::topics::control(&config.mongodb.offsets_database, group);
    if topic.len() > 249 {
        return Err(err(
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
            return Err(err(
                format!("kafka.group_properties.\"{key}\""),
                "set by the bridge (bridge.group_id, kafka.bootstrap_servers; the control topic \
                 has no offsets to commit): remove it",
            ));
        }
    }
    let int = |key: &str| {
        group_property_i64(&config.kafka, key)
            .map_err(|reason| err(format!("kafka.group_properties.\"{key}\""), reason))
    };
    let session = int("session.timeout.ms")?.unwrap_or(DEFAULT_SESSION_TIMEOUT_MS);
    if i64::try_from(b.lease_ms).unwrap_or(i64::MAX) > session {
        return Err(err(
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
        return Err(err(
            "bridge.shutdown_timeout_ms",
            format!(
                "{} ms is not below the group's max.poll.interval.ms ({poll} ms): a revocation \
                 drains for up to shutdown_timeout_ms inside the consumer's poll; lower it or \
                 raise kafka.group_properties.\"max.poll.interval.ms\"",
                b.shutdown_timeout_ms
            ),
        ));
    }
    crate::kafka::group::validate_properties(&config.kafka, group).map_err(|reason| {
        err(
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
        assert_eq!(field(load("group_id = \"\"", "")), "bridge.group_id");
        // 200 characters of group_id fit with the default offsets_database (247), not with a
        // longer one.
        let long = format!("group_id = \"{}\"", "g".repeat(200));
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
