//! Waiting on one event's deliveries: the future that stands for an event in the ordered window.
//!
//! WARNING: this decides when an event counts as delivered. It resolves `Ok` only when every
//! record of the event was acknowledged by the broker (or, under `on_oversize = "dead_letter"`,
//! an oversized record's stub was); any other delivery error or a cancelled delivery future
//! (the producer was dropped) resolves `Err`, which stops the window's advance (see `window.rs`).

use std::sync::Arc;
use std::time::Instant;

use rdkafka::producer::DeliveryFuture;

use crate::dead_letter;
use crate::error::BridgeError;
use crate::metrics::{PipelineMetrics, TopicMetrics};
use crate::sink::KafkaSink;

/// What the watches of one pipeline's events share: built once per relay, one `Arc` per event.
pub struct WatchShared {
    /// Pipeline name.
    pub pipeline: Arc<str>,
    /// The pipeline's metric handles.
    pub metrics: PipelineMetrics,
    /// Sink and topic of the dead-letter policy, when configured.
    pub dead_letter: Option<(KafkaSink, Arc<str>)>,
}

/// What an event's entry in the window waits on: all its records' deliveries.
pub struct DeliveryWatch {
    /// The pipeline's shared part.
    pub shared: Arc<WatchShared>,
    /// The pipeline's handles for the topic of the event's records.
    pub topic_metrics: Arc<TopicMetrics>,
    /// The event's `wallTime` (ms) and `clusterTime`, for the end-to-end latency.
    pub event_time: (Option<i64>, Option<bson::Timestamp>),
    /// When the event's last record was enqueued: the start of `delivery_duration`.
    pub enqueued_at: Instant,
}

impl DeliveryWatch {
    /// `Ok` only when every delivery succeeded (or an oversized record's stub was delivered to
    /// the dead-letter topic); the first failure or cancellation is the error.
    pub async fn wait(
        self,
        deliveries: Vec<DeliveryFuture>,
        operation_type: &str,
    ) -> Result<(), BridgeError> {
        let count = deliveries.len() as u64;
        for delivery in deliveries {
            match delivery.await {
                Ok(Ok(_)) => {}
                Ok(Err((source, message))) => {
                    if let Some((sink, dlq)) = &self.shared.dead_letter
                        && dead_letter::is_oversize(&source)
                    {
                        self.to_dead_letter(sink, dlq, &source, &message).await?;
                        continue;
                    }
                    let code = source
                        .rdkafka_error_code()
                        .map_or("unknown".into(), |c| format!("{c:?}"));
                    self.topic_metrics.delivery_error(&code);
                    if dead_letter::is_oversize(&source) {
                        use rdkafka::message::Message;
                        let key = message.key().unwrap_or_default();
                        return Err(BridgeError::Oversize {
                            pipeline: self.shared.pipeline.to_string(),
                            topic: self.topic_metrics.topic().to_string(),
                            key: String::from_utf8_lossy(key).into_owned(),
                            size: message.payload().map_or(0, <[u8]>::len) + key.len(),
                        });
                    }
                    return Err(self.failed(source));
                }
                Err(_) => {
                    self.topic_metrics.delivery_error("cancelled");
                    return Err(BridgeError::DeliveryCancelled {
                        pipeline: self.shared.pipeline.to_string(),
                    });
                }
            }
        }
        self.topic_metrics
            .delivery_duration
            .observe(self.enqueued_at.elapsed().as_secs_f64());
        self.topic_metrics.delivered(operation_type, count);
        self.shared
            .metrics
            .end_to_end(self.event_time.0, self.event_time.1);
        Ok(())
    }

    fn failed(&self, source: rdkafka::error::KafkaError) -> BridgeError {
        BridgeError::Delivery {
            pipeline: self.shared.pipeline.to_string(),
            topic: self.topic_metrics.topic().to_string(),
            source: Box::new(source),
        }
    }

    /// The broker refused a record as too large: deliver its stub to the dead-letter topic.
    async fn to_dead_letter(
        &self,
        sink: &KafkaSink,
        dlq: &Arc<str>,
        source: &rdkafka::error::KafkaError,
        message: &rdkafka::message::OwnedMessage,
    ) -> Result<(), BridgeError> {
        use rdkafka::message::{Headers, Message};
        let headers: Vec<(&'static str, Vec<u8>)> = message
            .headers()
            .map(|h| {
                h.iter()
                    .filter_map(|h| Some((crate::encode::header_name(h.key)?, h.value?.to_vec())))
                    .collect()
            })
            .unwrap_or_default();
        let key = message.key().unwrap_or_default();
        let size = message.payload().map_or(0, <[u8]>::len) + key.len();
        let stub = dead_letter::stub(dlq, message.topic(), key, &headers, size, source);
        self.topic_metrics.delivery_error("dead_lettered");
        tracing::error!(pipeline = %self.shared.pipeline, topic = message.topic(), size,
            "record refused by the broker as too large: a stub went to the dead-letter topic");
        let delivery = sink
            .enqueue_waiting(&stub, None)
            .await
            .map_err(|e| self.failed(e))?;
        match delivery.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err((e, _))) => Err(self.failed(e)),
            Err(_) => Err(BridgeError::DeliveryCancelled {
                pipeline: self.shared.pipeline.to_string(),
            }),
        }
    }
}
