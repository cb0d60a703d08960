//! One pipeline's life: before anything is taken, refuse what can never run; take ownership of
//! the offsets document; run ([`run`]); after a failure, do what [`policy`]
//! decides (restart, reopen, skip the lost history, stand by, stop); release the lease at the
//! end.
//!
//! ```text
//!   preflight ──▶ take ──▶ run ──error──▶ policy ─┬─ Restart (backoff) ─▶ load ──▶ run …
//!                  ▲                               ├─ Reopen / SkipHistory ─▶ load ──▶ run …
//!                  └──── standby (lapsed lease) ◀──┼─ StandBy (fenced)
//!                                                  └─ Stop ─▶ release lease, Err
//! ```
//!
//! Invariants:
//! - Every (re)start reads the position from the offsets document (checking our epoch), never
//!   from memory: what was not committed is read again (at-least-once).
//! - Nothing is taken before the preflight passed: an unwatchable namespace is a configuration
//!   error and leaves the offsets untouched.
//! - Every stop that still holds the pipeline releases its lease (clean or fatal), so standbys
//!   and tools see no live owner at once. A fenced instance holds nothing.
//! - Restarts back off exponentially with full jitter, capped at `max_restart_backoff_ms`, and
//!   reset after a run that lasted longer than [`HEALTHY_RUN`].
//! - Everything the pipeline writes to Kafka goes through its one producer, `sink`; a run that
//!   failed in the producer gets a new one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mongodb::Client;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::{Config, Delivery, PipelineConfig};
use crate::error::{BridgeError, ErrorClass, report};
use crate::gap::Skip;
use crate::kafka::admin::KafkaAdmin;
use crate::kafka::context::KafkaContext;
use crate::kafka::limits::Learned;
use crate::kafka::sink::KafkaSink;
use crate::observe::health::PipelineHealth;
use crate::observe::metrics::PipelineMetrics;
use crate::offsets::{OffsetsStore, StreamIdentity};
use policy::{Action, Attempts, backoff};

mod exactly_once;
mod hold;
pub(crate) mod policy;
mod run;
mod stage;
mod standby;

pub(crate) use stage::panicked;

/// A run longer than this resets the restart backoff and the persistent-error count.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// Everything one pipeline needs.
#[derive(Clone)]
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
    /// Shared Kafka admin client (topic metadata and creation).
    pub admin: KafkaAdmin,
    /// The pipeline's producer: records, dead-letter stubs and gap markers.
    pub sink: KafkaSink,
    /// What its runs learned about the topics (kept across restarts,
    /// [`crate::kafka::limits::Learned`]).
    pub learned: Learned,
}

impl PipelineContext {
    fn store(&self) -> OffsetsStore {
        let b = &self.config.bridge;
        let lease = Duration::from_millis(b.lease_ms);
        OffsetsStore::new(
            &self.client,
            self.config.mongodb.offsets(),
            &self.pipeline.name,
            StreamIdentity::of(&self.pipeline),
            &self.owner,
            lease,
        )
    }

    fn secrets(&self) -> Vec<String> {
        self.config.secrets()
    }

    fn report(&self, error: &BridgeError) -> String {
        let secrets = self.secrets();
        let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
        report(error, &secrets)
    }

    /// A new producer for pipeline `p`, its statistics into the pipeline's series. With
    /// `delivery = "exactly_once"` it is transactional ([`Config::transactional_id`] of
    /// `stream_uid`, the offsets document's; `None` before the pipeline is taken: such a
    /// producer only proves the configuration and is replaced after the take), with
    /// `batch.size` = `batch_cap` when given ([`Learned::batch_cap`]), and its
    /// `message.timeout.ms` default is at most `transaction.timeout.ms`.
    pub fn new_sink(
        config: &Config,
        p: &PipelineConfig,
        metrics: &PipelineMetrics,
        stream_uid: Option<&str>,
        batch_cap: Option<usize>,
    ) -> Result<KafkaSink, BridgeError> {
        let context = KafkaContext::new(metrics.rdkafka_gauges());
        let exactly_once = p.delivery == Delivery::ExactlyOnce;
        let mut message_timeout = config.message_timeout_ms();
        if exactly_once {
            message_timeout =
                message_timeout.min(crate::config::exactly_once::transaction_timeout_ms(config));
        }
        let id = exactly_once.then(|| config.transactional_id(&p.name, stream_uid));
        KafkaSink::new(
            &config.kafka,
            message_timeout,
            id.as_deref(),
            batch_cap,
            context,
        )
        .map_err(|e| BridgeError::Producer(Box::new(e)))
    }
}

/// How a pipeline ended without stopping the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
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

/// Runs the pipeline until `cancel` fires (`Ok(Stopped)`), the configuration is refused
/// (`Ok(Refused)`), or a failure the policy stops on (`Err`).
pub async fn run(
    mut ctx: PipelineContext,
    cancel: CancellationToken,
) -> Result<Ended, BridgeError> {
    let store = ctx.store();
    let mut epoch = None;
    let result = match preflight(&ctx, &cancel).await {
        Ok(()) => lifecycle(&mut ctx, &store, &cancel, &mut epoch).await,
        Err(e) => Err(e),
    };
    ctx.health
        .stopped
        .store(true, std::sync::atomic::Ordering::Relaxed);
    ctx.health.clear_standby();
    ctx.health.loop_ended();
    ctx.metrics.owned.set(0);
    if let Some(epoch) = epoch
        && store.release(epoch).await.is_ok()
    {
        info!(pipeline = %ctx.pipeline.name, "stopped; lease released");
    }
    result
}

/// What must hold before the pipeline is taken. Errors: [`BridgeError::Config`] for a namespace
/// MongoDB can never watch (case C23).
async fn preflight(ctx: &PipelineContext, cancel: &CancellationToken) -> Result<(), BridgeError> {
    let p = &ctx.pipeline;
    if let Some(Some(reason)) =
        cancellable(cancel, crate::source::stream::unwatchable(&ctx.client, p)).await
    {
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
    let mut backoff_attempt: u32 = 0;
    loop {
        let started = Instant::now();
        let Some(error) = run_owned(ctx, store, cancel, epoch).await else {
            return Ok(Ended::Stopped);
        };
        if started.elapsed() > HEALTHY_RUN {
            attempts.healthy_run();
            backoff_attempt = 0;
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
        ctx.metrics.restart(error.kind());
        match action {
            Action::StandBy if ctx.config.bridge.group_id.is_some() => {
                // Taken only on assignment: a released lease must not let this member take a
                // pipeline the group gave to another.
                *epoch = None;
                error!(pipeline = %p.name, error = %ctx.report(&error),
                       "pipeline stopped: fenced while the group assigns it here; it runs again \
                        when the group assigns it next (is an instance without group_id running?)");
                ctx.health.set_refused(
                    "fenced by another instance while the group assigns it to this member (an \
                     instance without [bridge] group_id, or a forced offsets reset); taken again \
                     after a session timeout if the group still assigns it here",
                );
                return Ok(Ended::Fenced);
            }
            Action::StandBy => {
                *epoch = None;
                ctx.metrics.owned.set(0);
                error!(pipeline = %p.name, error = %ctx.report(&error),
                       "pipeline stopped: fenced; standing by until the new owner's lease lapses");
                let taken = match standby::wait(store, &ctx.health, cancel).await {
                    Ok(Some(taken)) => taken,
                    Ok(None) => return Ok(Ended::Stopped),
                    Err(refused) => return Ok(refuse(ctx, &refused)),
                };
                info!(pipeline = %p.name, epoch = taken,
                      "the owner's lease lapsed: took the pipeline");
                *epoch = Some(taken);
                ctx.metrics.owned.set(1);
            }
            Action::Reopen => {
                info!(pipeline = %p.name, "stream invalidated; reopening after the invalidate event");
            }
            // A skip that could not run (no epoch held) waits like any restart.
            Action::Restart | Action::SkipHistory | Action::Stop | Action::Refuse => {
                let delay = backoff(backoff_attempt, ctx.config.bridge.max_restart_backoff_ms);
                backoff_attempt = backoff_attempt.saturating_add(1);
                warn!(pipeline = %p.name, error = %ctx.report(&error),
                      delay_ms = delay.as_millis() as u64,
                      "pipeline failed; restarting from the committed position");
                if cancellable(cancel, tokio::time::sleep(delay))
                    .await
                    .is_none()
                {
                    return Ok(Ended::Stopped);
                }
            }
        }
        let exactly_once = p.delivery == Delivery::ExactlyOnce;
        if error.is_producer_failure() {
            ctx.health
                .kafka_failing
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        // Exactly-once: every run builds its own producer (`run_owned`).
        if error.is_producer_failure() && !exactly_once {
            ctx.sink = PipelineContext::new_sink(
                &ctx.config,
                &p,
                &ctx.metrics,
                None,
                ctx.learned.batch_cap,
            )?;
        }
    }
}

/// What the run's end taught about the topics ([`Learned`]); `true` when the next run starts
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
    let offsets = match *epoch {
        None => cancellable(cancel, store.take()).await?,
        Some(held) => cancellable(cancel, store.load(held)).await?,
    };
    let offsets = match offsets {
        Ok(offsets) => offsets,
        Err(e) => return Some(e),
    };
    if epoch.is_none() {
        info!(pipeline = %ctx.pipeline.name, epoch = offsets.epoch, "took the pipeline");
        ctx.metrics.owned.set(1);
    }
    *epoch = offsets.epoch;
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
    run::once(ctx, store, offsets, cancel).await.err()
}

/// `error` with what the operator needs to know: a lost history names the position committed
/// last (history can be lost mid-run, after the run committed more than it started from); a
/// server-selection failure becomes the replica-set name mismatch behind it, if that is the
/// cause.
async fn explain(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    epoch: Option<i64>,
    error: BridgeError,
) -> BridgeError {
    match error {
        BridgeError::HistoryLost {
            pipeline,
            cluster_time,
            source,
        } => {
            let committed = match epoch {
                Some(epoch) => store.load(epoch).await.ok(),
                None => None,
            };
            let cluster_time = committed
                .and_then(|o| o.cluster_time.or(o.position_time))
                .map_or(cluster_time, crate::event::format_timestamp);
            BridgeError::HistoryLost {
                pipeline,
                cluster_time,
                source,
            }
        }
        BridgeError::Source { ref source, .. } | BridgeError::Checkpoint { ref source, .. }
            if crate::error::is_server_selection(source) =>
        {
            crate::mongo::replica_set_mismatch(&ctx.config)
                .await
                .unwrap_or(error)
        }
        error if error.is_producer_fenced() => coordinator_or_owner(store, epoch, error).await,
        other => other,
    }
}

/// A fenced transactional producer: another instance took the pipeline (a newer epoch in the
/// offsets document: [`BridgeError::Fenced`]), or the transaction coordinator timed our
/// transaction out and bumped the producer epoch (KAFKA-6119, librdkafka#3297), which is
/// transient: the restart builds a new producer. Stays `error` when the document cannot be
/// read (transient either way).
async fn coordinator_or_owner(
    store: &OffsetsStore,
    epoch: Option<i64>,
    error: BridgeError,
) -> BridgeError {
    let Some(held) = epoch else { return error };
    match store.read().await {
        Ok(Some(doc)) if doc.epoch != Some(held) => BridgeError::Fenced {
            pipeline: store.pipeline().to_owned(),
            epoch: held,
        },
        Ok(_) => {
            warn!(pipeline = %store.pipeline(), epoch = held,
                  "the Kafka transaction coordinator fenced our producer while the offsets \
                   document still names us the owner: a transaction timed out \
                   (transaction.timeout.ms); restarting with a new producer");
            error
        }
        Err(_) => error,
    }
}

/// The history-loss policy `skip` through the pipeline's own producer.
async fn skip(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    epoch: i64,
    lost: &BridgeError,
) -> Result<(), BridgeError> {
    let to = crate::mongo::cluster_time(&ctx.client)
        .await
        .ok()
        .flatten()
        .unwrap_or_else(crate::event::timestamp_now);
    let skip = Skip {
        pipeline: &ctx.pipeline,
        prefix: &ctx.config.kafka.topic_prefix,
        sink: &ctx.sink,
        metrics: &ctx.metrics,
        store,
        epoch,
        resync: (ctx.pipeline.on_history_lost == crate::config::OnHistoryLost::Snapshot).then(
            || crate::snapshot::Request {
                reason: crate::snapshot::Reason::HistoryLost,
                namespace: None,
                requested_at: bson::DateTime::now(),
            },
        ),
    };
    skip.run(to, lost).await
}

/// The pipeline's configured stream differs from its position's: not ready, counted, logged.
fn refuse(ctx: &PipelineContext, error: &BridgeError) -> Ended {
    ctx.health.set_refused(
        "its configured stream differs from the one its position was committed for (see the \
         log: offsets reset or offsets accept-config)",
    );
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
        error!(pipeline = %name, error = %ctx.report(error), "pipeline stopped");
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
