//! `[pipelines.routing]`: which topic each record goes to and what keys it, beyond the fixed
//! `topic` and `<topic_prefix><db>.<coll>` (README "Routing"). This file holds the settings,
//! the parsed topic template and namespace matcher, and the rules checked at load.
//!
//! The feature's pieces, one file name in every layer: `config/routing.rs` (this file),
//! `encode/routing.rs` (an event → its topic and key), `observe/metrics/routing.rs` (the
//! fallbacks counted), `cli/check/routing.rs` (the routes and the key's order warning in
//! `check`).
//!
//! Invariants, once [`rules`] passed:
//! - every template parses ([`Template::parse`]), names only `${db}`, `${coll}`, captures its
//!   own regex has, and fields under `fullDocument.`, `fullDocumentBeforeChange.` or
//!   `documentKey.`; its literal text uses only topic-name characters;
//! - a template that names a document field comes with `default_topic` (a delete has no full
//!   document), and `default_topic` comes only with such a template;
//! - `key_field` never coexists with a record a consumer could not tell apart (a tombstone or a
//!   document-form delete under the field's key), nor with a snapshot (its compacted mirror is
//!   keyed by `documentKey`), nor with the Debezium form (whose key is Debezium's).

use serde::Deserialize;

use super::{PipelineConfig, ValueMode};
use crate::error::BridgeError;

/// The roots a template field or `key_field` may start with.
pub(crate) const FIELD_ROOTS: [&str; 3] =
    ["fullDocument.", "fullDocumentBeforeChange.", "documentKey."];

/// `[pipelines.routing]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingSettings {
    /// `[[pipelines.routing.namespaces]]`: the first entry whose pattern matches the event's
    /// namespace (`db.coll`, or `db` for a database event) names its topic.
    #[serde(default)]
    pub namespaces: Vec<NamespaceRoute>,
    /// The topic template of the events no namespace entry matched (e.g.
    /// `"orders.${fullDocument.region}"`); without it they keep the pipeline's usual topic.
    pub topic: Option<String>,
    /// Where an event goes when its template cannot be filled (a field missing, null or not
    /// a topic name). Required with a template that names a document field.
    pub default_topic: Option<String>,
    /// The dotted path whose value keys document events instead of `documentKey`, e.g.
    /// `"fullDocument.customerId"`.
    pub key_field: Option<String>,
}

/// One `[[pipelines.routing.namespaces]]` entry: exactly one of `glob` and `regex`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceRoute {
    /// A glob over the whole namespace (`*` any characters, dots included; `?`, `[…]`, `{a,b}`).
    pub glob: Option<String>,
    /// A regular expression the whole namespace must match; its groups are `${1}`, `${2}`, ….
    pub regex: Option<String>,
    /// The topic template.
    pub topic: String,
}

/// One piece of a topic template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Text written as it is.
    Literal(String),
    /// `${db}`.
    Db,
    /// `${coll}`.
    Coll,
    /// `${N}`: group N of the namespace entry's regex.
    Capture(usize),
    /// `${a.b.c}`: the event's field at that dotted path.
    Field(Vec<String>),
}

/// A parsed topic template: literal text and placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    /// The pieces in order.
    pub pieces: Vec<Piece>,
}

impl Template {
    /// Parses `text`; errors say what is wrong and how to write it.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            literal(&rest[..start], &mut pieces)?;
            let Some(end) = rest[start..].find('}') else {
                return Err(format!("{text:?}: \"${{\" without its closing \"}}\""));
            };
            let name = &rest[start + 2..start + end];
            pieces.push(placeholder(text, name)?);
            rest = &rest[start + end + 1..];
        }
        literal(rest, &mut pieces)?;
        if pieces.is_empty() {
            return Err("must not be empty".to_owned());
        }
        if text.starts_with(super::names::INTERNAL_PREFIX) {
            return Err(format!(
                "{text:?}: names starting with __ are Kafka's and the bridge's internal topics"
            ));
        }
        Ok(Self { pieces })
    }

    /// Whether the template names a document field.
    pub(crate) fn has_fields(&self) -> bool {
        self.pieces.iter().any(|p| matches!(p, Piece::Field(_)))
    }

    /// The highest capture group the template names (0: none).
    pub(crate) fn max_capture(&self) -> usize {
        self.pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Capture(n) => Some(*n),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// The template's text when it has no placeholder: a topic known before any event.
    pub(crate) fn literal(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [Piece::Literal(text)] => Some(text),
            _ => None,
        }
    }
}

fn literal(text: &str, pieces: &mut Vec<Piece>) -> Result<(), String> {
    if text.is_empty() {
        return Ok(());
    }
    if let Some(c) = text.chars().find(|c| !topic_char(*c)) {
        return Err(format!(
            "{c:?} cannot be part of a Kafka topic name: use [A-Za-z0-9._-] and ${{…}} \
             placeholders"
        ));
    }
    pieces.push(Piece::Literal(text.to_owned()));
    Ok(())
}

fn placeholder(text: &str, name: &str) -> Result<Piece, String> {
    Ok(match name {
        "db" => Piece::Db,
        "coll" => Piece::Coll,
        n if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => match n.parse() {
            Ok(0) | Err(_) => return Err(format!("{text:?}: ${{{n}}}: groups count from 1")),
            Ok(group) => Piece::Capture(group),
        },
        path => Piece::Field(field_path(path).map_err(|reason| format!("{text:?}: {reason}"))?),
    })
}

/// The segments of a field path under one of [`FIELD_ROOTS`].
pub(crate) fn field_path(path: &str) -> Result<Vec<String>, String> {
    let roots = FIELD_ROOTS.join(", ");
    if !FIELD_ROOTS.iter().any(|r| path.starts_with(r)) {
        return Err(format!(
            "${{{path}}} is not a placeholder: use ${{db}}, ${{coll}}, ${{1}}… (a regex's groups) \
             or a field under {roots} (e.g. ${{fullDocument.region}})"
        ));
    }
    let segments: Vec<String> = path.split('.').map(str::to_owned).collect();
    if segments.iter().any(String::is_empty) {
        return Err(format!(
            "{path:?} has an empty segment (two dots, or a dot at the end)"
        ));
    }
    Ok(segments)
}

/// Whether `c` may appear in a Kafka topic name.
pub(crate) fn topic_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// A compiled namespace pattern.
#[derive(Debug, Clone)]
pub(crate) enum Matcher {
    /// A glob over the whole namespace.
    Glob(globset::GlobMatcher),
    /// A regex anchored at both ends.
    Regex(regex::Regex),
}

impl NamespaceRoute {
    /// The entry's pattern, compiled. Errors name the problem.
    pub(crate) fn matcher(&self) -> Result<Matcher, String> {
        match (&self.glob, &self.regex) {
            (Some(glob), None) => globset::GlobBuilder::new(glob)
                .literal_separator(false)
                .build()
                .map(|g| Matcher::Glob(g.compile_matcher()))
                .map_err(|e| format!("glob {glob:?}: {e}")),
            (None, Some(regex)) => regex::Regex::new(&format!("^(?:{regex})$"))
                .map(Matcher::Regex)
                .map_err(|e| format!("regex {regex:?}: {e}")),
            _ => Err("set exactly one of glob = \"…\" and regex = \"…\"".to_owned()),
        }
    }
}

/// The rules of `p.routing` at TOML path `at` (`pipelines[i]`).
///
/// Errors: [`BridgeError::Config`] naming the field and the fix.
pub(super) fn rules(p: &PipelineConfig, at: &str) -> Result<(), BridgeError> {
    let Some(r) = &p.routing else {
        return Ok(());
    };
    let fields = namespace_rules(r, at)? | topic_rules(p, r, at)?;
    default_rules(p, r, at, fields)?;
    key_rules(p, r, at)
}

/// The error of field `key` under `at.routing`.
fn refused(at: &str, key: &str, reason: impl Into<String>) -> BridgeError {
    BridgeError::config(format!("{at}.routing.{key}"), reason)
}

/// The rules of `[[pipelines.routing.namespaces]]`; whether a template names a field.
fn namespace_rules(r: &RoutingSettings, at: &str) -> Result<bool, BridgeError> {
    let mut fields = false;
    for (i, route) in r.namespaces.iter().enumerate() {
        let key = format!("namespaces[{i}]");
        let matcher = route.matcher().map_err(|e| refused(at, &key, e))?;
        let template =
            Template::parse(&route.topic).map_err(|e| refused(at, &format!("{key}.topic"), e))?;
        let groups = match &matcher {
            Matcher::Regex(re) => re.captures_len() - 1,
            Matcher::Glob(_) => 0,
        };
        if template.max_capture() > groups {
            return Err(refused(
                at,
                &format!("{key}.topic"),
                format!(
                    "${{{}}} names a group the pattern does not have ({groups}): captures come \
                     from a regex's (…) groups; a glob has none (use ${{db}} and ${{coll}})",
                    template.max_capture()
                ),
            ));
        }
        fields |= template.has_fields();
    }
    Ok(fields)
}

/// The rules of `[pipelines.routing] topic`; whether it names a field.
fn topic_rules(p: &PipelineConfig, r: &RoutingSettings, at: &str) -> Result<bool, BridgeError> {
    let Some(text) = &r.topic else {
        return Ok(false);
    };
    let template = Template::parse(text).map_err(|e| refused(at, "topic", e))?;
    if template.max_capture() > 0 {
        return Err(refused(
            at,
            "topic",
            "captures (${1}…) come from a namespaces entry's regex: move this template there, \
             or use ${db} and ${coll}",
        ));
    }
    if p.topic.is_some() {
        return Err(BridgeError::config(
            format!("{at}.topic"),
            "a pipeline with [pipelines.routing] topic takes its topic from that template: \
             remove one of the two",
        ));
    }
    Ok(template.has_fields())
}

/// The rules of `default_topic`, and of a field template with a snapshot (`fields`: some
/// template names a field).
fn default_rules(
    p: &PipelineConfig,
    r: &RoutingSettings,
    at: &str,
    fields: bool,
) -> Result<(), BridgeError> {
    let reason = match (&r.default_topic, fields) {
        (None, true) => {
            "required with a template that names a document field: a delete (and an update \
             whose lookup found nothing) has no full document to route by; name the topic for \
             such events"
        }
        (Some(_), false) => {
            "only used with a template that names a document field (${fullDocument.…}); \
             remove it"
        }
        (Some(t), true) if !super::names::is_data_topic(t) => {
            "Kafka topic names use 1–249 of [A-Za-z0-9._-] and must not start with __"
        }
        _ if fields && p.snapshots() => {
            return Err(refused(
                at,
                "topic",
                "a snapshot marks each namespace's topic with its start and end, and a topic \
                 chosen per document leaves a namespace with no one topic: route by namespace \
                 only, or set snapshot = \"never\" and on_history_lost other than \"snapshot\"",
            ));
        }
        _ => return Ok(()),
    };
    Err(refused(at, "default_topic", reason))
}

/// The rules of `key_field`.
fn key_rules(p: &PipelineConfig, r: &RoutingSettings, at: &str) -> Result<(), BridgeError> {
    let Some(path) = &r.key_field else {
        return Ok(());
    };
    let field = || format!("{at}.routing.key_field");
    field_path(path)
        .map_err(|e| BridgeError::config(field(), e.replace("${", "").replace('}', "")))?;
    let refuse = |reason: &str| Err(BridgeError::config(field(), reason));
    if p.value == ValueMode::Debezium {
        return refuse(
            "the Debezium form keys every record as Debezium does ({\"id\": …}): remove \
             key_field, or use value = \"change_event\"",
        );
    }
    if matches!(p.value, ValueMode::Document | ValueMode::Unwrapped) {
        return refuse(
            "with value = \"document\" or \"unwrapped\" a delete is a null value under the key, and keyed by \
             this field no consumer could tell which document went: use value = \
             \"change_event\"",
        );
    }
    if p.snapshots() {
        return refuse(
            "a snapshot mirrors each document under its documentKey in a compacted topic: \
             remove key_field, or set snapshot = \"never\" and on_history_lost other than \
             \"snapshot\"",
        );
    }
    if p.tombstones {
        return refuse(
            "a delete's tombstone would carry this field's key, and in a compacted topic delete \
             every document with that value: set tombstones = false",
        );
    }
    Ok(())
}

/// Whether `key_field` may change during a document's life: anything but `documentKey` and
/// `_id` (a shard key's fields are in `documentKey` too).
pub(crate) fn key_may_change(path: &str) -> bool {
    let under =
        |root: &str| path == root || path.strip_prefix(root).is_some_and(|r| r.starts_with('.'));
    !(under("documentKey") || under("fullDocument._id") || under("fullDocumentBeforeChange._id"))
}

/// What `key_field` costs per-document order, one sentence each (`run` logs them at start,
/// `check` prints them as ⚠).
pub(super) fn warnings(i: usize, p: &PipelineConfig) -> Vec<String> {
    let Some(path) = p.routing.as_ref().and_then(|r| r.key_field.as_deref()) else {
        return Vec::new();
    };
    let at = format!("pipelines[{i}].routing.key_field");
    let mut out = Vec::new();
    if key_may_change(path) {
        out.push(format!(
            "{at} = {path:?} is not part of documentKey: if a document's {path} changes, its \
             events go to different partitions and can be read out of order (per-document \
             order holds only per key). Key by a field that never changes (a shard key's \
             fields are in documentKey: \"documentKey.<field>\"), or order by the \
             mongo.cluster_time header"
        ));
    }
    if path.starts_with("fullDocument.")
        && p.full_document_before_change == super::FullDocumentBeforeChange::Off
    {
        out.push(format!(
            "{at}: a delete has no fullDocument, so without full_document_before_change \
             (\"when_available\" or \"required\", with pre-images on the collection) it is keyed \
             by documentKey, on another partition than its document's other events; \
             mongo_kafka_bridge_routing_fallbacks_total{{kind=\"key\"}} counts such events"
        ));
    }
    out
}

#[cfg(test)]
mod tests;
