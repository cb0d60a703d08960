//! Stage 3, the relay task: encodes each change event, enqueues its records, tracks deliveries
//! in the ordered window and publishes the safe position for the checkpointer. This file holds
//! the task and its loop; beside it: [`intake`] (the source's items in order, large events
//! encoded ahead on the encode pool), `enqueue.rs` (an item → records enqueued, one window
//! entry), `publish.rs` (delivered entries → the published state; the drain), [`window`] (the
//! ordered window and its proof), `snapshot.rs` (copied documents and markers) and
//! [`exactly_once`] (the Kafka transactions, and exactly-once's design).
//!
//! ```text
//!  source task ──mpsc<SourceItem>──▶ intake ─(encode pool: large events, FIFO)─┐
//!                                     ┌────────────────────────────────────────┘
//!                                     ▼
//!                                   relay ──enqueue──▶ librdkafka ──delivery futures──┐
//!                                     │  ▲                                            │
//!                                     │  └──────────── OrderedWindow ◀────────────────┘
//!                                     └──watch<Option<Position>>──▶ checkpointer
//! ```
//!
//! WARNING: this code decides what gets committed. The ordering proof is in [`window`];
//! the relay upholds its premises:
//! - every event and every watermark enters the window in the order the source read them
//!   (the intake hands items over in that order, wherever they were encoded: [`intake`]);
//! - an event's entry resolves `Ok` only when *all* its records (delete + tombstone) are
//!   delivered; any delivery error or cancellation resolves it `Err`;
//! - the first `Err` out of the window ends the relay; nothing after it is published.
//!
//! Loop priority (`select! { biased; … }`): 1. acks from the window (frees memory first),
//! 2. the retry of a pending event whose enqueue hit a full queue while nothing of ours is in
//! flight, 3. shutdown, 4. intake, only while the window has room (the in-flight event and byte
//! bounds) and the lease is known to hold — this bounds memory whatever the backlog, 5. the
//! 500 ms tick (liveness, gauges, and the pipeline's heartbeat records: [`heartbeat`]). A full librdkafka queue is backpressure, never an error or a
//! drop.
//!
//! Every drain (shutdown, or the source's end) ends by `shutdown_timeout_ms`, whatever is still
//! in flight or waiting for room in librdkafka's queue.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bson::Timestamp;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::encode::RecordEncoder;
use crate::error::BridgeError;
use crate::event::{Position, Safe, SourceItem};
use crate::kafka::admin::TopicCreator;
use crate::kafka::delivery::DeliveryContext;
use crate::kafka::limits::TopicLimits;
use crate::kafka::sink::KafkaSink;
use crate::observe::health::{PipelineHealth, now_ms};
use crate::observe::metrics::{PipelineMetrics, TopicMetrics};
use crate::snapshot::SharedState;
use enqueue::Pending;
use intake::Intake;
use window::OrderedWindow;

mod enqueue;
pub(crate) mod exactly_once;
pub(crate) mod heartbeat;
mod intake;
mod publish;
mod snapshot;
mod stall;
pub(crate) mod window;

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
pub(crate) struct Limits {
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
pub(crate) struct Relay {
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
    /// With `delivery = "exactly_once"`: the Kafka transactions ([`exactly_once`]).
    transactions: Option<exactly_once::Transactions>,
    /// The encode pool's encoders, and the smallest event it encodes ([`intake`]).
    pool: (Vec<RecordEncoder>, usize),
    /// With `heartbeat_interval_ms`: the heartbeats ([`heartbeat`]).
    heartbeats: Option<heartbeat::Heartbeats>,
}

impl Relay {
    /// A relay publishing safe positions on `safe`.
    pub(crate) fn new(
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
            pool: (Vec::new(), usize::MAX),
            heartbeats: None,
        }
    }

    /// Delivers exactly once: records in Kafka transactions with their progress record, the
    /// state published only once its transaction committed (see [`exactly_once`]).
    pub(crate) fn with_transactions(mut self, transactions: exactly_once::Transactions) -> Self {
        self.transactions = Some(transactions);
        self
    }

    /// Sends records Kafka refuses as too large to `topic` as stubs (`on_oversize =
    /// "dead_letter"`) instead of failing the pipeline.
    pub(crate) fn with_dead_letter(mut self, topic: &str) -> Self {
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
    pub(crate) fn with_topic_limits(mut self, limits: TopicLimits) -> Self {
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

    /// Encodes change events of at least `min_bytes` on up to `threads` blocking threads at
    /// once, ahead of the relay and in order ([`intake`]); 0 threads: every event in the
    /// relay's task.
    pub(crate) fn with_encode_pool(mut self, threads: usize, min_bytes: usize) -> Self {
        self.pool = (vec![self.encoder.clone(); threads], min_bytes);
        self
    }

    /// Makes sure every topic exists before its first record, creating it when missing.
    pub(crate) fn with_topic_creator(mut self, creator: TopicCreator) -> Self {
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
    pub(crate) fn with_lease(
        mut self,
        lease_valid_until: Arc<std::sync::atomic::AtomicI64>,
    ) -> Self {
        self.lease = Some(lease_valid_until);
        self
    }

    /// Runs until `cancel` fires or the source closes `rx` (then drains and returns `Ok`), or a
    /// delivery or encoding fails (returns that error; the safe position stays before it).
    pub(crate) async fn run(
        mut self,
        rx: mpsc::Receiver<SourceItem>,
        cancel: CancellationToken,
    ) -> Result<(), BridgeError> {
        let result = self.run_loop(rx, cancel).await;
        if let Err(error) = &result {
            if error.is_producer_failure() && self.transactions.is_none() {
                // At least once: the restart publishes the failed record again; nothing
                // enqueued after it may reach its partition before that (no gap in a
                // document's order).
                self.sink.purge();
            }
            // Nothing of the open transaction becomes visible; it is read again after restart.
            self.abort_transaction().await;
        }
        result
    }

    async fn run_loop(
        &mut self,
        rx: mpsc::Receiver<SourceItem>,
        cancel: CancellationToken,
    ) -> Result<(), BridgeError> {
        let (encoders, min_bytes) = std::mem::take(&mut self.pool);
        let mut intake = Intake::new(rx, encoders, min_bytes);
        let mut pending: Option<Pending> = None;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        // One cancellation future for the whole loop (not one registration per wake-up).
        let cancelled = cancel.cancelled();
        tokio::pin!(cancelled);
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
                () = &mut cancelled => break,
                taken = intake.next(), if pending.is_none() && self.has_room() => match taken {
                    Some(taken) => match self.take(taken).await {
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
                    if let Some(error) = self.stalled() {
                        return Err(error);
                    }
                    if let Some(reason) = self.sink.authentication_failure() {
                        self.abort_transaction().await;
                        return Err(BridgeError::KafkaAuthentication {
                            pipeline: self.pipeline.to_string(),
                            reason,
                        });
                    }
                    if pending.is_none() {
                        let rested = match self.at_rest(false).await {
                            Ok(()) => self.heartbeat().await,
                            Err(error) => Err(error),
                        };
                        match rested {
                            Ok(next) => pending = next,
                            Err(error) => {
                                self.abort_transaction().await;
                                return Err(error);
                            }
                        }
                    }
                }
            }
        }
        self.drain(pending).await
    }
}

#[cfg(test)]
mod tests;
