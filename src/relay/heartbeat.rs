//! The relay's heartbeats (`heartbeat_interval_ms`, README "Heartbeats"; `config/heartbeat.rs`
//! lists the feature's pieces): every interval, at the relay's 500 ms tick, a record that says
//! which position the pipeline has delivered, on a quiet stream as on a busy one, and that
//! commits the post-batch token with it.
//!
//! WARNING: this code adds records to what gets committed. What it upholds:
//! - **At least once**, the heartbeat's record enters the ordered window after everything read
//!   before it, like an event with no position of its own ([`Mark::Nothing`]): its delivery
//!   publishes the delivered prefix's state (the latest post-batch token included) for the
//!   checkpointer, and a failed delivery fails the run like any record's. It carries the
//!   delivered prefix's position when it was made: everything up to it is in Kafka.
//! - **Exactly once**, a heartbeat is never written outside a Kafka transaction: a due one is
//!   written by the next commit, after the window drained and just before the progress record
//!   (`exactly_once.rs`), so it carries exactly the position that transaction commits. With no
//!   transaction open, one of the progress record and the heartbeat alone commits it at once
//!   (`exactly_once/positions.rs`), the latest post-batch token with it. A heartbeat counts
//!   once its transaction committed; an aborted one is written again by the next commit.
//! - On a restart the first heartbeats name the committed position the run started from until
//!   the stream moves.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bson::Timestamp;

use super::enqueue::{Kind, Pending};
use super::{Mark, Relay};
use crate::encode::heartbeat::{self, Beat};
use crate::error::BridgeError;
use crate::kafka::delivery::Delivery;
use crate::observe::health::now_ms;
use crate::observe::metrics::HeartbeatMetrics;

/// A relay's heartbeat state.
pub(crate) struct Heartbeats {
    topic: Arc<str>,
    interval: Duration,
    /// When the last heartbeat was made.
    last: Instant,
    /// Exactly once: a heartbeat is due, for the next commit to write.
    due: bool,
    /// The committed position's times the run started from.
    started: (Option<Timestamp>, Option<Timestamp>),
    metrics: HeartbeatMetrics,
}

impl Heartbeats {
    /// Heartbeats to `topic` every `interval`, from a run whose committed position has these
    /// `clusterTime` and `positionTime`. The first comes one interval after the start.
    pub(crate) fn new(
        topic: &str,
        interval: Duration,
        started: (Option<Timestamp>, Option<Timestamp>),
        metrics: HeartbeatMetrics,
    ) -> Self {
        metrics.interval.set(interval.as_secs_f64());
        if metrics.last.get() == 0.0 {
            // Until the first heartbeat, its due time counts from the first run's start: an
            // alert on a late heartbeat then also sees one that never came.
            metrics.last.set(now_ms() as f64 / 1000.0);
        }
        Self {
            topic: Arc::from(topic),
            interval,
            last: Instant::now(),
            due: false,
            started,
            metrics,
        }
    }
}

impl Relay {
    /// Writes heartbeats ([`Heartbeats`]).
    pub(crate) fn with_heartbeats(mut self, heartbeats: Heartbeats) -> Self {
        self.heartbeats = Some(heartbeats);
        self
    }

    /// At the tick, with no event pending: a heartbeat when one is due. At least once its
    /// record is enqueued (returned pending when librdkafka's queue is full); exactly once it
    /// is left to the open transaction's commit, or committed now in a transaction of its own.
    ///
    /// Errors: the heartbeat topic's creation or limits, a failed enqueue, begin or commit.
    pub(super) async fn heartbeat(&mut self) -> Result<Option<Pending>, BridgeError> {
        let Some(h) = &mut self.heartbeats else {
            return Ok(None);
        };
        let lease = self.lease.as_ref();
        // A paused owner whose lease lapsed publishes nothing new, heartbeats included.
        let held = lease.is_none_or(|until| now_ms() < until.load(Ordering::Relaxed));
        if h.last.elapsed() < h.interval || !held {
            return Ok(None);
        }
        h.last = Instant::now();
        if self.transactions.is_some() {
            h.due = true;
            self.commit_unsent(false).await?;
            return Ok(None);
        }
        let beat = self.beat();
        let Some(h) = &self.heartbeats else {
            return Ok(None);
        };
        let record = heartbeat::record(&h.topic, &self.pipeline, &beat);
        self.enqueue_new(vec![record], Kind::Heartbeat(beat)).await
    }

    /// Whether a heartbeat waits for a transaction (exactly once).
    pub(super) fn heartbeat_due(&self) -> bool {
        self.heartbeats.as_ref().is_some_and(|h| h.due)
    }

    /// Exactly once, inside the open transaction after its window drained: the due heartbeat,
    /// enqueued and delivered; its beat, for [`Relay::heartbeat_committed`].
    ///
    /// Errors: the topic's creation or limits, the enqueue or its delivery.
    pub(super) async fn heartbeat_in_transaction(&mut self) -> Result<Option<Beat>, BridgeError> {
        let open = self.transactions.as_ref().is_some_and(|t| t.is_open());
        if !open || !self.heartbeat_due() {
            return Ok(None);
        }
        let beat = self.beat();
        let topic = match &self.heartbeats {
            Some(h) => Arc::clone(&h.topic),
            None => return Ok(None),
        };
        if let Some(creator) = &mut self.topics {
            creator.ensure(&topic).await?;
        }
        if let Some(limits) = &mut self.topic_limits {
            limits.admit(&topic).await?;
        }
        let record = heartbeat::record(&topic, &self.pipeline, &beat);
        let delivery = self
            .sink
            .enqueue_waiting(&record, None)
            .await
            .map_err(|e| self.transaction_error("heartbeat", e))?;
        match delivery.await {
            Ok(Ok(_)) => Ok(Some(beat)),
            Ok(Err((e, _))) => Err(self.transaction_error("heartbeat", e)),
            Err(_) => {
                Err(self.transaction_error("heartbeat", rdkafka::error::KafkaError::Canceled))
            }
        }
    }

    /// The transaction that carried `beat` committed.
    pub(super) fn heartbeat_committed(&mut self, beat: Option<Beat>) {
        if let (Some(h), Some(beat)) = (&mut self.heartbeats, beat) {
            h.due = false;
            h.metrics.delivered(beat.wall_time_ms);
        }
    }

    /// At least once: the heartbeat's window entry, resolving once its record is delivered
    /// (and everything before it: the window's order), counted then.
    pub(super) fn push_heartbeat(
        &mut self,
        topic: Arc<str>,
        bytes: usize,
        deliveries: Vec<Delivery>,
        beat: Beat,
    ) {
        let metrics = self.heartbeats.as_ref().map(|h| h.metrics.clone());
        self.push_untimed(topic, bytes, deliveries, "heartbeat", move || {
            if let Some(m) = &metrics {
                m.delivered(beat.wall_time_ms);
            }
            Mark::Nothing
        });
    }

    /// What a heartbeat made now says: the delivered prefix's position, else the one the run
    /// started from.
    fn beat(&self) -> Beat {
        let started = self.heartbeats.as_ref().map_or((None, None), |h| h.started);
        let stream = self.delivered.stream.as_ref();
        Beat {
            cluster_time: stream.and_then(|p| p.cluster_time).or(started.0),
            position_time: stream.map(|p| p.position_time).or(started.1),
            wall_time_ms: now_ms(),
        }
    }
}
