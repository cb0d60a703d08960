//! Domain types that cross task boundaries: the items a change stream yields, and positions.
//!
//! Invariants:
//! - A [`Position`] is only ever built from the server's own resume token (an event's `_id` or a
//!   post-batch resume token); tokens are opaque and never parsed or compared
//!   (<https://www.mongodb.com/docs/manual/changeStreams/#resume-tokens>).
//! - [`ChangeEventView`] borrows the raw event as the server sent it; nothing is re-serialized.

use std::sync::Arc;

use bson::{RawBsonRef, RawDocument, RawDocumentBuf, Timestamp};

use crate::snapshot::{CopyTarget, Marker, SharedState};

/// A resumable position of a change stream: what the offsets document stores.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Position {
    /// The resume token document, as the server sent it.
    pub token: RawDocumentBuf,
    /// `clusterTime` of the last event at or before this position, if any event was seen.
    pub cluster_time: Option<Timestamp>,
    /// Best-known cluster time of this position (the event's `clusterTime`, or for a post-batch
    /// token the time the batch was received, as a `Timestamp` with increment 0).
    pub position_time: Timestamp,
    /// `wallTime` of the last event, in ms since the Unix epoch, when the server sent it.
    pub wall_time_ms: Option<i64>,
    /// Events (not post-batch tokens) covered since the pipeline started in this process.
    pub event_count: u64,
}

/// What the source task hands to the relay.
#[derive(Debug)]
pub(crate) enum SourceItem {
    /// One change event, raw.
    Event {
        /// The event document as the server sent it.
        raw: RawDocumentBuf,
        /// Holds `raw`'s bytes in the source → relay byte budget until the relay has enqueued
        /// the event's records (dropping it returns the bytes).
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    },
    /// An empty batch whose post-batch resume token did not move: nothing new, but everything
    /// read so far is complete (no MongoDB transaction is partly read), so an exactly-once
    /// pipeline may end its Kafka transaction here.
    Idle,
    /// The post-batch resume token of an empty batch: a position past everything read so far.
    Watermark {
        /// The token.
        token: RawDocumentBuf,
        /// When the empty batch arrived, as a `Timestamp` (wall clock, increment 0).
        position_time: Timestamp,
    },
    /// One document a snapshot copied.
    Copy {
        /// Its namespace and snapshot.
        target: Arc<CopyTarget>,
        /// The document as the server sent it.
        raw: RawDocumentBuf,
        /// The reply's `operationTime`.
        read_time: Option<Timestamp>,
        /// The snapshot's state once this document is delivered: set on the last document of
        /// each batch, `None` on the others.
        state: Option<SharedState>,
        /// The snapshot's last copied document (known in the Debezium form only).
        snapshot_last: bool,
        /// Like an event's.
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    },
    /// A snapshot's `snapshot_start` or `snapshot_end` markers for one namespace.
    Marker {
        /// The namespace and snapshot.
        target: Arc<CopyTarget>,
        /// Which.
        marker: Marker,
        /// Documents copied (for an end).
        copied: u64,
        /// The snapshot's state once the markers are delivered.
        state: SharedState,
    },
    /// The snapshot's state alone, to commit once everything before it is delivered (a new
    /// snapshot's plan, or one with nothing left to copy).
    SnapshotState(SharedState),
}

/// Which MongoDB multi-document transaction a change event belongs to: its `lsid` and
/// `txnNumber` (<https://www.mongodb.com/docs/manual/reference/change-events/>). Events of one
/// MongoDB transaction are contiguous in the change stream and share both. (In the code,
/// "transaction" is Kafka's; MongoDB's is a "txn", after the event's `txnNumber`.)
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TxnId {
    /// `lsid`, as the server sent it.
    pub lsid: RawDocumentBuf,
    /// `txnNumber`.
    pub txn_number: i64,
}

impl TxnId {
    /// The transaction of `view`, when it has both `lsid` and `txnNumber`.
    pub(crate) fn of(view: &ChangeEventView<'_>) -> Option<Self> {
        Some(Self {
            lsid: view.lsid?.to_raw_document_buf(),
            txn_number: view.txn_number?,
        })
    }

    /// `lsid` as relaxed Extended JSON, for error messages.
    pub(crate) fn lsid_text(&self) -> String {
        self.lsid
            .to_document()
            .map(|d| bson::Bson::Document(d).into_relaxed_extjson().to_string())
            .unwrap_or_else(|_| "(unreadable)".to_owned())
    }
}

/// What the relay publishes for the checkpointer: the delivered prefix's stream position and
/// snapshot state, each the latest one in that prefix.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Safe {
    /// The change stream's position.
    pub stream: Option<Position>,
    /// The running snapshot's state.
    pub snapshot: Option<SharedState>,
    /// With `delivery = "exactly_once"`: the commit sequence of the Kafka transaction that
    /// committed this state, and its progress record's offset (`None` at-least-once).
    pub committed: Option<(i64, Option<i64>)>,
}

/// The fields of a change event the bridge reads, borrowed from the raw document.
/// Field reference: <https://www.mongodb.com/docs/manual/reference/change-events/>.
#[derive(Debug, Default)]
pub(crate) struct ChangeEventView<'a> {
    /// `_id`: the event's resume token.
    pub token: Option<&'a RawDocument>,
    /// `operationType`, e.g. `insert`.
    pub operation_type: &'a str,
    /// `ns.db`.
    pub db: Option<&'a str>,
    /// `ns.coll`.
    pub coll: Option<&'a str>,
    /// `documentKey`.
    pub document_key: Option<&'a RawDocument>,
    /// `fullDocument`: `Some(Some(doc))`, `Some(None)` when present but null, `None` when absent.
    pub full_document: Option<Option<&'a RawDocument>>,
    /// `clusterTime`.
    pub cluster_time: Option<Timestamp>,
    /// `wallTime` in ms since the Unix epoch.
    pub wall_time_ms: Option<i64>,
    /// `txnNumber`, for events in a transaction.
    pub txn_number: Option<i64>,
    /// `lsid`, for events in a transaction.
    pub lsid: Option<&'a RawDocument>,
}

impl<'a> ChangeEventView<'a> {
    /// Reads the fields of `raw`; unknown and malformed fields are left unset, except that a
    /// document that cannot be iterated is an error (malformed BSON).
    pub(crate) fn parse(raw: &'a RawDocument) -> Result<Self, bson::raw::Error> {
        let mut view = Self::default();
        for element in raw {
            let (key, value) = element?;
            match (key, value) {
                ("_id", RawBsonRef::Document(d)) => view.token = Some(d),
                ("operationType", RawBsonRef::String(s)) => view.operation_type = s,
                ("ns", RawBsonRef::Document(ns)) => {
                    view.db = ns.get_str("db").ok();
                    view.coll = ns.get_str("coll").ok();
                }
                ("documentKey", RawBsonRef::Document(d)) => view.document_key = Some(d),
                ("fullDocument", RawBsonRef::Document(d)) => view.full_document = Some(Some(d)),
                ("fullDocument", _) => view.full_document = Some(None),
                ("clusterTime", RawBsonRef::Timestamp(t)) => view.cluster_time = Some(t),
                ("wallTime", RawBsonRef::DateTime(t)) => {
                    view.wall_time_ms = Some(t.timestamp_millis())
                }
                ("txnNumber", RawBsonRef::Int64(n)) => view.txn_number = Some(n),
                ("txnNumber", RawBsonRef::Int32(n)) => view.txn_number = Some(i64::from(n)),
                ("lsid", RawBsonRef::Document(d)) => view.lsid = Some(d),
                _ => {}
            }
        }
        Ok(view)
    }
}

/// Formats a `Timestamp` as `<seconds>.<increment>`, the `mongo.cluster_time` header's form.
pub(crate) fn format_timestamp(ts: Timestamp) -> String {
    format!("{}.{}", ts.time, ts.increment)
}

/// `secs` since the Unix epoch as RFC 3339 UTC to the second (`2025-11-29T08:00:00Z`), or the
/// bare number when chrono cannot represent it. For human-facing output (CLI, `check`).
pub(crate) fn rfc3339_seconds(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0).map_or_else(
        || secs.to_string(),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
}

/// The `Timestamp` for a wall-clock instant (increment 0), used where no cluster time is known.
pub(crate) fn timestamp_now() -> Timestamp {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Timestamp {
        time: u32::try_from(secs).unwrap_or(u32::MAX),
        increment: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn parse_reads_fields_of_an_update_event() {
        let raw = rawdoc! {
            "_id": { "_data": "82AB" },
            "operationType": "update",
            "clusterTime": Timestamp { time: 1700000000, increment: 7 },
            "wallTime": bson::DateTime::from_millis(1700000000123),
            "ns": { "db": "shop", "coll": "orders" },
            "documentKey": { "_id": 1 },
            "fullDocument": bson::RawBson::Null,
            "txnNumber": 5_i64,
            "lsid": { "id": 1 },
        };
        let view = ChangeEventView::parse(&raw).expect("well-formed");
        assert_eq!(view.operation_type, "update");
        assert_eq!(view.db, Some("shop"));
        assert_eq!(view.coll, Some("orders"));
        assert_eq!(view.full_document, Some(None));
        assert_eq!(
            view.cluster_time,
            Some(Timestamp {
                time: 1700000000,
                increment: 7
            })
        );
        assert_eq!(view.wall_time_ms, Some(1700000000123));
        assert_eq!(view.txn_number, Some(5));
        assert!(view.lsid.is_some());
        assert_eq!(
            format_timestamp(view.cluster_time.expect("set")),
            "1700000000.7"
        );
    }
}
