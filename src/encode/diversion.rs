//! The records of an encoded event or copied document: what `on_ambiguous` makes of one JSON
//! cannot carry exactly (the diversion: an error, BSON, or a dead-letter stub), and the
//! tombstone after a delete.

use std::sync::Arc;

use bson::RawDocument;

use super::dead_letter::{self, Refused};
use super::{Diversion, Encoded, Record, RecordEncoder, format_header, lossy_json};
use crate::config::{Format, OnAmbiguous};
use crate::error::encode::{EncodeError, Unrepresentable};

impl RecordEncoder {
    /// The `on_ambiguous` policy for an event JSON cannot carry exactly.
    pub(super) fn divert(
        &self,
        key_doc: &RawDocument,
        value_doc: Option<&RawDocument>,
        problem: Unrepresentable,
    ) -> Result<Encoded, EncodeError> {
        let key_problem = problem.path.starts_with("documentKey");
        match self.on_ambiguous {
            OnAmbiguous::Fail => Err(EncodeError::Unrepresentable {
                key: lossy_json(key_doc),
                utf8: if problem.reason.contains("UTF-8") {
                    ", or replace_invalid_utf8 = true to write U+FFFD for it"
                } else {
                    ""
                },
                problem,
            }),
            OnAmbiguous::Bson => {
                // An ambiguous key is one of every event of its document: all of them get the
                // BSON key, so the document's records stay on one partition.
                let key = if key_problem || self.key_format == Format::Bson {
                    key_doc.as_bytes().to_vec()
                } else {
                    lossy_json(key_doc).into_bytes()
                };
                let value = value_doc.map(|doc| doc.as_bytes().to_vec());
                let diversion = Diversion {
                    outcome: "bson",
                    problem,
                };
                Ok((
                    key,
                    value,
                    format_header(Format::Bson, self.json),
                    Some(diversion),
                ))
            }
            OnAmbiguous::DeadLetter => {
                let key = match self.key_format {
                    Format::Bson => key_doc.as_bytes().to_vec(),
                    Format::Json => lossy_json(key_doc).into_bytes(),
                };
                let diversion = Diversion {
                    outcome: "dead_lettered",
                    problem,
                };
                Ok((key, None, b"json-canonical", Some(diversion)))
            }
        }
    }

    /// The records of an encoded event or copied document: its dead-letter stub when
    /// `on_ambiguous` diverted it there, else [`Self::records`]. `size`: the source's bytes;
    /// `tombstone`: a tombstone follows the record (a delete's, per the value mode).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn finish(
        &self,
        topic: Arc<str>,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        headers: Vec<(&'static str, Vec<u8>)>,
        diverted: &Option<Diversion>,
        size: usize,
        tombstone: bool,
    ) -> Vec<Record> {
        match (diverted, &self.dead_letter_topic) {
            (Some(d), Some(dlq)) if d.outcome == "dead_lettered" => {
                // A delete's tombstone is not what was refused: it still follows, so a
                // compacted topic forgets the document.
                let after = tombstone.then(|| Record {
                    topic: Arc::clone(&topic),
                    key: key.clone(),
                    value: None,
                    headers: headers.clone(),
                    partition: None,
                });
                let refused = Refused {
                    topic,
                    key,
                    headers,
                    size,
                    enqueued: false,
                };
                let mut out = vec![dead_letter::stub(
                    dlq,
                    &refused,
                    &d.problem.reason,
                    self.key_format,
                )];
                out.extend(after);
                out
            }
            _ => Self::records(topic, key, value, headers, tombstone),
        }
    }

    /// The event's record, and a tombstone after it when `tombstone`.
    pub(super) fn records(
        topic: Arc<str>,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        headers: Vec<(&'static str, Vec<u8>)>,
        tombstone: bool,
    ) -> Vec<Record> {
        let mut records = Vec::with_capacity(2);
        if tombstone {
            records.push(Record {
                topic: Arc::clone(&topic),
                key: key.clone(),
                value,
                headers: headers.clone(),
                partition: None,
            });
            records.push(Record {
                topic,
                key,
                value: None,
                headers,
                partition: None,
            });
        } else {
            records.push(Record {
                topic,
                key,
                value,
                headers,
                partition: None,
            });
        }
        records
    }
}
