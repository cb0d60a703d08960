//! `[pipelines.fields]`: field rules that rewrite the documents of every change event and
//! snapshot record before they are encoded (README "Field rules"): `include` or `exclude`,
//! `rename`, `mask`, `hash` (keyed HMAC-SHA-256) and `truncate`, by dotted path.
//!
//! The feature's pieces, one file name in every layer: `config/fields.rs` (this file: the
//! settings and the parsed rule tree; `fields/refusals.rs`, the rules checked at load and the
//! shard-key conflict), `encode/fields.rs` (an event or a document rewritten;
//! `fields/update.rs`, its `updateDescription`), `cli/check/fields.rs` (the rules and the
//! shard-key refusal in `check`), `pipeline/start.rs` (the shard-key refusal at each run's
//! start), `bench/rules/main.rs` (the cost under callgrind).
//!
//! Invariants, once [`rules`] passed:
//! - every path is non-empty dotted text whose components are non-empty and start without `$`;
//!   none is `_id` or under it (the record's key and the snapshot's position come from it);
//! - a path carries one action at most, and no action sits under `exclude`, `mask`, `hash` or
//!   `truncate` (those decide the whole value); with `include`, every other rule's path is at or
//!   under an included path (a rule on a field left out would do nothing);
//! - no rule touches a field the pipeline routes or keys by (`[pipelines.routing]`: the route
//!   reads the event after the rules);
//! - `hash` comes with a key of at least 16 bytes, from `hash_key` or the variable
//!   `hash_key_env` names (read at load; the key is a secret: never printed).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::BridgeError;

mod refusals;

pub(crate) use refusals::{rules, shard_key_conflict, shard_key_reason};

/// The replacement `mask` writes when `mask_with` is unset.
pub(crate) const DEFAULT_MASK: &str = "****";

/// The shortest `hash` key accepted, in bytes.
pub(crate) const MIN_HASH_KEY: usize = 16;

/// `[pipelines.fields]`.
#[derive(Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FieldSettings {
    /// Keep only these paths (and `_id`); exclusive with `exclude`.
    #[serde(default)]
    pub include: Vec<String>,
    /// Drop these paths.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Path → new name of its last component (the field stays under the same parent).
    #[serde(default)]
    pub rename: BTreeMap<String, String>,
    /// Replace these paths' values by `mask_with` (a string, whatever the value's type).
    #[serde(default)]
    pub mask: Vec<String>,
    /// The replacement of `mask`; default `"****"`.
    pub mask_with: Option<String>,
    /// Replace these paths' values by the lowercase hex HMAC-SHA-256 of the value under
    /// the key.
    #[serde(default)]
    pub hash: Vec<String>,
    /// The HMAC key itself (prefer `hash_key_env`).
    pub hash_key: Option<String>,
    /// The environment variable holding the HMAC key.
    pub hash_key_env: Option<String>,
    /// Path → the most bytes its strings keep (cut on a UTF-8 character boundary).
    #[serde(default)]
    pub truncate: BTreeMap<String, usize>,
    /// `record` (default): an update whose every change the rules removed still gets its
    /// record (its key and an empty `updateDescription`); `skip`: it gets none.
    #[serde(default)]
    pub empty_updates: EmptyUpdates,
    /// The key `hash_key_env` named, read at load (never deserialized, never printed).
    #[serde(skip)]
    pub(crate) env_key: Option<String>,
}

impl std::fmt::Debug for FieldSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret = |k: &Option<String>| k.as_ref().map(|_| "<redacted>");
        f.debug_struct("FieldSettings")
            .field("include", &self.include)
            .field("exclude", &self.exclude)
            .field("rename", &self.rename)
            .field("mask", &self.mask)
            .field("mask_with", &self.mask_with)
            .field("hash", &self.hash)
            .field("hash_key", &secret(&self.hash_key))
            .field("hash_key_env", &self.hash_key_env)
            .field("truncate", &self.truncate)
            .field("empty_updates", &self.empty_updates)
            .finish()
    }
}

/// What an update whose every change the rules removed becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum EmptyUpdates {
    /// Its record, with nothing changed in it: consumers still see that the document changed.
    #[default]
    Record,
    /// No record (its position is still committed).
    Skip,
}

/// What a rule does to the value at its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Kept (`include`).
    Keep,
    /// Dropped.
    Exclude,
    /// Written under this name.
    Rename(String),
    /// Replaced by the mask string.
    Mask,
    /// Replaced by its keyed hash.
    Hash,
    /// Strings cut to this many bytes.
    Truncate(usize),
}

impl Action {
    /// The TOML key that sets the action, for error messages.
    fn key(&self) -> &'static str {
        match self {
            Self::Keep => "include",
            Self::Exclude => "exclude",
            Self::Rename(_) => "rename",
            Self::Mask => "mask",
            Self::Hash => "hash",
            Self::Truncate(_) => "truncate",
        }
    }

    /// Whether the action decides the whole value (no rule may sit under it).
    fn is_whole(&self) -> bool {
        !matches!(self, Self::Keep | Self::Rename(_))
    }
}

/// One level of the rule tree: the action at this path, the rules under it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Node {
    /// The action at this path, if one.
    pub(crate) action: Option<Action>,
    /// The next components.
    pub(crate) children: BTreeMap<String, Node>,
    /// With `include`: this path is at or under an included path (kept whole unless a rule
    /// says otherwise).
    pub(crate) included: bool,
    /// `include` names this path (its action may be another rule's: kept, then masked,
    /// hashed, truncated or renamed).
    pub(crate) kept: bool,
}

/// The parsed rules of a pipeline (no `Debug`: it holds the key).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct FieldRules {
    /// The document's root.
    pub(crate) root: Node,
    /// Whether `include` is set: a field on no included path is dropped.
    pub(crate) include: bool,
    /// `mask_with`.
    pub(crate) mask: String,
    /// The HMAC key, when `hash` is used.
    pub(crate) hash_key: Option<Vec<u8>>,
    /// `empty_updates`.
    pub(crate) empty_updates: EmptyUpdates,
}

impl FieldSettings {
    /// Every (TOML key, path, action) in a fixed order: include, exclude, rename, mask, hash,
    /// truncate.
    fn entries(&self) -> Vec<(String, &str, Action)> {
        let mut out: Vec<(String, &str, Action)> = Vec::new();
        for (i, p) in self.include.iter().enumerate() {
            out.push((format!("include[{i}]"), p, Action::Keep));
        }
        for (i, p) in self.exclude.iter().enumerate() {
            out.push((format!("exclude[{i}]"), p, Action::Exclude));
        }
        for (p, to) in &self.rename {
            out.push((format!("rename.\"{p}\""), p, Action::Rename(to.clone())));
        }
        for (i, p) in self.mask.iter().enumerate() {
            out.push((format!("mask[{i}]"), p, Action::Mask));
        }
        for (i, p) in self.hash.iter().enumerate() {
            out.push((format!("hash[{i}]"), p, Action::Hash));
        }
        for (p, n) in &self.truncate {
            out.push((format!("truncate.\"{p}\""), p, Action::Truncate(*n)));
        }
        out
    }

    /// Every path a rule names, as components, with its TOML key.
    pub(crate) fn paths(&self) -> Vec<(String, Vec<String>)> {
        self.entries()
            .into_iter()
            .map(|(key, p, _)| (key, p.split('.').map(str::to_owned).collect()))
            .collect()
    }

    /// The parsed rules; `None` when no rule is set. Valid after [`rules`].
    pub(crate) fn parsed(&self) -> Option<FieldRules> {
        self.build("").ok().flatten()
    }

    /// Builds the rule tree; the error names the TOML key under `at`.
    fn build(&self, at: &str) -> Result<Option<FieldRules>, BridgeError> {
        let entries = self.entries();
        if entries.is_empty() {
            return Ok(None);
        }
        let bad = |key: &str, reason: String| BridgeError::Config {
            field: format!("{at}{key}"),
            reason,
        };
        let mut root = Node::default();
        for (key, path, action) in &entries {
            let parts = path_parts(path).map_err(|r| bad(key, r))?;
            let mut node = &mut root;
            for (depth, part) in parts.iter().enumerate() {
                if node.action.as_ref().is_some_and(Action::is_whole) {
                    return Err(bad(
                        key,
                        format!(
                            "\"{path}\" is under \"{}\", whose rule already decides its whole \
                             value: remove one of the two",
                            parts[..depth].join(".")
                        ),
                    ));
                }
                node = node.children.entry(part.clone()).or_default();
            }
            // `include` and one other rule on a path: kept, then that rule (include comes
            // first in `entries`).
            if *action == Action::Keep {
                node.kept = true;
            } else if node.action == Some(Action::Keep) && *action != Action::Exclude {
                node.action = None;
            }
            if let Some(before) = &node.action {
                return Err(bad(
                    key,
                    format!(
                        "\"{path}\" already has a rule ({}): one rule per path",
                        before.key()
                    ),
                ));
            }
            if action.is_whole() && !node.children.is_empty() {
                return Err(bad(
                    key,
                    format!(
                        "other rules sit under \"{path}\", whose {} decides its whole value: \
                         remove one of them",
                        action.key()
                    ),
                ));
            }
            node.action = Some(action.clone());
        }
        let include = !self.include.is_empty();
        if include && !self.exclude.is_empty() {
            return Err(bad(
                "exclude",
                "`include` and `exclude` cannot be combined: list what to keep, or what to drop"
                    .into(),
            ));
        }
        if include {
            mark_included(&mut root, false);
            for (key, path, action) in &entries {
                if *action != Action::Keep && !included_at(&root, path) {
                    return Err(bad(
                        key,
                        format!(
                            "\"{path}\" is not at or under an `include` path: the field is left \
                             out anyway (include it, or drop this rule)"
                        ),
                    ));
                }
            }
        }
        Ok(Some(FieldRules {
            root,
            include,
            mask: self
                .mask_with
                .clone()
                .unwrap_or_else(|| DEFAULT_MASK.to_owned()),
            hash_key: self.key().map(|k| k.as_bytes().to_vec()),
            empty_updates: self.empty_updates,
        }))
    }

    /// The HMAC key: `hash_key`, else what `hash_key_env` named (a secret: redaction lists it).
    pub(crate) fn key(&self) -> Option<&str> {
        self.hash_key.as_deref().or(self.env_key.as_deref())
    }
}

/// Marks every node at or under an `include` path (`Action::Keep`).
fn mark_included(node: &mut Node, above: bool) {
    node.included = above || node.kept;
    let included = node.included;
    for child in node.children.values_mut() {
        mark_included(child, included);
    }
}

/// Whether `path` is at or under an included path.
fn included_at(root: &Node, path: &str) -> bool {
    let mut node = root;
    for part in path.split('.') {
        match node.children.get(part) {
            Some(child) => node = child,
            None => return false,
        }
    }
    node.included
}

/// `path`'s components; the reason when it is not a usable field path.
fn path_parts(path: &str) -> Result<Vec<String>, String> {
    let parts: Vec<String> = path.split('.').map(str::to_owned).collect();
    if parts.iter().any(String::is_empty) {
        return Err(format!(
            "\"{path}\" is not a field path: write dotted field names, e.g. \"address.zip\""
        ));
    }
    if parts.iter().any(|p| p.starts_with('$') || p.contains('\0')) {
        return Err(format!(
            "\"{path}\": a field name here cannot start with `$` or hold a NUL byte"
        ));
    }
    if parts[0] == "_id" {
        return Err(format!(
            "\"{path}\" is `_id` or under it: the record's key (`documentKey`) and a snapshot's \
             position come from `_id`, so no rule may change it"
        ));
    }
    Ok(parts)
}
