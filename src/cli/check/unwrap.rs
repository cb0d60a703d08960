//! The unwrapped form's line of `check` (`value = "unwrapped"`; `config/unwrap.rs` lists the
//! feature's pieces): what a delete writes, the added fields, and, plainly, what an update
//! writes without a full document.

use super::{CheckLine, line};
use crate::config::{FullDocument, PipelineConfig, UnwrapDeletes, UnwrapSettings, ValueMode};

/// The line of `p`, none unless it is in the unwrapped form.
pub(super) fn lines(p: &PipelineConfig) -> Vec<CheckLine> {
    if p.value != ValueMode::Unwrapped {
        return Vec::new();
    }
    let settings = UnwrapSettings::of(p);
    let deletes = match settings.deletes {
        UnwrapDeletes::Tombstone => "a tombstone",
        UnwrapDeletes::Rewrite => "a record with __deleted: true",
        UnwrapDeletes::RewriteWithTombstone => "a record with __deleted: true, then a tombstone",
    };
    let added: Vec<&str> = settings.added().iter().map(|f| f.name()).collect();
    let added = if added.is_empty() {
        "no added field".to_owned()
    } else {
        format!("added {}", added.join(", "))
    };
    let updates = if p.full_document == FullDocument::Default {
        "an update: the document key and the changed fields only, marked __partial \
         (full_document = \"update_lookup\" for whole documents)"
    } else {
        "an update: the whole document, or the changed fields marked __partial when the \
         server sends none"
    };
    vec![line(
        true,
        format!(
            "pipeline {}: unwrapped form: a delete writes {deletes}; {updates}; {added}",
            p.name
        ),
    )]
}
