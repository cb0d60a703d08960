//! The value types of the configuration: enums of the documented choices, librdkafka property
//! values, and the redacting connection-string wrapper.
//!
//! Invariant: [`SecretUri`]'s `Debug` never shows the password.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

/// A librdkafka property value as written in TOML (librdkafka takes strings).
#[derive(Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum PropertyValue {
    /// `"lz4"`.
    Text(String),
    /// `5`.
    Integer(i64),
    /// `true`.
    Bool(bool),
    /// `0.5`.
    Float(f64),
}

impl fmt::Display for PropertyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Text(s) => f.write_str(s),
            Self::Integer(i) => write!(f, "{i}"),
            Self::Bool(b) => write!(f, "{b}"),
            Self::Float(x) => write!(f, "{x}"),
        }
    }
}

impl fmt::Debug for PropertyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

/// `full_document`: MongoDB's `fullDocument` change stream option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FullDocument {
    /// Server default: no `fullDocument` on updates.
    Default,
    /// Look the document up when the update is read (may be newer, or null if deleted since).
    UpdateLookup,
    /// Post-image when the collection records them.
    WhenAvailable,
    /// Post-image, or the stream fails.
    Required,
}

/// `full_document_before_change`: MongoDB's `fullDocumentBeforeChange` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FullDocumentBeforeChange {
    /// No pre-image.
    Off,
    /// Pre-image when the collection records them.
    WhenAvailable,
    /// Pre-image, or the stream fails.
    Required,
}

/// `value`: what a record's value holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueMode {
    /// The whole change event.
    ChangeEvent,
    /// `fullDocument` only (null for deletes and vanished documents).
    Document,
    /// The document after the change as a flat record (`[pipelines.unwrap]`,
    /// README "The unwrapped form").
    Unwrapped,
    /// The records of Debezium's MongoDB connector 3.6 with Kafka Connect's JSON converter
    /// (`[pipelines.debezium]`, README "The Debezium form").
    Debezium,
}

/// `format` and `key_format`: how a record's value or key is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// Extended JSON v2 (a key: canonical; a value: the pipeline's `json` mode).
    Json,
    /// BSON, as the server sent it.
    Bson,
}

/// `on_ambiguous`: an event that Extended JSON cannot carry exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnAmbiguous {
    /// Stop the pipeline with an error naming the document key, the field and the fix.
    Fail,
    /// Publish a stub with the reason to `dead_letter_topic` instead; the event then counts as
    /// delivered.
    DeadLetter,
    /// Publish that one event as BSON (`mongo.format = bson`).
    Bson,
}

/// `on_history_lost`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnHistoryLost {
    /// Stop with an actionable error; the offset is left as is.
    Fail,
    /// Restart at the current cluster time and publish a gap marker record to every partition
    /// of every topic the pipeline writes, so every consumer group learns of the gap.
    Skip,
    /// Publish gap markers, then copy the namespace(s) again (a re-sync, with
    /// `snapshot_start`/`snapshot_end` markers), then stream from the current time.
    Snapshot,
}

/// `snapshot`: whether a pipeline copies its existing documents before streaming.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotMode {
    /// Stream only.
    Never,
    /// A pipeline without a stream position copies its namespace(s) first.
    Initial,
}

/// `snapshot_count_check`: what a copy whose count disagrees with the collection's does
/// (README "Initial snapshot").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CountCheck {
    /// Stop the pipeline with an error naming the namespace and the counts.
    #[default]
    Fail,
    /// Log a warning, count it in `…_snapshot_count_mismatch_total`, and finish the copy.
    Warn,
}

/// `delivery`: how often each change event reaches Kafka (README "Exactly once").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Every event at least once: after a crash, the events after the last commit are
    /// published again (consumers can detect them by `mongo.resume_token`).
    #[default]
    AtLeastOnce,
    /// Records in Kafka transactions with the resume token in the same transaction (a progress
    /// record): a `read_committed` consumer reads every event exactly once.
    ExactlyOnce,
}

/// `[bridge] on_pipeline_failure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnPipelineFailure {
    /// Stop the failed pipeline only; the others run on.
    Isolate,
    /// Stop every pipeline and exit non-zero (a process manager restarts the whole process).
    Exit,
}

/// `on_oversize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnOversize {
    /// Stop the pipeline with an actionable error.
    Fail,
    /// Publish a small stub (key, headers, `mongo.error`, size, reason) to `dead_letter_topic`
    /// instead; the event then counts as delivered.
    DeadLetter,
}

/// Where a pipeline starts when it has no offset yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// The current time.
    Now,
    /// `startAtOperationTime` at this many seconds since the Unix epoch.
    Timestamp(u32),
}

/// A MongoDB connection string whose password is never printed.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct SecretUri(String);

impl SecretUri {
    /// Wraps a connection string.
    pub fn new(uri: impl Into<String>) -> Self {
        Self(uri.into())
    }
    /// The connection string itself, for the driver only.
    pub fn expose(&self) -> &str {
        &self.0
    }
    /// The password in the userinfo part, if any. Found also when it is not percent-encoded
    /// (the driver then refuses the URI, but it must not show up in that message or the logs):
    /// the userinfo ends at the last `@` before the query (the last `?`), or, when no `@`
    /// precedes the last `?` (a `?` inside the password and no query), at the last `@` if
    /// neither a `/` nor a `?…=` comes before it (then it would be the path or the query, and
    /// the `@` the query's).
    pub fn password(&self) -> Option<&str> {
        let rest = self.0.split_once("://")?.1;
        let before_query = rest.rfind('?').map_or(rest, |q| &rest[..q]);
        let at = before_query.rfind('@').or_else(|| {
            rest.rfind('@').filter(|&at| {
                let candidate = &rest[..at];
                let after_question = candidate.split_once('?').map_or("", |(_, q)| q);
                !candidate.contains('/') && !after_question.contains('=')
            })
        })?;
        let userinfo = &rest[..at];
        userinfo
            .split_once(':')
            .map(|(_, p)| p)
            .filter(|p| !p.is_empty())
    }

    /// Values of query options that carry secrets: any option whose name contains
    /// `password`, `secret` or `token` (e.g. `tlsCertificateKeyFilePassword`, `proxyPassword`),
    /// and `authMechanismProperties` (may hold `AWS_SESSION_TOKEN`).
    pub(crate) fn option_secrets(&self) -> Vec<&str> {
        let Some((_, query)) = self.0.split_once('?') else {
            return Vec::new();
        };
        query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .filter(|(name, value)| {
                let name = name.to_ascii_lowercase();
                !value.is_empty()
                    && (name.contains("password")
                        || name.contains("secret")
                        || name.contains("token")
                        || name == "authmechanismproperties")
            })
            .map(|(_, value)| value)
            .collect()
    }

    /// The connection string with the password and every secret option value replaced by `***`.
    pub fn redacted(&self) -> String {
        let mut text = match self.password() {
            Some(p) => self.0.replacen(&format!(":{p}@"), ":***@", 1),
            None => self.0.clone(),
        };
        for secret in self.option_secrets() {
            text = text.replace(&format!("={secret}"), "=***");
        }
        text
    }
}

impl fmt::Debug for SecretUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.redacted())
    }
}

/// `[kafka.topic_creation]`: topics the bridge creates itself, before its first record to them
/// (the idea of Debezium's `topic.creation.*`). Off by default: the topics must then exist, or
/// the broker creates them with its own defaults (`auto.create.topics.enable`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopicCreation {
    /// Create missing topics. Default `false`.
    pub enabled: bool,
    /// Partitions of a created topic; required when `enabled`.
    pub partitions: i32,
    /// Replication factor of a created topic; -1 (default) = the broker's
    /// `default.replication.factor` (Kafka ≥ 2.4, KIP-464).
    pub replication_factor: i32,
    /// `cleanup.policy` of a created topic: `delete` (default), `compact` or `compact,delete`.
    /// With `compact` and tombstones a topic keeps the latest record of every document.
    pub cleanup_policy: String,
    /// Further topic configurations, e.g. `"min.insync.replicas" = 2`.
    pub configs: BTreeMap<String, PropertyValue>,
}

impl Default for TopicCreation {
    fn default() -> Self {
        Self {
            enabled: false,
            partitions: 0,
            replication_factor: -1,
            cleanup_policy: "delete".to_owned(),
            configs: BTreeMap::new(),
        }
    }
}

impl TopicCreation {
    /// The topic configurations of a created topic: `cleanup.policy`, then `configs`.
    pub(crate) fn topic_configs(&self) -> Vec<(String, String)> {
        let mut out = vec![("cleanup.policy".to_owned(), self.cleanup_policy.clone())];
        out.extend(self.configs.iter().map(|(k, v)| (k.clone(), v.to_string())));
        out
    }
}
