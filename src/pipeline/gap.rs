//! History-loss policies `skip` and `snapshot`: gap markers that tell every consumer that
//! changes were skipped, then the move of the position to the current cluster time (with
//! `snapshot`, in the same write, the request of a re-sync by snapshot).
//!
//! When a pipeline's committed resume token is no longer in the oplog and its policy is
//! `on_history_lost = "skip"`, the bridge restarts at the current cluster time. Before it moves
//! the offsets, it publishes one **gap marker** to *every partition* of every topic the pipeline
//! writes, so each consumer of each group sees it whatever partitions it owns:
//! key `{"pipeline":"<name>"}`, value
//! `{"operationType":"gap","pipeline":…,"from":<committed clusterTime>,"to":<new start>,"reason":…}`
//! (times as Extended JSON timestamps, `from` null when unknown), both in the pipeline's
//! `key_format` and `format`, headers `mongo.operation_type=gap`, `mongo.format`.
//!
//! Invariants: the markers are delivered before the offsets move, so a crash in between repeats
//! the markers instead of losing them; they go through the pipeline's own producer, like
//! everything the pipeline writes; the topics are the ones [`topics::written_by`] the pipeline
//! among those the cluster lists (internal topics excluded).

use std::sync::Arc;
use std::time::Duration;

use bson::{RawBson, RawDocumentBuf, Timestamp, rawdoc};
use tracing::error;

use super::context::PipelineContext;
use crate::config::PipelineConfig;
use crate::encode::topics;
use crate::encode::{Record, format_header, own_document};
use crate::error::BridgeError;
use crate::event::format_timestamp;
use crate::extjson::JsonMode;
use crate::kafka::delivery::Delivery;
use crate::kafka::sink::KafkaSink;
use crate::observe::metrics::PipelineMetrics;
use crate::offsets::OffsetsStore;

/// Bound of the metadata request.
const GAP_TIMEOUT: Duration = Duration::from_secs(30);

/// What a skip needs of its pipeline.
pub(super) struct Skip<'a> {
    /// The pipeline's settings.
    pub pipeline: &'a PipelineConfig,
    /// `[kafka] topic_prefix`.
    pub prefix: &'a str,
    /// The pipeline's producer.
    pub sink: &'a KafkaSink,
    /// The pipeline's metric handles.
    pub metrics: &'a PipelineMetrics,
    /// The pipeline's offsets.
    pub store: &'a OffsetsStore,
    /// Our epoch.
    pub epoch: i64,
    /// `on_history_lost = "snapshot"`: the re-sync requested with the move.
    pub resync: Option<crate::snapshot::Request>,
}

impl Skip<'_> {
    /// Publishes the gap markers from the committed position to `to` (the current cluster
    /// time), then moves the offsets there. `lost` is the history-loss error, for the reason.
    ///
    /// Errors: a marker's delivery error, a metadata timeout, the offsets write's error.
    pub(super) async fn run(&self, to: Timestamp, lost: &BridgeError) -> Result<(), BridgeError> {
        let p = self.pipeline;
        // History can be lost mid-run (a `getMore`), after this run committed more: skip from
        // the position committed last, re-read from the offsets document.
        let committed = self.store.load(self.epoch).await?;
        let from = committed.cluster_time.or(committed.position_time);
        let reason = format!("resume token no longer in the oplog ({lost})");
        let markers = publish(self.sink, p, self.prefix, self.metrics, from, to, &reason).await?;
        self.store
            .move_to(self.epoch, to, self.resync.as_ref())
            .await?;
        self.metrics.restart("history_lost_skip");
        if self.resync.is_some() {
            error!(
                pipeline = %p.name,
                from = %from.map_or_else(|| "unknown".to_owned(), format_timestamp),
                to = %format_timestamp(to),
                markers,
                "history lost: the changes between these cluster times are gone from the oplog; \
                 published gap markers, restarting at the current time with a re-sync by \
                 snapshot (on_history_lost = snapshot)"
            );
            return Ok(());
        }
        error!(
            pipeline = %p.name,
            from = %from.map_or_else(|| "unknown".to_owned(), format_timestamp),
            to = %format_timestamp(to),
            markers,
            "history lost: SKIPPED the changes between these cluster times (on_history_lost = \
             skip); published gap markers and restarted at the current time"
        );
        Ok(())
    }
}

/// The history-loss policy `skip` through the pipeline's own producer.
pub(super) async fn skip(
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
                namespaces: None,
                requested_at: bson::DateTime::now(),
            },
        ),
    };
    skip.run(to, lost).await
}

/// The marker document of `pipeline`, skipping from `from` to `to` because of `reason`.
pub(super) fn marker(
    pipeline: &str,
    from: Option<Timestamp>,
    to: Timestamp,
    reason: &str,
) -> RawDocumentBuf {
    let mut doc = RawDocumentBuf::new();
    doc.append("operationType", "gap");
    doc.append("pipeline", pipeline);
    match from {
        Some(from) => doc.append("from", from),
        None => doc.append("from", RawBson::Null),
    }
    doc.append("to", to);
    doc.append("reason", reason);
    doc
}

/// Publishes the gap marker to every partition of every topic `p` writes; returns how many
/// markers were delivered. None in the Debezium form, which has no such record (it refuses
/// `skip`; its re-sync by snapshot is what Debezium's `when_needed` does, with no marker).
/// Errors: the first delivery error, or a metadata timeout.
async fn publish(
    sink: &KafkaSink,
    p: &PipelineConfig,
    prefix: &str,
    metrics: &PipelineMetrics,
    from: Option<Timestamp>,
    to: Timestamp,
    reason: &str,
) -> Result<usize, BridgeError> {
    if p.value == crate::config::ValueMode::Debezium {
        return Ok(0);
    }
    let delivery_error = |topic: &str, source| BridgeError::Delivery {
        pipeline: p.name.clone(),
        topic: topic.to_owned(),
        source: Box::new(source),
    };
    let listed = sink.topics(GAP_TIMEOUT).await.ok_or_else(|| {
        delivery_error(
            "*",
            rdkafka::error::KafkaError::MetadataFetch(
                rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
            ),
        )
    })?;
    // Exactly-once: the markers are one transaction of their own, committed before the
    // position moves (the move takes no new records, so it needs no progress record).
    let transaction_error = |operation, source| BridgeError::Transaction {
        pipeline: p.name.clone(),
        operation,
        source: Box::new(source),
    };
    if sink.is_transactional() {
        sink.init_transactions(GAP_TIMEOUT)
            .await
            .map_err(|e| transaction_error("init", e))?;
        sink.begin_transaction()
            .map_err(|e| transaction_error("begin", e))?;
    }
    let key = own_document(&rawdoc! { "pipeline": p.name.as_str() }, p.key_format);
    let value = own_document(&marker(&p.name, from, to, reason), p.format);
    let format = format_header(p.format, JsonMode::Canonical);
    let mut deliveries = Vec::new();
    let written = listed
        .iter()
        .filter(|(t, _)| topics::written_by(p, prefix, t));
    for (topic, partitions) in written {
        let topic: Arc<str> = Arc::from(topic.as_str());
        let counter = &metrics.topic(&topic).enqueued;
        let record = Record {
            topic: Arc::clone(&topic),
            key: key.clone(),
            value: Some(value.clone()),
            headers: vec![
                ("mongo.operation_type", b"gap".to_vec()),
                ("mongo.pipeline", p.name.as_bytes().to_vec()),
                ("mongo.format", format.to_vec()),
            ],
            partition: None,
        };
        for partition in 0..*partitions {
            let delivery = sink
                .enqueue_waiting(&record, Some(partition))
                .await
                .map_err(|e| delivery_error(&topic, e))?;
            counter.inc();
            deliveries.push(Delivery::Enqueued(delivery));
        }
    }
    let count = deliveries.len();
    if sink.is_transactional() {
        sink.commit_transaction(GAP_TIMEOUT)
            .await
            .map_err(|e| transaction_error("commit", e))?;
    }
    for delivery in deliveries {
        delivery.delivered(&p.name).await?;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_value_is_the_documented_json() {
        let to = Timestamp {
            time: 1700000100,
            increment: 2,
        };
        let from = Some(Timestamp {
            time: 1700000000,
            increment: 7,
        });
        let json = |doc: RawDocumentBuf| {
            String::from_utf8(own_document(&doc, crate::config::Format::Json)).expect("UTF-8")
        };
        assert_eq!(
            json(marker("orders", from, to, "history lost")),
            r#"{"operationType":"gap","pipeline":"orders","from":{"$timestamp":{"t":1700000000,"i":7}},"to":{"$timestamp":{"t":1700000100,"i":2}},"reason":"history lost"}"#
        );
        assert!(json(marker("o\"x", None, to, "r")).contains(r#""pipeline":"o\"x","from":null"#));
        let bson = own_document(
            &marker("orders", from, to, "r"),
            crate::config::Format::Bson,
        );
        let doc = bson::RawDocument::from_bytes(&bson).expect("BSON");
        assert_eq!(doc.get_timestamp("to").expect("to"), to);
    }
}
