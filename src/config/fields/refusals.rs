//! The refusals of `[pipelines.fields]` (the invariants listed in `config/fields.rs`): at load
//! ([`rules`]: rename targets, truncate sizes, the hash key, the rule tree, routed fields), and
//! against a sharded collection's key ([`shard_key_conflict`], at start and in `check`).

use super::super::PipelineConfig;
use super::{FieldSettings, MIN_HASH_KEY};
use crate::error::BridgeError;

/// The rules of `[pipelines.fields]`, checked at load (see the module doc).
///
/// Errors: [`BridgeError::Config`] naming the key under `at` (`pipelines[i].`).
pub(crate) fn rules(p: &PipelineConfig, at: &str) -> Result<(), BridgeError> {
    let Some(f) = &p.fields else {
        return Ok(());
    };
    let at = format!("{at}fields.");
    let bad = |key: &str, reason: String| BridgeError::Config {
        field: format!("{at}{key}"),
        reason,
    };
    for (from, to) in &f.rename {
        if to.is_empty() || to.contains('.') || to.starts_with('$') || to.contains('\0') {
            return Err(bad(
                &format!("rename.\"{from}\""),
                format!(
                    "{to:?} is not a field name: the new name of the last component, without \
                     dots (the field stays under the same parent)"
                ),
            ));
        }
    }
    renames(f).map_err(|(key, reason)| bad(&key, reason))?;
    for (path, n) in &f.truncate {
        if *n == 0 {
            return Err(bad(
                &format!("truncate.\"{path}\""),
                "must be at least 1 byte (exclude the field to drop it)".into(),
            ));
        }
    }
    if !f.hash.is_empty() {
        match (f.hash_key.is_some(), &f.hash_key_env, f.key()) {
            (false, None, _) => {
                return Err(bad(
                    "hash",
                    "needs a key: set hash_key_env to the name of an environment variable \
                     holding at least 16 bytes (or hash_key)"
                        .into(),
                ));
            }
            (false, Some(var), None) => {
                return Err(bad(
                    "hash_key_env",
                    format!("the environment variable {var} is not set: export the HMAC key"),
                ));
            }
            (_, _, Some(k)) if k.len() < MIN_HASH_KEY => {
                return Err(bad(
                    if f.hash_key.is_some() {
                        "hash_key"
                    } else {
                        "hash_key_env"
                    },
                    format!(
                        "the HMAC key is {} bytes: use at least {MIN_HASH_KEY} (e.g. 32 random \
                         bytes, hex)",
                        k.len()
                    ),
                ));
            }
            _ => {}
        }
    }
    f.build(&at)?;
    routed_fields_untouched(p, f, &at)
}

/// A field routing reads (a topic template's field, `key_field`) is no rule's: the route reads
/// the event after the rules.
fn routed_fields_untouched(
    p: &PipelineConfig,
    f: &FieldSettings,
    at: &str,
) -> Result<(), BridgeError> {
    let Some(routing) = &p.routing else {
        return Ok(());
    };
    for routed in routed_fields(routing) {
        if let Some(key) = rule_touching(f, &routed) {
            let reason = if key == "include" {
                format!(
                    "leaves out \"{}\", which [pipelines.routing] routes or keys by: include it",
                    routed.join(".")
                )
            } else {
                format!(
                    "touches \"{}\", which [pipelines.routing] routes or keys by: the route \
                     reads the event after the rules, so this rule would change where (or \
                     under which key) records go; leave the field alone",
                    routed.join(".")
                )
            };
            return Err(BridgeError::Config {
                field: format!("{at}{key}"),
                reason,
            });
        }
    }
    Ok(())
}

/// The first rule touching a field of `shard_key` (a sharded collection's key pattern): its
/// TOML key under `fields.` and the field. A shard key's fields are in `documentKey`, and a
/// copy's key and position are read from the document, so no rule may change them.
pub(crate) fn shard_key_conflict(
    f: &FieldSettings,
    shard_key: &[String],
) -> Option<(String, String)> {
    shard_key
        .iter()
        .filter(|k| k.as_str() != "_id")
        .find_map(|field| {
            let parts: Vec<String> = field.split('.').map(str::to_owned).collect();
            rule_touching(f, &parts).map(|key| (key, field.clone()))
        })
}

/// The TOML key (under `fields.`) of the first rule that would change `field` (components):
/// a rule at, above or under it, or `include` when no included path covers it.
fn rule_touching(f: &FieldSettings, field: &[String]) -> Option<String> {
    let touching = f.paths().into_iter().find(|(key, path)| {
        !key.starts_with("include") && (path.starts_with(field) || field.starts_with(path))
    });
    if let Some((key, _)) = touching {
        return Some(key);
    }
    let covered = f.include.is_empty()
        || f.include.iter().any(|i| {
            let i: Vec<String> = i.split('.').map(str::to_owned).collect();
            field.starts_with(&i)
        });
    (!covered).then(|| "include".to_owned())
}

/// Why a rule on a shard-key field is refused, with the way out.
pub(crate) fn shard_key_reason(ns: &str, field: &str) -> String {
    format!(
        "touches \"{field}\", a field of the shard key of {ns}: documentKey holds it and a \
         copy resumes by it, so no rule may change it. Remedy: remove that rule (or leave the \
         field out of its path)"
    )
}

/// The document-relative paths routing reads: each template's `${fullDocument.…}` and
/// `${fullDocumentBeforeChange.…}` fields, and `key_field` under those roots (`documentKey`
/// is no rule's).
fn routed_fields(routing: &super::super::RoutingSettings) -> Vec<Vec<String>> {
    let templates = routing
        .namespaces
        .iter()
        .map(|n| n.topic.as_str())
        .chain(routing.topic.as_deref());
    let mut paths: Vec<Vec<String>> = templates
        .filter_map(|t| super::super::routing::Template::parse(t).ok())
        .flat_map(|t| t.pieces)
        .filter_map(|piece| match piece {
            super::super::routing::Piece::Field(segments) => Some(segments),
            _ => None,
        })
        .collect();
    paths.extend(
        routing
            .key_field
            .iter()
            .map(|k| k.split('.').map(str::to_owned).collect()),
    );
    paths
        .into_iter()
        .filter(|s| {
            matches!(
                s.first().map(String::as_str),
                Some("fullDocument" | "fullDocumentBeforeChange")
            )
        })
        .map(|s| s[1..].to_vec())
        .collect()
}

/// What a rename may not do: land on `_id`, share its new name with another rename under the
/// same parent, or land on a path another rule names (rules apply to a field by its name in
/// the source document, so that rule would never see the renamed value: a `mask` or `exclude`
/// there would be bypassed). A path whose own field is renamed away is free (a swap).
fn renames(f: &crate::config::FieldSettings) -> Result<(), (String, String)> {
    let key = |from: &str| format!("rename.\"{from}\"");
    let target = |from: &str, to: &str| match from.rsplit_once('.') {
        Some((parent, _)) => format!("{parent}.{to}"),
        None => to.to_owned(),
    };
    let mut seen: Vec<(String, &str)> = Vec::new();
    for (from, to) in &f.rename {
        let landing = target(from, to);
        if landing == "_id" {
            return Err((
                key(from),
                "renames onto `_id`: the document's `_id` stays, so the record would hold two; \
                 pick another name"
                    .into(),
            ));
        }
        if landing == *from {
            return Err((key(from), format!("renames {from:?} to itself: remove it")));
        }
        if let Some((_, other)) = seen.iter().find(|(l, _)| *l == landing) {
            return Err((
                key(from),
                format!(
                    "{landing:?} is also the new name of {other:?}: the record would hold the \
                     field twice; give each its own name"
                ),
            ));
        }
        seen.push((landing.clone(), from));
        let other = f.paths().into_iter().find(|(k, parts)| {
            parts.join(".") == landing && !(k.starts_with("rename.") || k.starts_with("include"))
        });
        if let Some((other_key, _)) = other {
            return Err((
                key(from),
                format!(
                    "the renamed field lands on {landing:?}, which {other_key} names: rules apply \
                     to a field by its source name, so that rule would not apply to the renamed \
                     value; put the rule on {from:?} instead"
                ),
            ));
        }
    }
    Ok(())
}
