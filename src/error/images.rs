//! A captured change event without the pre-image `full_document_before_change = "required"`
//! promises, found by the bridge at a database or deployment scope (`source/images.rs`),
//! defined here so that [`BridgeError`](super::BridgeError) can carry it.
//!
//! Invariant: it is handled exactly as the server's own `required` failure (`NoMatchingDocument`
//! 47 on a collection scope): the same metric kind (`source`) and class (fatal), the pipeline
//! stopping before the event, which is never skipped.

/// The remedy of a missing required image, the server's or the bridge's: the collection records
/// none, or they expired before the bridge read the event (MongoDB removes pre- and post-images
/// after `expireAfterSeconds`, or with the oplog entry,
/// <https://www.mongodb.com/docs/manual/changeStreams/#change-streams-with-document-pre--and-post-images>).
pub(crate) const REMEDY: &str = "enable pre- and post-images on the collection the error names \
     (db.runCommand({collMod: COLL, changeStreamPreAndPostImages: {enabled: true}}); only later \
     writes get them); if they are enabled, they expired before the bridge read the event: raise \
     changeStreamOptions.preAndPostImages.expireAfterSeconds (setClusterParameter) or keep the \
     pipeline's lag below it. This event's image will never exist: to get past it, set \
     full_document_before_change (or full_document) = \"when_available\" until the pipeline has \
     read it (its record then carries null), then back";

/// A captured update, replace or delete whose `fullDocumentBeforeChange` is null.
#[derive(Debug, thiserror::Error)]
#[error(
    "pipeline {pipeline:?} stopped before the {operation} event of {namespace} at clusterTime \
     {cluster_time} (nothing was skipped): it has no pre-image (fullDocumentBeforeChange is \
     null), and full_document_before_change = \"required\". Pre-images are not enabled on \
     {namespace} ({enable} enables them for later writes), or they expired before the bridge \
     read the event (changeStreamOptions.preAndPostImages.expireAfterSeconds too short for the \
     pipeline's lag)"
)]
pub struct MissingPreImage {
    /// Pipeline name.
    pub pipeline: String,
    /// `update`, `replace` or `delete`.
    pub operation: String,
    /// `db.coll` of the event.
    pub namespace: String,
    /// The event's `clusterTime` as `<seconds>.<increment>`, or `unknown`.
    pub cluster_time: String,
    /// The command that enables pre-images on the collection.
    pub enable: String,
}

impl MissingPreImage {
    /// The error of pipeline `pipeline` for an `operation` event of `db.coll` at
    /// `cluster_time`.
    pub(crate) fn new(
        pipeline: &str,
        operation: &str,
        (db, coll): (&str, &str),
        cluster_time: String,
    ) -> Self {
        Self {
            pipeline: pipeline.to_owned(),
            operation: operation.to_owned(),
            namespace: format!("{db}.{coll}"),
            cluster_time,
            enable: enable_command(db, coll),
        }
    }
}

/// The shell command that enables pre- and post-images on `db.coll`.
pub(crate) fn enable_command(db: &str, coll: &str) -> String {
    format!(
        "db.getSiblingDB({db:?}).runCommand({{collMod: {coll:?}, changeStreamPreAndPostImages: \
         {{enabled: true}}}})"
    )
}
