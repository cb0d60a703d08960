//! Change event → Kafka records: topic, key, value, headers. Pure, no I/O.
//!
//! The record format is a public contract (README, "Record format"):
//! - **Key**: the event's `documentKey`, whole and in the server's field order, as compact
//!   canonical Extended JSON v2. Events without one (drop, rename, dropDatabase, invalidate) are
//!   keyed by their `ns` in the same encoding, or `{"pipeline":"<name>"}` when there is no `ns`.
//!   A key is never null and never derived from the resume token or `fullDocument`.
//! - **Value**: the whole event (`value = "change_event"`) or `fullDocument` only
//!   (`value = "document"`; null for deletes and for updates whose lookup found nothing).
//! - **Tombstone**: with `tombstones = true` and `value = "change_event"`, a delete yields a second
//!   record with the same key and a null value. In `document` mode the delete record *is* the
//!   tombstone. The relay commits an event only once all of its records are delivered.
//! - **Headers**: `mongo.operation_type`, `mongo.namespace`, `mongo.resume_token`,
//!   `mongo.cluster_time`, `mongo.wall_time`, `mongo.txn_number`, `mongo.lsid`, `mongo.pipeline`.

use std::borrow::Cow;
use std::io::Write as _;
use std::sync::Arc;

use bson::{RawBsonRef, RawDocument};

use crate::config::{PipelineConfig, ValueMode};
use crate::event::ChangeEventView;
use crate::extjson::{self, JsonMode};
use crate::kafka::topics;

/// Every header name the bridge writes.
pub const HEADER_NAMES: [&str; 9] = [
    "mongo.operation_type",
    "mongo.namespace",
    "mongo.resume_token",
    "mongo.cluster_time",
    "mongo.wall_time",
    "mongo.txn_number",
    "mongo.lsid",
    "mongo.pipeline",
    "mongo.error",
];

/// `operationType` values MongoDB documents for change events
/// (<https://www.mongodb.com/docs/manual/reference/change-events/>); the common ones first.
const OPERATION_TYPES: [&str; 15] = [
    "insert",
    "update",
    "replace",
    "delete",
    "drop",
    "rename",
    "dropDatabase",
    "invalidate",
    "create",
    "createIndexes",
    "dropIndexes",
    "modify",
    "shardCollection",
    "refineCollectionShardKey",
    "reshardCollection",
];

/// `operation_type` without an allocation when it is one MongoDB documents.
pub fn operation_type(operation_type: &str) -> Cow<'static, str> {
    match OPERATION_TYPES
        .iter()
        .find(|known| **known == operation_type)
    {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(operation_type.to_owned()),
    }
}

/// The `'static` spelling of a header name the bridge writes, if `name` is one.
pub fn header_name(name: &str) -> Option<&'static str> {
    HEADER_NAMES.iter().copied().find(|n| *n == name)
}

/// One Kafka record, ready to enqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Target topic.
    pub topic: Arc<str>,
    /// Key bytes (UTF-8 canonical Extended JSON).
    pub key: Vec<u8>,
    /// Value bytes (UTF-8 Extended JSON), `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    /// Header names and UTF-8 values.
    pub headers: Vec<(&'static str, Vec<u8>)>,
}

impl Record {
    /// Bytes this record holds in the producer queue (key + value + headers), for the in-flight
    /// byte budget.
    pub fn size(&self) -> usize {
        self.key.len()
            + self.value.as_ref().map_or(0, Vec::len)
            + self
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len())
                .sum::<usize>()
    }
}

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
}

/// Why an event could not be encoded. The bridge never drops such an event: it stops.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// The server sent BSON the encoder could not read.
    #[error("malformed change event: {0}")]
    Malformed(String),
    /// The event has no `_id` (resume token): the pipeline removed it, which MongoDB forbids.
    #[error("change event has no _id (resume token); do not $project it away in `pipeline`")]
    MissingToken,
    /// A document event (insert, update, replace, delete) has no `documentKey`: the user's
    /// pipeline removed it. Keying it otherwise would merge distinct documents on one key.
    #[error(
        "{0} event has no documentKey; the `pipeline` stages must keep it (it is the record key)"
    )]
    MissingDocumentKey(String),
}

/// Encodes the events of one pipeline.
#[derive(Debug)]
pub struct RecordEncoder {
    pipeline: String,
    topic: Option<Arc<str>>,
    topic_prefix: String,
    fallback_topic: Arc<str>,
    json: JsonMode,
    value: ValueMode,
    tombstones: bool,
    last_ns: (String, String, Option<Arc<str>>),
}

impl RecordEncoder {
    /// Builds the encoder of `pipeline` with the `[kafka] topic_prefix`.
    pub fn new(pipeline: &PipelineConfig, topic_prefix: &str) -> Self {
        let fallback = topics::fallback(pipeline, topic_prefix);
        Self {
            pipeline: pipeline.name.clone(),
            topic: pipeline.topic.as_deref().map(Arc::from),
            topic_prefix: topic_prefix.to_owned(),
            fallback_topic: Arc::from(fallback),
            json: pipeline.json,
            value: pipeline.value,
            tombstones: pipeline.tombstones,
            last_ns: (String::new(), String::new(), None),
        }
    }

    /// Encodes one raw change event into its records.
    ///
    /// Errors: [`EncodeError`] for malformed BSON or an event without `_id`.
    pub fn encode(&mut self, raw: &RawDocument) -> Result<EncodedEvent, EncodeError> {
        let malformed = |e: &dyn std::fmt::Display| EncodeError::Malformed(e.to_string());
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
        let topic = self.topic_for(&view);
        let key = self.key_for(&view).map_err(|e| malformed(&e))?;
        let value = match self.value {
            ValueMode::ChangeEvent => {
                let mut out = Vec::with_capacity(raw.as_bytes().len() + raw.as_bytes().len() / 4);
                extjson::write_document(&mut out, raw, self.json).map_err(|e| malformed(&e))?;
                Some(out)
            }
            ValueMode::Document => match view.full_document {
                Some(Some(doc)) => Some(
                    extjson::to_string(doc, self.json)
                        .map_err(|e| malformed(&e))?
                        .into_bytes(),
                ),
                _ => None,
            },
        };
        let headers = self.headers_for(&view, token).map_err(|e| malformed(&e))?;
        let is_delete = view.operation_type == "delete";
        let mut records = Vec::with_capacity(2);
        let tombstone = is_delete && self.tombstones && self.value == ValueMode::ChangeEvent;
        if tombstone {
            records.push(Record {
                topic: Arc::clone(&topic),
                key: key.clone(),
                value,
                headers: headers.clone(),
            });
            records.push(Record {
                topic,
                key,
                value: None,
                headers,
            });
        } else {
            records.push(Record {
                topic,
                key,
                value,
                headers,
            });
        }
        Ok(EncodedEvent {
            records,
            token: token.to_raw_document_buf(),
            operation_type: operation_type(view.operation_type),
            cluster_time: view.cluster_time,
            wall_time_ms: view.wall_time_ms,
        })
    }

    fn topic_for(&mut self, view: &ChangeEventView<'_>) -> Arc<str> {
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

    fn key_for(&self, view: &ChangeEventView<'_>) -> Result<Vec<u8>, extjson::ExtJsonError> {
        let mut key = Vec::with_capacity(64);
        if let Some(dk) = view.document_key {
            extjson::write_document(&mut key, dk, JsonMode::Canonical)?;
        } else if let Some(db) = view.db {
            let mut ns = bson::RawDocumentBuf::new();
            ns.append("db", db);
            if let Some(coll) = view.coll {
                ns.append("coll", coll);
            }
            extjson::write_document(&mut key, &ns, JsonMode::Canonical)?;
        } else {
            let mut doc = bson::RawDocumentBuf::new();
            doc.append("pipeline", self.pipeline.as_str());
            extjson::write_document(&mut key, &doc, JsonMode::Canonical)?;
        }
        Ok(key)
    }

    /// The headers of one event. Each value is built in one right-sized allocation (this runs
    /// for every event; see BENCHMARKS.md).
    fn headers_for(
        &self,
        view: &ChangeEventView<'_>,
        token: &RawDocument,
    ) -> Result<Vec<(&'static str, Vec<u8>)>, extjson::ExtJsonError> {
        let mut headers = Vec::with_capacity(8);
        headers.push((
            "mongo.operation_type",
            view.operation_type.as_bytes().to_vec(),
        ));
        if let Some(db) = view.db {
            let coll = view.coll.unwrap_or("");
            let mut ns = Vec::with_capacity(db.len() + 1 + coll.len());
            ns.extend_from_slice(db.as_bytes());
            if view.coll.is_some() {
                ns.push(b'.');
                ns.extend_from_slice(coll.as_bytes());
            }
            headers.push(("mongo.namespace", ns));
        }
        let token_text = match token.get("_data") {
            Ok(Some(RawBsonRef::String(data))) => data.as_bytes().to_vec(),
            _ => extjson::to_string(token, JsonMode::Canonical)?.into_bytes(),
        };
        headers.push(("mongo.resume_token", token_text));
        if let Some(ts) = view.cluster_time {
            let mut text = Vec::with_capacity(21);
            write!(text, "{}.{}", ts.time, ts.increment).expect("writing to a Vec cannot fail");
            headers.push(("mongo.cluster_time", text));
        }
        if let Some(millis) = view.wall_time_ms {
            let mut text = Vec::with_capacity(24);
            if extjson::write_rfc3339_millis(&mut text, millis) {
                headers.push(("mongo.wall_time", text));
            } else if let Some(time) = chrono::DateTime::from_timestamp_millis(millis) {
                // Before 1970 or after year 9999: chrono spells the year with a sign.
                let text = time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                headers.push(("mongo.wall_time", text.into_bytes()));
            }
        }
        if let Some(txn) = view.txn_number {
            headers.push(("mongo.txn_number", txn.to_string().into_bytes()));
        }
        if let Some(lsid) = view.lsid {
            headers.push((
                "mongo.lsid",
                extjson::to_string(lsid, JsonMode::Canonical)?.into_bytes(),
            ));
        }
        headers.push(("mongo.pipeline", self.pipeline.as_bytes().to_vec()));
        Ok(headers)
    }
}

#[cfg(test)]
#[path = "encode_tests.rs"]
mod tests;
