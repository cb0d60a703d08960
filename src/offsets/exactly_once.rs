//! The position's fields, shared by the offsets document and the progress record of
//! `delivery = "exactly_once"`: a Kafka record, written inside each Kafka transaction to the
//! progress topic, whose value is the committed position as a document of the offsets
//! document's own field names (canonical Extended JSON, so `kcat` shows it exactly).
//!
//! Record shape: key `{"pipeline":…,"topicPrefix":…,"streamUid":…}` (compact JSON); value
//! `{_id: <pipeline>, topicPrefix, streamUid, epoch, commitSequence, resetSequence, resumeToken?,
//!   clusterTime?, positionTime?, wallTime?, updatedAt, eventsCommitted?, snapshot? |
//!   lastSnapshot?}` (`eventsCommitted`: the document's count as of this transaction, so one
//!   brought forward counts the events it committed).
//!
//! Invariants:
//! - Which of a progress record and an offsets document is newer is decided by their
//!   sequences, never by comparing resume tokens (their format is the server's): a higher
//!   `resetSequence` wins, else a higher `commitSequence` ([`newer`]).
//! - A record's fields are exactly the ones [`OffsetsStore`] writes for a
//!   position, so bringing a document forward is one `$set` of them (and a `$max` of its
//!   sequence and `eventsCommitted`, which only rise).

use bson::{Bson, DateTime, Document, doc};

mod standing;
pub(crate) use standing::{Standing, standing};

use super::store::OffsetsStore;
use super::{fields, snapshot};
use crate::error::BridgeError;
use crate::event::Position;
use crate::snapshot::SnapshotState;

/// The `$set` and `$unset` that store `position` and the snapshot's `state`, when given. A
/// finished snapshot's state becomes its `lastSnapshot` summary.
///
/// Errors: a token that is not valid BSON (named).
pub(crate) fn position_fields(
    position: Option<&Position>,
    state: Option<&SnapshotState>,
) -> Result<(Document, Document), String> {
    let mut set = Document::new();
    let mut unset = Document::new();
    if let Some(position) = position {
        let token = position
            .token
            .to_document()
            .map_err(|_| "token is not valid BSON".to_owned())?;
        set.insert(fields::RESUME_TOKEN, token);
        set.insert(fields::POSITION_TIME, position.position_time);
        set.insert(fields::UPDATED_AT, DateTime::now());
        if let Some(ts) = position.cluster_time {
            set.insert(fields::CLUSTER_TIME, ts);
        }
        if let Some(ms) = position.wall_time_ms {
            set.insert(fields::WALL_TIME, DateTime::from_millis(ms));
        }
        unset.insert(fields::START_AT_OPERATION_TIME, "");
    }
    match state {
        Some(state) if state.is_done() => {
            set.insert(fields::LAST_SNAPSHOT, snapshot::finished_doc(state));
            unset.insert(fields::SNAPSHOT, "");
        }
        Some(state) => {
            set.insert(fields::SNAPSHOT, snapshot::state_doc(state));
        }
        None => {}
    }
    Ok((set, unset))
}

/// The sequences a progress record or an offsets document carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sequences {
    /// `resetSequence`.
    pub reset: i64,
    /// `commitSequence`.
    pub commit: i64,
}

/// Whether a position with sequences `a` is newer than one with `b`: a higher reset
/// sequence wins (an operator reset after it), else a higher commit sequence.
pub(crate) fn newer(a: Sequences, b: Sequences) -> bool {
    (a.reset, a.commit) > (b.reset, b.commit)
}

/// A decoded progress record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProgressRecord {
    /// Its document (see the module's shape).
    pub doc: Document,
    /// Its sequences.
    pub sequences: Sequences,
    /// The epoch of the owner that committed it.
    pub epoch: i64,
}

impl ProgressRecord {
    /// The position fields of the record as an offsets document (for the start position).
    ///
    /// Errors: a field of the wrong type, named.
    pub(crate) fn offsets(&self) -> Result<super::OffsetsDoc, String> {
        super::OffsetsDoc::parse(&self.doc)
    }

    /// The `$set` and `$unset` that bring an offsets document to this record's position.
    pub(crate) fn forward_fields(&self) -> (Document, Document) {
        let mut set = Document::new();
        for key in [
            fields::RESUME_TOKEN,
            fields::CLUSTER_TIME,
            fields::POSITION_TIME,
            fields::WALL_TIME,
            fields::SNAPSHOT,
            fields::LAST_SNAPSHOT,
        ] {
            if let Some(value) = self.doc.get(key) {
                set.insert(key, value.clone());
            }
        }
        set.insert(fields::UPDATED_AT, DateTime::now());
        let mut unset = doc! {};
        if set.contains_key(fields::RESUME_TOKEN) {
            unset.insert(fields::START_AT_OPERATION_TIME, "");
        }
        if set.contains_key(fields::LAST_SNAPSHOT) && !set.contains_key(fields::SNAPSHOT) {
            unset.insert(fields::SNAPSHOT, "");
        }
        (set, unset)
    }
}

/// Whose progress records: the pipeline, the deployment's topic prefix and the offsets
/// document's `streamUid`. Two deployments that share a Kafka cluster (and so the progress
/// topic of one `offsets_database` name) differ at least in the `streamUid`, so neither ever
/// reads the other's position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProgressKey {
    /// The pipeline's name.
    pub pipeline: String,
    /// `[kafka] topic_prefix`.
    pub topic_prefix: String,
    /// The offsets document's `streamUid`.
    pub stream_uid: String,
}

impl ProgressKey {
    /// The records' Kafka key: compact JSON `{"pipeline":…,"topicPrefix":…,"streamUid":…}`.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        serde_json::json!({
            "pipeline": self.pipeline,
            "topicPrefix": self.topic_prefix,
            "streamUid": self.stream_uid,
        })
        .to_string()
        .into_bytes()
    }

    /// The value of a progress record: `fields` (from [`position_fields`]) with the key's
    /// fields, the epoch and the sequences, as canonical Extended JSON.
    pub(crate) fn value(&self, epoch: i64, sequences: Sequences, fields_set: &Document) -> Vec<u8> {
        let mut out = doc! {
            fields::ID: &self.pipeline,
            fields::TOPIC_PREFIX: &self.topic_prefix,
            fields::STREAM_UID: &self.stream_uid,
            fields::EPOCH: epoch,
            fields::COMMIT_SEQUENCE: sequences.commit,
            fields::RESET_SEQUENCE: sequences.reset,
        };
        for (key, value) in fields_set {
            out.insert(key.clone(), value.clone());
        }
        Bson::Document(out)
            .into_canonical_extjson()
            .to_string()
            .into_bytes()
    }

    /// Decodes a progress record's value; `None` when it is not one of this key (another
    /// pipeline's or deployment's record in the same partition).
    ///
    /// Errors: a value that is not a progress record (named why).
    pub(crate) fn decode(&self, value: &[u8]) -> Result<Option<ProgressRecord>, String> {
        let json: serde_json::Value =
            serde_json::from_slice(value).map_err(|e| format!("not JSON: {e}"))?;
        let Bson::Document(doc) =
            Bson::try_from(json).map_err(|e| format!("not Extended JSON: {e}"))?
        else {
            return Err("not a document".to_owned());
        };
        let ours = doc.get_str(fields::ID).ok() == Some(self.pipeline.as_str())
            && doc.get_str(fields::TOPIC_PREFIX).ok() == Some(self.topic_prefix.as_str())
            && doc.get_str(fields::STREAM_UID).ok() == Some(self.stream_uid.as_str());
        if !ours {
            return Ok(None);
        }
        let int = |key: &str| {
            doc.get_i64(key)
                .map_err(|_| format!("{key} must be a 64-bit integer"))
        };
        let sequences = Sequences {
            reset: int(fields::RESET_SEQUENCE)?,
            commit: int(fields::COMMIT_SEQUENCE)?,
        };
        let epoch = int(fields::EPOCH)?;
        Ok(Some(ProgressRecord {
            doc,
            sequences,
            epoch,
        }))
    }
}

impl OffsetsStore {
    /// Brings the document to `record`'s position, found at `offset` of the progress topic
    /// (exactly-once: Kafka committed the transaction, the offsets write after it did not
    /// happen), keeping our epoch and lease.
    ///
    /// Errors: [`BridgeError::Fenced`] when our epoch is no longer current.
    pub(crate) async fn bring_forward(
        &self,
        epoch: i64,
        record: &ProgressRecord,
        offset: i64,
    ) -> Result<(), BridgeError> {
        self.update(epoch, record.update(offset, "$max")).await
    }
}

impl ProgressRecord {
    /// The update that gives an offsets document this record's position, found at `offset` of
    /// the progress topic: its fields `$set`, its `commitSequence` and `eventsCommitted` by
    /// `sequence_op` (`$max` to bring a document forward, which only raises them; `$set` to
    /// rewind one that claims more than Kafka committed).
    pub(crate) fn update(&self, offset: i64, sequence_op: &str) -> Document {
        let (mut set, unset) = self.forward_fields();
        set.insert(fields::PROGRESS_OFFSET, offset);
        set.insert(fields::DELIVERY, "exactly_once");
        let mut sequences = doc! { fields::COMMIT_SEQUENCE: self.sequences.commit };
        if let Ok(events) = self.doc.get_i64(fields::EVENTS_COMMITTED) {
            // The count as of the record's transaction (records before it have none).
            sequences.insert(fields::EVENTS_COMMITTED, events);
        }
        let mut update = doc! { "$set": set };
        if sequence_op == "$set" {
            if let Some(Bson::Document(set)) = update.get_mut("$set") {
                set.extend(sequences);
            }
        } else {
            update.insert(sequence_op, sequences);
        }
        if !unset.is_empty() {
            update.insert("$unset", unset);
        }
        update
    }
}

#[cfg(test)]
mod tests {
    use bson::{Timestamp, rawdoc};

    use super::*;

    fn key(pipeline: &str, topic_prefix: &str, stream_uid: &str) -> ProgressKey {
        ProgressKey {
            pipeline: pipeline.into(),
            topic_prefix: topic_prefix.into(),
            stream_uid: stream_uid.into(),
        }
    }

    fn position() -> Position {
        Position {
            token: rawdoc! { "_data": "8266AB" },
            cluster_time: Some(Timestamp {
                time: 7,
                increment: 3,
            }),
            position_time: Timestamp {
                time: 7,
                increment: 3,
            },
            wall_time_ms: Some(1_700_000_000_123),
            event_count: 5,
        }
    }

    #[test]
    fn a_record_round_trips_and_reads_as_an_offsets_document() {
        let (set, _) = position_fields(Some(&position()), None).expect("fields");
        let s = Sequences {
            reset: 2,
            commit: 41,
        };
        let value = key("orders", "shop.", "u1").value(9, s, &set);
        let record = key("orders", "shop.", "u1")
            .decode(&value)
            .expect("valid")
            .expect("ours");
        assert_eq!(record.sequences, s);
        assert_eq!(record.epoch, 9);
        let offsets = record.offsets().expect("parses");
        assert_eq!(
            offsets.resume_token,
            Some(rawdoc! { "_data": "8266AB" }),
            "the token's bytes survive"
        );
        assert_eq!(offsets.cluster_time, position().cluster_time);
        let (forward, unset) = record.forward_fields();
        assert_eq!(
            forward.get_document(fields::RESUME_TOKEN).ok(),
            Some(&doc! { "_data": "8266AB" })
        );
        assert_eq!(unset, doc! { fields::START_AT_OPERATION_TIME: "" });
    }

    #[test]
    fn records_of_other_pipelines_or_deployments_are_not_ours() {
        let ours = key("orders", "shop.", "u1");
        let value = ours.value(
            1,
            Sequences {
                reset: 0,
                commit: 1,
            },
            &doc! {},
        );
        assert_eq!(key("orders", "other.", "u1").decode(&value), Ok(None));
        assert_eq!(key("users", "shop.", "u1").decode(&value), Ok(None));
        assert_eq!(
            key("orders", "shop.", "u2").decode(&value),
            Ok(None),
            "another deployment's pipeline of the same name and prefix"
        );
        assert_ne!(ours.bytes(), key("orders", "shop.", "u2").bytes());
        assert!(ours.decode(b"{").is_err());
    }

    #[test]
    fn a_reset_wins_over_any_commit_and_else_the_later_commit_wins() {
        let s = |reset, commit| Sequences { reset, commit };
        assert!(newer(s(1, 0), s(0, 900)));
        assert!(newer(s(1, 5), s(1, 4)));
        assert!(!newer(s(1, 4), s(1, 4)));
        assert!(!newer(s(0, 900), s(1, 0)));
    }
}
