//! The Debezium form's settings (`value = "debezium"` with `[pipelines.debezium]`) and their
//! rules: which of the bridge's settings stand for which of Debezium's, and the combinations
//! Debezium has no record for, refused at load. The feature's pieces are listed in
//! `encode/debezium.rs`.
//!
//! | bridge | Debezium MongoDB connector 3.6 |
//! |---|---|
//! | `[pipelines.debezium] topic_prefix` | `topic.prefix` (topics `<prefix>.<db>.<coll>`, `source.name`, the offsets' `server_id`) |
//! | `[pipelines.debezium] schemas` | the JSON converter's `schemas.enable` |
//! | `full_document = "default"` / `"update_lookup"` (the default in this form) | `capture.mode = change_streams` / `change_streams_update_full` (its default) |
//! | `full_document_before_change = "when_available"` or `"required"` | `capture.mode = …_with_pre_image` |
//! | `tombstones` | `tombstones.on.delete` |
//! | `snapshot = "initial"` / `"never"` | `snapshot.mode = initial` / `no_data` |
//! | `on_history_lost = "fail"` / `"snapshot"` | no offset found in the oplog: fail / `snapshot.mode = when_needed` |
//!
//! Invariant: a pipeline in this form passed [`rules`]: it writes JSON keys and values, never
//! BSON, and never a record Debezium has no form for (a gap it cannot announce is refused).

use serde::Deserialize;

use super::{Format, OnAmbiguous, OnHistoryLost, PipelineConfig, ValueMode};
use crate::error::BridgeError;

/// `[pipelines.debezium]`: the connector settings the Debezium form reproduces.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DebeziumSettings {
    /// Debezium's `topic.prefix`: the records go to `<topic_prefix>.<db>.<coll>` (not under
    /// `[kafka] topic_prefix`), `source.name` is it, and `offsets import debezium` expects it as
    /// the offsets' `server_id`. Required.
    pub topic_prefix: String,
    /// Kafka Connect's JSON converter with `schemas.enable = true`: every key and value is
    /// `{"schema":…,"payload":…}`. Default `false`.
    #[serde(default)]
    pub schemas: bool,
}

/// Gives `full_document` Debezium's default capture mode (`change_streams_update_full`:
/// `update_lookup`) in every `[[pipelines]]` entry of the parsed file that asks for the Debezium
/// form without naming a `full_document`.
pub(super) fn default_capture_mode(tree: &mut toml::Table) {
    let Some(toml::Value::Array(pipelines)) = tree.get_mut("pipelines") else {
        return;
    };
    for pipeline in pipelines.iter_mut().filter_map(toml::Value::as_table_mut) {
        let debezium = pipeline.get("value").and_then(toml::Value::as_str) == Some("debezium");
        if debezium && !pipeline.contains_key("full_document") {
            pipeline.insert(
                "full_document".to_owned(),
                toml::Value::String("update_lookup".to_owned()),
            );
        }
    }
}

/// The rules of the Debezium form for pipeline `p` at TOML path `at`.
///
/// Errors: [`BridgeError::Config`] naming the field and what to write instead.
pub(super) fn rules(p: &PipelineConfig, at: &str) -> Result<(), BridgeError> {
    let error = |key: &str, reason: &str| Err(BridgeError::config(format!("{at}.{key}"), reason));
    let Some(settings) = &p.debezium else {
        if p.value == ValueMode::Debezium {
            return error(
                "debezium",
                "value = \"debezium\" needs [pipelines.debezium] with topic_prefix = \"…\" (the \
                 connector's topic.prefix: topics <prefix>.<db>.<coll>)",
            );
        }
        return Ok(());
    };
    if p.value != ValueMode::Debezium {
        return error(
            "debezium",
            "only used with value = \"debezium\": set that, or remove [pipelines.debezium]",
        );
    }
    let prefix = &settings.topic_prefix;
    let valid = !prefix.is_empty()
        && prefix.len() < 200
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !valid || prefix.starts_with("__") || prefix.ends_with('.') {
        return error(
            "debezium.topic_prefix",
            "use the connector's topic.prefix: 1–199 of [A-Za-z0-9._-], not starting with __ \
             nor ending with . (topics are <prefix>.<db>.<coll>)",
        );
    }
    if p.format != Format::Json || p.key_format != Format::Json {
        let key = if p.format == Format::Json {
            "key_format"
        } else {
            "format"
        };
        return error(
            key,
            "Debezium's records are Kafka Connect JSON converter output: remove it (the form \
             is always JSON)",
        );
    }
    if p.json.is_some() {
        return error(
            "json",
            "has no effect in the Debezium form (Debezium's own JSON writers decide every \
             string): remove it",
        );
    }
    if p.on_ambiguous == OnAmbiguous::Bson {
        return error(
            "on_ambiguous",
            "\"bson\" would put a BSON record among Debezium's JSON ones: use \"fail\" or \
             \"dead_letter\"",
        );
    }
    if p.replace_invalid_utf8 {
        return error(
            "replace_invalid_utf8",
            "not available in the Debezium form: remove it (invalid UTF-8 goes to on_ambiguous)",
        );
    }
    if p.on_history_lost == OnHistoryLost::Skip {
        return error(
            "on_history_lost",
            "\"skip\" would leave a gap no Debezium record can announce (gap markers are not \
             Debezium records): use \"fail\" (Debezium's behaviour) or \"snapshot\" (a new copy, \
             like snapshot.mode = when_needed)",
        );
    }
    Ok(())
}

/// The consumer that reads a Kafka Connect offsets topic (`offsets import debezium
/// --connect-offsets-topic`): the connection and security properties of `[kafka.properties]`,
/// no group commits, `read_committed` (Connect's exactly-once workers write offsets in
/// transactions), the end of a partition reported.
pub(crate) fn offsets_reader_config(kafka: &super::KafkaConfig) -> rdkafka::ClientConfig {
    let mut config = super::kafka::admin_config(kafka);
    config
        .set("group.id", "mongo-kafka-bridge.connect-offsets-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed");
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, FullDocument};

    fn load(body: &str) -> Result<Config, BridgeError> {
        let text = format!(
            "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
             [[pipelines]]\nname = \"p\"\ndatabase = \"shop\"\ncollection = \"orders\"\n{body}"
        );
        Config::from_toml(&text, std::iter::empty())
    }

    fn refused(body: &str) -> (String, String) {
        match load(body) {
            Err(BridgeError::Config { field, reason }) => (field, reason),
            other => panic!("not refused: {other:?}"),
        }
    }

    const FORM: &str = "value = \"debezium\"\n";
    const TABLE: &str = "[pipelines.debezium]\ntopic_prefix = \"dbserver1\"\n";

    #[test]
    fn the_form_defaults_to_debeziums_capture_mode_and_keeps_an_explicit_one() {
        let config = load(&format!("{FORM}{TABLE}")).expect("valid");
        let p = &config.pipelines[0];
        assert_eq!(p.full_document, FullDocument::UpdateLookup);
        let settings = p.debezium.as_ref().expect("settings");
        assert_eq!(settings.topic_prefix, "dbserver1");
        assert!(!settings.schemas);
        let config = load(&format!(
            "{FORM}full_document = \"default\"\n{TABLE}schemas = true\n"
        ))
        .expect("valid");
        assert_eq!(config.pipelines[0].full_document, FullDocument::Default);
        assert!(
            config.pipelines[0]
                .debezium
                .as_ref()
                .is_some_and(|d| d.schemas)
        );
        // Other forms keep the server default.
        let config = load("").expect("valid");
        assert_eq!(config.pipelines[0].full_document, FullDocument::Default);
    }

    #[test]
    fn combinations_debezium_has_no_record_for_are_refused_naming_the_field() {
        let cases = [
            (FORM.to_owned(), "pipelines[0].debezium", "topic_prefix"),
            (TABLE.to_owned(), "pipelines[0].debezium", "only used with"),
            (
                format!("{FORM}[pipelines.debezium]\ntopic_prefix = \"a.\"\n"),
                "pipelines[0].debezium.topic_prefix",
                "topic.prefix",
            ),
            (
                format!("{FORM}format = \"bson\"\n{TABLE}"),
                "pipelines[0].format",
                "JSON converter",
            ),
            (
                format!("{FORM}key_format = \"bson\"\n{TABLE}"),
                "pipelines[0].key_format",
                "JSON converter",
            ),
            (
                format!("{FORM}json = \"canonical\"\n{TABLE}"),
                "pipelines[0].json",
                "no effect",
            ),
            (
                format!("{FORM}on_ambiguous = \"bson\"\n{TABLE}"),
                "pipelines[0].on_ambiguous",
                "dead_letter",
            ),
            (
                format!("{FORM}on_history_lost = \"skip\"\n{TABLE}"),
                "pipelines[0].on_history_lost",
                "when_needed",
            ),
            (
                format!("{FORM}replace_invalid_utf8 = true\n{TABLE}"),
                "pipelines[0].replace_invalid_utf8",
                "on_ambiguous",
            ),
            (
                format!("{FORM}snapshot = \"initial\"\nfull_document = \"default\"\n{TABLE}"),
                "pipelines[0].full_document",
                "update_lookup",
            ),
            (
                format!("{FORM}snapshot = \"initial\"\ntombstones = false\n{TABLE}"),
                "pipelines[0].tombstones",
                "tombstones",
            ),
        ];
        for (body, field, words) in cases {
            let (got, reason) = refused(&body);
            assert_eq!(got, field, "{body}");
            assert!(reason.contains(words), "{body}: {reason}");
        }
    }

    #[test]
    fn debeziums_own_settings_are_accepted() {
        let body = format!(
            "{FORM}snapshot = \"initial\"\non_history_lost = \"snapshot\"\n\
             full_document_before_change = \"when_available\"\ndelivery = \"exactly_once\"\n{TABLE}"
        );
        load(&body).expect("valid");
    }
}
