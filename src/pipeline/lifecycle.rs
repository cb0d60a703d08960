//! One pipeline's life: before anything is taken, refuse what can never run; take ownership of
//! the offsets document; run (`run.rs`); after a failure, do what the policy decides
//! (`policy.rs`: restart, reopen, skip the lost history, stand by, stop); release the lease at
//! the end.
//!
//! Invariants:
//! - Every (re)start reads the position from the offsets document (checking our epoch), never
//!   from memory: what was not committed is read again (at-least-once).
//! - Nothing is taken before the preflight passed: an unwatchable namespace is a configuration
//!   error and leaves the offsets untouched.
//! - Every stop that still holds the pipeline releases its lease (clean or fatal), so standbys
//!   and tools see no live owner at once. A fenced instance holds nothing.
//! - Restarts back off exponentially with full jitter, capped at `max_restart_backoff_ms`, and
//!   reset after a run that lasted longer than [`HEALTHY_RUN`] or that committed a position. A
//!   reopen after an `invalidate` is at once, unless the stream closed again within that time:
//!   never a tight loop.
//! - A run that failed in Kafka gets new Kafka clients, and a failure that keeps coming back
//!   escalates (`recovery.rs`).
//! - A pipeline that stops on a failure says so where operators look: `/readyz` names it with
//!   the error and the remedy, and `…_pipeline_failed` is 1 until its next run begins.
//! - A pipeline whose position belongs to another stream or another MongoDB cluster is refused
//!   before its epoch moves (the take checks both, `crate::offsets`); one whose cluster could
//!   not be named runs, with `…_pipeline_cluster_unchecked` 1.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::context::PipelineContext;
use super::gap::skip;
use super::policy::{self, Action, Attempts, backoff, explain};
use super::recovery::Recovery;
use super::stage::cancellable;
use super::standby;
use super::waiting::{naming_a_set_mismatch, said};
use crate::config::Delivery;
use crate::error::{BridgeError, ErrorClass};
use crate::offsets::OffsetsStore;

/// A run longer than this resets the restart backoff and the persistent-error count.
pub(super) const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// How a pipeline ended without stopping the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Shutdown: it drained and committed.
    Stopped,
    /// Its configured stream differs from the one its position belongs to: it never ran, it is
    /// not ready, and the other pipelines run on.
    Refused,
    /// In a group: another instance took it while the group assigns it here (an operator's
    /// forced reset, an instance without `group_id`, or this member was evicted and has not
    /// noticed yet). The group supervisor takes it again if the slot is still assigned here
    /// after a session timeout.
    Fenced,
}

/// How much longer than `max_await_time_ms` a `getMore` (or a start step, `waiting.rs`) may
/// wait for MongoDB before the pipeline is reported not ready (ms).
const SERVER_ANSWER_GRACE_MS: u64 = 2000;

/// Runs the pipeline until `cancel` fires (`Ok(Stopped)`), the configuration is refused
/// (`Ok(Refused)`), or a failure the policy stops on (`Err`).
pub(crate) async fn run(
    mut ctx: PipelineContext,
    cancel: CancellationToken,
) -> Result<Ended, BridgeError> {
    let store = ctx.store();
    let mut epoch = None;
    ctx.metrics.failed.set(0); // the roster's start forgot the last run's end in `health`
    let answer_bound = ctx.config.bridge.max_await_time_ms + SERVER_ANSWER_GRACE_MS;
    let answer_bound = i64::try_from(answer_bound).unwrap_or(i64::MAX);
    ctx.health
        .server_answer_bound_ms
        .store(answer_bound, Ordering::Relaxed);
    let result = match preflight(&ctx, &cancel).await {
        Ok(()) => lifecycle(&mut ctx, &store, &cancel, &mut epoch).await,
        Err(e) => Err(e),
    };
    let failure = match &result {
        Err(error) if !cancel.is_cancelled() => Some(error.stopped_text(&ctx.report(error))),
        _ => None,
    };
    if let Some(failure) = &failure {
        ctx.health.set_failed(failure);
        ctx.metrics.failed.set(1);
    }
    ctx.health
        .stopped
        .store(true, std::sync::atomic::Ordering::Relaxed);
    ctx.health.clear_standby();
    ctx.health.loop_ended();
    ctx.metrics.owned.set(0);
    if let Some(epoch) = epoch {
        let released = match &failure {
            Some(failure) => store.release_failed(epoch, failure).await,
            None => store.release(epoch).await,
        };
        if released.is_ok() {
            info!(pipeline = %ctx.pipeline.name, "stopped; lease released");
        }
    }
    result
}

/// What must hold before the pipeline is taken. Errors: [`BridgeError::Config`] for a namespace
/// MongoDB can never watch (case C23).
async fn preflight(ctx: &PipelineContext, cancel: &CancellationToken) -> Result<(), BridgeError> {
    let p = &ctx.pipeline;
    let check = crate::source::stream::unwatchable(&ctx.client, p);
    let check = naming_a_set_mismatch(ctx, check);
    let what = "checking that the namespace can be watched (listCollections)";
    if let Some(Some(reason)) = cancellable(cancel, said(&p.name, &ctx.health, what, check)).await {
        let index = ctx.config.pipelines.iter().position(|q| q.name == p.name);
        return Err(BridgeError::Config {
            field: format!("pipelines[{}].collection", index.unwrap_or(0)),
            reason,
        });
    }
    Ok(())
}

/// Takes the pipeline and runs it until a clean stop or a failure the policy stops on; `epoch`
/// is the epoch this instance holds (`None` while it stands by).
async fn lifecycle(
    ctx: &mut PipelineContext,
    store: &OffsetsStore,
    cancel: &CancellationToken,
    epoch: &mut Option<i64>,
) -> Result<Ended, BridgeError> {
    let p = ctx.pipeline.clone();
    let mut attempts = Attempts::new(ctx.config.bridge.persistent_error_attempts);
    let mut backoff: u32 = 0;
    let mut recovery = Recovery::default();
    loop {
        let started = Instant::now();
        recovery.begin_run(ctx);
        let Some(error) = run_owned(ctx, store, cancel, epoch).await else {
            return Ok(Ended::Stopped);
        };
        let progressed = recovery.progressed(ctx);
        if started.elapsed() > HEALTHY_RUN || progressed {
            attempts.healthy_run();
            backoff = 0;
        }
        let mut error = explain(ctx, store, *epoch, error).await;
        ctx.metrics.error(error.kind(), error.class().label());
        if !cancel.is_cancelled() && learn(ctx, &error)? {
            continue;
        }
        if cancel.is_cancelled() {
            if matches!(error, BridgeError::StreamClosed { .. }) {
                // An invalidate met the shutdown: what was read is committed, and the next
                // start reopens after it, as a reopen would have.
                return Ok(Ended::Stopped);
            }
            error!(pipeline = %p.name, error = %ctx.report(&error), "pipeline stopped");
            return Err(error);
        }
        let mut action = policy::decide(&error, p.on_history_lost, &mut attempts);
        if action == Action::SkipHistory
            && let Some(held) = *epoch
        {
            match skip(ctx, store, held, &error).await {
                Ok(()) => continue,
                Err(failed) => {
                    error = failed;
                    ctx.metrics.error(error.kind(), error.class().label());
                    action = match policy::decide(&error, p.on_history_lost, &mut attempts) {
                        Action::SkipHistory => Action::Restart,
                        other => other,
                    };
                }
            }
        }
        if action == Action::Stop {
            stop_log(ctx, &error, attempts.persistent());
            return Err(error);
        }
        if action == Action::Refuse {
            return Ok(refuse(ctx, &error));
        }
        if let Some(ended) =
            between_runs(ctx, store, cancel, epoch, action, &error, &mut backoff).await
        {
            return Ok(ended);
        }
        if error.is_producer_failure() {
            ctx.health.kafka_failing.store(true, Ordering::Relaxed);
        }
        recovery.after_failure(ctx, &error, progressed).await?;
    }
}

/// What comes between a failed run and the next, after `action` (not `Stop` or `Refuse`):
/// standing by, reopening at once, or a backoff. `Some` when the pipeline ends instead of
/// running again.
async fn between_runs(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    cancel: &CancellationToken,
    epoch: &mut Option<i64>,
    action: Action,
    error: &BridgeError,
    backoff_attempt: &mut u32,
) -> Option<Ended> {
    let p = &ctx.pipeline;
    ctx.metrics.restart(error.kind());
    match action {
        Action::StandBy if ctx.config.bridge.group_id.is_some() => {
            // Taken only on assignment: a released lease must not let this member take a
            // pipeline the group gave to another.
            *epoch = None;
            error!(pipeline = %p.name, error = %ctx.report(error),
                   "pipeline stopped: fenced while the group assigns it here; it runs again \
                    when the group assigns it next (is an instance without group_id running?)");
            ctx.health.set_refused(
                "fenced by another instance while the group assigns it to this member (an \
                 instance without [bridge] group_id, or a forced offsets reset); taken again \
                 after a session timeout if the group still assigns it here",
            );
            return Some(Ended::Fenced);
        }
        Action::StandBy => {
            *epoch = None;
            ctx.metrics.owned.set(0);
            error!(pipeline = %p.name, error = %ctx.report(error),
                   "pipeline stopped: fenced; standing by until the new owner's lease lapses");
            let taken = match standby::wait(store, &ctx.health, cancel).await {
                Ok(Some(taken)) => taken,
                Ok(None) => return Some(Ended::Stopped),
                Err(refused) => return Some(refuse(ctx, &refused)),
            };
            info!(pipeline = %p.name, epoch = taken,
                  "the owner's lease lapsed: took the pipeline");
            *epoch = Some(taken);
            ctx.metrics.owned.set(1);
        }
        Action::Reopen if *backoff_attempt == 0 => {
            *backoff_attempt = 1;
            info!(pipeline = %p.name, "stream invalidated; reopening after the invalidate event");
        }
        // Closed again within a minute of the last reopen: never a tight loop.
        Action::Reopen => {
            let delay = next_delay(ctx, backoff_attempt);
            warn!(pipeline = %p.name, delay_ms = delay.as_millis() as u64,
                  "stream invalidated again soon after the last reopen; reopening after a \
                   pause. If this repeats with no new event published, the server closes the \
                   stream at a position the bridge cannot pass: check that the pipeline's filter \
                   lets `invalidate` events through");
            return pause(cancel, delay).await;
        }
        // A skip that could not run (no epoch held) waits like any restart.
        Action::Restart | Action::SkipHistory | Action::Stop | Action::Refuse => {
            let delay = next_delay(ctx, backoff_attempt);
            warn!(pipeline = %p.name, error = %ctx.report(error),
                  delay_ms = delay.as_millis() as u64,
                  "pipeline failed; restarting from the committed position");
            return pause(cancel, delay).await;
        }
    }
    None
}

/// The next restart delay (exponential, full jitter, capped), counting the attempt.
fn next_delay(ctx: &PipelineContext, attempt: &mut u32) -> Duration {
    let delay = backoff(*attempt, ctx.config.bridge.max_restart_backoff_ms);
    *attempt = attempt.saturating_add(1);
    delay
}

/// Waits `delay` before the next run; `Some(Ended::Stopped)` when `cancel` fired first.
async fn pause(cancel: &CancellationToken, delay: Duration) -> Option<Ended> {
    match cancellable(cancel, tokio::time::sleep(delay)).await {
        Some(()) => None,
        None => Some(Ended::Stopped),
    }
}

/// What the run's end taught about the topics ([`Learned`](crate::kafka::limits::Learned)); `true` when the next run starts
/// at once: a topic accepts smaller batches than the producer builds, and nothing of it was
/// enqueued, so a producer that batches less runs without a backoff.
///
/// Errors: [`BridgeError::Producer`] when the new producer cannot be built.
fn learn(ctx: &mut PipelineContext, error: &BridgeError) -> Result<bool, BridgeError> {
    match error {
        BridgeError::RefusedInTransaction { topic, size, .. } => {
            // Restarted as any transient failure; the next run stubs such records at enqueue.
            ctx.learned.refused(topic, *size);
            Ok(false)
        }
        BridgeError::BatchAboveTopicLimit { topic_limit, .. } => {
            warn!(pipeline = %ctx.pipeline.name, error = %ctx.report(error),
                  "rebuilding the producer");
            ctx.learned.cap_batches(*topic_limit);
            ctx.metrics.restart(error.kind());
            if ctx.pipeline.delivery != Delivery::ExactlyOnce {
                let cap = ctx.learned.batch_cap;
                ctx.sink =
                    PipelineContext::new_sink(&ctx.config, &ctx.pipeline, &ctx.metrics, None, cap)?;
            }
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// One run as the owner: takes (or reloads) the offsets and runs. The error that ended it;
/// `None` when it stopped cleanly (shutdown).
async fn run_owned(
    ctx: &mut PipelineContext,
    store: &OffsetsStore,
    cancel: &CancellationToken,
    epoch: &mut Option<i64>,
) -> Option<BridgeError> {
    let (name, health) = (&ctx.pipeline.name, &ctx.health);
    let offsets = match *epoch {
        None => standby::take_over(ctx, store, cancel).await?,
        Some(held) => {
            let load = said(
                name,
                health,
                "reading its offsets document",
                store.load(held),
            );
            cancellable(cancel, load).await?
        }
    };
    let offsets = match offsets {
        Ok(offsets) => offsets,
        Err(e) => return Some(e),
    };
    *epoch = offsets.epoch;
    ctx.metrics
        .cluster_unchecked
        .set(i64::from(store.cluster_unchecked()));
    if ctx.pipeline.delivery == Delivery::ExactlyOnce {
        // Whatever ended an earlier run, its producer may hold an open transaction (or a
        // fenced state): a new one, whose init_transactions aborts it, of the transactional.id
        // named by the document's streamUid.
        let uid = offsets.stream_uid.as_deref();
        match PipelineContext::new_sink(
            &ctx.config,
            &ctx.pipeline,
            &ctx.metrics,
            uid,
            ctx.learned.batch_cap,
        ) {
            Ok(sink) => ctx.sink = sink,
            Err(e) => return Some(e),
        }
    }
    super::run::once(ctx, store, offsets, cancel).await.err()
}

/// The pipeline's configured stream, or its MongoDB cluster, differs from its position's: not
/// ready, counted, logged.
fn refuse(ctx: &PipelineContext, error: &BridgeError) -> Ended {
    ctx.health.set_refused(if matches!(error, BridgeError::Cluster(_)) {
        "its position was committed on another MongoDB cluster than the one mongodb.uri reaches \
         (see the log: offsets reset or offsets accept-cluster)"
    } else {
        "its configured stream differs from the one its position was committed for (see the \
         log: offsets reset or offsets accept-config)"
    });
    ctx.metrics.refused.set(1);
    error!(pipeline = %ctx.pipeline.name, error = %ctx.report(error), "pipeline refused");
    Ended::Refused
}

fn stop_log(ctx: &PipelineContext, error: &BridgeError, persistent: u32) {
    let name = &ctx.pipeline.name;
    if error.class() == ErrorClass::Persistent {
        error!(pipeline = %name, error = %ctx.report(error), attempts = persistent,
               remedy = error.remedy(),
               "pipeline stopped: the same kind of failure kept coming back \
                ([bridge] persistent_error_attempts)");
    } else {
        error!(pipeline = %name, error = %ctx.report(error), remedy = error.remedy(),
               "pipeline stopped");
    }
}
