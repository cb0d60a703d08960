//! `[[pipelines]]`: one entry per change stream, its settings with their documented defaults,
//! and what the rest of the bridge reads of them (the parsed `start_at`, stages and filter, the
//! JSON mode, the scope).
//!
//! Invariant: the parsed values are valid once the configuration passed
//! [`Config::validate`](super::Config::validate); a pipeline never re-parses its text.

use serde::Deserialize;

use super::{
    CountCheck, Delivery, Format, FullDocument, FullDocumentBeforeChange, OnAmbiguous,
    OnHistoryLost, OnOversize, SnapshotMode, StartAt, ValueMode,
};
use crate::extjson::JsonMode;

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
    /// `[pipelines.routing]`: topics by namespace pattern or document field, the key from a
    /// field (`config/routing.rs`).
    pub routing: Option<super::RoutingSettings>,
    /// `[pipelines.fields]`: field rules rewriting every document before it is encoded
    /// (`config/fields.rs`).
    pub fields: Option<super::FieldSettings>,
    /// Write a heartbeat record every this many ms (`config/heartbeat.rs`); 0 (default): off.
    #[serde(default)]
    pub heartbeat_interval_ms: u64,
    /// The heartbeat topic; default `<topic_prefix>heartbeats`.
    pub heartbeat_topic: Option<String>,
    /// Default `change_event`; `document`; `unwrapped` with [`unwrap`](Self::unwrap);
    /// `debezium` with [`debezium`](Self::debezium).
    #[serde(default = "default_value_mode")]
    pub value: ValueMode,
    /// `[pipelines.unwrap]`: the unwrapped form's settings (`value = "unwrapped"`,
    /// `config/unwrap.rs`).
    pub unwrap: Option<super::UnwrapSettings>,
    /// `[pipelines.debezium]`: the Debezium form's settings (`value = "debezium"`).
    pub debezium: Option<super::DebeziumSettings>,
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
    /// `fail` (default) or `warn`: a copy that read another number of documents than
    /// `countDocuments(snapshot_filter)` finds at its end, beyond the changes the stream saw
    /// meanwhile, stops the pipeline, or only warns (README "Initial snapshot").
    #[serde(default)]
    pub snapshot_count_check: CountCheck,
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
            super::Config::from_toml(&text, std::iter::empty()).expect("a valid test pipeline");
        config.pipelines.remove(0)
    }

    /// The Extended JSON mode of JSON values: `json`, or relaxed when unset.
    pub fn json_mode(&self) -> JsonMode {
        self.json.unwrap_or(JsonMode::Relaxed)
    }

    /// Parsed `start_at`; valid after [`Config::validate`](super::Config::validate).
    pub fn start_at(&self) -> StartAt {
        super::validate::parse_start_at(&self.start_at).unwrap_or(StartAt::Now)
    }
    /// Whether the pipeline may copy its namespace(s): `snapshot = "initial"` or
    /// `on_history_lost = "snapshot"`.
    pub fn snapshots(&self) -> bool {
        self.snapshot == SnapshotMode::Initial || self.on_history_lost == OnHistoryLost::Snapshot
    }

    /// Parsed `snapshot_filter`; an empty filter when unset. Valid after
    /// [`Config::validate`](super::Config::validate).
    pub fn snapshot_filter(&self) -> bson::Document {
        self.snapshot_filter
            .as_deref()
            .map(super::snapshot::parse_filter)
            .and_then(Result::ok)
            .unwrap_or_default()
    }
    /// Parsed `pipeline` stages; empty when unset. Valid after
    /// [`Config::validate`](super::Config::validate).
    pub fn stages(&self) -> Vec<bson::Document> {
        self.pipeline
            .as_deref()
            .map(super::validate::parse_stages)
            .and_then(Result::ok)
            .unwrap_or_default()
    }
    /// Whether a `$match` stage tests `operationType` without naming `invalidate`: such a filter
    /// probably drops the event a drop or rename of a watched collection ends the stream with
    /// (README, "A `pipeline` filter must let `invalidate` events through"). A guess for a
    /// warning, not a rule: `{"operationType": {"$ne": "delete"}}` lets it through.
    pub fn may_drop_invalidate(&self) -> bool {
        fn tests_operation_type(doc: &bson::Document) -> bool {
            doc.iter().any(|(key, value)| {
                key == "operationType"
                    || match value {
                        bson::Bson::Document(d) => tests_operation_type(d),
                        bson::Bson::Array(items) => items
                            .iter()
                            .filter_map(bson::Bson::as_document)
                            .any(tests_operation_type),
                        _ => false,
                    }
            })
        }
        self.stages().iter().any(|stage| {
            stage.get_document("$match").is_ok_and(|m| {
                tests_operation_type(m) && !stage.to_string().contains("\"invalidate\"")
            })
        })
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
