//! What a restart rebuilds, and what the same failure coming back does: the pipeline never
//! loops on a client that a stall left wedged.
//!
//! A librdkafka client can outlive the condition that broke it: after a broker stall, a
//! client may know no broker at all and time out every call until it is rebuilt
//! (`kafka/admin.rs` says how). So:
//! - after a run that failed in Kafka (a delivery, a transaction, the progress topic, a topic
//!   creation), the next run starts on fresh Kafka clients: a new producer (exactly-once
//!   builds one for every run anyway, `lifecycle.rs`) and a rebuilt shared admin client
//!   (once for all the pipelines that failed together: [`KafkaAdmin::renew`](crate::kafka::admin::KafkaAdmin::renew)); the progress
//!   topic's reader is built for each read;
//! - when the same kind of failure ends [`ESCALATE_AFTER`] runs in a row with no commit in
//!   between, the pipeline escalates: it rebuilds every client it holds, MongoDB's too, says
//!   so in `/readyz` (the error and its remedy) and counts it in
//!   `mongo_kafka_bridge_pipeline_client_rebuilds_total{reason}`; the note stays until a run
//!   commits again.
//!
//! Invariants:
//! - A run that committed (the checkpointer wrote a newer position) counts as progress: the
//!   repeat count and the restart backoff start again (`lifecycle.rs`), so a broker that stalls
//!   every minute is met with a prompt restart every time, while a failure that keeps the
//!   pipeline from committing still backs off exponentially.
//! - Rebuilding never changes a position: every run reads it from the offsets document.

use tracing::{error, info};

use super::context::PipelineContext;
use crate::config::Delivery;
use crate::error::BridgeError;

/// Consecutive runs that end with the same kind of failure, no commit between them, before the
/// pipeline rebuilds every client it holds.
pub(crate) const ESCALATE_AFTER: u32 = 3;

/// What the pipeline's failed runs have in common so far.
#[derive(Debug, Default)]
pub(super) struct Recovery {
    /// The kind of the last failure, and how many runs in a row ended with it.
    repeats: Option<(&'static str, u32)>,
    /// Commits counted when the current run began.
    commits_at_start: u64,
    /// The shared admin client's generation when the current run began.
    admin_generation: u64,
}

impl Recovery {
    /// A run begins.
    pub(super) fn begin_run(&mut self, ctx: &PipelineContext) {
        self.commits_at_start = commits(ctx);
        self.admin_generation = ctx.admin.generation();
    }

    /// Whether the run that just ended committed a position.
    pub(super) fn progressed(&self, ctx: &PipelineContext) -> bool {
        commits(ctx) > self.commits_at_start
    }

    /// After a run that ended with `error` (`progressed`: it committed): rebuilds what the
    /// failure may have left wedged, and escalates a failure that keeps coming back.
    ///
    /// Errors: [`BridgeError::Producer`] when a client cannot be built again.
    pub(super) async fn after_failure(
        &mut self,
        ctx: &mut PipelineContext,
        error: &BridgeError,
        progressed: bool,
    ) -> Result<(), BridgeError> {
        if progressed {
            self.repeats = None;
            ctx.health.clear_escalated();
        }
        let kind = error.kind();
        let count = match self.repeats {
            Some((last, n)) if last == kind => n + 1,
            _ => 1,
        };
        self.repeats = Some((kind, count));
        if error.is_kafka_failure() {
            renew_admin(ctx, self.admin_generation)?;
            renew_producer(ctx)?;
        }
        if count >= ESCALATE_AFTER {
            self.repeats = None;
            escalate(ctx, error, count).await?;
        }
        Ok(())
    }
}

/// A new producer for an at-least-once pipeline (an exactly-once one builds its own for every
/// run, of the `transactional.id` its offsets document names).
fn renew_producer(ctx: &mut PipelineContext) -> Result<(), BridgeError> {
    if ctx.pipeline.delivery != Delivery::ExactlyOnce {
        let cap = ctx.learned.batch_cap;
        ctx.sink = PipelineContext::new_sink(&ctx.config, &ctx.pipeline, &ctx.metrics, None, cap)?;
    }
    Ok(())
}

/// Rebuilds the shared admin client ([`KafkaAdmin::renew`](crate::kafka::admin::KafkaAdmin::renew)) unless another pipeline did since
/// `generation`.
fn renew_admin(ctx: &PipelineContext, generation: u64) -> Result<(), BridgeError> {
    let renewed = ctx
        .admin
        .renew(generation)
        .map_err(|e| BridgeError::Producer(Box::new(e)))?;
    if renewed {
        info!(pipeline = %ctx.pipeline.name, "rebuilt the Kafka admin client after a Kafka failure");
    }
    Ok(())
}

/// The same failure ended `count` runs in a row: every client of the pipeline is rebuilt, and
/// `/readyz` and the metric say so.
async fn escalate(
    ctx: &mut PipelineContext,
    error: &BridgeError,
    count: u32,
) -> Result<(), BridgeError> {
    renew_admin(ctx, ctx.admin.generation())?;
    renew_producer(ctx)?;
    match crate::mongo::client(&ctx.config).await {
        Ok(client) => ctx.client = client,
        Err(e) => {
            error!(pipeline = %ctx.pipeline.name, error = %ctx.report(&e),
                   "rebuilding the MongoDB client failed; keeping the current one");
        }
    }
    let reason = error.kind();
    ctx.metrics.client_rebuild(reason);
    let text = format!(
        "the same failure ({reason}) ended {count} runs in a row with nothing committed; \
         rebuilt its MongoDB and Kafka clients and keeps retrying. Last error: {}. Remedy: {}",
        ctx.report(error),
        error.remedy()
    );
    error!(pipeline = %ctx.pipeline.name, "{text}");
    ctx.health.set_escalated(&text);
    Ok(())
}

/// Positions committed so far. Not every offsets write: a lease renewal writes too, and
/// counting it made every run that lasted one commit interval look like progress (a missing
/// topic then never spent its persistent attempts).
fn commits(ctx: &PipelineContext) -> u64 {
    ctx.metrics.positions_committed()
}
