//! Where a run starts: after the committed token, else at the stored or configured operation
//! time, else now; the initial commit of a first start, and the initial snapshot's request.
//!
//! Invariants:
//! - On a first start the stream's initial resume token is committed before any event is read,
//!   so a crash before the first event loses nothing written after "now" (case C27).
//! - A stored token the driver cannot take is an error naming the remedy, never a silent start
//!   elsewhere.
//! - A "cannot resume" error names the committed position ([`lost_history`]).

use mongodb::change_stream::event::ResumeToken;
use tracing::info;

use super::context::PipelineContext;
use crate::config::{PipelineConfig, SnapshotMode, StartAt};
use crate::error::{BridgeError, is_history_lost};
use crate::event::{Position, format_timestamp, timestamp_now};
use crate::offsets::{OffsetsDoc, OffsetsStore};
use crate::snapshot::{Reason, Request};
use crate::source::stream::{self, Start};

/// Where the stream starts: after the committed token, else at the stored or configured
/// operation time, else now.
///
/// Errors: [`BridgeError::OffsetsDocument`] when the stored token cannot be handed to the
/// driver (never a silent start elsewhere).
pub(super) fn start_of(p: &PipelineConfig, offsets: &OffsetsDoc) -> Result<Start, BridgeError> {
    start_with(p, offsets, stream::to_resume_token)
}

/// [`start_of`] with the conversion of a stored token into the driver's type given.
fn start_with(
    p: &PipelineConfig,
    offsets: &OffsetsDoc,
    convert: impl Fn(&bson::RawDocumentBuf) -> Result<ResumeToken, bson::de::Error>,
) -> Result<Start, BridgeError> {
    let stored = (
        offsets.resume_token.as_ref(),
        offsets.start_at_operation_time,
    );
    Ok(match (stored, p.start_at()) {
        ((Some(token), _), _) => {
            let token = convert(token).map_err(|e| BridgeError::OffsetsDocument {
                pipeline: p.name.clone(),
                reason: format!(
                    "its resumeToken cannot be read by the driver ({e}). Remedy: `offsets \
                     reset {} --to-timestamp T` (or --to-now) to start elsewhere",
                    p.name
                ),
            })?;
            Start::After(token)
        }
        ((None, Some(ts)), _) => Start::AtOperationTime(ts),
        ((None, None), StartAt::Timestamp(time)) => {
            Start::AtOperationTime(bson::Timestamp { time, increment: 0 })
        }
        ((None, None), StartAt::Now) => Start::Now,
    })
}

/// Logs where the run starts.
pub(super) fn log_start(p: &PipelineConfig, offsets: &OffsetsDoc, start: &Start) {
    let show =
        |t: Option<bson::Timestamp>| t.map_or_else(|| "unknown".to_owned(), format_timestamp);
    match start {
        Start::After(_) => info!(pipeline = %p.name,
            cluster_time = %show(offsets.cluster_time),
            position_time = %show(offsets.position_time),
            events_committed = offsets.events_committed,
            "resuming after the committed resume token"),
        Start::AtOperationTime(ts) => info!(pipeline = %p.name, at = %format_timestamp(*ts),
            "starting at an operation time (no token committed yet)"),
        Start::Now => info!(pipeline = %p.name,
            "starting at the current time (no position committed yet)"),
    }
}

/// The request of an initial snapshot, when `p` has `snapshot = "initial"` and its offsets have
/// neither a stream position nor a running snapshot, and no request for the whole scope waits.
/// After an `offsets reset` there is a position: no snapshot unless requested. An operator's
/// request for some namespaces made before the first start is merged into the initial copy
/// (which copies the whole scope), not taken for it.
pub(super) fn initial_snapshot(p: &PipelineConfig, offsets: &OffsetsDoc) -> Option<Request> {
    let positioned = offsets.resume_token.is_some() || offsets.start_at_operation_time.is_some();
    if p.snapshot != SnapshotMode::Initial || positioned || offsets.snapshot.is_some() {
        return None;
    }
    let initial = Request {
        reason: Reason::Initial,
        namespaces: None,
        requested_at: bson::DateTime::now(),
    };
    match &offsets.snapshot_request {
        None => Some(initial),
        Some(waiting) if waiting.namespaces.is_some() => Some(waiting.clone().merge(initial)),
        Some(_) => None,
    }
}

/// Commits the stream's first `token` before any event is read (case C27).
pub(super) async fn commit_initial(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    epoch: i64,
    token: bson::RawDocumentBuf,
) -> Result<(), BridgeError> {
    let initial = Position {
        token,
        cluster_time: None,
        position_time: timestamp_now(),
        wall_time_ms: None,
        event_count: 0,
    };
    store.commit(epoch, Some(&initial), None, 0, None).await?;
    ctx.metrics.committed(None, initial.position_time);
    info!(pipeline = %ctx.pipeline.name, "committed the initial position");
    Ok(())
}

/// A "cannot resume" source error becomes [`BridgeError::HistoryLost`], naming the committed
/// position; `at_open`: met by the `aggregate` that resumes (see [`is_history_lost`]).
pub(super) fn lost_history(
    p: &PipelineConfig,
    offsets: &OffsetsDoc,
    error: BridgeError,
    at_open: bool,
) -> BridgeError {
    match error {
        BridgeError::Source { source, .. } if is_history_lost(&source, at_open) => {
            BridgeError::HistoryLost {
                pipeline: p.name.clone(),
                cluster_time: offsets
                    .cluster_time
                    .or(offsets.position_time)
                    .map_or_else(|| "unknown".to_owned(), format_timestamp),
                source,
            }
        }
        other => other,
    }
}

/// Refuses `[pipelines.fields]` rules that touch a shard-key field of a sharded collection
/// the pipeline watches (`config/fields.rs`): the rules rewrite documents, and a copy's key and
/// position are read from them. Checked at each run's start (a collection may have been
/// sharded since), and by `check`.
///
/// Errors: [`BridgeError::Config`] naming the rule, the collection and the field.
pub(super) async fn refuse_shard_key_rules(
    client: &mongodb::Client,
    p: &PipelineConfig,
) -> Result<(), BridgeError> {
    let Some(fields) = &p.fields else {
        return Ok(());
    };
    let keys = crate::mongo::shard_keys(client, p.database.as_deref(), p.collection.as_deref());
    for (ns, key) in keys.await {
        if let Some((rule, field)) = crate::config::fields::shard_key_conflict(fields, &key) {
            return Err(BridgeError::Config {
                field: format!("pipeline {}: fields.{rule}", p.name),
                reason: crate::config::fields::shard_key_reason(&ns, &field),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bson::RawDocumentBuf;

    use super::*;

    fn pipeline() -> PipelineConfig {
        PipelineConfig::for_test("database = \"shop\"\n")
    }

    #[test]
    fn a_stored_token_the_driver_cannot_take_stops_instead_of_starting_now() {
        // GIVEN a committed token that the conversion into the driver's type refuses
        let offsets = OffsetsDoc {
            resume_token: Some(bson::rawdoc! { "_data": "8200" }),
            epoch: Some(1),
            ..OffsetsDoc::default()
        };
        let refuse =
            |_: &RawDocumentBuf| Err(<bson::de::Error as serde::de::Error>::custom("unreadable"));
        // THEN the run does not start at all (never at "now"), naming the remedy
        let error = start_with(&pipeline(), &offsets, refuse).expect_err("unusable token");
        assert!(
            matches!(&error, BridgeError::OffsetsDocument { pipeline, reason }
                if pipeline == "p" && reason.contains("offsets reset p ")),
            "{error:?}"
        );
    }

    #[test]
    fn without_a_token_the_stored_time_then_start_at_decide() {
        let at = bson::Timestamp {
            time: 9,
            increment: 2,
        };
        let stored = OffsetsDoc {
            start_at_operation_time: Some(at),
            ..OffsetsDoc::default()
        };
        assert!(matches!(
            start_of(&pipeline(), &stored),
            Ok(Start::AtOperationTime(t)) if t == at
        ));
        assert!(matches!(
            start_of(&pipeline(), &OffsetsDoc::default()),
            Ok(Start::Now)
        ));
    }

    #[test]
    fn an_initial_copy_is_not_narrowed_by_a_request_waiting_before_the_first_start() {
        let p = PipelineConfig::for_test(
            "database = \"shop\"\nsnapshot = \"initial\"\nfull_document = \"update_lookup\"\n",
        );
        let narrow = Request {
            reason: Reason::Requested,
            namespaces: Some(vec![("shop".into(), "orders".into())]),
            requested_at: bson::DateTime::from_millis(1),
        };
        let waiting = OffsetsDoc {
            snapshot_request: Some(narrow),
            ..OffsetsDoc::default()
        };
        let initial = initial_snapshot(&p, &waiting).expect("the initial copy still runs");
        assert_eq!(
            (initial.reason, initial.namespaces),
            (Reason::Initial, None)
        );
        // a request for the whole scope already waiting is the initial copy itself
        let whole = OffsetsDoc {
            snapshot_request: Some(Request {
                namespaces: None,
                ..waiting.snapshot_request.clone().expect("set above")
            }),
            ..OffsetsDoc::default()
        };
        assert_eq!(initial_snapshot(&p, &whole), None);
        assert!(initial_snapshot(&p, &OffsetsDoc::default()).is_some());
    }
}
