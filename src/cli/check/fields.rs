//! The field-rules lines of `check` (`[pipelines.fields]`; `config/fields.rs` lists the
//! feature's pieces): the rules of a pipeline (never the hash key, only where it comes from),
//! and a failure for a rule touching a shard-key field of a watched sharded collection.

use mongodb::Client;

use super::{CheckLine, line};
use crate::config::PipelineConfig;
use crate::config::fields::{shard_key_conflict, shard_key_reason};

/// The lines of `p`, none without field rules.
pub(super) async fn lines(client: &Client, p: &PipelineConfig) -> Vec<CheckLine> {
    let Some(f) = &p.fields else {
        return Vec::new();
    };
    let mut parts = Vec::new();
    let list = |name: &str, paths: &[String]| format!("{name} {}", paths.join(", "));
    for (name, paths) in [
        ("include", &f.include),
        ("exclude", &f.exclude),
        ("mask", &f.mask),
        ("hash", &f.hash),
    ] {
        if !paths.is_empty() {
            parts.push(list(name, paths));
        }
    }
    if !f.rename.is_empty() {
        let renames: Vec<String> = f.rename.iter().map(|(a, b)| format!("{a} → {b}")).collect();
        parts.push(format!("rename {}", renames.join(", ")));
    }
    if !f.truncate.is_empty() {
        let cuts: Vec<String> = f
            .truncate
            .iter()
            .map(|(a, n)| format!("{a} to {n} B"))
            .collect();
        parts.push(format!("truncate {}", cuts.join(", ")));
    }
    if !f.hash.is_empty() {
        parts.push(match &f.hash_key_env {
            Some(var) => format!("hash key from ${var}"),
            None => "hash key from hash_key".to_owned(),
        });
    }
    let empty = match f.empty_updates {
        crate::config::EmptyUpdates::Record => "an update of removed fields only: its record",
        crate::config::EmptyUpdates::Skip => "an update of removed fields only: skipped",
    };
    let mut out = vec![line(
        true,
        format!(
            "pipeline {}: field rules: {}; {empty}",
            p.name,
            parts.join("; ")
        ),
    )];
    let keys = crate::mongo::shard_keys(client, p.database.as_deref(), p.collection.as_deref());
    for (ns, key) in keys.await {
        if let Some((rule, field)) = shard_key_conflict(f, &key) {
            out.push(line(
                false,
                format!(
                    "pipeline {}: fields.{rule} {}",
                    p.name,
                    shard_key_reason(&ns, &field)
                ),
            ));
        }
    }
    out
}
