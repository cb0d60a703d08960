//! One pipeline's supervisor: takes ownership of the offsets document, then runs source → relay →
//! checkpointer, restarting from the committed position after transient failures.
//!
//! Invariants:
//! - Every (re)start reads the position from the offsets document (checking our epoch), never
//!   from memory: what was not committed is read again (at-least-once).
//! - On a first start the stream's initial resume token is committed before any event is read,
//!   so a crash before the first event loses nothing written after "now" (case C27).
//! - Restarts back off exponentially with full jitter, capped at `max_restart_backoff_ms`, and
//!   reset after a run that lasted longer than [`HEALTHY_RUN`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mongodb::Client;
use rand::Rng;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::checkpoint::{Offsets, OffsetsStore, run_checkpointer};
use crate::config::{Config, OnHistoryLost, OnOversize, PipelineConfig, StartAt};
use crate::encode::Encoder;
use crate::error::{BridgeError, ErrorClass, is_history_lost, report};
use crate::event::{Position, format_timestamp, timestamp_now};
use crate::gap;
use crate::health::PipelineHealth;
use crate::metrics::PipelineMetrics;
use crate::relay::{Limits, Relay};
use crate::sink::KafkaSink;
use crate::source::{self, Start};

/// How much longer than `max_await_time_ms` a `getMore` may take before the pipeline is reported
/// not ready (ms).
const SERVER_ANSWER_GRACE_MS: u64 = 2000;

/// A run longer than this resets the restart backoff.
const HEALTHY_RUN: Duration = Duration::from_secs(60);
/// Capacity of the source → relay channel (items); its bytes are bounded separately by
/// `max_in_flight_bytes` (see [`source::Channel`]).
const CHANNEL_CAPACITY: usize = 256;

/// Everything one pipeline needs.
pub struct PipelineContext {
    /// The whole config (for `[kafka]` and `[bridge]`).
    pub config: Arc<Config>,
    /// This pipeline's entry.
    pub pipeline: PipelineConfig,
    /// Shared MongoDB client.
    pub client: Client,
    /// Instance id written as `owner`.
    pub owner: String,
    /// This pipeline's metric handles.
    pub metrics: PipelineMetrics,
    /// This pipeline's health state.
    pub health: Arc<PipelineHealth>,
}

impl PipelineContext {
    fn store(&self) -> OffsetsStore {
        let b = &self.config.bridge;
        let lease = Duration::from_millis(b.commit_interval_ms.saturating_mul(5).max(5000));
        OffsetsStore::new(
            &self.client,
            &self.config.mongodb.offsets_database,
            &self.config.mongodb.offsets_collection,
            &self.pipeline.name,
            &self.owner,
            lease,
        )
    }
}

/// Runs the pipeline until `cancel` fires (`Ok`) or a fatal error (`Err`).
pub async fn run(ctx: PipelineContext, cancel: CancellationToken) -> Result<(), BridgeError> {
    let store = ctx.store();
    let name = ctx.pipeline.name.clone();
    let secrets = ctx.config.secrets();
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    let mut attempt: u32 = 0;
    let mut epoch = None;
    let result = loop {
        let started = Instant::now();
        let offsets = match epoch {
            None => cancellable(&cancel, store.take()).await,
            Some(epoch) => cancellable(&cancel, store.load(epoch)).await,
        };
        let result = match offsets {
            None => break Ok(()),
            Some(Ok(offsets)) => {
                if epoch.is_none() {
                    info!(pipeline = %name, epoch = offsets.epoch, "took the pipeline");
                }
                epoch = Some(offsets.epoch);
                run_guarded(&ctx, &store, offsets, &cancel).await
            }
            Some(Err(e)) => Err(e),
        };
        let error = match result {
            Ok(Outcome::Stopped) => break Ok(()),
            Ok(Outcome::Restart) => continue,
            Err(e) => e,
        };
        let class = error.class();
        let class_label = if class == ErrorClass::Fatal {
            "fatal"
        } else {
            "transient"
        };
        ctx.metrics.error(error.kind(), class_label);
        if matches!(error, BridgeError::Fenced { .. }) && !cancel.is_cancelled() {
            // The pipeline stops, and this instance stands by instead of exiting: a process
            // supervisor restarting it would otherwise take the pipeline back and fence the new
            // owner in turn, forever (two replicas stealing from each other).
            error!(pipeline = %name, error = %report(&error, &secrets),
                   "pipeline stopped: fenced; standing by until the new owner's lease lapses");
            ctx.metrics.restart(error.kind());
            epoch = None;
            if standby(&store, &cancel).await.is_none() {
                break Ok(());
            }
            info!(pipeline = %name, "the owner's lease lapsed: taking the pipeline");
            continue;
        }
        if class == ErrorClass::Fatal || cancel.is_cancelled() {
            error!(pipeline = %name, error = %report(&error, &secrets), "pipeline stopped");
            break Err(error);
        }
        if started.elapsed() > HEALTHY_RUN {
            attempt = 0;
        }
        let delay = backoff(attempt, ctx.config.bridge.max_restart_backoff_ms);
        attempt = attempt.saturating_add(1);
        ctx.metrics.restart(error.kind());
        if matches!(error, BridgeError::StreamClosed { .. }) {
            info!(pipeline = %name, "stream invalidated; reopening after the invalidate event");
        } else {
            warn!(pipeline = %name, error = %report(&error, &secrets),
                  delay_ms = delay.as_millis() as u64,
                  "pipeline failed; restarting from the committed position");
        }
        tokio::select! {
            () = cancel.cancelled() => break Ok(()),
            () = tokio::time::sleep(delay) => {}
        }
    };
    ctx.health.stopped.store(true, Ordering::Relaxed);
    if let (Ok(()), Some(epoch)) = (&result, epoch) {
        // A clean stop hands the pipeline back at once: tools see no live owner.
        if store.release(epoch).await.is_ok() {
            info!(pipeline = %name, "stopped; lease released");
        }
    }
    result
}

/// Waits until the pipeline's lease is free (its `leaseUntil` passed, or the document is gone);
/// `None` when `cancel` fires first. Read errors just wait for the next look.
async fn standby(store: &OffsetsStore, cancel: &CancellationToken) -> Option<()> {
    loop {
        let pause = tokio::time::sleep(Duration::from_secs(1));
        cancellable(cancel, pause).await?;
        if let Ok(false) = cancellable(cancel, store.is_held()).await? {
            return Some(());
        }
    }
}

/// Runs `work` unless `cancel` fires first (`None`): startup steps that may wait for a server
/// (taking the offsets, opening the stream) must not delay a shutdown.
async fn cancellable<T>(cancel: &CancellationToken, work: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        () = cancel.cancelled() => None,
        out = work => Some(out),
    }
}

/// Full-jitter exponential backoff: uniform in `[50 ms, min(cap, 100 ms × 2^attempt)]`.
pub fn backoff(attempt: u32, cap_ms: u64) -> Duration {
    let ceiling = 100u64
        .saturating_mul(1u64 << attempt.min(20))
        .clamp(50, cap_ms.max(50));
    Duration::from_millis(rand::rng().random_range(50..=ceiling))
}

fn start_of(p: &PipelineConfig, offsets: &Offsets) -> Start {
    match (
        &offsets.resume_token,
        offsets.start_at_operation_time,
        p.start_at(),
    ) {
        (Some(token), _, _) => Start::After(token.clone()),
        (None, Some(ts), _) => Start::AtOperationTime(ts),
        (None, None, StartAt::Timestamp(secs)) => Start::AtOperationTime(bson::Timestamp {
            time: secs,
            increment: 0,
        }),
        (None, None, StartAt::Now) => Start::Now,
    }
}

/// How a run ended without an error.
enum Outcome {
    /// Shutdown was requested and the pipeline drained.
    Stopped,
    /// The position was moved on purpose (history-loss policy `skip`): start again at once.
    Restart,
}

/// [`run_once`] plus the history-loss policy: with `skip`, gap markers are published, the offsets
/// move to the current cluster time, and the pipeline restarts there. Either way the error and
/// the markers' `from` name the position committed last (re-read from the offsets document).
async fn run_guarded(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    offsets: Offsets,
    cancel: &CancellationToken,
) -> Result<Outcome, BridgeError> {
    let (epoch, from) = (offsets.epoch, offsets.cluster_time);
    match run_once(ctx, store, offsets, cancel).await {
        Ok(()) => Ok(Outcome::Stopped),
        Err(BridgeError::HistoryLost {
            pipeline, source, ..
        }) => {
            // History can be lost mid-run (a `getMore`), after this run committed more: name
            // (and skip from) the position committed last, not the one the run started at.
            let from = store
                .load(epoch)
                .await
                .ok()
                .and_then(|o| o.cluster_time)
                .or(from);
            let error = BridgeError::HistoryLost {
                pipeline,
                cluster_time: from.map_or_else(|| "unknown".to_owned(), format_timestamp),
                source,
            };
            if ctx.pipeline.on_history_lost != OnHistoryLost::Skip {
                return Err(error);
            }
            let reason = format!("resume token no longer in the oplog ({error})");
            skip_history(ctx, store, epoch, from, &reason).await?;
            Ok(Outcome::Restart)
        }
        Err(error) => Err(error),
    }
}

/// Publishes the gap markers, then moves the offsets to the current cluster time.
async fn skip_history(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    epoch: i64,
    from: Option<bson::Timestamp>,
    reason: &str,
) -> Result<(), BridgeError> {
    let p = &ctx.pipeline;
    let to = current_cluster_time(&ctx.client).await;
    let sink = KafkaSink::new(&ctx.config.kafka)?;
    let markers = gap::publish(&sink, p, &ctx.config.kafka.topic_prefix, from, to, reason).await?;
    sink.flush(Duration::from_secs(5)).await;
    sink.close();
    store.reset_to(epoch, to).await?;
    ctx.metrics.restart("history_lost_skip");
    error!(
        pipeline = %p.name,
        from = %from.map_or_else(|| "unknown".to_owned(), format_timestamp),
        to = %format_timestamp(to),
        markers,
        "history lost: SKIPPED the changes between these cluster times (on_history_lost = skip); \
         published gap markers and restarted at the current time"
    );
    Ok(())
}

/// The deployment's current cluster time (`operationTime` of a `ping`), or the wall clock when
/// the server does not report one.
async fn current_cluster_time(client: &Client) -> bson::Timestamp {
    let reply = client
        .database("admin")
        .run_command(bson::doc! { "ping": 1 })
        .await;
    reply
        .ok()
        .and_then(|r| r.get_timestamp("operationTime").ok())
        .unwrap_or_else(timestamp_now)
}

/// One run: open the stream, commit the initial position if there is none, then run the tasks.
async fn run_once(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    offsets: Offsets,
    cancel: &CancellationToken,
) -> Result<(), BridgeError> {
    let p = &ctx.pipeline;
    let b = &ctx.config.bridge;
    let start = start_of(p, &offsets);
    let max_await = Duration::from_millis(b.max_await_time_ms);
    let answer_bound = b.max_await_time_ms.saturating_add(SERVER_ANSWER_GRACE_MS);
    ctx.health
        .server_answer_bound_ms
        .store(answer_bound as i64, Ordering::Relaxed);
    // An unwatchable namespace is a configuration error: never retried (C23).
    let unwatchable = cancellable(cancel, source::unwatchable(&ctx.client, p)).await;
    if let Some(Some(reason)) = unwatchable {
        let index = ctx.config.pipelines.iter().position(|q| q.name == p.name);
        return Err(BridgeError::Config {
            field: format!("pipelines[{}].collection", index.unwrap_or(0)),
            reason,
        });
    }
    let opened = cancellable(
        cancel,
        source::open_splitting(&ctx.client, p, &start, max_await),
    );
    let Some(opened) = opened.await else {
        return Ok(());
    };
    let (stream, _splits) = opened.map_err(|source| classify_open(p, &offsets, source))?;
    if let (Start::AtOperationTime(ts), None) = (&start, &offsets.start_at_operation_time) {
        store.set_start_time(offsets.epoch, *ts).await?;
    }
    if offsets.resume_token.is_none()
        && let Some(token) = source::current_token(&stream)
    {
        let initial = Position {
            token,
            cluster_time: None,
            position_time: timestamp_now(),
            wall_time_ms: None,
            event_count: 0,
        };
        store.commit(offsets.epoch, &initial, 0).await?;
        ctx.metrics.committed(None, initial.position_time);
        info!(pipeline = %p.name, "committed the initial position");
    }
    let sink = KafkaSink::with_context(&ctx.config.kafka, ctx.metrics.rdkafka_context())?;
    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
    let budget_bytes = u32::try_from(b.max_in_flight_bytes).unwrap_or(u32::MAX);
    let channel = source::Channel {
        tx,
        budget: Arc::new(tokio::sync::Semaphore::new(budget_bytes as usize)),
        budget_bytes,
    };
    let (safe_tx, safe_rx) = watch::channel(None);
    let run_cancel = cancel.child_token();
    let source_task = tokio::spawn({
        let (name, cancel, health) = (p.name.clone(), run_cancel.clone(), Arc::clone(&ctx.health));
        async move { source::run(&name, stream, channel, cancel, health).await }
    });
    let interval = Duration::from_millis(b.commit_interval_ms);
    let checkpointer = tokio::spawn({
        let (store, metrics, cancel) = (store.clone(), ctx.metrics.clone(), run_cancel.clone());
        async move {
            let result =
                run_checkpointer(store, offsets.epoch, safe_rx, interval, metrics, 0).await;
            if result.is_err() {
                cancel.cancel();
            }
            result
        }
    });
    let limits = Limits {
        max_events: b.max_in_flight_events,
        max_bytes: b.max_in_flight_bytes,
        drain_timeout: Duration::from_millis(b.shutdown_timeout_ms),
    };
    let encoder = Encoder::new(p, &ctx.config.kafka.topic_prefix);
    // Kept until the relay and its delivery watches are gone, then destroyed off the runtime.
    let last_sink = sink.clone();
    let relay = Relay::new(
        &p.name,
        encoder,
        sink,
        limits,
        ctx.metrics.clone(),
        Arc::clone(&ctx.health),
        safe_tx,
    );
    let relay = relay.with_lease(store.lease_valid_until());
    let relay = match (&p.on_oversize, &p.dead_letter_topic) {
        (OnOversize::DeadLetter, Some(topic)) => relay.with_dead_letter(topic),
        _ => relay,
    };
    ctx.metrics.stream_open.set(1);
    let relay_result = relay.run(rx, run_cancel.clone()).await;
    last_sink.close();
    run_cancel.cancel();
    ctx.metrics.stream_open.set(0);
    let source_result = source_task.await.unwrap_or(Ok(()));
    let checkpoint_result = checkpointer.await.unwrap_or(Ok(()));
    let source_result = source_result.map_err(|e| reclassify(&offsets, e, false));
    let result = relay_result.and(source_result);
    if let (Err(_), Err(hidden)) = (&result, &checkpoint_result) {
        // Only the first error decides the restart; this one explains why the last positions
        // were not committed (they will be read and published again).
        let secrets = ctx.config.secrets();
        let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
        warn!(pipeline = %p.name, error = %report(hidden, &secrets),
              "the final commit failed too: the events after the last commit will be read again");
    }
    result.and(checkpoint_result)
}

fn classify_open(
    p: &PipelineConfig,
    offsets: &Offsets,
    source: mongodb::error::Error,
) -> BridgeError {
    let error = BridgeError::Source {
        pipeline: p.name.clone(),
        source: Box::new(source),
    };
    reclassify(offsets, error, true)
}

/// Turns a "cannot resume" source error into [`BridgeError::HistoryLost`].
fn reclassify(offsets: &Offsets, error: BridgeError, at_open: bool) -> BridgeError {
    match error {
        BridgeError::Source { pipeline, source } if is_history_lost(&source, at_open) => {
            BridgeError::HistoryLost {
                pipeline,
                cluster_time: offsets
                    .cluster_time
                    .map_or_else(|| "unknown".to_owned(), format_timestamp),
                source,
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_within_its_bounds() {
        for attempt in 0..40 {
            let d = backoff(attempt, 30_000).as_millis() as u64;
            assert!((50..=30_000).contains(&d), "{attempt}: {d}");
            let ceiling = 100u64
                .saturating_mul(1 << attempt.min(20))
                .clamp(50, 30_000);
            assert!(d <= ceiling, "{attempt}: {d} > {ceiling}");
        }
    }
}
