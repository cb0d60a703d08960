//! One run of a pipeline as its owner: its plan (`plan.rs`: the stream opened where the offsets
//! say, the initial position committed if there is none, the topics made sure of), then the
//! three stages until one ends.
//!
//! ```text
//!  source ──mpsc<SourceItem> (items + byte budget)──▶ relay ──watch<Position>──▶ checkpointer
//!                                                       │ enqueue                  │ commit
//!                                                       ▼                          ▼
//!                                                 librdkafka (acks)         offsets document
//! ```
//!
//! Invariants:
//! - A stage's error or panic ends the run ([`super::stage`]): the source's by closing the
//!   channel (the relay delivers what was read, then stops), the relay's and the checkpointer's
//!   by cancelling it. The first error of the relay, then the source, then the checkpointer, is
//!   the run's.
//! - The lease is renewed while the run starts ([`super::hold`]): a slow open is not a dead owner.

use std::sync::Arc;
use std::time::Duration;

use bson::Timestamp;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::context::PipelineContext;
use super::plan::{RunPlan, prepare};
use super::stage::{self, Ends, Stage};
use super::start::lost_history;
use super::{exactly_once, hold};
use crate::config::kafka::{batch_bytes, compresses};
use crate::config::{Delivery, InFlightBounds};
use crate::encode::{RecordEncoder, topics};
use crate::error::BridgeError;
use crate::event::Safe;
use crate::kafka::admin::TopicCreator;
use crate::kafka::limits::TopicLimits;
use crate::offsets::{OffsetsDoc, OffsetsStore};
use crate::relay::heartbeat::Heartbeats;
use crate::relay::{Limits, Relay};
use crate::snapshot::Request;
use crate::source::copying::{Copier, Job};
use crate::source::reader::{Channel, StreamReader};
use crate::source::stream::RawStream;

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
    super::start::refuse_shard_key_rules(&ctx.client, &ctx.pipeline).await?;
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
    let prepared = hold::holding(store, epoch, interval, prepare(ctx, store, offsets, cancel));
    let Some(plan) = prepared.await? else {
        return Ok(());
    };
    stages(ctx, store, plan, cancel).await
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

/// Spawns and joins the three stages of the run planned by `plan`.
async fn stages(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    plan: RunPlan,
    cancel: &CancellationToken,
) -> Result<(), BridgeError> {
    let RunPlan {
        epoch,
        offsets,
        stream,
        job,
        creator,
    } = plan;
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
    let (requests_tx, requests_rx) = requests(&offsets, job.as_ref());
    let run = cancel.child_token();
    let source = spawn_source(ctx, stream, channel, &run, requests_rx, job);
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
    let started = (offsets.cluster_time, offsets.position_time);
    let relay = relay(ctx, store, (epoch, started), bounds, creator, safe_tx).await?;
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
        .map_err(|e| lost_history(p, &offsets, e, false));
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

/// Spawns the source stage: `stream` read into `channel`, and the copies of `job` (or of a
/// request arriving on `requests`) when a snapshot runs.
fn spawn_source(
    ctx: &PipelineContext,
    stream: RawStream,
    channel: Channel,
    run: &CancellationToken,
    requests: watch::Receiver<Option<Request>>,
    job: Option<Job>,
) -> Stage<()> {
    let p = &ctx.pipeline;
    let copier = Copier {
        client: ctx.client.clone(),
        pipeline: p.clone(),
        offsets: ctx.config.mongodb.offsets(),
        metrics: ctx.metrics.clone(),
    };
    let reader = StreamReader::new(p, stream);
    stage::spawn(
        &p.name,
        "source",
        Ends::ClosingItsOutput,
        crate::source::snapshot::stage(
            reader,
            channel,
            run.clone(),
            Arc::clone(&ctx.health),
            copier,
            requests,
            job,
        ),
    )
}

/// The run's relay, publishing on `safe`: the in-flight `bounds`, the encoder, the producer,
/// the lease, the topics' limits, the dead-letter topic, the topic `creator` and, exactly-once,
/// the transactions (from the offsets as they are now, after the initial commit), and the
/// heartbeats (naming the committed position's `clusterTime` and `positionTime`, `started`,
/// until the stream moves).
async fn relay(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    (epoch, started): (i64, (Option<Timestamp>, Option<Timestamp>)),
    bounds: InFlightBounds,
    creator: Option<TopicCreator>,
    safe: watch::Sender<Safe>,
) -> Result<Relay, BridgeError> {
    let p = &ctx.pipeline;
    let limits = Limits {
        max_events: bounds.events,
        max_bytes: bounds.bytes,
        queue_bytes: bounds.queue_bytes,
        drain_timeout: ctx.config.bridge.drain_bound(),
    };
    let (topic_fallbacks, key_fallbacks) = ctx.metrics.routing_fallbacks();
    let encoder = RecordEncoder::new(p, &ctx.config.kafka.topic_prefix)
        .with_routing_fallbacks(topic_fallbacks, key_fallbacks);
    let mut relay = Relay::new(
        &p.name,
        encoder,
        ctx.sink.clone(),
        limits,
        ctx.metrics.clone(),
        Arc::clone(&ctx.health),
        safe,
    )
    .with_lease(store.lease_valid_until())
    .with_encode_pool(
        ctx.config.bridge.encode_threads,
        ctx.config.bridge.encode_offload_min_bytes,
    )
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
        relay = relay.with_transactions(exactly_once::transactions(ctx, store, epoch).await?);
    }
    if let Some(topic) = topics::heartbeat(p, &ctx.config.kafka.topic_prefix) {
        let interval = Duration::from_millis(p.heartbeat_interval_ms);
        let beats = Heartbeats::new(&topic, interval, started, ctx.metrics.heartbeats());
        relay = relay.with_heartbeats(beats);
    }
    Ok(relay)
}
