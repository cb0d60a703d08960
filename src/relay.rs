//! The relay task: encodes each change event, enqueues its records, tracks deliveries in the
//! ordered window and publishes the safe position for the checkpointer.
//!
//! ```text
//!  source task ──mpsc<SourceItem>──▶ relay ──enqueue──▶ librdkafka ──delivery futures──┐
//!                                     │  ▲                                            │
//!                                     │  └──────────── OrderedWindow ◀────────────────┘
//!                                     └──watch<Option<Position>>──▶ checkpointer
//! ```
//!
//! WARNING: this code decides what gets committed. The ordering proof is in [`crate::window`];
//! the relay upholds its premises:
//! - every event and every watermark enters the window in the order the source read them;
//! - an event's entry resolves `Ok` only when *all* its records (delete + tombstone) are
//!   delivered; any delivery error or cancellation resolves it `Err`;
//! - the first `Err` out of the window ends the relay; nothing after it is published.
//!
//! Loop priority (`select! { biased; … }`): 1. acks from the window (frees memory first),
//! 2. the retry of a pending event whose enqueue hit a full queue while nothing of ours is in
//! flight, 3. shutdown, 4. intake, only while the window has room (the in-flight event and byte
//! bounds) and the lease is known to hold — this bounds memory whatever the backlog, 5. the
//! 500 ms tick (heartbeat, gauges). A full librdkafka queue is backpressure, never an error or a
//! drop.
//!
//! Every drain (shutdown, or the source's end) ends by `shutdown_timeout_ms`, whatever is still
//! in flight or waiting for room in librdkafka's queue.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bson::Timestamp;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::encode::dead_letter::Refused;
use crate::encode::{EncodedEvent, Record, RecordEncoder};
use crate::error::{BridgeError, is_oversize};
use crate::event::{Position, Safe, SourceItem, timestamp_now};
use crate::kafka::admin::TopicCreator;
use crate::kafka::delivery::{Delivery, DeliveryContext, EventDeliveries};
use crate::kafka::limits::TopicLimits;
use crate::kafka::sink::{EnqueueError, KafkaSink};
use crate::observe::health::{PipelineHealth, now_ms};
use crate::observe::metrics::{PipelineMetrics, TopicMetrics};
use crate::snapshot::SharedState;
use crate::window::OrderedWindow;

/// Bound of one burst in `complete_ready`, so a full window of completed entries (up to
/// `max_in_flight_events`) does not hold the runtime thread for long without a yield.
const MAX_COMPLETIONS_PER_WAKE: usize = 1024;

/// An event (or copied document, or markers) whose records are partly enqueued (the queue
/// was full).
struct Pending {
    records: VecDeque<Record>,
    deliveries: Vec<Delivery>,
    kind: Kind,
    bytes: usize,
    topic: Arc<str>,
}

/// What a pending entry is, for the position its window entry yields.
enum Kind {
    /// A change event: its position is built when it enters the window.
    Event(EncodedEvent),
    /// A snapshot's copied document or markers: the snapshot's state it completes, if any.
    Snapshot(&'static str, Option<SharedState>),
}

/// What a window entry yields once it and everything before it is delivered.
#[derive(Debug)]
pub(crate) enum Mark {
    /// A position of the change stream.
    Stream(Position),
    /// A snapshot's state.
    Snapshot(SharedState),
    /// Nothing to commit (a copied document inside a batch).
    Nothing,
}

/// Resolves after a short pause when `wanted`, never otherwise: the retry of an event whose
/// enqueue met a full librdkafka queue while nothing of ours is in flight to wait for.
async fn retry_later(wanted: bool) {
    if wanted {
        tokio::time::sleep(Duration::from_millis(5)).await;
    } else {
        std::future::pending::<()>().await;
    }
}

/// In-flight bounds of one pipeline.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Events enqueued and not delivered (see [`crate::config::InFlightBounds`]).
    pub max_events: usize,
    /// Bytes of records enqueued and not delivered.
    pub max_bytes: usize,
    /// The producer queue's size (bytes): a larger record can never be enqueued.
    pub queue_bytes: usize,
    /// Bound of the drain at shutdown or after the source stopped.
    pub drain_timeout: Duration,
}

/// One pipeline's relay.
pub struct Relay {
    pipeline: Arc<str>,
    encoder: RecordEncoder,
    sink: KafkaSink,
    window: OrderedWindow<Mark, BridgeError>,
    limits: Limits,
    metrics: PipelineMetrics,
    health: Arc<PipelineHealth>,
    safe: watch::Sender<Safe>,
    /// The delivered prefix's latest stream position and snapshot state.
    delivered: Safe,
    last_cluster_time: Option<Timestamp>,
    last_wall_time_ms: Option<i64>,
    event_count: u64,
    last_topic: Option<(Arc<str>, Arc<TopicMetrics>)>,
    /// What every in-flight event's deliveries share, the dead-letter policy included (one
    /// `Arc` per event instead of clones of the name, the metric handles and the sink).
    context: Arc<DeliveryContext>,
    lease: Option<Arc<std::sync::atomic::AtomicI64>>,
    /// Creates missing topics before their first record (`[kafka.topic_creation]`).
    topics: Option<TopicCreator>,
    /// The topics' `max.message.bytes`, learned before their first record.
    topic_limits: Option<TopicLimits>,
    last_position_time: Timestamp,
    /// Partition counts of the topics markers went to.
    partitions: std::collections::HashMap<Arc<str>, i32>,
    /// With `delivery = "exactly_once"`: the Kafka transactions ([`transaction`]).
    transactions: Option<transaction::Transactions>,
}

impl Relay {
    /// A relay publishing safe positions on `safe`.
    pub fn new(
        pipeline: &str,
        encoder: RecordEncoder,
        sink: KafkaSink,
        limits: Limits,
        metrics: PipelineMetrics,
        health: Arc<PipelineHealth>,
        safe: watch::Sender<Safe>,
    ) -> Self {
        let context = Arc::new(DeliveryContext {
            pipeline: Arc::from(pipeline),
            metrics: metrics.clone(),
            dead_letter: None,
            key_format: encoder.key_format(),
            batch_check: None,
        });
        Self {
            pipeline: Arc::from(pipeline),
            encoder,
            sink,
            window: OrderedWindow::new(),
            limits,
            metrics,
            health,
            safe,
            delivered: Safe::default(),
            last_cluster_time: None,
            last_wall_time_ms: None,
            event_count: 0,
            last_topic: None,
            context,
            lease: None,
            topics: None,
            topic_limits: None,
            last_position_time: Timestamp {
                time: 0,
                increment: 0,
            },
            partitions: std::collections::HashMap::new(),
            transactions: None,
        }
    }

    /// Delivers exactly once: records in Kafka transactions with their progress record, the
    /// state published only once its transaction committed (see [`transaction`]).
    pub fn with_transactions(mut self, transactions: transaction::Transactions) -> Self {
        self.transactions = Some(transactions);
        self
    }

    /// Sends records Kafka refuses as too large to `topic` as stubs (`on_oversize =
    /// "dead_letter"`) instead of failing the pipeline.
    pub fn with_dead_letter(mut self, topic: &str) -> Self {
        self.context = Arc::new(DeliveryContext {
            pipeline: Arc::clone(&self.pipeline),
            metrics: self.metrics.clone(),
            dead_letter: Some((self.sink.clone(), Arc::from(topic))),
            key_format: self.context.key_format,
            batch_check: self.context.batch_check.clone(),
        });
        self
    }

    /// Learns every topic's `max.message.bytes` before its first record, refusing a topic
    /// that accepts smaller batches than the producer builds ([`TopicLimits::admit`]).
    pub fn with_topic_limits(mut self, limits: TopicLimits) -> Self {
        self.context = Arc::new(DeliveryContext {
            pipeline: Arc::clone(&self.pipeline),
            metrics: self.metrics.clone(),
            dead_letter: self.context.dead_letter.clone(),
            key_format: self.context.key_format,
            batch_check: Some(limits.batch_check()),
        });
        self.topic_limits = Some(limits);
        self
    }

    /// Makes sure every topic exists before its first record, creating it when missing.
    pub fn with_topic_creator(mut self, creator: TopicCreator) -> Self {
        self.topics = Some(creator);
        self
    }

    /// Whether the relay may take the next item: the window has room and our lease is known to
    /// hold (self-fencing: after a pause longer than the lease, nothing new is published until
    /// the checkpointer has renewed it — or found us fenced).
    fn has_room(&self) -> bool {
        let room = self.window.is_empty()
            || (self.window.events() < self.limits.max_events
                && self.window.bytes() < self.limits.max_bytes);
        room && self
            .lease
            .as_ref()
            .is_none_or(|until| now_ms() < until.load(Ordering::Relaxed))
    }

    /// `at`, or the last position's time if that is later: a watermark's wall-clock time (whole
    /// seconds) must not step back behind an event's `clusterTime` in the same second.
    fn monotonic(&mut self, at: Timestamp) -> Timestamp {
        self.last_position_time = self.last_position_time.max(at);
        self.last_position_time
    }

    /// Gates intake on the lease validity the offsets store records (see `has_room`).
    pub fn with_lease(mut self, lease_valid_until: Arc<std::sync::atomic::AtomicI64>) -> Self {
        self.lease = Some(lease_valid_until);
        self
    }

    /// Runs until `cancel` fires or the source closes `rx` (then drains and returns `Ok`), or a
    /// delivery or encoding fails (returns that error; the safe position stays before it).
    pub async fn run(
        mut self,
        rx: mpsc::Receiver<SourceItem>,
        cancel: CancellationToken,
    ) -> Result<(), BridgeError> {
        let result = self.run_loop(rx, cancel).await;
        if result.is_err() {
            // Nothing of the open transaction becomes visible; it is read again after restart.
            self.abort_transaction().await;
        }
        result
    }

    async fn run_loop(
        &mut self,
        mut rx: mpsc::Receiver<SourceItem>,
        cancel: CancellationToken,
    ) -> Result<(), BridgeError> {
        let mut pending: Option<Pending> = None;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            let stalled = pending.is_some() && self.window.is_empty();
            tokio::select! {
                biased;
                Some(done) = self.window.next(), if !self.window.is_empty() => {
                    self.complete_ready(done)?;
                    if let Some(p) = pending.take() {
                        pending = self.enqueue(p)?;
                    }
                }
                () = retry_later(stalled) => {
                    if let Some(p) = pending.take() {
                        pending = self.enqueue(p)?;
                    }
                }
                () = cancel.cancelled() => break,
                item = rx.recv(), if pending.is_none() && self.has_room() => match item {
                    Some(item) => match self.accept(item).await {
                        Ok(next) => pending = next,
                        // The event cannot be published (it stops the pipeline): what was read
                        // before it is still delivered and committed first.
                        Err(error) => {
                            self.drain(None).await?;
                            return Err(error);
                        }
                    },
                    None => break,
                },
                _ = tick.tick() => {
                    self.health.beat();
                    self.publish_gauges();
                    if pending.is_none()
                        && let Err(error) = self.at_rest(false).await
                    {
                        self.abort_transaction().await;
                        return Err(error);
                    }
                }
            }
        }
        self.drain(pending).await
    }

    /// Takes one item from the source. An event's byte-budget permit is dropped on return, once
    /// its records are enqueued (librdkafka holds its own copy) or kept in `Pending`.
    async fn accept(&mut self, item: SourceItem) -> Result<Option<Pending>, BridgeError> {
        match item {
            SourceItem::Event { raw, permit } => {
                // Held until this arm ends: the records are then enqueued or kept in `Pending`.
                let _permit = permit;
                self.metrics
                    .source_bytes
                    .inc_by(raw.as_bytes().len() as u64);
                let encoded = self
                    .encoder
                    .encode(&raw)
                    .map_err(|source| BridgeError::Encode {
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
                let mut encoded = encoded;
                let records = std::mem::take(&mut encoded.records);
                self.before_records(encoded.txn.as_ref(), true, &records)
                    .await?;
                self.enqueue_new(records, Kind::Event(encoded)).await
            }
            SourceItem::Copy {
                target,
                raw,
                read_time,
                state,
                permit,
            } => {
                let _permit = permit;
                self.accept_copy(&target, &raw, read_time, state).await
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

    /// Enqueues the records of one event, copied document or markers (their topic made sure of
    /// first); returns them back as pending if the queue filled up.
    async fn enqueue_new(
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
    fn enqueue(&mut self, mut p: Pending) -> Result<Option<Pending>, BridgeError> {
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
    fn diverted(&self, diverted: &crate::encode::Diversion) {
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
    fn topic_metrics(&mut self, topic: &Arc<str>) -> Arc<TopicMetrics> {
        match &self.last_topic {
            Some((name, handles)) if name == topic => Arc::clone(handles),
            _ => {
                let handles = self.metrics.topic(topic);
                self.last_topic = Some((Arc::clone(topic), Arc::clone(&handles)));
                handles
            }
        }
    }

    fn push_event(&mut self, p: Pending) {
        let encoded = match p.kind {
            Kind::Event(encoded) => encoded,
            Kind::Snapshot(operation_type, state) => {
                return self.push_snapshot(p.topic, p.bytes, p.deliveries, operation_type, state);
            }
        };
        self.event_count += 1;
        if encoded.cluster_time.is_some() {
            self.last_cluster_time = encoded.cluster_time;
        }
        if encoded.wall_time_ms.is_some() {
            self.last_wall_time_ms = encoded.wall_time_ms;
        }
        let position = Position {
            token: encoded.token,
            cluster_time: self.last_cluster_time,
            position_time: self.monotonic(encoded.cluster_time.unwrap_or_else(timestamp_now)),
            wall_time_ms: self.last_wall_time_ms,
            event_count: self.event_count,
        };
        let deliveries = EventDeliveries {
            context: Arc::clone(&self.context),
            topic_metrics: self.topic_metrics(&p.topic),
            event_time: (encoded.wall_time_ms, encoded.cluster_time),
            enqueued_at: Instant::now(),
            deliveries: p.deliveries,
        };
        let operation_type = encoded.operation_type;
        self.window.push_event(p.bytes, async move {
            deliveries
                .wait(&operation_type)
                .await
                .map(|()| Mark::Stream(position))
        });
    }

    /// Takes `first` and up to [`MAX_COMPLETIONS_PER_WAKE`] further entries the window has ready
    /// without waiting, then publishes the last position once (one checkpointer wake-up and one
    /// gauge update per burst of deliveries, not per event). On an error, the positions before
    /// it are still published.
    fn complete_ready(
        &mut self,
        first: Result<crate::window::Completed<Mark>, BridgeError>,
    ) -> Result<(), BridgeError> {
        use futures::FutureExt as _;
        let mut next = Some(first);
        let mut taken = 0;
        let mut any = false;
        while let Some(result) = next {
            taken += 1;
            match result {
                Ok(done) => {
                    any = true;
                    self.fold(done);
                }
                Err(e) => {
                    if any {
                        self.publish();
                    }
                    return Err(e);
                }
            }
            if taken > MAX_COMPLETIONS_PER_WAKE {
                break;
            }
            next = self.window.next().now_or_never().flatten();
        }
        if any {
            self.publish();
        }
        Ok(())
    }

    /// Takes one delivered entry into the delivered prefix's state.
    fn fold(&mut self, done: crate::window::Completed<Mark>) {
        // The window yields in read order and we stop at the first error, so this entry ends
        // a contiguous prefix of delivered entries (proof in `window.rs`).
        match done.position {
            Mark::Stream(position) => self.delivered.stream = Some(position),
            Mark::Snapshot(state) => self.delivered.snapshot = Some(state),
            Mark::Nothing => {}
        }
        if done.is_event {
            self.health.kafka_failing.store(false, Ordering::Relaxed);
        }
    }

    /// Publishes the delivered prefix's state for the checkpointer; exactly-once, only a state
    /// no open transaction holds (the commit publishes the others, see [`transaction`]).
    fn publish(&mut self) {
        if self.sequence_untransacted() {
            self.safe.send_replace(self.delivered.clone());
        }
        self.publish_gauges();
    }

    fn complete(&mut self, done: crate::window::Completed<Mark>) {
        self.fold(done);
        self.publish();
    }

    fn publish_gauges(&self) {
        self.metrics
            .in_flight_events
            .set(self.window.events() as i64);
        self.metrics.in_flight_bytes.set(self.window.bytes() as i64);
        let oldest = self
            .window
            .oldest()
            .map_or(0, |at| now_ms() - at.elapsed().as_millis() as i64);
        self.health
            .oldest_in_flight_ms
            .store(oldest, Ordering::Relaxed);
    }

    /// Waits for in-flight deliveries up to the drain timeout, publishing each safe position,
    /// then flushes the producer explicitly (its `Drop` would purge the queue). Ends by the
    /// deadline whatever is still in flight, including an event waiting for room in the queue.
    async fn drain(&mut self, pending: Option<Pending>) -> Result<(), BridgeError> {
        let deadline = Instant::now() + self.limits.drain_timeout;
        let mut pending = pending;
        loop {
            if let Some(p) = pending.take() {
                pending = self.enqueue(p)?;
            }
            if self.window.is_empty() && pending.is_none() {
                break;
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            let next = async {
                match self.window.next().await {
                    Some(done) => Some(done),
                    // Nothing of ours in flight: wait for room in the queue, then try again.
                    None => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        None
                    }
                }
            };
            match tokio::time::timeout(remaining, next).await {
                Ok(Some(done)) => self.complete(done?),
                Ok(None) => {}
                Err(_) => {
                    tracing::warn!(
                        pipeline = %self.pipeline,
                        undelivered_events = self.window.events() + usize::from(pending.is_some()),
                        "drain timed out; the undelivered events will be read again after restart"
                    );
                    break;
                }
            }
        }
        if self.window.is_empty() && pending.is_none() {
            self.end_transaction().await?;
        } else {
            self.abort_transaction().await;
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        self.sink
            .flush(remaining.max(Duration::from_millis(100)))
            .await;
        self.publish_gauges();
        Ok(())
    }
}

mod snapshot;
pub mod transaction;

#[cfg(test)]
#[path = "relay_tests.rs"]
mod tests;
