//! Kafka producer: builds the idempotent producer and enqueues records.
//!
//! Invariants:
//! - The producer always runs with `enable.idempotence=true`, `acks=all`,
//!   `max.in.flight.requests.per.connection=5` and `partitioner=murmur2_random` (the Java
//!   clients' mapping, so a key lands on the same partition whichever client wrote it). Config
//!   validation rejects user properties that contradict them; these are set last so nothing
//!   overrides them (librdkafka `CONFIGURATION.md`, `INTRODUCTION.md` "Idempotent Producer").
//! - "Enqueued" means handed to librdkafka (`send_result` returned a [`DeliveryFuture`]);
//!   "delivered" means that future resolved `Ok`. A cancelled future is *not* delivered.
//! - [`KafkaSink::flush`] must be called before the producer is dropped: librdkafka's destroy path
//!   purges queued records.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};

use crate::config::KafkaConfig;
use crate::encode::Record;
use crate::error::BridgeError;
use crate::metrics::StatsContext;

/// Properties the bridge sets after the user's, so they always hold.
const PROTECTED: [(&str, &str); 4] = [
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("max.in.flight.requests.per.connection", "5"),
    ("partitioner", "murmur2_random"),
];

/// Defaults the user may override in `[kafka.properties]`. `linger.ms = 5` is librdkafka's
/// own default, set explicitly because it is a measured choice: 10 ms doubled the median
/// write → consumer latency at 2 000 events/s with no catch-up gain, 1 ms tripled the p99
/// (more, smaller produce requests); see BENCHMARKS.md.
const DEFAULTS: [(&str, &str); 3] = [
    ("linger.ms", "5"),
    ("message.timeout.ms", "120000"),
    ("client.id", "mongo-kafka-bridge"),
];

/// Why a record could not be enqueued.
#[derive(Debug)]
pub enum EnqueueError {
    /// librdkafka's local queue is full: wait for deliveries and enqueue again (backpressure).
    QueueFull,
    /// Any other error: the record cannot be produced by this producer.
    Failed(KafkaError),
}

/// The librdkafka producer configuration for `kafka` (user properties, then the protected ones).
pub fn client_config(kafka: &KafkaConfig) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &kafka.bootstrap_servers);
    for (key, value) in DEFAULTS {
        config.set(key, value);
    }
    for (key, value) in &kafka.properties {
        config.set(key, value.to_string());
    }
    for (key, value) in PROTECTED {
        config.set(key, value);
    }
    config
}

/// The producer type: its client context publishes librdkafka statistics as metrics.
pub type SinkProducer = FutureProducer<StatsContext>;

/// One pipeline's producer (clones share it).
#[derive(Clone)]
pub struct KafkaSink {
    producer: SinkProducer,
}

impl KafkaSink {
    /// Creates the producer. Errors: [`BridgeError::Producer`] when librdkafka refuses the
    /// configuration (e.g. an unknown property name); connection problems surface later as
    /// delivery errors, after `message.timeout.ms`.
    pub fn new(kafka: &KafkaConfig) -> Result<Self, BridgeError> {
        Self::with_context(kafka, StatsContext::default())
    }

    /// Like [`KafkaSink::new`], publishing librdkafka statistics through `context` every
    /// `statistics.interval.ms` (default 5000 unless `[kafka.properties]` sets it; 0 = off).
    pub fn with_context(kafka: &KafkaConfig, context: StatsContext) -> Result<Self, BridgeError> {
        let mut config = client_config(kafka);
        if !kafka.properties.contains_key("statistics.interval.ms") {
            config.set(
                "statistics.interval.ms",
                crate::metrics::librdkafka::DEFAULT_STATISTICS_INTERVAL_MS,
            );
        }
        let producer: SinkProducer = config
            .create_with_context(context)
            .map_err(|e| BridgeError::Producer(Box::new(e)))?;
        Ok(Self { producer })
    }

    /// Enqueues `record` without waiting for its delivery.
    ///
    /// Returns the delivery future on success, [`EnqueueError::QueueFull`] when librdkafka's
    /// queue (`queue.buffering.max.messages` / `.kbytes`) is full.
    pub fn enqueue(&self, record: &Record) -> Result<DeliveryFuture, EnqueueError> {
        self.enqueue_to(record, None)
    }

    /// Like [`KafkaSink::enqueue`], to an explicit `partition` when given (else the key decides).
    pub fn enqueue_to(
        &self,
        record: &Record,
        partition: Option<i32>,
    ) -> Result<DeliveryFuture, EnqueueError> {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
        for (name, value) in &record.headers {
            headers = headers.insert(Header {
                key: name,
                value: Some(value.as_slice()),
            });
        }
        let mut future = FutureRecord::to(&record.topic)
            .key(&record.key)
            .headers(headers);
        if let Some(value) = &record.value {
            future = future.payload(value);
        }
        if let Some(partition) = partition {
            future = future.partition(partition);
        }
        self.producer
            .send_result(future)
            .map_err(|(error, _)| match error {
                KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull) => {
                    EnqueueError::QueueFull
                }
                other => EnqueueError::Failed(other),
            })
    }

    /// Like [`KafkaSink::enqueue_to`], waiting in 5 ms steps while librdkafka's queue is full
    /// (for the few records produced outside the relay: gap markers, dead-letter stubs).
    ///
    /// Errors: any other enqueue error.
    pub async fn enqueue_waiting(
        &self,
        record: &Record,
        partition: Option<i32>,
    ) -> Result<DeliveryFuture, KafkaError> {
        loop {
            match self.enqueue_to(record, partition) {
                Ok(delivery) => return Ok(delivery),
                Err(EnqueueError::QueueFull) => tokio::time::sleep(Duration::from_millis(5)).await,
                Err(EnqueueError::Failed(e)) => return Err(e),
            }
        }
    }

    /// Topic names and partition counts from the cluster's metadata, or `None` when the cluster
    /// does not answer within `timeout`.
    pub async fn topics(&self, timeout: Duration) -> Option<Vec<(String, i32)>> {
        let producer = self.producer.clone();
        let metadata = tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(None, timeout)
                .ok()
                .map(|m| {
                    m.topics()
                        .iter()
                        .map(|t| (t.name().to_owned(), t.partitions().len() as i32))
                        .collect::<Vec<_>>()
                })
        });
        metadata.await.ok().flatten()
    }

    /// Drops this handle on the blocking pool: when it is the producer's last handle, librdkafka's
    /// destroy path (purge, a flush of up to 500 ms, joining its threads) must not stall a
    /// runtime thread that other pipelines and `/healthz` share. Call [`KafkaSink::flush`] first.
    pub fn close(self) {
        tokio::task::spawn_blocking(move || drop(self));
    }

    /// Waits up to `timeout` for every enqueued record to be delivered or fail. Runs the
    /// blocking librdkafka call on the blocking pool. Returns whether the queue is empty.
    pub async fn flush(&self, timeout: Duration) -> bool {
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || producer.flush(timeout).is_ok())
            .await
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PropertyValue;

    #[test]
    fn protected_properties_win_over_user_properties() {
        let mut kafka = KafkaConfig {
            bootstrap_servers: "127.0.0.1:9".into(),
            topic_prefix: String::new(),
            properties: Default::default(),
        };
        kafka
            .properties
            .insert("acks".into(), PropertyValue::Text("1".into()));
        kafka
            .properties
            .insert("linger.ms".into(), PropertyValue::Integer(50));
        let config = client_config(&kafka);
        assert_eq!(config.get("acks"), Some("all"));
        assert_eq!(config.get("enable.idempotence"), Some("true"));
        assert_eq!(config.get("partitioner"), Some("murmur2_random"));
        assert_eq!(config.get("linger.ms"), Some("50"));
        assert_eq!(config.get("message.timeout.ms"), Some("120000"));
    }
}
