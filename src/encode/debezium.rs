//! The Debezium form (`value = "debezium"`, issue 21): for every event Debezium's MongoDB
//! connector captures, the topic, key and value it writes (Debezium MongoDB connector
//! **3.6.3.Final** on OpenJDK 17, Kafka Connect's JSON converter with schemas off, or on with
//! `[pipelines.debezium] schemas = true`). README, "The Debezium form".
//!
//! The feature's pieces, one file name in every layer:
//! - `extjson/debezium.rs` (+ `extjson/debezium/`): Debezium's JSON strings byte for byte
//!   (`after`/`before`, `updatedFields`, `removedFields`, `truncatedArrays`, the key);
//! - `config/debezium.rs`: `[pipelines.debezium]`, the mapping to the connector's settings, the
//!   combinations refused at load;
//! - this file (+ `encode/debezium/`): the records (`envelope.rs`: the value and its `source`;
//!   `schema.rs`: the schemas-enabled wrappers);
//! - `source/debezium.rs`: which copied document is a snapshot's last (`source.snapshot =
//!   "last"`);
//! - `offsets/debezium.rs`, `kafka/debezium.rs`, `cli/offsets/debezium.rs` (+
//!   `cli/offsets/debezium/`: `offset.rs` the entries and their offset, `partitions.rs` which
//!   partition is taken): `offsets import debezium`, the move from Debezium without a gap
//!   (Connect's offsets → the offsets document).
//!
//! The records:
//! - topic `<topic_prefix>.<db>.<coll>` (`encode/topics.rs`), or the pipeline's `topic`;
//! - key `{"id":"<_id in Debezium's relaxed JSON>"}`;
//! - value `{"before","after","updateDescription","source","op","ts_ms","transaction"}`: `op`
//!   `c` insert, `u` update and replace (a replace has `updateDescription` null), `d` delete
//!   (followed by a tombstone with `tombstones`), `r` a copied document; `after` the event's
//!   `fullDocument`, `before` its `fullDocumentBeforeChange` (pre-images), both as Debezium's
//!   strict JSON strings; `source` from `wallTime` and `clusterTime` (copies: the read time,
//!   `ord` -1, `snapshot` `"true"`, `"last"` on the snapshot's last record); top-level `ts_ms`
//!   and a copy's `source.ts_*` are the time of encoding (processing time, like Debezium's);
//! - headers: Debezium's `__debezium.context.*` four, then the bridge's `mongo.*` with
//!   `mongo.format` `debezium-json` (or `debezium-json-schemas`).
//!
//! Events Debezium does not capture (drop, rename, dropDatabase, invalidate, and any other
//! operation type) get **no record**: their position is committed like a filtered event's, and
//! the pipeline acts on them as in every form (an invalidate reopens the stream). The bridge's
//! own markers (gap, snapshot start and end) are not written in this form; split events are
//! reassembled before they reach the encoder. So a consumer written for Debezium only ever
//! reads Debezium's records.
//!
//! Invariant: `source.version` is `3.6.3.Final`
//! ([`DEBEZIUM_VERSION`](crate::extjson::debezium::DEBEZIUM_VERSION)), the release whose records these are,
//! so a consumer that checks it for the record's shape reads it as that release's; the bridge
//! names itself in the headers (`mongo.pipeline`, `mongo.format`).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bson::RawDocument;

use super::headers::CONTEXT_HEADERS;
use super::{Diversion, EncodedEvent, Record, RecordEncoder};
use crate::config::PipelineConfig;
use crate::error::encode::{EncodeError, Unrepresentable};
use crate::event::ChangeEventView;
use crate::extjson::debezium::{DebeziumJsonError, key_json};

mod envelope;
#[cfg(test)]
mod replay_tests;
mod schema;
#[cfg(test)]
mod tests;

use envelope::{Parts, Source};

/// `mongo.format` of a record in the Debezium form, schemas off.
pub(crate) const FORMAT_JSON: &[u8] = b"debezium-json";
/// `mongo.format` of a record in the Debezium form, schemas on.
pub(crate) const FORMAT_SCHEMAS: &[u8] = b"debezium-json-schemas";

/// A pipeline's Debezium form: `[pipelines.debezium]` as the encoder needs it.
#[derive(Debug, Clone)]
pub(super) struct Form {
    /// `topic.prefix`: `source.name`, schema names, the logical-name header.
    server: String,
    /// The JSON converter's `schemas.enable`.
    schemas: bool,
    /// Debezium's context headers, one run id per encoder (per run of the pipeline).
    context: Vec<(&'static str, Vec<u8>)>,
}

impl Form {
    /// The form of `p`, when it asks for it.
    pub(super) fn of(p: &PipelineConfig) -> Option<Self> {
        let settings = p.debezium.as_ref()?;
        let server = settings.topic_prefix.clone();
        let values = [
            server.clone(),
            "0".to_owned(),
            "mongodb".to_owned(),
            uuid::Uuid::new_v4().to_string(),
        ];
        Some(Self {
            server,
            schemas: settings.schemas,
            context: CONTEXT_HEADERS
                .iter()
                .zip(values)
                .map(|(name, value)| (*name, value.into_bytes()))
                .collect(),
        })
    }

    fn format(&self) -> &'static [u8] {
        if self.schemas {
            FORMAT_SCHEMAS
        } else {
            FORMAT_JSON
        }
    }
}

/// Where a copied document stands in its snapshot: `source.snapshot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SnapshotMark {
    /// Any copied document but the last: `"true"`.
    Within,
    /// The snapshot's last copied document: `"last"`.
    Last,
}

/// The time of encoding as (seconds, nanoseconds) since the Unix epoch.
fn now() -> (i64, u32) {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (
        i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        since.subsec_nanos(),
    )
}

/// The `op` of a change event Debezium captures; `None` for the others.
fn op_of(operation_type: &str) -> Option<&'static str> {
    match operation_type {
        "insert" => Some("c"),
        "update" | "replace" => Some("u"),
        "delete" => Some("d"),
        _ => None,
    }
}

/// A writer's error as the encoder's: invalid UTF-8 is for `on_ambiguous`, the rest malformed.
fn failed(error: DebeziumJsonError) -> Result<EncodeError, Unrepresentable> {
    match error {
        DebeziumJsonError::Bson(e)
            if matches!(e.kind, bson::raw::ErrorKind::Utf8EncodingError(_)) =>
        {
            Err(Unrepresentable {
                path: "(event)".to_owned(),
                reason: "not valid UTF-8, which Debezium's JSON writers cannot carry".to_owned(),
            })
        }
        other => Ok(EncodeError::Malformed(other.to_string())),
    }
}

impl RecordEncoder {
    /// The records of one change event in the Debezium form (none for an event Debezium does
    /// not capture).
    ///
    /// Errors: as [`RecordEncoder::encode`]; invalid UTF-8 goes to `on_ambiguous`.
    pub(super) fn encode_debezium(
        &mut self,
        raw: &RawDocument,
        view: &ChangeEventView<'_>,
        token: &RawDocument,
    ) -> Result<EncodedEvent, EncodeError> {
        let mut encoded = EncodedEvent::without_records(view, token);
        let Some(op) = op_of(view.operation_type) else {
            return Ok(encoded);
        };
        let topic = self.topic_for(view, Some(raw));
        let Some(form) = &self.debezium else {
            return Ok(encoded);
        };
        let key_doc = view
            .document_key
            .ok_or_else(|| EncodeError::MissingDocumentKey(view.operation_type.to_owned()))?;
        let (db, coll) = (view.db.unwrap_or(""), view.coll.unwrap_or(""));
        let document = |name: &str| match raw.get(name) {
            Ok(Some(bson::RawBsonRef::Document(d))) => Some(d),
            _ => None,
        };
        let parts = Parts {
            before: document("fullDocumentBeforeChange"),
            after: view.full_document.flatten(),
            update: (view.operation_type == "update")
                .then(|| document("updateDescription"))
                .flatten(),
            op,
        };
        let time = view.cluster_time.unwrap_or(bson::Timestamp {
            time: 0,
            increment: 0,
        });
        let source = Source {
            server: &form.server,
            db,
            coll,
            time: Source::event_time(view.wall_time_ms, time.time),
            snapshot: "false",
            ord: time.increment as i32,
            lsid: view.lsid,
            txn_number: view.txn_number,
            wall_time: view.wall_time_ms.filter(|ms| *ms != 0),
        };
        let headers = super::headers::headers_for(&self.pipeline, view, token, form.format())
            .map_err(|e| EncodeError::Malformed(e.to_string()))?;
        let written = self.debezium_bytes(key_doc, &parts, &source);
        let is_delete = op == "d";
        let (records, diverted) =
            self.debezium_records(topic, written, key_doc, raw, headers, is_delete)?;
        encoded.records = records;
        encoded.diverted = diverted;
        Ok(encoded)
    }

    /// The record of one copied document of `db.coll` in the Debezium form.
    ///
    /// Errors: as [`RecordEncoder::encode_copy`].
    pub(super) fn copy_debezium(
        &mut self,
        (db, coll): (&str, &str),
        doc: &RawDocument,
        mark: SnapshotMark,
        headers: Vec<(&'static str, Vec<u8>)>,
    ) -> Result<(Vec<Record>, Option<Diversion>), EncodeError> {
        let topic = self.topic_of(db, coll);
        let Some(form) = &self.debezium else {
            return Ok((Vec::new(), None));
        };
        let parts = Parts {
            before: None,
            after: Some(doc),
            update: None,
            op: "r",
        };
        let source = Source {
            server: &form.server,
            db,
            coll,
            time: now(),
            snapshot: match mark {
                SnapshotMark::Within => "true",
                SnapshotMark::Last => "last",
            },
            ord: -1,
            lsid: None,
            txn_number: None,
            wall_time: None,
        };
        let written = self.debezium_bytes(doc, &parts, &source);
        self.debezium_records(topic, written, doc, doc, headers, false)
    }

    /// The `mongo.format` of this pipeline's records, when it is in the Debezium form.
    pub(super) fn debezium_format(&self) -> Option<&'static [u8]> {
        self.debezium.as_ref().map(Form::format)
    }

    /// The key and value bytes (schemas on or off).
    fn debezium_bytes(
        &self,
        key_doc: &RawDocument,
        parts: &Parts<'_>,
        source: &Source<'_>,
    ) -> Result<(Vec<u8>, Vec<u8>), DebeziumJsonError> {
        let (key, value) = (key_json(key_doc)?, envelope::value(parts, source, now())?);
        match self.debezium.as_ref().filter(|form| form.schemas) {
            None => Ok((key.into_bytes(), value.into_bytes())),
            Some(form) => {
                let name = format!("{}.{}.{}", form.server, source.db, source.coll);
                Ok((
                    schema::key(&name, &key).into_bytes(),
                    schema::envelope(&name, &value).into_bytes(),
                ))
            }
        }
    }

    /// The records of written bytes (with the tombstone of a delete), or what `on_ambiguous`
    /// makes of an event the writers refused; Debezium's context headers first.
    fn debezium_records(
        &self,
        topic: Arc<str>,
        written: Result<(Vec<u8>, Vec<u8>), DebeziumJsonError>,
        key_doc: &RawDocument,
        value_doc: &RawDocument,
        mut headers: Vec<(&'static str, Vec<u8>)>,
        is_delete: bool,
    ) -> Result<(Vec<Record>, Option<Diversion>), EncodeError> {
        let context = self.debezium.as_ref().map(|f| f.context.clone());
        headers.splice(0..0, context.unwrap_or_default());
        let problem = match written.map_err(failed) {
            Ok((key, value)) => {
                let tombstone = is_delete && self.tombstones;
                let records = Self::records(topic, key, Some(value), headers, tombstone);
                return Ok((records, None));
            }
            Err(Ok(error)) => return Err(error),
            Err(Err(problem)) => problem,
        };
        if self.on_ambiguous == crate::config::OnAmbiguous::Fail {
            return Err(EncodeError::Malformed(format!(
                "{} ({}); on_ambiguous = \"dead_letter\" diverts such an event",
                problem.reason,
                super::lossy_json(key_doc)
            )));
        }
        let size = value_doc.as_bytes().len();
        let (key, value, _, diverted) = self.divert(key_doc, Some(value_doc), problem)?;
        let tombstone = is_delete && self.tombstones;
        let records = self.finish(topic, key, value, headers, &diverted, size, tombstone);
        Ok((records, diverted))
    }
}
