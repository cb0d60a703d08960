//! A pipeline's change stream: its options, its stages, opening it at its scope, and the
//! conversions of resume tokens between the driver and the offsets document.
//!
//! Invariants:
//! - Resuming uses `startAfter` (survives an invalidate), a first start `startAtOperationTime`
//!   or the current time (<https://www.mongodb.com/docs/manual/changeStreams/#resume-a-change-stream>).
//! - A collection scope on a view or a time-series collection is refused before the pipeline is
//!   taken ([`unwatchable`], case C23), whether or not the server itself would refuse it.
//! - No stream publishes the bridge's own offsets collection: a database or deployment scope
//!   that covers it filters its events out on the server, before the user's stages
//!   ([`stages`]); otherwise every commit would become an event, published, committed, forever.
//! - `full_document_before_change = "required"` reaches the server only from a collection
//!   scope; a wider one asks for `whenAvailable` and its reader checks the captured events
//!   (`config/images.rs`): the server could otherwise fail the stream on an event the filter
//!   drops, such as an update of the offsets collection itself.
//! - A stored token the driver cannot take, or a token the driver reports that cannot be read
//!   back, is an error, never a silent start elsewhere.

use std::time::Duration;

use bson::{RawDocumentBuf, Timestamp};
use mongodb::Client;
use mongodb::change_stream::ChangeStream;
use mongodb::change_stream::event::ResumeToken;
use mongodb::options::{ChangeStreamOptions, FullDocumentBeforeChangeType, FullDocumentType};

use crate::config::names::OffsetsLocation;
use crate::config::{FullDocument, PipelineConfig, PreImages};
use crate::error::encode::EncodeError;
use crate::error::{CODE_UNKNOWN_STAGE, mongo_code};
use crate::source::split::SPLIT_STAGE;

/// What a pipeline's change stream is: the pipeline's settings, and the bridge's own collection
/// that the stream must leave out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamSpec<'a> {
    /// The pipeline's settings.
    pub pipeline: &'a PipelineConfig,
    /// Where the offsets live (`[mongodb] offsets_database` and `offsets_collection`).
    pub offsets: &'a OffsetsLocation,
    /// `maxAwaitTimeMS` of each `getMore`.
    pub max_await: Duration,
}

/// Where a change stream starts.
#[derive(Debug, Clone)]
pub(crate) enum Start {
    /// `startAfter` this token (the committed position).
    After(ResumeToken),
    /// `startAtOperationTime`.
    AtOperationTime(Timestamp),
    /// The current time.
    Now,
}

/// A raw change stream: events are kept as the server's BSON bytes.
pub type RawStream = ChangeStream<RawDocumentBuf>;

/// Converts a stored token document into the driver's token type.
pub fn to_resume_token(token: &RawDocumentBuf) -> Result<ResumeToken, bson::de::Error> {
    let mut wrapper = RawDocumentBuf::new();
    wrapper.append("t", token.clone());
    bson::from_slice(wrapper.as_bytes()).map(|w: TokenWrapper| w.t)
}

#[derive(serde::Deserialize)]
struct TokenWrapper {
    t: ResumeToken,
}

/// The driver's current resume token as a raw document; `Ok(None)` when it has none yet.
///
/// Errors: [`EncodeError::Malformed`] when the token cannot be written as BSON.
pub fn current_token(stream: &RawStream) -> Result<Option<RawDocumentBuf>, EncodeError> {
    let Some(token) = stream.resume_token() else {
        return Ok(None);
    };
    let malformed = |e: &dyn std::fmt::Display| {
        EncodeError::Malformed(format!("the driver's resume token cannot be read: {e}"))
    };
    let wrapper = bson::to_raw_document_buf(&TokenRef { t: &token }).map_err(|e| malformed(&e))?;
    let doc = wrapper.get_document("t").map_err(|e| malformed(&e))?;
    Ok(Some(doc.to_raw_document_buf()))
}

#[derive(serde::Serialize)]
struct TokenRef<'a> {
    t: &'a ResumeToken,
}

/// The stages of the pipeline's stream: the exclusion of the bridge's own collections
/// ([`OffsetsLocation::own_collections`]) when the scope covers them, then the user's stages.
pub(crate) fn stages(spec: &StreamSpec<'_>) -> Vec<bson::Document> {
    let p = spec.pipeline;
    let db = spec.offsets.database.as_str();
    let covers_offsets = match (&p.database, &p.collection) {
        (None, _) => true,
        (Some(watched), None) => watched == db,
        (Some(_), Some(_)) => false,
    };
    let mut stages = Vec::new();
    if covers_offsets {
        let own = spec.offsets.own_collections();
        let ours = bson::doc! { "ns.db": db, "ns.coll": { "$in": own.to_vec() } };
        stages.push(bson::doc! { "$match": { "$nor": [ ours ] } });
    }
    stages.extend(p.stages());
    stages
}

fn options(p: &PipelineConfig, start: &Start, max_await: Duration) -> ChangeStreamOptions {
    let full_document = match p.full_document {
        FullDocument::Default => None,
        FullDocument::UpdateLookup => Some(FullDocumentType::UpdateLookup),
        FullDocument::WhenAvailable => Some(FullDocumentType::WhenAvailable),
        FullDocument::Required => Some(FullDocumentType::Required),
    };
    // A database or deployment scope asks for `whenAvailable` and checks `required` itself on
    // the events it captures (`config/images.rs`, `source/images.rs`).
    let before = match p.pre_images() {
        PreImages::Off => None,
        PreImages::WhenAvailable | PreImages::Enforced => {
            Some(FullDocumentBeforeChangeType::WhenAvailable)
        }
        PreImages::Required => Some(FullDocumentBeforeChangeType::Required),
    };
    let mut options = ChangeStreamOptions::default();
    options.full_document = full_document;
    options.full_document_before_change = before;
    options.max_await_time = Some(max_await);
    match start {
        Start::After(token) => options.start_after = Some(token.clone()),
        Start::AtOperationTime(ts) => options.start_at_operation_time = Some(*ts),
        Start::Now => {}
    }
    options
}

/// Opens the change stream of `p` with `$changeStreamSplitLargeEvent` appended, so events over
/// 16 MB arrive as fragments (see [`super::split`]); on a server that does not know the stage
/// (code 40324, MongoDB < 7.0) opens it without. Returns the stream and whether it splits.
pub(crate) async fn open_splitting(
    client: &Client,
    spec: &StreamSpec<'_>,
    start: &Start,
) -> Result<(RawStream, bool), mongodb::error::Error> {
    let mut stages = stages(spec);
    stages.push(bson::doc! { SPLIT_STAGE: {} });
    match open_with(client, spec, stages, start).await {
        Ok(stream) => Ok((stream, true)),
        Err(e) if mongo_code(&e) == Some(CODE_UNKNOWN_STAGE) => {
            tracing::info!(pipeline = %spec.pipeline.name, "server has no \
                $changeStreamSplitLargeEvent: events over 16 MB will fail the pipeline \
                (BSONObjectTooLarge)");
            Ok((open(client, spec, start).await?, false))
        }
        Err(e) => Err(e),
    }
}

/// Why the collection of a collection-scope pipeline can never be watched (a view or a
/// time-series collection, which MongoDB refuses with `CommandNotSupportedOnView` 166, case
/// C23), from `listCollections`; `None` when it can be, does not exist (yet), or the server
/// does not answer (the stream's own `aggregate` then decides).
pub(crate) async fn unwatchable(client: &Client, p: &PipelineConfig) -> Option<String> {
    let (Some(db), Some(coll)) = (&p.database, &p.collection) else {
        return None;
    };
    let command = bson::doc! { "listCollections": 1, "filter": { "name": coll } };
    let reply = client.database(db).run_command(command).await.ok()?;
    let spec = reply
        .get_document("cursor")
        .ok()?
        .get_array("firstBatch")
        .ok()?
        .first()?
        .as_document()?;
    let timeseries = spec.get_str("type") == Ok("timeseries")
        || spec
            .get_document("options")
            .is_ok_and(|o| o.contains_key("timeseries"));
    let what = if timeseries {
        "a time-series collection"
    } else if spec.get_str("type") == Ok("view") {
        "a view"
    } else {
        return None;
    };
    Some(format!(
        "{db}.{coll} is {what}: MongoDB cannot open a change stream on it \
         (CommandNotSupportedOnView, 166); watch its database instead (omit `collection`), or \
         another collection"
    ))
}

/// Opens the change stream of `p` at its scope (collection, database or deployment).
///
/// Errors: the driver's error (auth, invalid stage, history lost, network), unclassified.
pub(crate) async fn open(
    client: &Client,
    spec: &StreamSpec<'_>,
    start: &Start,
) -> Result<RawStream, mongodb::error::Error> {
    open_with(client, spec, stages(spec), start).await
}

async fn open_with(
    client: &Client,
    spec: &StreamSpec<'_>,
    stages: Vec<bson::Document>,
    start: &Start,
) -> Result<RawStream, mongodb::error::Error> {
    let p = spec.pipeline;
    let options = options(p, start, spec.max_await);
    let stream = match (&p.database, &p.collection) {
        (Some(db), Some(coll)) => {
            let coll = client.database(db).collection::<bson::Document>(coll);
            coll.watch().pipeline(stages).with_options(options).await?
        }
        (Some(db), None) => {
            client
                .database(db)
                .watch()
                .pipeline(stages)
                .with_options(options)
                .await?
        }
        _ => {
            client
                .watch()
                .pipeline(stages)
                .with_options(options)
                .await?
        }
    };
    Ok(stream.with_type::<RawDocumentBuf>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipeline(scope: &str) -> PipelineConfig {
        PipelineConfig::for_test(&format!(
            "{scope}pipeline = '[{{\"$match\": {{\"x\": 1}}}}]'\n"
        ))
    }

    fn spec<'a>(p: &'a PipelineConfig, offsets: &'a OffsetsLocation) -> StreamSpec<'a> {
        StreamSpec {
            pipeline: p,
            offsets,
            max_await: Duration::from_secs(1),
        }
    }

    #[test]
    fn only_a_collection_scope_asks_the_server_for_required_pre_images() {
        let asked = |scope: &str| {
            let body = format!("{scope}full_document_before_change = \"required\"\n");
            let p = PipelineConfig::for_test(&body);
            let asked = options(&p, &Start::Now, Duration::from_secs(1));
            format!("{:?}", asked.full_document_before_change)
        };
        let coll = asked("database = \"shop\"\ncollection = \"orders\"\n");
        assert_eq!(coll, "Some(Required)");
        for wider in ["database = \"shop\"\n", ""] {
            let asked = asked(wider);
            assert_eq!(asked, "Some(WhenAvailable)", "{wider}");
        }
    }

    #[test]
    fn scopes_that_cover_the_offsets_collection_leave_it_out_first() {
        let exclusion = bson::doc! {
            "$match": { "$nor": [
                { "ns.db": "mkb", "ns.coll": { "$in": ["offsets", "offsets.slots"] } }
            ] }
        };
        let user = bson::doc! { "$match": { "x": 1 } };
        let mkb = OffsetsLocation::from(("mkb", "offsets"));
        let deployment = pipeline("");
        assert_eq!(
            stages(&spec(&deployment, &mkb)),
            vec![exclusion.clone(), user.clone()]
        );
        let offsets_db = pipeline("database = \"mkb\"\n");
        assert_eq!(
            stages(&spec(&offsets_db, &mkb)),
            vec![exclusion, user.clone()]
        );
        let other_db = pipeline("database = \"shop\"\n");
        assert_eq!(stages(&spec(&other_db, &mkb)), vec![user.clone()]);
        let coll = pipeline("database = \"mkb\"\ncollection = \"orders\"\n");
        assert_eq!(stages(&spec(&coll, &mkb)), vec![user]);
    }
}
