//! What became of enqueued records, and the future that stands for one change event in the
//! relay's ordered window.
//!
//! WARNING: this decides when an event counts as delivered. [`EventDeliveries::wait`] resolves
//! `Ok` only when every record of the event was acknowledged by the broker (or, under
//! `on_oversize = "dead_letter"`, an oversized record's stub was); any other refusal or a
//! cancelled delivery future (the producer was dropped) resolves `Err`, which stops the window's
//! advance (see `window.rs`). A record librdkafka refuses when it is enqueued takes the same path
//! as one the broker refuses ([`Delivery::Refused`]), so the oversize policy is applied in one
//! place.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use futures::future::BoxFuture;

use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::producer::DeliveryFuture;

use super::admin::KafkaAdmin;
use super::sink::KafkaSink;
use crate::config::Format;
use crate::encode::dead_letter::{self, Refused};
use crate::encode::header_name;
use crate::error::{BridgeError, is_oversize};
use crate::observe::metrics::{PipelineMetrics, TopicMetrics};

/// One record handed to the producer: its delivery future, or librdkafka's refusal at enqueue.
pub(crate) enum Delivery {
    /// Enqueued; the future resolves with the broker's answer.
    Enqueued(DeliveryFuture),
    /// Refused when it was enqueued (e.g. larger than the producer's `message.max.bytes`).
    Refused(KafkaError, Refused),
}

/// What became of one record.
pub(crate) enum Outcome {
    /// Acknowledged by the broker (`acks=all`).
    Delivered,
    /// Refused by librdkafka or the broker, after librdkafka's own retries.
    Refused(KafkaError, Refused),
    /// The delivery future was dropped without a result (the producer was closed): not delivered.
    Cancelled,
}

impl Delivery {
    /// Waits for the record's fate.
    pub(crate) async fn outcome(self) -> Outcome {
        match self {
            Self::Refused(error, refused) => Outcome::Refused(error, refused),
            Self::Enqueued(future) => match future.await {
                Ok(Ok(_)) => Outcome::Delivered,
                Ok(Err((error, message))) => Outcome::Refused(error, refused_message(&message)),
                Err(_) => Outcome::Cancelled,
            },
        }
    }

    /// `Ok` once delivered; the refusal or cancellation as a [`BridgeError`] of `pipeline` (for
    /// records outside the window: gap markers, stubs).
    pub(crate) async fn delivered(self, pipeline: &str) -> Result<(), BridgeError> {
        match self.outcome().await {
            Outcome::Delivered => Ok(()),
            Outcome::Refused(source, refused) => Err(BridgeError::Delivery {
                pipeline: pipeline.to_owned(),
                topic: refused.topic.to_string(),
                source: Box::new(source),
            }),
            Outcome::Cancelled => Err(BridgeError::DeliveryCancelled {
                pipeline: pipeline.to_owned(),
            }),
        }
    }
}

/// What the in-flight events of one pipeline share: built once per relay, one `Arc` per event.
pub(crate) struct DeliveryContext {
    /// Pipeline name.
    pub pipeline: Arc<str>,
    /// The pipeline's metric handles.
    pub metrics: PipelineMetrics,
    /// The producer and topic of the dead-letter policy, when configured.
    pub dead_letter: Option<(KafkaSink, Arc<str>)>,
    /// How the pipeline's keys are encoded (for stubs and messages).
    pub key_format: Format,
    /// For telling a refused batch from a refused record: the admin client that reads a
    /// topic's `max.message.bytes`, and the producer's batch bound (bytes).
    pub batch_check: Option<(KafkaAdmin, usize)>,
}

/// One change event's records in flight.
pub(crate) struct EventDeliveries {
    /// The pipeline's shared part.
    pub context: Arc<DeliveryContext>,
    /// The pipeline's handles for the topic of the event's records.
    pub topic_metrics: Arc<TopicMetrics>,
    /// The event's `wallTime` (ms) and `clusterTime`, for the end-to-end latency.
    pub event_time: (Option<i64>, Option<bson::Timestamp>),
    /// When the event's last record was enqueued: the start of `delivery_duration`.
    pub enqueued_at: Instant,
    /// One per record, in the order they were enqueued.
    pub deliveries: Vec<Delivery>,
}

impl EventDeliveries {
    /// `Ok` only when every record was delivered (or an oversized record's stub was delivered
    /// to the dead-letter topic); the first failure or cancellation is the error.
    pub(crate) fn wait<S: AsRef<str> + Unpin>(self, operation_type: S) -> Delivered<S> {
        Delivered {
            event: self,
            next: 0,
            operation_type,
            oversize: None,
        }
    }

    /// Every record is delivered: the event's metrics.
    fn all_delivered(&self, operation_type: &str) {
        self.topic_metrics
            .delivery_duration
            .observe(self.enqueued_at.elapsed().as_secs_f64());
        let count = self.deliveries.len() as u64;
        self.topic_metrics.delivered(operation_type, count);
        self.context
            .metrics
            .end_to_end(self.event_time.0, self.event_time.1);
    }

    /// What a record's refusal or cancellation means: the error that ends the wait, or (an
    /// oversized record) the policy's future, which owns what it needs.
    fn failed(&self, outcome: Outcome) -> Result<Policy, BridgeError> {
        match outcome {
            Outcome::Refused(error, refused) if is_oversize(&error) => {
                let event = EventDeliveries {
                    context: Arc::clone(&self.context),
                    topic_metrics: Arc::clone(&self.topic_metrics),
                    event_time: self.event_time,
                    enqueued_at: self.enqueued_at,
                    deliveries: Vec::new(),
                };
                Ok(Box::pin(
                    async move { event.oversize(error, refused).await },
                ))
            }
            Outcome::Refused(error, refused) => {
                self.topic_metrics.delivery_error(&error_code(&error));
                Err(BridgeError::Delivery {
                    pipeline: self.context.pipeline.to_string(),
                    topic: refused.topic.to_string(),
                    source: Box::new(error),
                })
            }
            Outcome::Cancelled => {
                self.topic_metrics.delivery_error("cancelled");
                Err(self.cancelled())
            }
            Outcome::Delivered => unreachable!("invariant: `Delivered::poll` passes failures only"),
        }
    }

    fn cancelled(&self) -> BridgeError {
        BridgeError::DeliveryCancelled {
            pipeline: self.context.pipeline.to_string(),
        }
    }

    /// A record too large for Kafka: its stub goes to the dead-letter topic when one is
    /// configured, else the pipeline fails. A refused stub fails the pipeline too (never a stub
    /// of the stub).
    async fn oversize(&self, error: KafkaError, refused: Refused) -> Result<(), BridgeError> {
        let pipeline = self.context.pipeline.to_string();
        if let Some(batch) = self.refused_batch(&refused).await {
            self.topic_metrics.delivery_error(&error_code(&error));
            return Err(batch);
        }
        let Some((sink, dlq)) = &self.context.dead_letter else {
            self.topic_metrics.delivery_error(&error_code(&error));
            return Err(BridgeError::Oversize {
                pipeline,
                topic: refused.topic.to_string(),
                key: refused.key_text(self.context.key_format),
                size: refused.size,
            });
        };
        if refused.enqueued && sink.is_transactional() {
            // The transaction can only abort now: no stub can join it.
            self.topic_metrics.delivery_error(&error_code(&error));
            return Err(BridgeError::RefusedInTransaction {
                pipeline,
                topic: refused.topic.to_string(),
                size: refused.size,
            });
        }
        let stub = dead_letter::stub(dlq, &refused, &error.to_string(), self.context.key_format);
        self.topic_metrics.delivery_error("dead_lettered");
        tracing::error!(pipeline, topic = %refused.topic, size = refused.size,
            "record too large for Kafka: a stub goes to the dead-letter topic instead");
        let stub_refused = |source| BridgeError::DeadLetterRefused {
            pipeline: pipeline.clone(),
            topic: dlq.to_string(),
            key: refused.key_text(self.context.key_format),
            source: Box::new(source),
        };
        let delivery = match sink.enqueue_waiting(&stub, None).await {
            Ok(future) => Delivery::Enqueued(future),
            Err(source) => return Err(stub_refused(source)),
        };
        match delivery.outcome().await {
            Outcome::Delivered => Ok(()),
            Outcome::Refused(source, _) => Err(stub_refused(source)),
            Outcome::Cancelled => Err(self.cancelled()),
        }
    }
}

/// [`EventDeliveries::wait`], written out by hand: every in-flight event keeps one, so it holds
/// only the event, the index of the next record to wait for and, while an oversized record's
/// policy runs, that policy's boxed future (an `async fn` would reserve the policy's state, and
/// its captured arguments a second time, in every event: 3.4 KB instead of ~150 bytes).
///
/// Records are waited for in the order they were enqueued; it resolves `Ok` only after the last
/// one was delivered (or stubbed), and with the first failure otherwise. Not polled again after
/// it resolved (the window drops it).
pub(crate) struct Delivered<S> {
    event: EventDeliveries,
    next: usize,
    operation_type: S,
    oversize: Option<Policy>,
}

/// The oversize policy's future for one record (a stub's delivery, or the error).
type Policy = BoxFuture<'static, Result<(), BridgeError>>;

impl<S: AsRef<str> + Unpin> Future for Delivered<S> {
    type Output = Result<(), BridgeError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            if let Some(policy) = &mut this.oversize {
                ready!(policy.as_mut().poll(cx))?;
                this.oversize = None;
                this.next += 1;
                continue;
            }
            let outcome = match this.event.deliveries.get_mut(this.next) {
                None => {
                    this.event.all_delivered(this.operation_type.as_ref());
                    return Poll::Ready(Ok(()));
                }
                Some(Delivery::Enqueued(future)) => match ready!(Pin::new(future).poll(cx)) {
                    Ok(Ok(_)) => {
                        this.next += 1;
                        continue;
                    }
                    Ok(Err((error, message))) => Outcome::Refused(error, refused_message(&message)),
                    Err(_) => Outcome::Cancelled,
                },
                Some(Delivery::Refused(error, refused)) => {
                    Outcome::Refused(error.clone(), refused.clone())
                }
            };
            match this.event.failed(outcome) {
                Ok(policy) => this.oversize = Some(policy),
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
    }
}

impl EventDeliveries {
    /// When the broker refused an enqueued record that fits its topic's `max.message.bytes`
    /// as it is now (read again here), the batch it was in was too large, not the record (the
    /// limit was lowered while the pipeline ran): [`BridgeError::BatchAboveTopicLimit`], so
    /// the run ends and the next one batches within the limit. `None`: the record itself is
    /// too large (or the limit is unknown), and the oversize policy applies.
    async fn refused_batch(&self, refused: &Refused) -> Option<BridgeError> {
        let (admin, batch_bytes) = self.context.batch_check.as_ref()?;
        if !refused.enqueued {
            return None;
        }
        let limit = admin
            .describe(
                rdkafka::admin::ResourceSpecifier::Topic(&refused.topic),
                &["max.message.bytes"],
            )
            .await
            .remove(0)
            .and_then(|v| v.parse::<usize>().ok())?;
        let headers: usize = refused.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
        let single =
            super::limits::single_record_batch(refused.size + headers, refused.headers.len());
        // A producer that already batches within the limit cannot have been refused for its
        // batch: then the record is what the broker refused.
        (single <= limit && *batch_bytes > limit).then(|| BridgeError::BatchAboveTopicLimit {
            pipeline: self.context.pipeline.to_string(),
            topic: refused.topic.to_string(),
            topic_limit: limit,
            batch_bytes: *batch_bytes,
        })
    }
}

/// What is known of a record the broker refused (librdkafka hands it back with the delivery
/// error): enough to name it and to build its stub.
fn refused_message(message: &OwnedMessage) -> Refused {
    let headers = message
        .headers()
        .map(|h| {
            h.iter()
                .filter_map(|h| Some((header_name(h.key)?, h.value?.to_vec())))
                .collect()
        })
        .unwrap_or_default();
    let key = message.key().unwrap_or_default().to_vec();
    Refused {
        topic: Arc::from(message.topic()),
        size: message.payload().map_or(0, <[u8]>::len) + key.len(),
        key,
        headers,
        enqueued: true,
    }
}

/// A bounded label for a delivery error: librdkafka's code name.
fn error_code(error: &KafkaError) -> String {
    error
        .rdkafka_error_code()
        .map_or("unknown".into(), |c| format!("{c:?}"))
}
