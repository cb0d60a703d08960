//! The rules of a pipeline's snapshot (`snapshot = "initial"`, `on_history_lost =
//! "snapshot"`, `snapshot_filter`, the batch and parallelism bounds): what the mirror guarantee
//! (README, "Initial snapshot") needs of the pipeline's records.
//!
//! Invariant: settings under which a copied document could stay a key's last record although
//! it is not the document's current state are refused, not warned about.

use super::{FullDocument, OnHistoryLost, PipelineConfig, SnapshotMode, ValueMode};
use crate::error::BridgeError;

/// Parses a `snapshot_filter`: one Extended JSON document.
pub(super) fn parse_filter(text: &str) -> Result<bson::Document, String> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    match bson::Bson::try_from(json) {
        Ok(bson::Bson::Document(d)) => Ok(d),
        Ok(_) => Err("must be a JSON object, a find filter such as '{\"status\": \"A\"}'".into()),
        Err(e) => Err(format!("not valid Extended JSON: {e}")),
    }
}

/// What a snapshot needs: records that carry whole documents, tombstones for deletes, sane
/// batch sizes. The mirror guarantee (README, "Initial snapshot") holds only then, so other
/// settings are refused rather than warned about.
pub(super) fn snapshot_rules(p: &PipelineConfig, at: &str) -> Result<(), BridgeError> {
    let snapshots =
        p.snapshot == SnapshotMode::Initial || p.on_history_lost == OnHistoryLost::Snapshot;
    if let Some(text) = &p.snapshot_filter {
        parse_filter(text)
            .map_err(|reason| BridgeError::config(format!("{at}.snapshot_filter"), reason))?;
    }
    if !(1..=100_000).contains(&p.snapshot_batch_size) {
        return Err(BridgeError::config(
            format!("{at}.snapshot_batch_size"),
            "documents per batch: use 1–100000 (default 1000)",
        ));
    }
    if !(1..=64).contains(&p.snapshot_parallelism) {
        return Err(BridgeError::config(
            format!("{at}.snapshot_parallelism"),
            "collections copied at once: use 1–64 (default 2)",
        ));
    }
    if !snapshots {
        return Ok(());
    }
    let key = if p.snapshot == SnapshotMode::Initial {
        "snapshot = \"initial\""
    } else {
        "on_history_lost = \"snapshot\""
    };
    if p.value != ValueMode::Document && p.full_document == FullDocument::Default {
        return Err(BridgeError::config(
            format!("{at}.full_document"),
            format!(
                "{key} needs every record to carry the whole document, or an update's record \
                 would leave an older copy as the key's last record: set full_document = \
                 \"update_lookup\" (or \"required\" / \"when_available\" with post-images enabled)"
            ),
        ));
    }
    if p.value == ValueMode::Unwrapped && !super::UnwrapSettings::of(p).tombstone() {
        return Err(BridgeError::config(
            format!("{at}.unwrap.deletes"),
            format!(
                "{key} needs tombstones, or a deleted document's record would stay the key's \
                 last record in a compacted topic: use \"tombstone\" or \
                 \"rewrite_with_tombstone\""
            ),
        ));
    }
    if !matches!(p.value, ValueMode::Document | ValueMode::Unwrapped) && !p.tombstones {
        return Err(BridgeError::config(
            format!("{at}.tombstones"),
            format!(
                "{key} needs tombstones, or a deleted document's copy would stay the key's last \
                 record in a compacted topic: remove tombstones = false"
            ),
        ));
    }
    Ok(())
}
