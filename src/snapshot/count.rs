//! The count check of a namespace's copy: the number of documents it read against
//! `countDocuments(snapshot_filter)` at its end, allowing one document of difference per change
//! of the namespace the change stream returned during the copy.
//!
//! Why that bound holds: the copy reads each `_id` at most once (it pages by `_id`), so a
//! document present and matching the filter from the copy's first `find` to the count is read
//! once and counted once. Only a document inserted, deleted, or updated into or out of the
//! filter in that span can be read and not counted, or counted and not read: each such document
//! has at least one change event in the span, and the stream returns every change of the
//! namespace (the pipeline's stages must keep them, README "Initial snapshot"). The stream is
//! read until it passed the count ([`Verdict::Wait`] until then): an event after the count's
//! `operationTime`, or an empty batch asked for after the count's reply. Changes the stream
//! returned from the copy's start count too, even those older than it: the bound only grows.
//!
//! Across restarts: the changes counted as stream items leave into the channel are kept in
//! the snapshot's state (`NamespaceCopy::changes`), committed with the resume token of the
//! same delivered prefix; a restart reads the stream again after that token, so the stored
//! count plus this run's is again every change since the copy began.
//!
//! Invariants: a difference within the bound agrees; beyond it, the verdict waits until the
//! stream passed the count, then is a mismatch (an error, or a warning under
//! `snapshot_count_check = "warn"`, or for a copy resumed from a state stored without
//! `changes`, whose earlier changes are unknown); a copy whose collection was dropped or
//! renamed meanwhile is not checked (its count says nothing of the copy).

use bson::{RawDocument, Timestamp};
use mongodb::options::ReadConcern;
use mongodb::{Client, Collection};

use crate::config::CountCheck;

/// `countDocuments` at a copy's end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counted {
    /// Documents matching the filter.
    pub documents: u64,
    /// The count's `operationTime` (or, if the server sent none, the local clock plus 1 s).
    pub at: Timestamp,
}

/// Counts the documents of `collection` matching `filter` (read concern `majority`).
///
/// Errors: the driver's.
pub(crate) async fn count(
    client: &Client,
    collection: &Collection<bson::Document>,
    filter: bson::Document,
) -> Result<Counted, mongodb::error::Error> {
    let action = collection
        .count_documents(filter)
        .read_concern(ReadConcern::majority());
    let (documents, at) = match client.start_session().await {
        Ok(mut session) => {
            let n = action.session(&mut session).await?;
            (n, session.operation_time())
        }
        Err(_) => (action.await?, None),
    };
    let at = at.unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Timestamp {
            time: u32::try_from(now + 1).unwrap_or(u32::MAX),
            increment: 0,
        }
    });
    Ok(Counted { documents, at })
}

/// What a change event does to `db.coll`'s count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// An insert, update, replace or delete of it: one document of allowance.
    Document,
    /// A drop or rename of it (or onto it), or of its database: its count says nothing of the
    /// copy.
    Void,
}

/// What `event` does to `db.coll`'s count; `None`: nothing.
pub(crate) fn change_of(event: &RawDocument, (db, coll): (&str, &str)) -> Option<Change> {
    let ns = |key| {
        let ns = event.get_document(key).ok()?;
        Some((ns.get_str("db").ok()?, ns.get_str("coll").ok()))
    };
    let this = |n: Option<(&str, Option<&str>)>| n == Some((db, Some(coll)));
    match event.get_str("operationType").ok()? {
        "insert" | "update" | "replace" | "delete" if this(ns("ns")) => Some(Change::Document),
        "drop" | "rename" if this(ns("ns")) || this(ns("to")) => Some(Change::Void),
        "dropDatabase" if ns("ns").is_some_and(|(d, _)| d == db) => Some(Change::Void),
        _ => None,
    }
}

/// What the stream returned of one namespace during its copy.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Tally {
    /// Its inserts, updates, replaces and deletes (with those committed by earlier runs).
    pub changes: u64,
    /// The copy began in an earlier run whose changes are unknown (a state stored before
    /// `changes` existed).
    pub resumed: bool,
    /// The collection was dropped or renamed, or its database dropped.
    pub void: bool,
}

impl Tally {
    /// Counts `event` when it changes `db.coll`.
    pub(crate) fn saw(&mut self, event: &RawDocument, namespace: (&str, &str)) {
        match change_of(event, namespace) {
            Some(Change::Document) => self.changes = self.changes.saturating_add(1),
            Some(Change::Void) => self.void = true,
            None => {}
        }
    }
}

/// What a copy's count says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Within the bound.
    Agrees,
    /// Beyond the bound so far, but the stream has not passed the count yet.
    Wait,
    /// Not checked: the collection was dropped or renamed during the copy.
    Skipped,
    /// Beyond the bound: `fail` says whether the copy stops (else it warns).
    Mismatch {
        /// Stop the copy with an error.
        fail: bool,
        /// |read − counted|.
        difference: u64,
    },
}

/// The verdict on a copy that read `read` documents, counted `counted`, with `tally` from the
/// stream, which `passed` the count or not, under `policy`.
pub(crate) fn verdict(
    read: u64,
    counted: u64,
    tally: &Tally,
    passed: bool,
    policy: CountCheck,
) -> Verdict {
    if tally.void {
        return Verdict::Skipped;
    }
    let difference = read.abs_diff(counted);
    if difference <= tally.changes {
        Verdict::Agrees
    } else if !passed {
        Verdict::Wait
    } else {
        Verdict::Mismatch {
            fail: policy == CountCheck::Fail && !tally.resumed,
            difference,
        }
    }
}

/// Whether a stream item passed the count taken at `at`: an event after it (`event_time`).
pub(crate) fn after(event_time: Timestamp, at: Timestamp) -> bool {
    (event_time.time, event_time.increment) > (at.time, at.increment)
}

#[cfg(test)]
mod tests;
