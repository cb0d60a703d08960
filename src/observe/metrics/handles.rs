//! Per-pipeline (and per-pipeline-and-topic) handles, resolved once and cloned into the tasks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use bson::Timestamp;
use prometheus::{Gauge, Histogram, IntCounter, IntGauge};

use super::librdkafka::RdkafkaGauges;
use super::registry::Metrics;

/// Handles of one pipeline's series. Cheap to clone.
#[derive(Clone)]
pub struct PipelineMetrics {
    pub(super) name: String,
    pub(super) family: Metrics,
    pub(super) topics: Arc<Mutex<HashMap<Arc<str>, Arc<TopicMetrics>>>>,
    /// Raw event bytes read.
    pub source_bytes: IntCounter,
    /// Watermarks taken.
    pub source_watermarks: IntCounter,
    /// Events encoded on the encode pool.
    pub pool_encoded: IntCounter,
    /// Full-queue waits.
    pub queue_full: IntCounter,
    /// Event time → delivery, seconds.
    pub end_to_end: Histogram,
    /// Events in flight.
    pub in_flight_events: IntGauge,
    /// Bytes in flight.
    pub in_flight_bytes: IntGauge,
    /// Offsets write seconds.
    pub commit_duration: Histogram,
    /// Committed clusterTime, Unix seconds.
    pub checkpoint_timestamp: Gauge,
    /// Source lag, seconds.
    pub source_lag: Gauge,
    /// Stream open flag.
    pub stream_open: IntGauge,
    /// 1 while this instance owns the pipeline.
    pub owned: IntGauge,
    /// 1 when the pipeline was refused (its stream or its MongoDB cluster changed).
    pub refused: IntGauge,
    /// 1 when the MongoDB cluster could not be named at the last take (nothing was checked).
    pub cluster_unchecked: IntGauge,
    /// 1 while the pipeline stopped on a failure (the others run on).
    pub failed: IntGauge,
    /// Episodes of a topic it writes found missing.
    pub topic_missing: IntCounter,
    /// `source_events` of the document operations, resolved on first use.
    pub(super) events_read: OpCounters,
}

/// The counters of one labelled family for the four document operation types, each resolved on
/// first use (so no series appears before its first event) and then shared: the per-event path
/// skips the family's label hashing and lock.
#[derive(Clone, Default)]
pub(super) struct OpCounters(Arc<[OnceLock<IntCounter>; 4]>);

impl OpCounters {
    /// The counter of `operation_type`, from `resolve` on first use; `None` for operation types
    /// other than insert, update, replace and delete (the caller resolves those each time).
    fn get(
        &self,
        operation_type: &str,
        resolve: impl FnOnce() -> IntCounter,
    ) -> Option<&IntCounter> {
        let slot = match operation_type {
            "insert" => 0,
            "update" => 1,
            "replace" => 2,
            "delete" => 3,
            _ => return None,
        };
        Some(self.0[slot].get_or_init(resolve))
    }
}

/// Handles of one pipeline's series for one topic, resolved once per topic. Cheap to clone.
#[derive(Clone)]
pub struct TopicMetrics {
    pipeline: String,
    topic: Arc<str>,
    family: Metrics,
    /// Records enqueued to this topic.
    pub enqueued: IntCounter,
    /// Enqueue → delivery seconds of events whose records go to this topic.
    pub delivery_duration: Histogram,
    delivered: OpCounters,
}

impl TopicMetrics {
    /// The topic these handles count for.
    pub fn topic(&self) -> &Arc<str> {
        &self.topic
    }
    /// Counts `records` delivered records of an event of `operation_type`.
    pub fn delivered(&self, operation_type: &str, records: u64) {
        let resolve = || {
            self.family.delivery.delivered.with_label_values(&[
                self.pipeline.as_str(),
                &self.topic,
                operation_type,
            ])
        };
        match self.delivered.get(operation_type, resolve) {
            Some(counter) => counter.inc_by(records),
            None => resolve().inc_by(records),
        }
    }
    /// Counts a delivery error with a bounded `error_code` (librdkafka code name).
    pub(crate) fn delivery_error(&self, error_code: &str) {
        self.family
            .delivery
            .delivery_errors
            .with_label_values(&[self.pipeline.as_str(), &self.topic, error_code])
            .inc();
    }
}

impl Metrics {
    /// The handles of one pipeline. Its error and restart counters exist at zero for every
    /// error kind and class from the start, so alerts on their increase see the first one.
    pub fn pipeline(&self, name: &str) -> PipelineMetrics {
        let life = &self.lifecycle;
        for kind in crate::error::KINDS {
            life.restarts.with_label_values(&[name, kind]);
            life.client_rebuilds.with_label_values(&[name, kind]);
            for class in ["transient", "persistent", "fatal"] {
                life.errors.with_label_values(&[name, kind, class]);
            }
        }
        PipelineMetrics {
            name: name.to_owned(),
            family: self.clone(),
            source_bytes: self.source.source_bytes.with_label_values(&[name]),
            source_watermarks: self.source.source_watermarks.with_label_values(&[name]),
            pool_encoded: self.source.pool_encoded.with_label_values(&[name]),
            topics: Arc::default(),
            queue_full: self.delivery.queue_full.with_label_values(&[name]),
            end_to_end: self.delivery.end_to_end.with_label_values(&[name]),
            in_flight_events: self.delivery.in_flight_events.with_label_values(&[name]),
            in_flight_bytes: self.delivery.in_flight_bytes.with_label_values(&[name]),
            commit_duration: self.checkpoint.commit_duration.with_label_values(&[name]),
            checkpoint_timestamp: self
                .checkpoint
                .checkpoint_timestamp
                .with_label_values(&[name]),
            source_lag: self.source.source_lag.with_label_values(&[name]),
            stream_open: self.source.stream_open.with_label_values(&[name]),
            owned: self.lifecycle.pipeline_owned.with_label_values(&[name]),
            refused: self.lifecycle.pipeline_refused.with_label_values(&[name]),
            cluster_unchecked: self
                .lifecycle
                .pipeline_cluster_unchecked
                .with_label_values(&[name]),
            failed: self.lifecycle.pipeline_failed.with_label_values(&[name]),
            topic_missing: self.lifecycle.topic_missing.with_label_values(&[name]),
            events_read: OpCounters::default(),
        }
    }
}

impl PipelineMetrics {
    /// The pipeline's handles for `topic` (resolved on first use, then cached).
    pub fn topic(&self, topic: &Arc<str>) -> Arc<TopicMetrics> {
        let mut map = self.topics.lock().unwrap_or_else(|e| e.into_inner());
        let handles = map.entry(Arc::clone(topic)).or_insert_with(|| {
            Arc::new(TopicMetrics {
                pipeline: self.name.clone(),
                topic: Arc::clone(topic),
                family: self.family.clone(),
                enqueued: self
                    .family
                    .delivery
                    .enqueued
                    .with_label_values(&[self.name.as_str(), topic]),
                delivery_duration: self
                    .family
                    .delivery
                    .delivery_duration
                    .with_label_values(&[self.name.as_str(), topic]),
                delivered: OpCounters::default(),
            })
        });
        Arc::clone(handles)
    }
    /// Counts one event read of `operation_type`.
    pub(crate) fn event_read(&self, operation_type: &str) {
        let resolve = || {
            self.family
                .source
                .source_events
                .with_label_values(&[&self.name, operation_type])
        };
        match self.events_read.get(operation_type, resolve) {
            Some(counter) => counter.inc(),
            None => resolve().inc(),
        }
    }
    /// Observes the end-to-end latency of an event just delivered: now minus its `wallTime`
    /// (ms since the Unix epoch), else minus its `clusterTime` (second resolution).
    pub(crate) fn end_to_end(&self, wall_time_ms: Option<i64>, cluster_time: Option<Timestamp>) {
        let now_ms = crate::observe::health::now_ms();
        let at_ms = wall_time_ms.or(cluster_time.map(|t| i64::from(t.time) * 1000));
        if let Some(at_ms) = at_ms {
            self.end_to_end
                .observe((now_ms - at_ms).max(0) as f64 / 1000.0);
        }
    }
    /// Records a committed position: `cluster_time` of its last event (if any) and its
    /// best-known cluster time `position_time`. Feeds the lag and headroom gauges.
    pub fn committed(&self, cluster_time: Option<Timestamp>, position_time: Timestamp) {
        if let Some(ts) = cluster_time {
            self.checkpoint_timestamp.set(f64::from(ts.time));
        }
        let mut map = self
            .family
            .committed
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.insert(self.name.clone(), f64::from(position_time.time));
    }
    /// Counts an event `on_ambiguous` diverted with `outcome` (`dead_lettered` | `bson`).
    pub fn ambiguous(&self, outcome: &str) {
        self.family
            .delivery
            .ambiguous
            .with_label_values(&[&self.name, outcome])
            .inc();
    }
    /// Counts an offsets write with `outcome` `ok` | `error` | `lease`.
    pub fn commit(&self, outcome: &str) {
        self.family
            .checkpoint
            .commits
            .with_label_values(&[&self.name, outcome])
            .inc();
    }
    /// Positions this pipeline has committed since the process started: offsets writes that
    /// moved the position (`ok`, not lease renewals) and committed Kafka transactions.
    pub fn positions_committed(&self) -> u64 {
        let writes = self
            .family
            .checkpoint
            .commits
            .with_label_values(&[&self.name, "ok"])
            .get();
        writes + self.transactions().committed.get()
    }
    /// Counts an error at `stage` of `class` (`transient` | `fatal`).
    pub fn error(&self, stage: &str, class: &str) {
        self.family
            .lifecycle
            .errors
            .with_label_values(&[&self.name, stage, class])
            .inc();
    }
    /// Counts a restart for `reason` (an error kind).
    pub fn restart(&self, reason: &str) {
        self.family
            .lifecycle
            .restarts
            .with_label_values(&[&self.name, reason])
            .inc();
    }
    /// Counts an escalation for `reason` (an error kind).
    pub fn client_rebuild(&self, reason: &str) {
        self.family
            .lifecycle
            .client_rebuilds
            .with_label_values(&[&self.name, reason])
            .inc();
    }
    /// This pipeline's Kafka transaction series (exactly-once).
    pub fn transactions(&self) -> super::exactly_once::TransactionMetrics {
        self.family.transactions(&self.name)
    }

    /// This pipeline's heartbeat series (pipelines with heartbeats only).
    pub fn heartbeats(&self) -> super::heartbeat::HeartbeatMetrics {
        self.family.heartbeats.pipeline(&self.name)
    }
    /// This pipeline's routing fallback counters, `topic` and `key` (routed pipelines only).
    pub fn routing_fallbacks(&self) -> (IntCounter, IntCounter) {
        self.family.routing.pipeline(&self.name)
    }

    /// The librdkafka statistics series of this pipeline's producer.
    pub(crate) fn rdkafka_gauges(&self) -> RdkafkaGauges {
        self.family.rdkafka.for_pipeline(&self.name)
    }

    /// The snapshot series of `namespace` (`db.coll`).
    pub fn snapshot(&self, namespace: &str) -> super::snapshot::SnapshotMetrics {
        self.family.snapshot.for_namespace(&self.name, namespace)
    }
}
