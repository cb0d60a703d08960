//! One run of a pipeline as its owner: open the stream where the offsets say, commit the initial
//! position if there is none, make sure the topics exist (when the bridge creates them), then
//! run the three stages until one ends.
//!
//! ```text
//!  source ──mpsc<SourceItem> (items + byte budget)──▶ relay ──watch<Position>──▶ checkpointer
//!                                                       │ enqueue                  │ commit
//!                                                       ▼                          ▼
//!                                                 librdkafka (acks)         offsets document
//! ```
//!
//! Invariants:
//! - On a first start the stream's initial resume token is committed before any event is read,
//!   so a crash before the first event loses nothing written after "now" (case C27).
//! - A stage's error or panic ends the run ([`super::stage`]): the source's by closing the
//!   channel (the relay delivers what was read, then stops), the relay's and the checkpointer's
//!   by cancelling it. The first error of the relay, then the source, then the checkpointer, is
//!   the run's.
//! - The lease is renewed while the run starts ([`super::hold`]): a slow open is not a dead owner.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mongodb::change_stream::event::ResumeToken;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::stage::{self, Ends};
use super::{PipelineContext, cancellable};
use super::{exactly_once, hold};
use crate::config::kafka::{batch_bytes, compresses};
use crate::config::{Delivery, PipelineConfig, SnapshotMode, StartAt};
use crate::encode::RecordEncoder;
use crate::encode::topics;
use crate::error::{BridgeError, is_history_lost};
use crate::event::{Position, Safe, format_timestamp, timestamp_now};
use crate::kafka::admin::{ADMIN_TIMEOUT, TopicCreator};
use crate::kafka::limits::TopicLimits;
use crate::offsets::{OffsetsDoc, OffsetsStore};
use crate::relay::exactly_once::{TransactionSettings, Transactions};
use crate::relay::{Limits, Relay};
use crate::snapshot::{Reason, Request};
use crate::source::copying::{Copier, Job};
use crate::source::reader::{Channel, StreamReader};
use crate::source::stream::{self, RawStream, Start, StreamSpec};

/// How much longer than `max_await_time_ms` a `getMore` may take before the pipeline is reported
/// not ready (ms).
const SERVER_ANSWER_GRACE_MS: u64 = 2000;

/// Capacity of the source → relay channel (items); its bytes are bounded separately by the
/// in-flight byte bound (see [`Channel`]).
const CHANNEL_CAPACITY: usize = 256;

/// Runs the pipeline from `offsets` (taken or reloaded with our epoch) until `cancel` fires and
/// the stages drained (`Ok`) or a stage fails.
pub(super) async fn once(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    offsets: OffsetsDoc,
    cancel: &CancellationToken,
) -> Result<(), BridgeError> {
    let b = &ctx.config.bridge;
    let epoch = offsets
        .epoch
        .expect("a taken or reloaded offsets document has an epoch");
    let interval = Duration::from_millis(b.commit_interval_ms);
    let offsets = if ctx.pipeline.delivery == Delivery::ExactlyOnce {
        let reconciled = exactly_once::reconcile(ctx, store, epoch, offsets);
        hold::holding(store, epoch, interval, reconciled).await?
    } else {
        offsets
    };
    let prepared = hold::holding(
        store,
        epoch,
        interval,
        prepare(ctx, store, &offsets, cancel),
    );
    let Some((stream, creator, job)) = prepared.await? else {
        return Ok(());
    };
    stages(ctx, store, epoch, &offsets, stream, creator, job, cancel).await
}

/// What a run starts with: the opened stream, the topic creator, the copy job.
type Prepared = (RawStream, Option<TopicCreator>, Option<Job>);

/// Opens the stream where `offsets` say, commits the initial position (and the request of an
/// initial snapshot) when there is none, and prepares topic creation; `None` when `cancel`
/// fired during the open.
async fn prepare(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    offsets: &OffsetsDoc,
    cancel: &CancellationToken,
) -> Result<Option<Prepared>, BridgeError> {
    let p = &ctx.pipeline;
    let b = &ctx.config.bridge;
    let epoch = offsets
        .epoch
        .expect("a taken or reloaded offsets document has an epoch");
    let start = start_of(p, offsets)?;
    log_start(p, offsets, &start);
    let answer_bound = b.max_await_time_ms.saturating_add(SERVER_ANSWER_GRACE_MS);
    ctx.health
        .server_answer_bound_ms
        .store(answer_bound as i64, Ordering::Relaxed);
    let offsets_location = ctx.config.mongodb.offsets();
    let spec = StreamSpec {
        pipeline: p,
        offsets: &offsets_location,
        max_await: Duration::from_millis(b.max_await_time_ms),
    };
    let opened = cancellable(cancel, stream::open_splitting(&ctx.client, &spec, &start));
    let Some(opened) = opened.await else {
        return Ok(None);
    };
    let (stream, _splits) = opened.map_err(|source| {
        let error = BridgeError::Source {
            pipeline: p.name.clone(),
            source: Box::new(source),
        };
        lost_history(p, offsets, error, true)
    })?;
    if let (Start::AtOperationTime(ts), None) = (&start, &offsets.start_at_operation_time) {
        store.set_start_time(epoch, *ts).await?;
    }
    let initial = initial_snapshot(p, offsets);
    if let Some(request) = &initial {
        // Before the initial position: a crash in between snapshots on the next start.
        store.request_snapshot(epoch, request).await?;
        info!(pipeline = %p.name, "snapshot = initial: no position yet, the namespace(s) will \
              be copied after the stream's start is committed");
    }
    if offsets.resume_token.is_none() {
        let token = stream::current_token(&stream).map_err(|source| BridgeError::Encode {
            pipeline: p.name.clone(),
            source,
        })?;
        if let Some(token) = token {
            commit_initial(ctx, store, epoch, token).await?;
        }
    }
    let creator = topic_creator(ctx).await?;
    let job = match (&offsets.snapshot, &offsets.snapshot_request, initial) {
        (Some(state), _, _) => Some(Job::Resume(state.clone())),
        (None, Some(request), _) => Some(Job::New(request.clone())),
        (None, None, initial) => initial.map(Job::New),
    };
    Ok(Some((stream, creator, job)))
}

/// The request of an initial snapshot, when `p` has `snapshot = "initial"` and its offsets have
/// neither a stream position nor a snapshot (running or requested). After an `offsets reset`
/// there is a position: no snapshot unless requested.
fn initial_snapshot(p: &PipelineConfig, offsets: &OffsetsDoc) -> Option<Request> {
    let positioned = offsets.resume_token.is_some() || offsets.start_at_operation_time.is_some();
    let snapshotting = offsets.snapshot.is_some() || offsets.snapshot_request.is_some();
    (p.snapshot == SnapshotMode::Initial && !positioned && !snapshotting).then(|| Request {
        reason: Reason::Initial,
        namespace: None,
        requested_at: bson::DateTime::now(),
    })
}

/// The snapshot requests the checkpointer reports to the source: a request waiting in the
/// offsets document that `job` does not answer is reported at once.
fn requests(
    offsets: &OffsetsDoc,
    job: Option<&Job>,
) -> (
    watch::Sender<Option<Request>>,
    watch::Receiver<Option<Request>>,
) {
    let (tx, rx) = watch::channel(offsets.snapshot_request.clone());
    let answered = match job {
        Some(Job::New(_)) => true,
        Some(Job::Resume(state)) => offsets
            .snapshot_request
            .as_ref()
            .is_some_and(|r| Some(r.requested_at) == state.requested_at),
        None => false,
    };
    if offsets.snapshot_request.is_some() && !answered {
        tx.send_replace(offsets.snapshot_request.clone());
    }
    (tx, rx)
}

/// Spawns and joins the three stages of the run.
#[allow(clippy::too_many_arguments)]
async fn stages(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    epoch: i64,
    offsets: &OffsetsDoc,
    stream: RawStream,
    creator: Option<TopicCreator>,
    job: Option<Job>,
    cancel: &CancellationToken,
) -> Result<(), BridgeError> {
    let p = &ctx.pipeline;
    let b = &ctx.config.bridge;
    let bounds = ctx.config.in_flight_bounds();
    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
    let budget_bytes = u32::try_from(bounds.bytes).unwrap_or(u32::MAX);
    let channel = Channel {
        tx,
        budget: Arc::new(tokio::sync::Semaphore::new(budget_bytes as usize)),
        budget_bytes,
    };
    let (safe_tx, safe_rx) = watch::channel(Safe::default());
    let (requests_tx, requests_rx) = requests(offsets, job.as_ref());
    let run = cancel.child_token();
    let copier = Copier {
        client: ctx.client.clone(),
        pipeline: p.clone(),
        offsets: ctx.config.mongodb.offsets(),
        metrics: ctx.metrics.clone(),
    };
    let reader = StreamReader::new(&p.name, stream);
    let source = stage::spawn(
        &p.name,
        "source",
        Ends::ClosingItsOutput,
        crate::source::snapshot::stage(
            reader,
            channel,
            run.clone(),
            Arc::clone(&ctx.health),
            copier,
            requests_rx,
            job,
        ),
    );
    let interval = Duration::from_millis(b.commit_interval_ms);
    let checkpointer = stage::spawn(
        &p.name,
        "checkpointer",
        Ends::Cancelling(&run),
        crate::checkpoint::run(
            store.clone(),
            epoch,
            safe_rx,
            interval,
            ctx.metrics.clone(),
            requests_tx,
        ),
    );
    let limits = Limits {
        max_events: bounds.events,
        max_bytes: bounds.bytes,
        queue_bytes: bounds.queue_bytes,
        drain_timeout: Duration::from_millis(b.shutdown_timeout_ms),
    };
    let encoder = RecordEncoder::new(p, &ctx.config.kafka.topic_prefix);
    let mut relay = Relay::new(
        &p.name,
        encoder,
        ctx.sink.clone(),
        limits,
        ctx.metrics.clone(),
        Arc::clone(&ctx.health),
        safe_tx,
    )
    .with_lease(store.lease_valid_until())
    .with_topic_limits(TopicLimits::new(
        ctx.admin.clone(),
        &p.name,
        (
            batch_bytes(&ctx.config.kafka, ctx.learned.batch_cap),
            compresses(&ctx.config.kafka),
        ),
        &ctx.learned,
    ));
    if let Some(topic) = &p.dead_letter_topic {
        relay = relay.with_dead_letter(topic);
    }
    if let Some(creator) = creator {
        relay = relay.with_topic_creator(creator);
    }
    if p.delivery == Delivery::ExactlyOnce {
        relay = relay.with_transactions(transactions(ctx, store, epoch).await?);
    }
    ctx.metrics.stream_open.set(1);
    let relay = stage::spawn(&p.name, "relay", Ends::Cancelling(&run), {
        let run = run.clone();
        relay.run(rx, run)
    });
    let relay_result = relay.join().await;
    ctx.health.loop_ended();
    run.cancel();
    ctx.metrics.stream_open.set(0);
    let source_result = source
        .join()
        .await
        .map_err(|e| lost_history(p, offsets, e, false));
    let checkpoint_result = checkpointer.join().await;
    let result = relay_result.and(source_result);
    if let (Err(_), Err(hidden)) = (&result, &checkpoint_result) {
        // Only the first error decides the restart; this one explains why the last positions
        // were not committed (they will be read and published again).
        warn!(pipeline = %p.name, error = %ctx.report(hidden),
              "the final commit failed too: the events after the last commit will be read again");
    }
    result.and(checkpoint_result)
}

/// The transaction state of an exactly-once run, from the offsets as they are now (after the
/// initial commit, if there was one).
async fn transactions(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    epoch: i64,
) -> Result<Transactions, BridgeError> {
    let now = store.load(epoch).await?;
    let config = &ctx.config;
    let settings = TransactionSettings {
        progress_topic: crate::config::names::progress_topic(&config.mongodb.offsets_database),
        owner: exactly_once::progress_key(ctx, &now)?,
        epoch,
        sequences: exactly_once::sequences(&now),
        progress_offset: now.progress_offset,
        max_events: ctx.pipeline.max_transaction_events,
        interval: Duration::from_millis(config.bridge.commit_interval_ms),
        transaction_timeout: Duration::from_millis(
            crate::config::exactly_once::transaction_timeout_ms(config),
        ),
    };
    Ok(Transactions::new(settings, ctx.metrics.transactions()))
}

/// Where the stream starts: after the committed token, else at the stored or configured
/// operation time, else now.
///
/// Errors: [`BridgeError::OffsetsDocument`] when the stored token cannot be handed to the
/// driver (never a silent start elsewhere).
fn start_of(p: &PipelineConfig, offsets: &OffsetsDoc) -> Result<Start, BridgeError> {
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

fn log_start(p: &PipelineConfig, offsets: &OffsetsDoc, start: &Start) {
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

/// Commits the stream's first `token` before any event is read (case C27).
async fn commit_initial(
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

/// With `[kafka.topic_creation] enabled`: the creator, after the topics known before any event
/// (a fixed or collection topic, the dead-letter topic) were made sure of. Without: `None`,
/// after a warning for each known topic the cluster does not list.
async fn topic_creator(ctx: &PipelineContext) -> Result<Option<TopicCreator>, BridgeError> {
    let p = &ctx.pipeline;
    let prefix = &ctx.config.kafka.topic_prefix;
    let settings = &ctx.config.kafka.topic_creation;
    let listed = ctx.admin.metadata(ADMIN_TIMEOUT).await.ok();
    if listed.is_some() {
        ctx.health.kafka_failing.store(false, Ordering::Relaxed);
    }
    let existing: Vec<String> = listed
        .iter()
        .flat_map(|c| c.topics.iter().map(|t| t.name.clone()))
        .collect();
    let known: Vec<String> = topics::known(p, prefix)
        .into_iter()
        .chain(p.dead_letter_topic.clone())
        .collect();
    if !settings.enabled {
        for topic in known
            .iter()
            .filter(|t| listed.is_some() && !existing.contains(t))
        {
            warn!(pipeline = %p.name, topic = %topic,
                  "topic does not exist: relying on the broker's auto.create.topics.enable (its \
                   default partitions and cleanup.policy); set [kafka.topic_creation] enabled = \
                   true to have the bridge create it, or create it yourself");
        }
        return Ok(None);
    }
    let mut creator = TopicCreator::new(ctx.admin.clone(), settings.clone(), &p.name, existing);
    for topic in known {
        creator.ensure(&Arc::from(topic)).await?;
    }
    Ok(Some(creator))
}

/// A "cannot resume" source error becomes [`BridgeError::HistoryLost`], naming the committed
/// position; `at_open`: met by the `aggregate` that resumes (see [`is_history_lost`]).
fn lost_history(
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
}
