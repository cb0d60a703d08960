//! The records of a snapshot: a copied document, and the `snapshot_start` / `snapshot_end`
//! markers (README, "Record format" and "Initial snapshot").
//!
//! Invariants:
//! - A copied document's key is its `documentKey` built as the server builds it
//!   ([`crate::snapshot::key`]), in the pipeline's `key_format`: the same bytes, hence the same
//!   partition, as every change event of that document.
//! - Its value: with `value = "change_event"` an event-shaped document `{operationType:
//!   "snapshot", ns, documentKey, fullDocument}` (no `_id`: a copy has no resume token); with
//!   `value = "document"` the document itself. Formats, JSON modes and `on_ambiguous` apply as
//!   for events.
//! - A marker's key is `{pipeline, snapshot, ns, marker}`: distinct per snapshot, namespace and
//!   kind, so compaction keeps every one of them (gap markers share one key).

use bson::{RawDocument, RawDocumentBuf, Timestamp, rawdoc};

use super::debezium::SnapshotMark;
use super::format::{Failed, key_bytes, value_bytes};
use super::unwrap::Unwrapped;
use super::{Diversion, Record, RecordEncoder, format_header, own_document};
use crate::config::ValueMode;
use crate::error::encode::EncodeError;
use crate::event::ChangeEventView;
use crate::extjson::JsonMode;
use crate::snapshot::{CopyTarget, Marker, key};

impl RecordEncoder {
    /// The record of one copied document of `target`, read at `read_time`.
    ///
    /// Errors: [`EncodeError::Malformed`] for a document without `_id`, and (`on_ambiguous =
    /// "fail"`) [`EncodeError::Unrepresentable`].
    /// `mark`: where the document stands in its snapshot (the Debezium form's
    /// `source.snapshot`).
    pub(crate) fn encode_copy(
        &mut self,
        target: &CopyTarget,
        doc: &RawDocument,
        read_time: Option<Timestamp>,
        mark: SnapshotMark,
    ) -> Result<(Vec<Record>, Option<Diversion>), EncodeError> {
        let rewritten;
        let doc = match &self.fields {
            None => doc,
            Some(rules) => {
                let malformed =
                    |e: super::fields::RewriteError| EncodeError::Malformed(e.to_string());
                rewritten = rules.document(doc).map_err(malformed)?;
                &*rewritten
            }
        };
        if let Some(format) = self.debezium_format() {
            let headers = copy_headers(&self.pipeline, target, read_time, format);
            let ns = (target.db.as_str(), target.coll.as_str());
            return self.copy_debezium(ns, doc, mark, headers);
        }
        let key_doc =
            key::document_key(doc, target.shard_key.as_deref()).map_err(EncodeError::Malformed)?;
        let topic = self.topic_of(&target.db, &target.coll);
        let event;
        let built;
        let mut collision = None;
        let (value_doc, prefix): (&RawDocument, &str) = match self.value {
            ValueMode::ChangeEvent | ValueMode::Debezium => {
                event = copy_event(target, &key_doc, doc);
                (&event, "")
            }
            ValueMode::Document => (doc, "fullDocument."),
            ValueMode::Unwrapped => {
                let ns = (target.db.as_str(), target.coll.as_str());
                match self.unwrapped_copy(doc, ns, read_time) {
                    Some(Unwrapped::Built(b)) => {
                        built = b;
                        (&built, "")
                    }
                    Some(Unwrapped::Collides(problem)) => {
                        collision = Some(problem);
                        (doc, "fullDocument.")
                    }
                    _ => (doc, "fullDocument."),
                }
            }
        };
        let written = match collision {
            Some(problem) => Err(Failed::Unrepresentable(problem)),
            None => key_bytes(&key_doc, self.key_format, self.utf8).and_then(|key| {
                let value = value_bytes(value_doc, prefix, self.format, self.json, self.utf8)?;
                Ok((key, value))
            }),
        };
        let (key, value, format, diverted) = match written {
            Ok((key, value)) => (
                key,
                Some(value),
                format_header(self.format, self.json),
                None,
            ),
            Err(Failed::Malformed(e)) => return Err(EncodeError::Malformed(e.to_string())),
            Err(Failed::Unrepresentable(problem)) => {
                self.divert(&key_doc, Some(value_doc), problem)?
            }
        };
        let headers = copy_headers(&self.pipeline, target, read_time, format);
        let records = self.finish(
            topic,
            key,
            value,
            headers,
            &diverted,
            doc.as_bytes().len(),
            false,
        );
        Ok((records, diverted))
    }

    /// The `marker` records of `target` (after `copied` documents, for an end), one per
    /// partition `0..partitions` of the namespace's topic; none in the Debezium form (it has
    /// no such record).
    pub(crate) fn markers(
        &mut self,
        target: &CopyTarget,
        marker: Marker,
        copied: u64,
        partitions: i32,
    ) -> Vec<Record> {
        if self.debezium.is_some() {
            return Vec::new();
        }
        let topic = self.topic_of(&target.db, &target.coll);
        let ns = rawdoc! { "db": target.db.as_str(), "coll": target.coll.as_str() };
        let key = rawdoc! {
            "pipeline": self.pipeline.as_str(), "snapshot": target.snapshot_id.as_str(),
            "ns": ns.clone(), "marker": marker.operation_type(),
        };
        let mut value = rawdoc! {
            "operationType": marker.operation_type(), "pipeline": self.pipeline.as_str(),
            "snapshot": target.snapshot_id.as_str(), "ns": ns,
            "reason": target.reason.as_str(),
        };
        if marker == Marker::End {
            value.append("copied", copied as i64);
        }
        let key = own_document(&key, self.key_format);
        let value = own_document(&value, self.format);
        let format = format_header(self.format, JsonMode::Canonical);
        let mut headers = copy_headers(&self.pipeline, target, None, format);
        headers[0].1 = marker.operation_type().as_bytes().to_vec();
        (0..partitions)
            .map(|partition| Record {
                topic: std::sync::Arc::clone(&topic),
                key: key.clone(),
                value: Some(value.clone()),
                headers: headers.clone(),
                partition: Some(partition),
            })
            .collect()
    }

    /// Whether the pipeline's form writes snapshot markers (every form but Debezium's).
    pub(crate) fn writes_markers(&self) -> bool {
        self.debezium.is_none()
    }

    /// The topic of namespace `db.coll` (a fixed `topic`, or the namespace's).
    pub(crate) fn topic_of(&mut self, db: &str, coll: &str) -> std::sync::Arc<str> {
        let view = ChangeEventView {
            db: Some(db),
            coll: Some(coll),
            ..ChangeEventView::default()
        };
        self.topic_for(&view, None)
    }
}

/// `{operationType: "snapshot", ns, documentKey, fullDocument}`.
fn copy_event(target: &CopyTarget, key: &RawDocument, doc: &RawDocument) -> RawDocumentBuf {
    let mut event = RawDocumentBuf::new();
    event.append("operationType", "snapshot");
    event.append(
        "ns",
        rawdoc! { "db": target.db.as_str(), "coll": target.coll.as_str() },
    );
    event.append("documentKey", key.to_raw_document_buf());
    event.append("fullDocument", doc.to_raw_document_buf());
    event
}

/// A copied document's headers, `mongo.operation_type` first and `mongo.format` last.
fn copy_headers(
    pipeline: &str,
    target: &CopyTarget,
    read_time: Option<Timestamp>,
    format: &'static [u8],
) -> Vec<(&'static str, Vec<u8>)> {
    let mut headers = Vec::with_capacity(6);
    headers.push(("mongo.operation_type", b"snapshot".to_vec()));
    headers.push((
        "mongo.namespace",
        format!("{}.{}", target.db, target.coll).into_bytes(),
    ));
    headers.push(("mongo.pipeline", pipeline.as_bytes().to_vec()));
    headers.push(("mongo.snapshot_id", target.snapshot_id.as_bytes().to_vec()));
    if let Some(ts) = read_time {
        headers.push((
            "mongo.read_time",
            format!("{}.{}", ts.time, ts.increment).into_bytes(),
        ));
    }
    headers.push(("mongo.format", format.to_vec()));
    headers
}
