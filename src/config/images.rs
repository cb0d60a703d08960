//! Pre-images (`full_document_before_change`): what a pipeline asks the server for and what the
//! bridge checks itself, by scope, and the load rule that keeps the bridge's check sound.
//!
//! The rule (README "Pre- and post-images"): `required` promises a pre-image on every
//! **captured** update, replace and delete event, and says nothing of the events the pipeline
//! does not capture. MongoDB gives those three operation types `fullDocumentBeforeChange` when
//! the collection records pre-images, inserts never
//! (<https://www.mongodb.com/docs/manual/changeStreams/#change-streams-with-document-pre--and-post-images>,
//! <https://www.mongodb.com/docs/manual/reference/operator/aggregation/changeStream/>).
//!
//! - A collection scope captures exactly its collection: the server is asked for `required`.
//! - A database or deployment scope watches more than its filter captures (and the bridge's own
//!   offsets collection when it covers it), and a server may apply `required` to every event of
//!   the scope before any `$match` runs: SecantusDB does; mongod moves a `$match` it can ahead
//!   of the lookup (its test `jstests/change_streams/`
//!   `change_stream_pre_image_lookup_whole_db_whole_cluster.js`), which its manual does not
//!   promise. So such a scope asks for `whenAvailable`, and the
//!   bridge fails a captured event whose pre-image is missing ([`PreImages::Enforced`],
//!   `source/images.rs`): an uncaptured collection can never stop the stream, and a captured
//!   one without its pre-image always does.
//!
//! Invariant: `required` is never weakened. The bridge reads the event as the stages leave
//! it, so a wide-scope `required` pipeline whose stages remove `fullDocumentBeforeChange` is
//! refused at load ([`rules`]): its check could not see a missing pre-image.

use bson::Bson;

use super::{FullDocumentBeforeChange, PipelineConfig};
use crate::error::BridgeError;

/// How a pipeline gets its pre-images.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreImages {
    /// None asked for.
    Off,
    /// `whenAvailable`: a pre-image when the server has one, else `null`.
    WhenAvailable,
    /// `required`, checked by the server (a collection scope).
    Required,
    /// `required` at a database or deployment scope: the server is asked for
    /// `whenAvailable`, and the bridge fails a captured update, replace or delete whose
    /// `fullDocumentBeforeChange` is `null`.
    Enforced,
}

impl PipelineConfig {
    /// How this pipeline gets its pre-images (`config/images.rs`).
    pub fn pre_images(&self) -> PreImages {
        match (self.full_document_before_change, self.collection.is_some()) {
            (FullDocumentBeforeChange::Off, _) => PreImages::Off,
            (FullDocumentBeforeChange::WhenAvailable, _) => PreImages::WhenAvailable,
            (FullDocumentBeforeChange::Required, true) => PreImages::Required,
            (FullDocumentBeforeChange::Required, false) => PreImages::Enforced,
        }
    }
}

/// The field the bridge reads to enforce `required`.
pub(crate) const PRE_IMAGE_FIELD: &str = "fullDocumentBeforeChange";

/// Refuses a pipeline whose pre-image check would be blind: [`PreImages::Enforced`] with a stage
/// that removes `fullDocumentBeforeChange` (an exclusion `$project` of it, an inclusion
/// `$project` that does not include it whole, an `$unset` of it).
pub(super) fn rules(p: &PipelineConfig, at: &str) -> Result<(), BridgeError> {
    if p.pre_images() != PreImages::Enforced {
        return Ok(());
    }
    let Some((i, name)) = p.stages().iter().enumerate().find_map(|(i, stage)| {
        let (name, body) = stage.iter().next()?;
        removes_pre_image(name, body).then(|| (i, name.clone()))
    }) else {
        return Ok(());
    };
    Err(BridgeError::config(
        format!("{at}.pipeline"),
        format!(
            "stage {i} ({name}) removes {PRE_IMAGE_FIELD}, which full_document_before_change = \
             \"required\" asks for: at a database or deployment scope the bridge checks each \
             captured event's pre-image itself, and could not see a missing one. Keep the field \
             (trim it with $project: {{\"{PRE_IMAGE_FIELD}.field\": 0}}), or set \
             full_document_before_change = \"when_available\""
        ),
    ))
}

/// Whether the stage `name: body` removes the whole `fullDocumentBeforeChange` field.
fn removes_pre_image(name: &str, body: &Bson) -> bool {
    let excluded = |v: &Bson| {
        matches!(v, Bson::Boolean(false))
            || v.as_i32() == Some(0)
            || v.as_i64() == Some(0)
            || v.as_f64() == Some(0.0)
    };
    match (name, body) {
        ("$unset", Bson::String(path)) => path == PRE_IMAGE_FIELD,
        ("$unset", Bson::Array(paths)) => paths.iter().any(|p| p.as_str() == Some(PRE_IMAGE_FIELD)),
        ("$project", Bson::Document(spec)) => {
            let inclusion = spec.iter().any(|(k, v)| k != "_id" && !excluded(v));
            // An inclusion of a part of it (`fullDocumentBeforeChange.a: 1`) drops a null
            // pre-image too: a projected path through a non-document value is left out.
            spec.get(PRE_IMAGE_FIELD).is_some_and(excluded)
                || (inclusion && !spec.contains_key(PRE_IMAGE_FIELD))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_is_the_servers_for_a_collection_and_the_bridges_for_a_wider_scope() {
        let p = |body: &str| PipelineConfig::for_test(body).pre_images();
        let required = "full_document_before_change = \"required\"\n";
        assert_eq!(
            p(&format!(
                "database = \"shop\"\ncollection = \"orders\"\n{required}"
            )),
            PreImages::Required
        );
        assert_eq!(
            p(&format!("database = \"shop\"\n{required}")),
            PreImages::Enforced
        );
        assert_eq!(p(required), PreImages::Enforced);
        let available = "full_document_before_change = \"when_available\"\n";
        assert_eq!(p(available), PreImages::WhenAvailable);
        assert_eq!(p("database = \"shop\"\n"), PreImages::Off);
    }

    #[test]
    fn a_wide_required_pipeline_may_not_remove_the_pre_image() {
        let text = |scope: &str, stages: &str| {
            format!(
                "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
                 [[pipelines]]\nname = \"p\"\n{scope}full_document_before_change = \"required\"\n\
                 pipeline = '{stages}'\n"
            )
        };
        let load = |scope: &str, stages: &str| {
            crate::config::Config::from_toml(&text(scope, stages), std::iter::empty())
        };
        for stages in [
            r#"[{"$project": {"fullDocumentBeforeChange": 0}}]"#,
            r#"[{"$unset": ["x", "fullDocumentBeforeChange"]}]"#,
            r#"[{"$project": {"documentKey": 1, "fullDocument": 1, "ns": 1}}]"#,
            r#"[{"$project": {"documentKey": 1, "fullDocumentBeforeChange.a": 1}}]"#,
        ] {
            let error = load("database = \"shop\"\n", stages).expect_err(stages);
            let text = error.to_string();
            assert!(text.contains("pipelines[0].pipeline"), "{text}");
            assert!(text.contains("removes fullDocumentBeforeChange"), "{text}");
            // The server checks a collection scope's pre-images before the stages run.
            let coll = "database = \"shop\"\ncollection = \"orders\"\n";
            assert!(load(coll, stages).is_ok(), "{stages}");
        }
        for kept in [
            r#"[{"$project": {"fullDocumentBeforeChange.secret": 0}}]"#,
            r#"[{"$project": {"documentKey": 1, "fullDocumentBeforeChange": 1}}]"#,
            r#"[{"$unset": "fullDocument"}]"#,
        ] {
            assert!(load("", kept).is_ok(), "{kept}");
        }
    }
}
