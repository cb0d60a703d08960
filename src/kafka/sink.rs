//! The pipeline's Kafka producer: enqueues records without waiting for their delivery.
//!
//! Invariants:
//! - "Enqueued" means handed to librdkafka (`send_result` returned a [`DeliveryFuture`]);
//!   "delivered" means that future resolved `Ok`. A cancelled future is *not* delivered.
//! - One producer per pipeline carries everything the pipeline writes: its records, dead-letter
//!   stubs and gap markers (a transactional producer, later, must be the only one of its id).
//! - [`KafkaSink::flush`] is called before the last handle is dropped: librdkafka's destroy path
//!   purges queued records. The destroy itself runs on the blocking pool ([`super::Detached`]).

use std::sync::Arc;
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};

use super::Detached;
use super::context::{AuthenticationFailure, KafkaContext};
use crate::config::KafkaConfig;
use crate::config::kafka::pipeline_producer_config;
use crate::encode::record::Record;

/// Why a record could not be enqueued.
#[derive(Debug)]
pub(crate) enum EnqueueError {
    /// librdkafka's local queue is full: wait for deliveries and enqueue again (backpressure).
    QueueFull,
    /// Any other error: the record cannot be produced by this producer.
    Failed(KafkaError),
}

/// The producer type: its client context publishes librdkafka statistics as metrics.
type SinkProducer = FutureProducer<KafkaContext>;

/// One pipeline's producer (clones share it).
#[derive(Clone)]
pub(crate) struct KafkaSink {
    pub(super) producer: Arc<Detached<SinkProducer>>,
    /// `transactional.id`, when the producer is transactional (`delivery = "exactly_once"`).
    pub(super) transactional_id: Option<Arc<str>>,
    /// Whether `init_transactions` succeeded on this producer (it may run once per producer).
    pub(super) initialized: Arc<std::sync::atomic::AtomicBool>,
    /// What the producer's context records of an authentication failure.
    pub(super) authentication: AuthenticationFailure,
    /// The producer's effective `message.timeout.ms` (0: none).
    pub(super) message_timeout: Duration,
}

impl KafkaSink {
    /// Creates the producer (`message.timeout.ms` defaulting to `message_timeout_ms`), publishing
    /// librdkafka statistics through `context` every
    /// `statistics.interval.ms` (default 5000 unless `[kafka.properties]` sets it; 0 = off).
    ///
    /// With `transactional_id`, the producer is transactional (see [`super::exactly_once`]).
    /// With `batch_size`, its `batch.size` is that many bytes, whatever `[kafka.properties]`
    /// says (a topic's limit, see [`super::limits`]).
    ///
    /// Errors: librdkafka's refusal of the configuration (e.g. contradicting idempotence
    /// settings, an unreadable `ssl.ca.location`); connection problems surface later as delivery
    /// errors, after `message.timeout.ms`.
    pub(crate) fn new(
        kafka: &KafkaConfig,
        message_timeout_ms: u64,
        transactional_id: Option<&str>,
        batch_size: Option<usize>,
        context: KafkaContext,
    ) -> Result<Self, KafkaError> {
        let authentication = context.authentication();
        let config =
            pipeline_producer_config(kafka, message_timeout_ms, transactional_id, batch_size);
        let message_timeout = config
            .get("message.timeout.ms")
            .and_then(|v| v.parse().ok())
            .map_or(Duration::ZERO, Duration::from_millis);
        let producer: SinkProducer = config.create_with_context(context)?;
        Ok(Self {
            message_timeout,
            producer: Arc::new(Detached::new(producer)),
            transactional_id: transactional_id.map(Arc::from),
            initialized: Arc::default(),
            authentication,
        })
    }

    /// The producer's effective `message.timeout.ms`, the default or `[kafka.properties]`'s
    /// (`Duration::ZERO`: records never time out).
    pub(crate) fn message_timeout(&self) -> Duration {
        self.message_timeout
    }

    /// librdkafka's reason when the producer failed to authenticate (see
    /// [`KafkaContext::authentication`]).
    pub(crate) fn authentication_failure(&self) -> Option<String> {
        self.authentication.get()
    }

    /// Asks the cluster for its metadata through this producer (whose thread polls librdkafka's
    /// events, so a refused authentication is recorded): the number of brokers.
    ///
    /// Errors: the metadata request's, e.g. a timeout when no broker answers.
    pub(crate) async fn metadata_brokers(&self, timeout: Duration) -> Result<usize, KafkaError> {
        let producer = Arc::clone(&self.producer);
        tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(None, timeout)
                .map(|m| m.brokers().len())
        })
        .await
        .unwrap_or(Err(KafkaError::Canceled))
    }

    /// Enqueues `record` without waiting for its delivery.
    ///
    /// Returns the delivery future on success, [`EnqueueError::QueueFull`] when librdkafka's
    /// queue (`queue.buffering.max.messages` / `.kbytes`) is full.
    pub(crate) fn enqueue(&self, record: &Record) -> Result<DeliveryFuture, EnqueueError> {
        self.enqueue_to(record, record.partition)
    }

    /// Like [`KafkaSink::enqueue`], to an explicit `partition` when given (else the key decides).
    pub(crate) fn enqueue_to(
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
    /// (for the few records produced outside the relay's window: gap markers, dead-letter stubs).
    ///
    /// Errors: any other enqueue error.
    pub(crate) async fn enqueue_waiting(
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
    pub(crate) async fn topics(&self, timeout: Duration) -> Option<Vec<(String, i32)>> {
        let producer = Arc::clone(&self.producer);
        let metadata = tokio::task::spawn_blocking(move || {
            let metadata = producer.client().fetch_metadata(None, timeout).ok()?;
            let topics = metadata.topics().iter();
            Some(
                topics
                    .map(|t| (t.name().to_owned(), t.partitions().len() as i32))
                    .collect::<Vec<_>>(),
            )
        });
        metadata.await.ok().flatten()
    }

    /// The partition count of `topic`, asking for it by name (a producer's request lets a broker
    /// with `auto.create.topics.enable` create it); `None` when the cluster does not know it
    /// within `timeout`.
    pub(crate) async fn partitions(&self, topic: &str, timeout: Duration) -> Option<i32> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let producer = Arc::clone(&self.producer);
            let name = topic.to_owned();
            let count = tokio::task::spawn_blocking(move || {
                let metadata = producer
                    .client()
                    .fetch_metadata(Some(&name), Duration::from_secs(5))
                    .ok()?;
                let found = metadata.topics().iter().find(|t| t.name() == name)?;
                Some(found.partitions().len() as i32).filter(|n| *n > 0)
            })
            .await
            .ok()
            .flatten();
            if count.is_some() || tokio::time::Instant::now() >= deadline {
                return count;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Drops every record not yet delivered, queued or in flight (their deliveries report
    /// purged; acknowledgements of in-flight ones are voided), without waiting: after a failed
    /// delivery, nothing enqueued after it may reach the topic before the restart publishes it
    /// again. librdkafka's idempotent producer would otherwise go on after a timed-out record
    /// (bumping its epoch, KIP-360) and deliver later records of the same partition first.
    pub(crate) fn purge(&self) {
        use rdkafka::producer::PurgeConfig;
        self.producer
            .purge(PurgeConfig::default().queue().inflight().non_blocking());
    }

    /// Waits up to `timeout` for every enqueued record to be delivered or fail. Runs the
    /// blocking librdkafka call on the blocking pool. Returns whether the queue is empty.
    pub(crate) async fn flush(&self, timeout: Duration) -> bool {
        let producer = Arc::clone(&self.producer);
        tokio::task::spawn_blocking(move || producer.flush(timeout).is_ok())
            .await
            .unwrap_or(false)
    }
}
