//! The librdkafka producer every Rust program of the bench shares (`limit`, `fair`,
//! `limit-copy`): the bridge's producer settings, a delivery counter instead of one future per
//! record, backpressure on a full queue, and the wait for the last acknowledgement.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};

/// Counts delivery reports.
#[derive(Default)]
pub(crate) struct Counting {
    delivered: AtomicU64,
    failed: AtomicU64,
}

impl rdkafka::ClientContext for Counting {}

impl ProducerContext for Counting {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => self.delivered.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.failed.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// The same producer settings as the bridge (`sink.rs`): idempotent, acks=all, 5 in flight,
/// murmur2_random, linger 5 ms; then `properties` (`--property`).
pub(crate) fn producer(
    bootstrap: &str,
    compression: &str,
    properties: &[(String, String)],
) -> anyhow::Result<ThreadedProducer<Counting>> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("max.in.flight.requests.per.connection", "5")
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "120000")
        .set("compression.type", compression);
    for (key, value) in properties {
        config.set(key, value);
    }
    Ok(config.create_with_context(Counting::default())?)
}

/// Enqueues one record, waiting while librdkafka's queue is full (backpressure, as the bridge).
pub(crate) async fn send(
    producer: &ThreadedProducer<Counting>,
    topic: &str,
    key: &[u8],
    value: &[u8],
    headers: Option<OwnedHeaders>,
) -> anyhow::Result<()> {
    let mut record = BaseRecord::to(topic).key(key).payload(value);
    if let Some(headers) = headers {
        record = record.headers(headers);
    }
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err((e, _)) => return Err(e.into()),
        }
    }
}

/// Waits until `count` records are delivered (or failed); returns (delivered, failed).
pub(crate) async fn finish(producer: &ThreadedProducer<Counting>, count: u64) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let delivered = producer.context().delivered.load(Ordering::Relaxed);
        let failed = producer.context().failed.load(Ordering::Relaxed);
        if delivered + failed >= count || Instant::now() > deadline {
            let _ = producer.flush(Duration::from_secs(1));
            return (delivered, failed);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
