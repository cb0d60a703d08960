//! The relay's intake: one item from the source becomes records enqueued to librdkafka, and
//! one entry in the ordered window, in the order the source read them.
//!
//! Invariants: an item's topic is made sure of (created, its batch limit learned) before its
//! first record is enqueued; a full librdkafka queue keeps the rest of the item pending
//! (backpressure, never a drop); a record too large for the producer's queue or its topic is
//! kept as refused, so its event's deliveries apply the oversize policy in one place.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::intake::Taken;
use super::{Mark, Relay};
use crate::encode::dead_letter::Refused;
use crate::encode::{Diversion, EncodedEvent, Record};
use crate::error::encode::EncodeError;
use crate::error::{BridgeError, is_oversize};
use crate::event::{Position, SourceItem, timestamp_now};
use crate::kafka::delivery::{Delivery, EventDeliveries};
use crate::kafka::sink::EnqueueError;
use crate::observe::health::now_ms;
use crate::observe::metrics::TopicMetrics;
use crate::snapshot::SharedState;

/// An event (or copied document, or markers) whose records are partly enqueued (the queue
/// was full).
pub(super) struct Pending {
    records: VecDeque<Record>,
    deliveries: Vec<Delivery>,
    kind: Kind,
    bytes: usize,
    topic: Arc<str>,
}

/// What a pending entry is, for the position its window entry yields.
pub(super) enum Kind {
    /// A change event: its position is built when it enters the window.
    Event(EncodedEvent),
    /// A snapshot's copied document or markers: the snapshot's state it completes, if any.
    Snapshot(&'static str, Option<SharedState>),
    /// A heartbeat (`heartbeat.rs`), at least once.
    Heartbeat(crate::encode::heartbeat::Beat),
}

impl Relay {
    /// Takes the intake's next item; an event the pool encoded keeps its byte-budget permit
    /// until its records are enqueued or kept in `Pending`, as one the relay encodes does.
    pub(super) async fn take(&mut self, taken: Taken) -> Result<Option<Pending>, BridgeError> {
        match taken {
            Taken::Item(item) => self.accept(item).await,
            Taken::Encoded {
                bytes,
                encoded,
                permit,
            } => {
                let _permit = permit;
                self.metrics.pool_encoded.inc();
                self.accept_event(bytes, encoded).await
            }
        }
    }

    /// Takes one item from the source. An event's byte-budget permit is dropped on return, once
    /// its records are enqueued (librdkafka holds its own copy) or kept in `Pending`.
    pub(super) async fn accept(
        &mut self,
        item: SourceItem,
    ) -> Result<Option<Pending>, BridgeError> {
        match item {
            SourceItem::Event { raw, permit } => {
                // Held until this arm ends: the records are then enqueued or kept in `Pending`.
                let _permit = permit;
                let encoded = self.encoder.encode(&raw);
                self.accept_event(raw.as_bytes().len(), encoded).await
            }
            SourceItem::Copy {
                target,
                raw,
                read_time,
                state,
                snapshot_last,
                permit,
            } => {
                let _permit = permit;
                self.accept_copy(&target, &raw, read_time, state, snapshot_last)
                    .await
            }
            SourceItem::Marker {
                target,
                marker,
                copied,
                state,
            } => self.accept_markers(&target, marker, copied, state).await,
            SourceItem::SnapshotState(state) => {
                self.window.push_watermark(Mark::Snapshot(state));
                Ok(None)
            }
            SourceItem::Idle => {
                self.at_rest(true).await?;
                Ok(None)
            }
            SourceItem::Watermark {
                token,
                position_time,
            } => {
                self.metrics.source_watermarks.inc();
                // An empty batch: the stream has been read up to now.
                self.metrics.source_lag.set(0.0);
                let position_time = self.monotonic(position_time);
                let position = Position {
                    token,
                    cluster_time: self.last_cluster_time,
                    position_time,
                    wall_time_ms: self.last_wall_time_ms,
                    event_count: self.event_count,
                };
                self.window.push_watermark(Mark::Stream(position));
                self.at_rest(true).await?;
                Ok(None)
            }
        }
    }

    /// Takes one change event of `bytes` raw bytes, encoded (by the relay, or on the pool).
    pub(super) async fn accept_event(
        &mut self,
        bytes: usize,
        encoded: Result<EncodedEvent, EncodeError>,
    ) -> Result<Option<Pending>, BridgeError> {
        self.metrics.source_bytes.inc_by(bytes as u64);
        let mut encoded = encoded.map_err(|source| BridgeError::Encode {
            pipeline: self.pipeline.to_string(),
            source,
        })?;
        self.metrics.event_read(&encoded.operation_type);
        if let Some(diverted) = &encoded.diverted {
            self.diverted(diverted);
        }
        if let Some(ts) = encoded.cluster_time {
            let lag = timestamp_now().time.saturating_sub(ts.time);
            self.metrics.source_lag.set(f64::from(lag));
        }
        let records = std::mem::take(&mut encoded.records);
        if records.is_empty() {
            // An event this form writes nothing for (the Debezium form's drop, rename,
            // invalidate): its position commits once everything before it is delivered.
            let position = self.position_of(&mut encoded);
            self.window.push_watermark(Mark::Stream(position));
            return Ok(None);
        }
        self.before_records(encoded.txn.as_ref(), true, &records)
            .await?;
        self.enqueue_new(records, Kind::Event(encoded)).await
    }

    /// Enqueues the records of one event, copied document or markers (their topic made sure of
    /// first); returns them back as pending if the queue filled up.
    pub(super) async fn enqueue_new(
        &mut self,
        records: Vec<Record>,
        kind: Kind,
    ) -> Result<Option<Pending>, BridgeError> {
        let bytes = records.iter().map(Record::size).sum();
        let topic = records
            .first()
            .map_or_else(|| Arc::from(""), |r| Arc::clone(&r.topic));
        let first = self.topics.as_ref().is_some_and(|c| !c.knows(&topic))
            || self.topic_limits.as_ref().is_some_and(|l| !l.knows(&topic));
        if first {
            // Admin calls ahead of its first record: the event waits undelivered from now on
            // (readiness sees a broker that does not answer them).
            let _ = self.health.oldest_in_flight_ms.compare_exchange(
                0,
                now_ms(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        if let Some(creator) = &mut self.topics {
            creator.ensure(&topic).await?;
        }
        if let Some(limits) = &mut self.topic_limits {
            limits.admit(&topic).await?;
        }
        let pending = Pending {
            deliveries: Vec::with_capacity(records.len()),
            records: VecDeque::from(records),
            kind,
            bytes,
            topic,
        };
        self.enqueue(pending)
    }

    /// Enqueues the remaining records of `p`; returns it back if the queue filled up. A record
    /// librdkafka refuses as too large is kept as refused: its event's deliveries apply the
    /// oversize policy, in one place ([`EventDeliveries::wait`]). Any other refusal fails the
    /// pipeline.
    pub(super) fn enqueue(&mut self, mut p: Pending) -> Result<Option<Pending>, BridgeError> {
        while let Some(record) = p.records.pop_front() {
            if record.size() > self.limits.queue_bytes || self.over_topic_limit(&record) {
                // librdkafka would answer QUEUE_FULL for it forever: it is too large.
                let too_large =
                    KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
                p.deliveries
                    .push(Delivery::Refused(too_large, Refused::from_record(record)));
                continue;
            }
            match self.sink.enqueue(&record) {
                Ok(delivery) => {
                    self.topic_metrics(&record.topic).enqueued.inc();
                    p.deliveries.push(Delivery::Enqueued(delivery));
                    if self.transactions.is_some() {
                        crate::failpoint::reach("transaction_open");
                    }
                }
                Err(EnqueueError::QueueFull) => {
                    self.metrics.queue_full.inc();
                    p.records.push_front(record);
                    return Ok(Some(p));
                }
                Err(EnqueueError::Failed(source)) if is_oversize(&source) => {
                    p.deliveries
                        .push(Delivery::Refused(source, Refused::from_record(record)));
                }
                Err(EnqueueError::Failed(source)) => {
                    return Err(BridgeError::Delivery {
                        pipeline: self.pipeline.to_string(),
                        topic: record.topic.to_string(),
                        source: Box::new(source),
                    });
                }
            }
        }
        self.push_event(p);
        Ok(None)
    }

    /// Counts and logs an event `on_ambiguous` diverted (a stub, or BSON).
    pub(super) fn diverted(&self, diverted: &Diversion) {
        self.metrics.ambiguous(diverted.outcome);
        let (path, reason) = (&diverted.problem.path, &diverted.problem.reason);
        if diverted.outcome == "bson" {
            tracing::warn!(pipeline = %self.pipeline, field = %path, reason = %reason,
                "event published as BSON (on_ambiguous = bson): JSON cannot carry it exactly");
        } else {
            tracing::error!(pipeline = %self.pipeline, field = %path, reason = %reason,
                "event replaced by a stub on the dead-letter topic (on_ambiguous = dead_letter): \
                 JSON cannot carry it exactly");
        }
    }

    /// The metric handles of `topic`, cached for the common case of one topic in a row.
    pub(super) fn topic_metrics(&mut self, topic: &Arc<str>) -> Arc<TopicMetrics> {
        match &self.last_topic {
            Some((name, handles)) if name == topic => Arc::clone(handles),
            _ => {
                let handles = self.metrics.topic(topic);
                self.last_topic = Some((Arc::clone(topic), Arc::clone(&handles)));
                handles
            }
        }
    }

    /// The position after `encoded`, counted as one more event (the event's resume token moves
    /// into it: `encoded.token` is left empty).
    fn position_of(&mut self, encoded: &mut EncodedEvent) -> Position {
        self.event_count += 1;
        if encoded.cluster_time.is_some() {
            self.last_cluster_time = encoded.cluster_time;
        }
        if encoded.wall_time_ms.is_some() {
            self.last_wall_time_ms = encoded.wall_time_ms;
        }
        Position {
            token: std::mem::take(&mut encoded.token),
            cluster_time: self.last_cluster_time,
            position_time: self.monotonic(encoded.cluster_time.unwrap_or_else(timestamp_now)),
            wall_time_ms: self.last_wall_time_ms,
            event_count: self.event_count,
        }
    }

    pub(super) fn push_event(&mut self, p: Pending) {
        let mut encoded = match p.kind {
            Kind::Event(encoded) => encoded,
            Kind::Snapshot(operation_type, state) => {
                return self.push_snapshot(p.topic, p.bytes, p.deliveries, operation_type, state);
            }
            Kind::Heartbeat(beat) => {
                return self.push_heartbeat(p.topic, p.bytes, p.deliveries, beat);
            }
        };
        let position = self.position_of(&mut encoded);
        let deliveries = EventDeliveries {
            context: Arc::clone(&self.context),
            topic_metrics: self.topic_metrics(&p.topic),
            event_time: (encoded.wall_time_ms, encoded.cluster_time),
            enqueued_at: Instant::now(),
            deliveries: p.deliveries,
        };
        let operation_type = encoded.operation_type;
        let at = deliveries.enqueued_at;
        let delivered = deliveries.wait(operation_type);
        self.window.push_event(
            p.bytes,
            (at, p.topic),
            futures::FutureExt::map(delivered, |out| out.map(|()| Mark::Stream(position))),
        );
    }
}
