//! The bridge's own check of `full_document_before_change = "required"` at a database or
//! deployment scope ([`PreImages::Enforced`](crate::config::PreImages), whose rule and sources
//! are in `config/images.rs`): the stream asks the server for `whenAvailable`, and this check
//! fails a captured update, replace or delete whose pre-image is missing.
//!
//! Which events: every event the stream yields has passed the pipeline's stages on the server,
//! so every one is captured; events the filter drops (an uncaptured collection, the bridge's
//! own offsets collection) never reach it. With `whenAvailable`, MongoDB writes
//! `fullDocumentBeforeChange` on update, replace and delete events only: the pre-image, or
//! `null` when it has none; an insert has no such field
//! (<https://www.mongodb.com/docs/manual/reference/operator/aggregation/changeStream/>). So:
//!
//! | operationType | `fullDocumentBeforeChange` | verdict |
//! |---|---|---|
//! | `update`, `replace`, `delete` | a document | passes |
//! | `update`, `replace`, `delete` | `null` | [`MissingPreImage`]: the pipeline stops |
//! | any other (`insert`, `drop`, …) | absent (or `null`) | passes: it has no pre-image to miss |
//!
//! Invariants:
//! - Cost on the hot path: one top-level field lookup per event, only in a pipeline that
//!   enforces (the reader of any other pipeline tests a `bool`); the operation type is read only
//!   when that field is `null`.
//! - The failure is the server's `required` failure in all but origin: kind `source`, fatal, the
//!   pipeline stopping before the event (what was read before it is delivered and committed).
//! - Split events are checked once whole (after reassembly), never fragment by fragment.

use bson::{RawBsonRef, RawDocument};

use crate::config::images::PRE_IMAGE_FIELD;
use crate::error::BridgeError;
use crate::error::images::MissingPreImage;

/// Operation types whose events carry `fullDocumentBeforeChange` when pre-images are recorded
/// (MongoDB's "Change Streams with Document Pre- and Post-Images"): an insert has no pre-image.
pub(crate) const WITH_PRE_IMAGE: [&str; 3] = ["update", "replace", "delete"];

/// `Ok` unless `event` of `pipeline` is an update, replace or delete whose
/// `fullDocumentBeforeChange` is `null`.
///
/// Errors: [`BridgeError::MissingPreImage`], naming the operation, the namespace and the
/// event's `clusterTime`.
pub(crate) fn check(pipeline: &str, event: &RawDocument) -> Result<(), BridgeError> {
    // The one lookup of the hot path. A malformed event passes here: the encoder names it.
    if !matches!(event.get(PRE_IMAGE_FIELD), Ok(Some(RawBsonRef::Null))) {
        return Ok(());
    }
    let operation = event.get_str("operationType").unwrap_or("");
    if !WITH_PRE_IMAGE.contains(&operation) {
        return Ok(());
    }
    let ns = event.get_document("ns").ok();
    let name = |field| ns.and_then(|ns| ns.get_str(field).ok()).unwrap_or("?");
    let cluster_time = event
        .get_timestamp("clusterTime")
        .map_or_else(|_| "unknown".to_owned(), crate::event::format_timestamp);
    let missing = MissingPreImage::new(
        pipeline,
        operation,
        (name("db"), name("coll")),
        cluster_time,
    );
    Err(BridgeError::MissingPreImage(Box::new(missing)))
}

#[cfg(test)]
mod tests {
    use bson::{Timestamp, rawdoc};

    use super::*;

    fn event(operation: &str, before: Option<bson::RawBson>) -> bson::RawDocumentBuf {
        let mut raw = rawdoc! {
            "_id": { "_data": "82" },
            "operationType": operation,
            "clusterTime": Timestamp { time: 1_700_000_000, increment: 7 },
            "ns": { "db": "shop", "coll": "payments" },
            "documentKey": { "_id": 1 },
        };
        if let Some(before) = before {
            raw.append(PRE_IMAGE_FIELD, before);
        }
        raw
    }

    #[test]
    fn a_captured_change_without_its_pre_image_fails_naming_the_collection() {
        for operation in WITH_PRE_IMAGE {
            let error =
                check("p", &event(operation, Some(bson::RawBson::Null))).expect_err(operation);
            assert_eq!(error.kind(), "source", "{operation}");
            assert_eq!(
                error.class(),
                crate::error::ErrorClass::Fatal,
                "{operation}"
            );
            let text = error.to_string();
            for part in [
                format!("the {operation} event of shop.payments at clusterTime 1700000000.7"),
                "collMod: \"payments\"".to_owned(),
                "expireAfterSeconds".to_owned(),
            ] {
                assert!(text.contains(&part), "{part}: {text}");
            }
            assert!(error.remedy().contains("when_available"), "{operation}");
        }
    }

    #[test]
    fn pre_images_and_events_without_one_pass() {
        let image = bson::RawBson::Document(rawdoc! { "_id": 1, "v": 1 });
        for operation in WITH_PRE_IMAGE {
            assert!(check("p", &event(operation, Some(image.clone()))).is_ok());
        }
        // An insert has no pre-image (the server writes no field); neither has a drop.
        for operation in ["insert", "drop", "invalidate"] {
            assert!(check("p", &event(operation, None)).is_ok(), "{operation}");
        }
        // A field the pipeline's stages removed is not a null pre-image: the stages that can
        // remove it are refused at load (`config/images.rs`).
        assert!(check("p", &event("update", None)).is_ok());
    }
}
