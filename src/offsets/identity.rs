//! What decides which events a position refers to: the pipeline's stream identity, stored with
//! every offsets document so that a changed filter is never resumed silently.
//!
//! The identity is `{database, collection, pipeline}`: the scope (null for a wider one) and the
//! user's parsed stages in order. Its fingerprint is the hex SHA-256 of its canonical Extended
//! JSON, so whitespace in the `pipeline` string does not count. Left out, because they change a
//! record's content or routing but not which events exist: the stages the bridge adds itself
//! (the offsets exclusion, `$changeStreamSplitLargeEvent`), `full_document`,
//! `full_document_before_change`, `topic`, `format`, `key_format`, `value`, `json`,
//! `tombstones`, the `on_*` policies, `start_at`.

use bson::{Bson, Document, doc};
use sha2::{Digest, Sha256};

use crate::config::{Format, PipelineConfig, ValueMode};
use crate::extjson::{self, JsonMode};

/// A pipeline's stream identity and the settings stored beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamIdentity {
    /// Hex SHA-256 of the canonical Extended JSON of `stream`.
    pub fingerprint: String,
    /// `{database, collection, pipeline}`, stored so an operator can read what changed.
    pub stream: Document,
    /// `json`, `bson` or `debezium` (the Debezium form's keys): recorded so a change of it can
    /// be warned about (it moves every key).
    pub key_format: &'static str,
}

impl StreamIdentity {
    /// The identity of `p` as configured.
    pub fn of(p: &PipelineConfig) -> Self {
        let scope = |v: &Option<String>| v.as_deref().map_or(Bson::Null, Bson::from);
        let stages: Vec<Bson> = p.stages().into_iter().map(Bson::Document).collect();
        let stream = doc! {
            "database": scope(&p.database),
            "collection": scope(&p.collection),
            "pipeline": stages,
        };
        Self {
            fingerprint: fingerprint(&stream),
            stream,
            key_format: match (p.value, p.key_format) {
                // Debezium's keys ({"id":"…"}) are other bytes than the JSON form's.
                (ValueMode::Debezium, _) => "debezium",
                (_, Format::Json) => "json",
                (_, Format::Bson) => "bson",
            },
        }
    }
}

/// Hex SHA-256 of the canonical Extended JSON of `stream`.
pub(crate) fn fingerprint(stream: &Document) -> String {
    let raw = bson::RawDocumentBuf::from_document(stream)
        .expect("invariant: a document built from a parsed configuration is valid BSON");
    let json = extjson::to_string(&raw, JsonMode::Canonical)
        .expect("invariant: a document built from a parsed configuration transcodes");
    let digest = Sha256::digest(json.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// `stream` as one line of relaxed Extended JSON, for messages.
pub(crate) fn describe(stream: &Document) -> String {
    Bson::Document(stream.clone())
        .into_relaxed_extjson()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_follows_scope_and_stages_only() {
        let base = StreamIdentity::of(&PipelineConfig::for_test(
            "database = \"shop\"\npipeline = '[{\"$match\": {\"x\": 1}}]'\n",
        ));
        // Whitespace in the stages, and settings that do not decide which events exist, do
        // not count.
        let same = StreamIdentity::of(&PipelineConfig::for_test(
            "database = \"shop\"\npipeline = '[ { \"$match\" : { \"x\" : 1 } } ]'\n\
             topic = \"t\"\nformat = \"bson\"\ntombstones = false\n",
        ));
        assert_eq!(base.fingerprint, same.fingerprint);
        assert_eq!(same.key_format, "json");
        // A changed filter or scope does.
        for changed in [
            "database = \"shop\"\npipeline = '[{\"$match\": {\"x\": 2}}]'\n",
            "database = \"shop\"\ncollection = \"orders\"\npipeline = '[{\"$match\": {\"x\": 1}}]'\n",
            "database = \"shop\"\n",
        ] {
            let other = StreamIdentity::of(&PipelineConfig::for_test(changed));
            assert_ne!(base.fingerprint, other.fingerprint, "{changed}");
        }
        assert_eq!(
            describe(&base.stream),
            r#"{"database":"shop","collection":null,"pipeline":[{"$match":{"x":1}}]}"#
        );
        assert_eq!(base.fingerprint.len(), 64);
    }
}
