//! The snapshot: copying the documents a pipeline's namespaces already hold into its topics,
//! while its change stream keeps being read, so that a compacted topic becomes a mirror of the
//! collection (README, "Initial snapshot").
//!
//! ```text
//!  offsets: snapshotRequest ──run start / owner's poll──▶ SnapshotState {id, namespaces}
//!  source task: change stream ─┐
//!               copy cursors ──┴─▶ sequence.rs (ordering proof) ─▶ channel ─▶ relay ─▶ window
//!  checkpointer: the delivered prefix's SnapshotState (last _id per namespace) ─▶ offsets
//! ```
//!
//! The pieces, one file name in every layer: this room (the shared types; `plan`: which
//! namespaces; [`copy`]: one namespace's copy bracket by bracket; `order`: MongoDB's order
//! of `_id`s, which a copy checks as it reads; [`count`]: the count check at a copy's end;
//! `sequence`: the order of stream and copy items, and its proof; `key`: a copied document's
//! `documentKey`),
//! `config/snapshot.rs` (the rules), `source/snapshot.rs` and `source/copying.rs` (the source
//! task that streams and copies), `encode/snapshot.rs` (copied documents' and markers' records),
//! `relay/snapshot.rs` (their window entries), `offsets/snapshot.rs` (the document's fields),
//! `observe/metrics/snapshot.rs` (the series) and `cli/snapshot.rs` (the `snapshot` command).
//!
//! Invariants:
//! - One task reads the stream and the copies; the order in which their items enter the
//!   window is the one `sequence` proves correct: the last record of every key is the
//!   document's current state once the copy finished and the stream passed its end.
//! - A namespace's progress (`lastId`, `copied`) and its markers' delivery (`started`, `done`)
//!   are committed by the rule of the resume token: only once every record before them is
//!   delivered. A restart continues after the committed `lastId`; a resumed snapshot keeps its
//!   id and publishes no second `snapshot_start`.
//! - Memory is bounded: one reply per open cursor (at most `snapshot_parallelism`), the items
//!   held behind an unanswered copy request (`sequence::HOLD_ITEMS`), and the channel's and
//!   the window's bounds, as for events.

use std::sync::Arc;

use bson::{Bson, DateTime};

pub mod copy;
pub mod count;
pub(crate) mod key;
pub(crate) mod order;
pub(crate) mod plan;
pub(crate) mod sequence;

/// Why a snapshot runs, in increasing weight (the order [`Request::merge`] keeps the
/// weightier of).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// The `snapshot` command.
    Requested,
    /// `snapshot = "initial"` on a pipeline without a position.
    Initial,
    /// `on_history_lost = "snapshot"`: a re-sync after a gap.
    HistoryLost,
}

impl Reason {
    /// The stored and displayed spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Initial => "initial",
            Self::Requested => "requested",
            Self::HistoryLost => "history_lost",
        }
    }

    /// Reads a stored spelling; `None` for an unknown one.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Initial, Self::Requested, Self::HistoryLost]
            .into_iter()
            .find(|r| r.as_str() == text)
    }
}

/// A snapshot asked for and not started yet (`snapshotRequest` in the offsets document).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Why.
    pub reason: Reason,
    /// Only these namespaces (`db`, `coll`; never empty, sorted, each once); `None`: every
    /// namespace of the pipeline's scope.
    pub namespaces: Option<Vec<(String, String)>>,
    /// When it was asked for.
    pub requested_at: DateTime,
}

impl Request {
    /// One request that answers both `self` (waiting, perhaps already being answered) and
    /// `newer`: the union of their namespaces (every namespace when either asks for every
    /// one), the weightier reason (a history loss or an initial copy is not demoted to an
    /// operator's request), and a time later than the waiting one's (the newer request's, or
    /// the waiting one's plus 1 ms when the newer one's clock says earlier).
    ///
    /// Invariant (why merging loses no request): a snapshot answers a request when it starts
    /// after the request was stored and copies its namespaces. The merged request is stored
    /// after both, and copies a superset of each; a snapshot already running for `self` does
    /// not consume it (a request is consumed by its exact `requestedAt`, which the merge always
    /// moves past `self`'s, whatever the clocks of the hosts that stamped them), so the merged
    /// one runs after it.
    pub fn merge(self, newer: Request) -> Request {
        let namespaces = match (self.namespaces, newer.namespaces) {
            (Some(mut a), Some(b)) => {
                a.extend(b);
                a.sort();
                a.dedup();
                Some(a)
            }
            _ => None,
        };
        Request {
            reason: self.reason.max(newer.reason),
            namespaces,
            requested_at: DateTime::from_millis(
                (self.requested_at.timestamp_millis() + 1)
                    .max(newer.requested_at.timestamp_millis()),
            ),
        }
    }
}

/// `db.coll` split at its first dot (a collection's name may hold more); `None` unless both
/// parts are non-empty.
pub(crate) fn split_namespace(ns: &str) -> Option<(String, String)> {
    let (db, coll) = ns.split_once('.')?;
    (!db.is_empty() && !coll.is_empty()).then(|| (db.to_owned(), coll.to_owned()))
}

/// One namespace's copy.
#[derive(Debug, Clone, PartialEq)]
pub struct NamespaceCopy {
    /// Database.
    pub db: String,
    /// Collection.
    pub coll: String,
    /// Its `snapshot_start` markers are delivered.
    pub started: bool,
    /// The last `_id` copied such that its records and all before them are delivered (what a
    /// restart continues after); `None` before the first batch.
    pub last_id: Option<Bson>,
    /// Documents copied and delivered so far.
    pub copied: u64,
    /// Inserts, updates, replaces and deletes of the namespace that the stream returned since
    /// its copy began, delivered with this state (`count.rs`: the count check's allowance, kept
    /// across restarts); `None` in a state stored before the field existed.
    pub changes: Option<u64>,
    /// Its `snapshot_end` markers are delivered: the copy of this namespace is over.
    pub done: bool,
}

impl NamespaceCopy {
    /// A namespace not copied yet.
    pub fn new(db: &str, coll: &str) -> Self {
        Self {
            db: db.to_owned(),
            coll: coll.to_owned(),
            started: false,
            last_id: None,
            copied: 0,
            changes: Some(0),
            done: false,
        }
    }

    /// `db.coll`.
    pub fn namespace(&self) -> String {
        format!("{}.{}", self.db, self.coll)
    }
}

/// A running snapshot (`snapshot` in the offsets document), as far as it is delivered.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotState {
    /// Its id, in every record's `mongo.snapshot_id` header and in its markers.
    pub id: String,
    /// Why it runs.
    pub reason: Reason,
    /// When it started.
    pub started_at: DateTime,
    /// The namespaces it copies, in the order they are copied.
    pub namespaces: Vec<NamespaceCopy>,
    /// `requestedAt` of the request it answers, so a restart does not answer it twice.
    pub requested_at: Option<DateTime>,
    /// The `snapshot_filter` it copies with, as canonical Extended JSON (`None`: every
    /// document). A resume under another filter is refused: the copy would mix two filters.
    pub filter: Option<String>,
}

impl SnapshotState {
    /// A new snapshot answering `request`, of `namespaces`, with a fresh id.
    pub fn new(request: &Request, namespaces: Vec<NamespaceCopy>, filter: Option<String>) -> Self {
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            reason: request.reason,
            started_at: DateTime::now(),
            namespaces,
            requested_at: Some(request.requested_at),
            filter,
        }
    }

    /// Every namespace's copy is over.
    pub fn is_done(&self) -> bool {
        self.namespaces.iter().all(|n| n.done)
    }

    /// Documents copied so far, over every namespace.
    pub fn copied(&self) -> u64 {
        self.namespaces.iter().map(|n| n.copied).sum()
    }
}

/// The snapshot state shared by items in flight (one clone per batch, not per document).
pub type SharedState = Arc<SnapshotState>;

/// What a copied document's records need to know of its namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyTarget {
    /// Database.
    pub db: String,
    /// Collection.
    pub coll: String,
    /// The snapshot's id.
    pub snapshot_id: String,
    /// Why the snapshot runs.
    pub reason: Reason,
    /// The shard key's field names, in order, of a sharded collection (`key`).
    pub shard_key: Option<Vec<String>>,
}

/// A snapshot's control records, to every partition of the namespace's topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// Before the namespace's first copied record.
    Start,
    /// After its last; carries the count.
    End,
}

impl Marker {
    /// The marker's `operationType`.
    pub fn operation_type(self) -> &'static str {
        match self {
            Self::Start => "snapshot_start",
            Self::End => "snapshot_end",
        }
    }
}

/// The configured `snapshot_filter` as canonical Extended JSON; `None` without one.
pub(crate) fn canonical_filter(p: &crate::config::PipelineConfig) -> Option<String> {
    p.snapshot_filter.as_ref()?;
    let raw = bson::RawDocumentBuf::from_document(&p.snapshot_filter()).ok()?;
    crate::extjson::to_string(&raw, crate::extjson::JsonMode::Canonical).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(reason: Reason, namespaces: Option<&[&str]>, at: i64) -> Request {
        let split = |ns: &&str| {
            let (db, coll) = ns.split_once('.').expect("db.coll in the test");
            (db.to_owned(), coll.to_owned())
        };
        Request {
            reason,
            namespaces: namespaces.map(|list| list.iter().map(split).collect()),
            requested_at: DateTime::from_millis(at),
        }
    }

    #[test]
    fn merged_requests_copy_the_union_for_the_weightier_reason_at_the_later_time() {
        use Reason::*;
        let a = request(Requested, Some(&["d.a"]), 1);
        let b = request(Requested, Some(&["d.b", "d.a"]), 5);
        assert_eq!(
            a.clone().merge(b),
            request(Requested, Some(&["d.a", "d.b"]), 5)
        );
        let whole = request(HistoryLost, None, 3);
        assert_eq!(
            a.clone().merge(whole.clone()),
            request(HistoryLost, None, 3)
        );
        let initial = request(Initial, None, 0);
        assert_eq!(initial.merge(a.clone()), request(Initial, None, 1));
        // a newer request stamped by a slower clock still moves the time past the waiting
        // one's, so the snapshot answering the waiting one cannot consume the merged one
        assert_eq!(whole.merge(a.clone()), request(HistoryLost, None, 4));
        assert_eq!(a.clone().merge(a), request(Requested, Some(&["d.a"]), 2));
    }
}
