//! `value = "unwrapped"` and `[pipelines.unwrap]`: each record's value is the document after the
//! change as a flat record, in the spirit of Debezium's `ExtractNewDocumentState` (README "The
//! unwrapped form").
//!
//! The feature's pieces, one file name in every layer: `config/unwrap.rs` (this file: the
//! settings and the rules checked at load, with the other value modes' rule on full documents),
//! `encode/unwrap.rs` (the value of each event), `cli/check/unwrap.rs` (what `check` says of
//! the form).
//!
//! Invariants, once [`rules`] passed:
//! - `[pipelines.unwrap]` appears only with `value = "unwrapped"`;
//! - with a snapshot, deletes end in a tombstone (`deletes` other than `"rewrite"`) and updates
//!   carry the whole document (`snapshot.rs`), so a compacted topic mirrors the collection.

use serde::Deserialize;

use super::{FullDocument, PipelineConfig, ValueMode};
use crate::error::BridgeError;

/// `[pipelines.unwrap]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct UnwrapSettings {
    /// What a delete writes; default `tombstone`.
    #[serde(default)]
    pub deletes: UnwrapDeletes,
    /// Fields added to every document record: `op`, `ns`, `ts_ms` (written `__op`, `__ns`,
    /// `__ts_ms`).
    #[serde(default)]
    pub add_fields: Vec<AddedField>,
}

/// `[pipelines.unwrap] deletes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum UnwrapDeletes {
    /// A null value under the document's key, nothing else (what compaction needs).
    #[default]
    Tombstone,
    /// A record `{<documentKey fields>, "__deleted": true}` (the pre-image's fields instead,
    /// when the event has one), and no tombstone.
    Rewrite,
    /// That record, then a tombstone.
    RewriteWithTombstone,
}

/// `[pipelines.unwrap] add_fields` entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AddedField {
    /// `__op`: `c` insert, `u` update or replace, `d` delete, `r` a copied document.
    Op,
    /// `__ns`: `<db>.<coll>`.
    Ns,
    /// `__ts_ms`: the event's `wallTime` in ms since the Unix epoch, else its `clusterTime`'s
    /// seconds × 1000; a copied document's read time.
    TsMs,
}

impl AddedField {
    /// The field's name in the record.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Op => "__op",
            Self::Ns => "__ns",
            Self::TsMs => "__ts_ms",
        }
    }
}

impl UnwrapSettings {
    /// The pipeline's settings: its table, or the defaults.
    pub(crate) fn of(p: &PipelineConfig) -> Self {
        p.unwrap.clone().unwrap_or_default()
    }

    /// The added fields in the order records carry them (`__op`, `__ns`, `__ts_ms`), whatever
    /// the order of `add_fields` (which [`rules`] keeps free of repeats).
    pub(crate) fn added(&self) -> Vec<AddedField> {
        let mut added = self.add_fields.clone();
        added.sort();
        added
    }

    /// Whether a delete ends in a tombstone.
    pub(crate) fn tombstone(&self) -> bool {
        self.deletes != UnwrapDeletes::Rewrite
    }
}

/// The value modes' rules: the table only with its mode, and `value = "document"`'s need of a
/// full document on updates (the unwrapped form writes an update's changed fields instead, a
/// record marked partial).
pub(super) fn rules(p: &PipelineConfig, at: &str) -> Result<(), BridgeError> {
    if p.unwrap.is_some() && p.value != ValueMode::Unwrapped {
        return Err(BridgeError::config(
            format!("{at}.unwrap"),
            "only used with value = \"unwrapped\": set it, or remove the table",
        ));
    }
    if p.value == ValueMode::Unwrapped {
        unwrapped(p, at)?;
    }
    if p.value == ValueMode::Document && p.full_document == FullDocument::Default {
        return Err(BridgeError::config(
            format!("{at}.full_document"),
            "value = \"document\" needs a full document on updates: use \"update_lookup\", \
             \"when_available\" or \"required\" (otherwise an update would look like a delete); \
             or value = \"unwrapped\", whose update records carry the changed fields",
        ));
    }
    Ok(())
}

/// The unwrapped form's own rules: `tombstones` does not apply (`deletes` decides), an added
/// field is named once, and no rename lands on a name the form writes.
fn unwrapped(p: &PipelineConfig, at: &str) -> Result<(), BridgeError> {
    if !p.tombstones {
        return Err(BridgeError::config(
            format!("{at}.tombstones"),
            "does not apply to value = \"unwrapped\": [pipelines.unwrap] deletes decides \
             (\"rewrite\" writes no tombstone); remove tombstones",
        ));
    }
    let settings = UnwrapSettings::of(p);
    for (i, field) in settings.add_fields.iter().enumerate() {
        if settings.add_fields[..i].contains(field) {
            return Err(BridgeError::config(
                format!("{at}.unwrap.add_fields[{i}]"),
                format!("{:?} is listed twice: list each field once", field.name()),
            ));
        }
    }
    let written = ["__deleted", "__partial", "__removed", "__truncated"];
    let renames = p.fields.iter().flat_map(|f| f.rename.iter());
    for (from, to) in renames.filter(|(from, _)| !from.contains('.')) {
        let added = settings.add_fields.iter().any(|f| f.name() == to);
        if added || written.contains(&to.as_str()) {
            return Err(BridgeError::config(
                format!("{at}.fields.rename.\"{from}\""),
                format!(
                    "the unwrapped form writes {to:?} itself: the record would hold it twice; \
                     pick another name"
                ),
            ));
        }
    }
    Ok(())
}
