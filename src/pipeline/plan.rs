//! A run's plan, built once before its stages start ([`prepare`]) and taken whole by them:
//! what to read (the stream, opened where the offsets say, and the snapshot to run first),
//! where it starts (the offsets it was opened from, under our epoch), and how to deliver (the
//! topic creator, after the topics known before any event were made sure of).
//!
//! Invariants: the initial position, and the request of an initial snapshot before it, are
//! committed before the stages start (`start.rs`); the stream is opened at most once per plan.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::context::PipelineContext;
use super::stage::cancellable;
use super::start::{commit_initial, initial_snapshot, log_start, lost_history, start_of};
use super::waiting::said;
use crate::encode::routing::Router;
use crate::encode::topics;
use crate::error::BridgeError;
use crate::kafka::admin::{ADMIN_TIMEOUT, TopicCreator};
use crate::offsets::{OffsetsDoc, OffsetsStore};
use crate::source::copying::Job;
use crate::source::stream::{self, RawStream, Start, StreamSpec};

/// What one run reads, where it starts and how it delivers.
pub(super) struct RunPlan {
    /// Our epoch.
    pub(super) epoch: i64,
    /// The offsets the run starts from (brought forward first, exactly-once).
    pub(super) offsets: OffsetsDoc,
    /// The change stream, opened where `offsets` say.
    pub(super) stream: RawStream,
    /// The snapshot to run first, if any (a running one, one requested, an initial one).
    pub(super) job: Option<Job>,
    /// With `[kafka.topic_creation] enabled`: the creator of missing topics.
    pub(super) creator: Option<TopicCreator>,
}

/// The plan of a run from `doc` (taken or reloaded with our epoch): opens the stream where it
/// says, commits the initial position (and the request of an initial snapshot) when there is
/// none, and prepares topic creation; `None` when `cancel` fired during the open.
pub(super) async fn prepare(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    doc: OffsetsDoc,
    cancel: &CancellationToken,
) -> Result<Option<RunPlan>, BridgeError> {
    let offsets = &doc;
    let p = &ctx.pipeline;
    let b = &ctx.config.bridge;
    let epoch = offsets
        .epoch
        .expect("a taken or reloaded offsets document has an epoch");
    let start = start_of(p, offsets)?;
    log_start(p, offsets, &start);
    // The gauges of the committed position start from the stored one, not from 0 until the
    // next commit (a `time() - …_checkpoint_timestamp_seconds` alert would see 56 years).
    if let Some(position_time) = offsets.position_time.or(offsets.cluster_time) {
        ctx.metrics.committed(offsets.cluster_time, position_time);
    }
    let offsets_location = ctx.config.mongodb.offsets();
    let spec = StreamSpec {
        pipeline: p,
        offsets: &offsets_location,
        max_await: Duration::from_millis(b.max_await_time_ms),
    };
    let open = stream::open_splitting(&ctx.client, &spec, &start);
    let open = said(
        &p.name,
        &ctx.health,
        "opening the change stream (aggregate)",
        open,
    );
    let opened = cancellable(cancel, open);
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
    if let Some(at) = offsets.answered_request {
        // The last owner stopped between the finished snapshot's commit and this removal.
        store.consume_request(epoch, at).await?;
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
    let job = match (&offsets.snapshot, initial, &offsets.snapshot_request) {
        (Some(state), _, _) => Some(Job::Resume(state.clone())),
        // The initial request as stored above (a waiting request merged into it).
        (None, Some(initial), _) => Some(Job::New(initial)),
        (None, None, waiting) => waiting.clone().map(Job::New),
    };
    Ok(Some(RunPlan {
        epoch,
        offsets: doc,
        stream,
        job,
        creator,
    }))
}

/// With `[kafka.topic_creation] enabled`: the creator, after the topics known before any event
/// (a fixed or collection topic, the dead-letter topic, routing's literal and default topics,
/// the heartbeat topic) were made sure of. Without: `None`,
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
    if listed.is_some() {
        super::missing_topic::seen(ctx, &existing);
    }
    let routed = Router::of(p).map(|r| r.known_topics()).unwrap_or_default();
    let known: Vec<String> = topics::known(p, prefix)
        .into_iter()
        .chain(p.dead_letter_topic.clone())
        .chain(routed)
        .chain(topics::heartbeat(p, prefix))
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
