//! A topic the pipeline writes that the cluster does not have, made visible.
//!
//! Without topic creation, librdkafka holds a record for a topic it has no metadata for until
//! `topic.metadata.propagation.max.ms` (30 s by default) and only then reports it unknown. Our
//! `message.timeout.ms` (the lease's share, 13 s by default) runs out first, so the delivery
//! fails with `MessageTimedOut`, which alone reads as an outage and would be retried forever
//! while the pipeline looked healthy (or, earlier still, the relay's stall deadline ends the run,
//! `relay/stall.rs`). After a run that failed so, [`explain`] asks the cluster
//! for its topics:
//! - the topic is not listed: the error becomes the unknown-topic error it is (persistent:
//!   retried `[bridge] persistent_error_attempts` times, then the pipeline stops with the
//!   remedy), the pipeline is not ready (`/readyz` names the topic and its namespace), and
//!   `…_topic_missing_total` counts the episode once;
//! - the cluster does not answer: the error stays an outage.
//!
//! Invariant: the episode ends only when a later run finds the topic listed ([`seen`]) or a
//! record reaches the topic (`PipelineHealth::delivered_to`, from the relay's delivered
//! prefix), so a pipeline that keeps failing on the same missing topic counts it once. A
//! delivery ends it too because the cluster's metadata may list a topic just created later
//! than a producer delivers to it: a run that started on the stale listing and then delivers
//! has no later run to see the listing.

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode as C;
use tracing::warn;

use super::context::PipelineContext;
use crate::encode::topics;
use crate::error::BridgeError;
use crate::kafka::admin::ADMIN_TIMEOUT;

/// `error` explained: a delivery that timed out or was refused as unknown, for a topic the
/// cluster does not list, is an unknown-topic error; the pipeline's health and metric say so.
pub(super) async fn explain(ctx: &PipelineContext, error: BridgeError) -> BridgeError {
    let (pipeline, topic) = match &error {
        BridgeError::Delivery {
            pipeline,
            topic,
            source,
        } if matches!(
            source.rdkafka_error_code(),
            Some(C::MessageTimedOut | C::UnknownTopic | C::UnknownTopicOrPartition)
        ) =>
        {
            (pipeline, topic)
        }
        // The relay's own deadline, before librdkafka's timeout (`relay/stall.rs`).
        BridgeError::DeliveryStalled {
            pipeline, topic, ..
        } => (pipeline, topic),
        _ => return error,
    };
    let Ok(cluster) = ctx.admin.metadata(ADMIN_TIMEOUT).await else {
        return error;
    };
    if cluster.topics.iter().any(|t| &t.name == topic) {
        return error;
    }
    let what = describe(ctx, topic);
    if ctx.health.set_topic_missing(topic, &what) {
        ctx.metrics.topic_missing.inc();
    }
    warn!(pipeline = %pipeline, topic = %topic, "{what}");
    BridgeError::Delivery {
        pipeline: pipeline.clone(),
        topic: topic.clone(),
        source: Box::new(KafkaError::MessageProduction(C::UnknownTopicOrPartition)),
    }
}

/// A run found the cluster's topics `listed`: the episode ends when none of them is missing
/// any more.
pub(super) fn seen(ctx: &PipelineContext, listed: &[String]) {
    if let Some((missing, _)) = ctx.health.topic_missing()
        && listed.contains(&missing)
    {
        ctx.health.clear_topic_missing();
    }
}

/// What the missing `topic` is for, and what to do: `/readyz`'s line and the warning.
fn describe(ctx: &PipelineContext, topic: &str) -> String {
    let p = &ctx.pipeline;
    let namespace = match &p.topic {
        _ if p.routing.is_some() => format!("a route of scope {}", p.scope()),
        Some(_) => format!("every namespace of scope {}", p.scope()),
        None => {
            let prefix = topics::prefix(p, &ctx.config.kafka.topic_prefix);
            topic.strip_prefix(prefix.as_ref()).map_or_else(
                || format!("scope {}", p.scope()),
                |ns| format!("namespace {ns}"),
            )
        }
    };
    format!(
        "topic {topic:?} does not exist (for {namespace}): the pipeline does not move past its \
         first event; create the topic, or set [kafka.topic_creation] enabled = true"
    )
}
