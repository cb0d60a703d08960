//! Why a snapshot's copy stopped rather than finish short: its `_id`s came out of order (the
//! server's `_id` index order disagrees with its `$gt`, so paging skips documents), or the
//! number it read disagrees with `countDocuments` at its end beyond the changes the stream saw
//! meanwhile. Defined here so that [`BridgeError`](super::BridgeError) can carry them.
//!
//! Invariant: each message names the pipeline, the namespace, what was seen (the two `_id`s,
//! or the counts) and what to do.

/// A copy that would have finished short.
#[derive(Debug, thiserror::Error)]
pub enum CopyCheckError {
    /// Two `_id`s read in this order are not strictly increasing by MongoDB's rules.
    #[error(
        "pipeline {pipeline:?}: the copy of {namespace} read _id {next} right after _id \
         {previous}, but MongoDB orders {next} before (or equal to) {previous}: the server's \
         _id index order disagrees with its $gt comparison, so paging by _id would skip \
         documents. The copy stopped before that batch (nothing after {previous} was copied). \
         Remedy: copy this collection from a server whose _id order follows MongoDB's \
         comparison rules (MongoDB does; SecantusDB orders embedded-document _ids by their \
         bytes), or give its documents _ids of a scalar type; to stream without the copy, run \
         `mongo-kafka-bridge offsets reset {pipeline} --to-now --config FILE`"
    )]
    OutOfOrder {
        /// Pipeline name.
        pipeline: String,
        /// `db.coll`.
        namespace: String,
        /// The `_id` read first (relaxed Extended JSON).
        previous: String,
        /// The `_id` read right after it.
        next: String,
    },
    /// The copy read another number of documents than the collection holds, beyond the
    /// changes seen during the copy.
    #[error(
        "pipeline {pipeline:?}: the copy of {namespace} read {copied} documents, but \
         countDocuments(snapshot_filter) found {counted} at its end, a difference of {difference} \
         where the {changes} inserts, updates and deletes the change stream saw during the copy \
         allow at most {changes}: documents were skipped. Remedy: check that the server's _id \
         index follows MongoDB's order, and that the pipeline's stages keep every event of the \
         copied namespace; set snapshot_count_check = \"warn\" to finish such a copy with a \
         warning (and mongo_kafka_bridge_snapshot_count_mismatch_total) instead"
    )]
    CountMismatch {
        /// Pipeline name.
        pipeline: String,
        /// `db.coll`.
        namespace: String,
        /// Documents the copy read.
        copied: u64,
        /// `countDocuments` at the copy's end.
        counted: u64,
        /// |copied − counted|.
        difference: u64,
        /// Changes of the namespace the stream returned during the copy.
        changes: u64,
    },
}

/// A running snapshot was started with another `snapshot_filter`: resuming would copy the rest
/// under another filter.
#[derive(Debug, thiserror::Error)]
#[error(
    "pipeline {pipeline:?} has a snapshot running with snapshot_filter {stored}, but the \
     configuration now says {configured}: resuming would copy the rest under another filter. \
     Restore the filter until the snapshot finished (`offsets show {pipeline}`), or start \
     over with `mongo-kafka-bridge offsets reset {pipeline} --to-now --config FILE` and \
     then `mongo-kafka-bridge snapshot {pipeline} --config FILE`"
)]
pub struct FilterChanged {
    /// Pipeline name.
    pub pipeline: String,
    /// The running snapshot's filter (canonical Extended JSON).
    pub stored: String,
    /// The configured one.
    pub configured: String,
}
