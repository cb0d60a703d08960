//! Stage 2, the encoder: change event → Kafka records: topic (`topics`), key and value in
//! each `format` (`format.rs`), headers (`headers`), the dead-letter stubs that stand for
//! what cannot be written (`dead_letter`), a snapshot's records (`snapshot.rs`), and the
//! Debezium form (`debezium.rs`, `value = "debezium"`: Debezium's records, its own rules), the
//! unwrapped form (`unwrap.rs`, `value = "unwrapped"`), and what `on_ambiguous` makes of an event
//! and the tombstone after a delete (`diversion.rs`). Pure, no I/O.
//!
//! The record format is a public contract (README, "Record format"):
//! - **Key**: the event's `documentKey`, whole and in the server's field order, as compact
//!   canonical Extended JSON v2 (`key_format = "json"`) or its BSON (`"bson"`). Events without one
//!   (drop, rename, dropDatabase, invalidate) are keyed by their `ns` in the same encoding, or
//!   `{"pipeline":"<name>"}` when there is no `ns`. A key is never null and never derived from
//!   the resume token or `fullDocument`.
//! - **Value**: the whole event (`value = "change_event"`) or `fullDocument` only
//!   (`value = "document"`; null for deletes and for updates whose lookup found nothing; an event
//!   without a document, such as a drop, keeps the whole event so that a document topic says the
//!   namespace changed), or the document after the change as a flat record (`value =
//!   "unwrapped"`, `unwrap.rs`), as Extended JSON (`format = "json"`) or BSON (`"bson"`).
//! - **Tombstone**: with `tombstones = true` and `value = "change_event"`, a delete yields a second
//!   record with the same key and a null value. In `document` mode the delete record *is* the
//!   tombstone. The relay commits an event only once all of its records are delivered.
//! - **Headers**: see `headers`; `mongo.format` names each value's encoding.
//! - **What JSON cannot carry** (an ambiguous document, invalid UTF-8; see `extjson`) is never
//!   written as JSON: `on_ambiguous` stops the pipeline (`fail`), replaces the event's records by
//!   a dead-letter stub (`dead_letter`), or writes that one event as BSON (`bson`).

use std::borrow::Cow;
use std::sync::Arc;

use bson::RawDocument;

use crate::config::{Format, OnAmbiguous, PipelineConfig, ValueMode};
use crate::error::encode::{EncodeError, Unrepresentable};
use crate::event::ChangeEventView;
use crate::extjson::{JsonMode, Utf8};

pub(crate) mod dead_letter;
pub(crate) mod debezium;
mod diversion;
pub(crate) mod fields;
mod format;
pub(crate) mod headers;
pub(crate) mod heartbeat;
pub(crate) mod record;
pub(crate) mod routing;
mod snapshot;
pub(crate) mod topics;
mod unwrap;

pub(crate) use format::lossy_json;
use format::{Failed, key_bytes, value_bytes};
pub(crate) use headers::{format_header, header_name, operation_type};
pub use record::Record;

/// The records of one change event plus what the relay needs to know about it.
#[derive(Debug)]
pub struct EncodedEvent {
    /// One record, or two for a delete followed by its tombstone.
    pub records: Vec<Record>,
    /// The event's resume token (`_id`), as the server sent it.
    pub token: bson::RawDocumentBuf,
    /// `operationType`, for metrics (borrowed for the operation types MongoDB documents).
    pub operation_type: Cow<'static, str>,
    /// `clusterTime`.
    pub cluster_time: Option<bson::Timestamp>,
    /// `wallTime` in ms since the Unix epoch.
    pub wall_time_ms: Option<i64>,
    /// Set when `on_ambiguous` diverted the event: its records are a stub or BSON.
    pub diverted: Option<Diversion>,
    /// The MongoDB transaction the event belongs to (`lsid` and `txnNumber`), if any.
    pub(crate) txn: Option<crate::event::TxnId>,
}

impl EncodedEvent {
    /// The event's facts with no record yet (a skipped event, or one whose records follow).
    pub(crate) fn without_records(view: &ChangeEventView<'_>, token: &RawDocument) -> Self {
        Self {
            records: Vec::new(),
            token: token.to_raw_document_buf(),
            operation_type: operation_type(view.operation_type),
            cluster_time: view.cluster_time,
            wall_time_ms: view.wall_time_ms,
            diverted: None,
            txn: crate::event::TxnId::of(view),
        }
    }
}

/// The bytes of a document of the bridge's own (a gap marker, its key) in `format`: its BSON,
/// or its canonical Extended JSON (the bridge's own documents are never ambiguous).
pub(crate) fn own_document(doc: &RawDocument, format: Format) -> Vec<u8> {
    match format {
        Format::Bson => doc.as_bytes().to_vec(),
        Format::Json => lossy_json(doc).into_bytes(),
    }
}

/// What `on_ambiguous` did with an event JSON cannot carry exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diversion {
    /// `dead_lettered` or `bson`, the metric's bounded label.
    pub outcome: &'static str,
    /// Where and why.
    pub problem: Unrepresentable,
}

/// Encodes the events of one pipeline (a clone encodes alike: the relay's encode pool).
#[derive(Debug, Clone)]
pub struct RecordEncoder {
    pipeline: String,
    topic: Option<Arc<str>>,
    topic_prefix: String,
    fallback_topic: Arc<str>,
    json: JsonMode,
    value: ValueMode,
    format: Format,
    key_format: Format,
    on_ambiguous: OnAmbiguous,
    utf8: Utf8,
    dead_letter_topic: Option<Arc<str>>,
    tombstones: bool,
    last_ns: (String, String, Option<Arc<str>>),
    /// `value = "debezium"`: the form's settings.
    debezium: Option<debezium::Form>,
    /// `[pipelines.routing]` (`routing.rs`); `None` costs one branch per event.
    router: Option<Box<routing::Router>>,
    /// `[pipelines.fields]` (`fields.rs`), applied before anything else reads the event;
    /// `None` costs one branch per event.
    fields: Option<Box<fields::FieldRewriter>>,
    /// `value = "unwrapped"` (`unwrap.rs`).
    unwrap: Option<unwrap::Unwrapper>,
}

/// A record's key and value bytes, the value's `mongo.format`, and the diversion if any.
type Encoded = (Vec<u8>, Option<Vec<u8>>, &'static [u8], Option<Diversion>);

impl RecordEncoder {
    /// Builds the encoder of `pipeline` with the `[kafka] topic_prefix`.
    pub fn new(pipeline: &PipelineConfig, topic_prefix: &str) -> Self {
        let fallback = topics::fallback(pipeline, topic_prefix);
        Self {
            pipeline: pipeline.name.clone(),
            topic: pipeline.topic.as_deref().map(Arc::from),
            topic_prefix: topics::prefix(pipeline, topic_prefix).into_owned(),
            fallback_topic: Arc::from(fallback),
            json: pipeline.json_mode(),
            value: pipeline.value,
            format: pipeline.format,
            key_format: pipeline.key_format,
            on_ambiguous: pipeline.on_ambiguous,
            utf8: if pipeline.replace_invalid_utf8 {
                Utf8::Replace
            } else {
                Utf8::Refuse
            },
            dead_letter_topic: pipeline.dead_letter_topic.as_deref().map(Arc::from),
            tombstones: pipeline.tombstones,
            last_ns: (String::new(), String::new(), None),
            debezium: debezium::Form::of(pipeline),
            router: routing::Router::of(pipeline).map(Box::new),
            fields: fields::FieldRewriter::of(pipeline).map(Box::new),
            unwrap: unwrap::Unwrapper::of(pipeline),
        }
    }

    /// How the pipeline's keys are encoded.
    pub fn key_format(&self) -> Format {
        self.key_format
    }

    /// Encodes one raw change event into its records.
    ///
    /// Errors: [`EncodeError`] for malformed BSON, an event without `_id` or a document event
    /// without `documentKey`, and (`on_ambiguous = "fail"`) an event JSON cannot carry exactly.
    pub fn encode(&mut self, raw: &RawDocument) -> Result<EncodedEvent, EncodeError> {
        let malformed = |e: &dyn std::fmt::Display| EncodeError::Malformed(e.to_string());
        let rewritten;
        let (raw, skip) = match &self.fields {
            None => (raw, false),
            Some(rules) => {
                let r = rules.event(raw).map_err(|e| malformed(&e))?;
                rewritten = r.event;
                (&*rewritten, r.emptied && rules.skips_empty_updates())
            }
        };
        let view = ChangeEventView::parse(raw).map_err(|e| malformed(&e))?;
        let token = view.token.ok_or(EncodeError::MissingToken)?;
        let is_document_event = matches!(
            view.operation_type,
            "insert" | "update" | "replace" | "delete"
        );
        if is_document_event && view.document_key.is_none() {
            return Err(EncodeError::MissingDocumentKey(
                view.operation_type.to_owned(),
            ));
        }
        if skip {
            // `empty_updates = "skip"`: no record; the relay still commits past it.
            return Ok(EncodedEvent::without_records(&view, token));
        }
        if self.debezium.is_some() {
            return self.encode_debezium(raw, &view, token);
        }
        let topic = self.topic_for(&view, Some(raw));
        let key_doc = self.key_of(raw, &view);
        let (value_doc, prefix, collision) = match (self.value, view.full_document) {
            (ValueMode::ChangeEvent | ValueMode::Debezium, _) => {
                (Some(Cow::Borrowed(raw)), "", None)
            }
            (ValueMode::Unwrapped, _) => self.unwrapped(raw, &view).map_err(|e| malformed(&e))?,
            (ValueMode::Document, Some(Some(doc))) => {
                (Some(Cow::Borrowed(doc)), "fullDocument.", None)
            }
            // A drop, rename, dropDatabase, invalidate: the event itself marks the namespace.
            (ValueMode::Document, _) if !is_document_event => (Some(Cow::Borrowed(raw)), "", None),
            (ValueMode::Document, _) => (None, "", None),
        };
        let value_doc = value_doc.as_deref();
        let written = match collision {
            Some(problem) => Err(Failed::Unrepresentable(problem)),
            None => key_bytes(&key_doc, self.key_format, self.utf8).and_then(|key| {
                let value = value_doc
                    .map(|doc| value_bytes(doc, prefix, self.format, self.json, self.utf8))
                    .transpose()?;
                Ok((key, value))
            }),
        };
        let (key, value, format, diverted) = match written {
            Ok((key, value)) => (key, value, format_header(self.format, self.json), None),
            Err(Failed::Malformed(e)) => return Err(malformed(&e)),
            Err(Failed::Unrepresentable(problem)) => self.divert(&key_doc, value_doc, problem)?,
        };
        let headers = headers::headers_for(&self.pipeline, &view, token, format)
            .map_err(|e| malformed(&e))?;
        let is_delete = view.operation_type == "delete";
        let tombstone = match (self.value, &self.unwrap) {
            (ValueMode::Document, _) => false,
            (ValueMode::Unwrapped, Some(form)) => is_delete && form.tombstone_after_delete(),
            _ => is_delete && self.tombstones,
        };
        let records = self.finish(
            topic,
            key,
            value,
            headers,
            &diverted,
            raw.as_bytes().len(),
            tombstone,
        );
        Ok(EncodedEvent {
            records,
            token: token.to_raw_document_buf(),
            operation_type: operation_type(view.operation_type),
            cluster_time: view.cluster_time,
            wall_time_ms: view.wall_time_ms,
            diverted,
            txn: crate::event::TxnId::of(&view),
        })
    }

    fn topic_for(&mut self, view: &ChangeEventView<'_>, raw: Option<&RawDocument>) -> Arc<str> {
        if let Some(router) = self.router.as_deref_mut()
            && let Some(topic) = router.topic(view, raw)
        {
            return topic;
        }
        if let Some(topic) = &self.topic {
            return Arc::clone(topic);
        }
        let (Some(db), coll) = (view.db, view.coll) else {
            return Arc::clone(&self.fallback_topic);
        };
        let coll = coll.unwrap_or("");
        if let (last_db, last_coll, Some(topic)) = &self.last_ns
            && last_db == db
            && last_coll == coll
        {
            return Arc::clone(topic);
        }
        let topic: Arc<str> = Arc::from(topics::for_namespace(
            &self.topic_prefix,
            db,
            Some(coll).filter(|c| !c.is_empty()),
        ));
        self.last_ns = (db.to_owned(), coll.to_owned(), Some(Arc::clone(&topic)));
        topic
    }
}

#[cfg(test)]
mod fields_corpus_tests;
#[cfg(test)]
mod fields_tests;
#[cfg(test)]
mod format_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod unwrap_tests;
