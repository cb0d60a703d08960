//! Prometheus metrics: every name is a `const` here, every handle is resolved once per pipeline.
//!
//! Invariants: names carry the `mongo_kafka_bridge_` prefix and base units, counters end in
//! `_total`, and labels are bounded sets (pipeline names from the config, operation types, topic
//! names, librdkafka error-code names, error kinds) — never a document id, a token or an error
//! message. A value the bridge cannot know is an absent series, never a made-up number (e.g.
//! [`HISTORY_HEADROOM`] when the server does not report its oldest oplog entry).
//! Naming follows <https://prometheus.io/docs/practices/naming/>.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus::{
    Encoder, GaugeVec, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};

mod families;
mod group;
mod handles;
mod librdkafka;
pub mod read;
mod snapshot;
mod transactions;

pub use group::GroupMetrics;
pub use snapshot::SnapshotMetrics;
pub use transactions::{
    TRANSACTION_COMMIT_DURATION, TRANSACTION_DURATION, TRANSACTION_RECORDS, TRANSACTIONS,
    TransactionMetrics,
};

use families::{counter, float_gauge, gauge, histogram, seconds_buckets};
pub use handles::{PipelineMetrics, TopicMetrics};
pub use librdkafka::RdkafkaGauges;

/// Changes of this member's group assignment, by `kind` (`assigned`, `revoked`, `lost`, `error`).
pub const GROUP_REBALANCES: &str = "mongo_kafka_bridge_group_rebalances_total";
/// Seconds from a revocation to the revoked pipelines' stop.
pub const GROUP_REVOKE_DURATION: &str = "mongo_kafka_bridge_group_revoke_duration_seconds";
/// Pipelines the group assigned to this member and that it runs.
pub const GROUP_OWNED: &str = "mongo_kafka_bridge_group_owned_pipelines";
/// Configured pipelines whose slot has no partition of the control topic (no member can run
/// them).
pub const GROUP_UNASSIGNABLE: &str = "mongo_kafka_bridge_group_unassignable_pipelines";
/// Configuration reloads (SIGHUP), by `outcome`: `applied`, `unchanged`, `rejected`.
pub const CONFIG_RELOADS: &str = "mongo_kafka_bridge_config_reloads_total";
/// Change events read, by `pipeline`, `operation_type`.
pub const SOURCE_EVENTS: &str = "mongo_kafka_bridge_source_events_total";
/// Raw change event bytes read, by `pipeline`.
pub const SOURCE_BYTES: &str = "mongo_kafka_bridge_source_bytes_total";
/// Post-batch resume tokens taken as positions, by `pipeline`.
pub const SOURCE_WATERMARKS: &str = "mongo_kafka_bridge_source_watermarks_total";
/// Records handed to librdkafka, by `pipeline`, `topic`.
pub const MESSAGES_ENQUEUED: &str = "mongo_kafka_bridge_kafka_messages_enqueued_total";
/// Records acknowledged by the broker, by `pipeline`, `topic`, `operation_type`.
pub const MESSAGES_DELIVERED: &str = "mongo_kafka_bridge_kafka_messages_delivered_total";
/// Records Kafka did not acknowledge, by `pipeline`, `topic`, `error_code` (librdkafka code
/// name, or `cancelled` / `dead_lettered`).
pub const DELIVERY_ERRORS: &str = "mongo_kafka_bridge_kafka_delivery_errors_total";
/// Events JSON cannot carry exactly that `on_ambiguous` diverted, by `pipeline`, `outcome`
/// (`dead_lettered`: a stub went to the dead-letter topic; `bson`: published as BSON).
pub const AMBIGUOUS_EVENTS: &str = "mongo_kafka_bridge_ambiguous_events_total";
/// Times librdkafka's queue was full and the relay waited, by `pipeline`.
pub const QUEUE_FULL: &str = "mongo_kafka_bridge_kafka_queue_full_total";
/// Seconds from enqueue to delivery of an event's records, by `pipeline`, `topic`.
pub const DELIVERY_DURATION: &str = "mongo_kafka_bridge_kafka_delivery_duration_seconds";
/// Seconds from an event's `wallTime` (else its `clusterTime`) to its delivery, by `pipeline`.
pub const END_TO_END_LATENCY: &str = "mongo_kafka_bridge_end_to_end_latency_seconds";
/// Events enqueued and not yet delivered, by `pipeline`.
pub const IN_FLIGHT_EVENTS: &str = "mongo_kafka_bridge_in_flight_events";
/// Bytes of records enqueued and not yet delivered, by `pipeline`.
pub const IN_FLIGHT_BYTES: &str = "mongo_kafka_bridge_in_flight_bytes";
/// Offsets writes, by `pipeline`, `outcome` (`ok`, `error`, `lease` = nothing new, lease renewed).
pub const CHECKPOINT_COMMITS: &str = "mongo_kafka_bridge_checkpoint_commits_total";
/// Seconds an offsets write took, by `pipeline`.
pub const CHECKPOINT_DURATION: &str = "mongo_kafka_bridge_checkpoint_commit_duration_seconds";
/// `clusterTime` of the last committed event (Unix seconds), by `pipeline`.
pub const CHECKPOINT_TIMESTAMP: &str = "mongo_kafka_bridge_checkpoint_timestamp_seconds";
/// Now minus the cluster time of the committed position (`positionTime`), seconds, by
/// `pipeline`; computed at scrape time, so it grows while commits stall.
pub const CHECKPOINT_LAG: &str = "mongo_kafka_bridge_checkpoint_lag_seconds";
/// Now minus the `clusterTime` of the last event read (seconds), when it was read, by
/// `pipeline`; 0 once an empty batch shows the stream read up to now.
pub const SOURCE_LAG: &str = "mongo_kafka_bridge_source_lag_seconds";
/// The committed position's cluster time minus the oldest oplog entry's (seconds), by
/// `pipeline`: the oplog window minus the committed position's age. Absent when the server
/// does not report its oldest entry.
pub const HISTORY_HEADROOM: &str = "mongo_kafka_bridge_history_headroom_seconds";
/// Newest minus oldest oplog entry time (seconds), as last sampled. Absent when unknown.
pub const HISTORY_WINDOW: &str = "mongo_kafka_bridge_history_window_seconds";
/// Errors, by `pipeline`, `stage`, `class`.
pub const ERRORS: &str = "mongo_kafka_bridge_errors_total";
/// Pipeline restarts, by `pipeline`, `reason`.
pub const RESTARTS: &str = "mongo_kafka_bridge_pipeline_restarts_total";
/// 1 while the pipeline's change stream is open, by `pipeline`.
pub const STREAM_OPEN: &str = "mongo_kafka_bridge_stream_open";
/// 1 while this instance owns the pipeline (holds its epoch), 0 while it stands by or after
/// it stopped, by `pipeline`.
pub const PIPELINE_OWNED: &str = "mongo_kafka_bridge_pipeline_owned";
/// 1 when the pipeline was refused because its configured stream differs from the one its
/// position was committed for, by `pipeline`.
pub const PIPELINE_REFUSED: &str = "mongo_kafka_bridge_pipeline_refused";
/// librdkafka `msg_cnt`: records in the producer's queues, by `pipeline`.
pub const RDKAFKA_QUEUE_MESSAGES: &str = "mongo_kafka_bridge_rdkafka_queue_messages";
/// librdkafka `msg_size`: bytes of records in the producer's queues, by `pipeline`.
pub const RDKAFKA_QUEUE_BYTES: &str = "mongo_kafka_bridge_rdkafka_queue_bytes";
/// librdkafka `outbuf_msg_cnt` summed over brokers: records awaiting transmission.
pub const RDKAFKA_OUTBUF_MESSAGES: &str = "mongo_kafka_bridge_rdkafka_outbuf_messages";
/// librdkafka `waitresp_msg_cnt` summed over brokers: records sent, awaiting a response.
pub const RDKAFKA_WAITRESP_MESSAGES: &str = "mongo_kafka_bridge_rdkafka_waitresp_messages";
/// librdkafka `txretries` summed over brokers: produce request retries, by `pipeline`.
pub const RDKAFKA_RETRIES: &str = "mongo_kafka_bridge_rdkafka_retries_total";
/// Documents a snapshot copied, by `pipeline` and `namespace`.
pub const SNAPSHOT_DOCUMENTS: &str = "mongo_kafka_bridge_snapshot_documents_total";
/// Estimate of the documents a running copy has left, by `pipeline` and `namespace`.
pub const SNAPSHOT_REMAINING: &str = "mongo_kafka_bridge_snapshot_remaining_documents";
/// 1 while a namespace is being copied, by `pipeline` and `namespace`.
pub const SNAPSHOT_RUNNING: &str = "mongo_kafka_bridge_snapshot_running";
/// Constant 1 with `version` and `git_sha`.
pub const BUILD_INFO: &str = "mongo_kafka_bridge_build_info";

/// The git commit the binary was built from (`MKB_GIT_SHA` at build time, see `build.rs`), or
/// `unknown`.
pub const GIT_SHA: &str = match option_env!("MKB_GIT_SHA") {
    Some(sha) => sha,
    None => "unknown",
};

/// Every metric name this crate exports (alerts and dashboards may only use these).
pub const ALL: [&str; 37] = [
    SOURCE_EVENTS,
    SOURCE_BYTES,
    SOURCE_WATERMARKS,
    MESSAGES_ENQUEUED,
    MESSAGES_DELIVERED,
    DELIVERY_ERRORS,
    AMBIGUOUS_EVENTS,
    QUEUE_FULL,
    DELIVERY_DURATION,
    END_TO_END_LATENCY,
    IN_FLIGHT_EVENTS,
    IN_FLIGHT_BYTES,
    CHECKPOINT_COMMITS,
    CHECKPOINT_DURATION,
    CHECKPOINT_TIMESTAMP,
    CHECKPOINT_LAG,
    SOURCE_LAG,
    HISTORY_HEADROOM,
    HISTORY_WINDOW,
    ERRORS,
    RESTARTS,
    STREAM_OPEN,
    PIPELINE_OWNED,
    PIPELINE_REFUSED,
    RDKAFKA_QUEUE_MESSAGES,
    RDKAFKA_QUEUE_BYTES,
    RDKAFKA_OUTBUF_MESSAGES,
    RDKAFKA_WAITRESP_MESSAGES,
    RDKAFKA_RETRIES,
    SNAPSHOT_DOCUMENTS,
    SNAPSHOT_REMAINING,
    SNAPSHOT_RUNNING,
    BUILD_INFO,
    TRANSACTIONS,
    TRANSACTION_DURATION,
    TRANSACTION_COMMIT_DURATION,
    TRANSACTION_RECORDS,
];

/// All metric families, registered in one (non-global) registry. Cheap to clone (handles).
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    source_events: IntCounterVec,
    source_bytes: IntCounterVec,
    source_watermarks: IntCounterVec,
    enqueued: IntCounterVec,
    delivered: IntCounterVec,
    delivery_errors: IntCounterVec,
    ambiguous: IntCounterVec,
    queue_full: IntCounterVec,
    delivery_duration: HistogramVec,
    end_to_end: HistogramVec,
    in_flight_events: IntGaugeVec,
    in_flight_bytes: IntGaugeVec,
    commits: IntCounterVec,
    commit_duration: HistogramVec,
    checkpoint_timestamp: GaugeVec,
    checkpoint_lag: GaugeVec,
    source_lag: GaugeVec,
    history_headroom: GaugeVec,
    history_window: GaugeVec,
    errors: IntCounterVec,
    restarts: IntCounterVec,
    stream_open: IntGaugeVec,
    pipeline_owned: IntGaugeVec,
    pipeline_refused: IntGaugeVec,
    rdkafka: librdkafka::Families,
    snapshot: snapshot::Families,
    transactions: transactions::Families,
    /// The group membership's series.
    pub group: GroupMetrics,
    reloads: IntCounterVec,
    /// Committed position time (Unix seconds) per pipeline, for the scrape-time lag and headroom.
    committed: Arc<Mutex<HashMap<String, f64>>>,
    /// Oldest and newest oplog entry times (Unix seconds), when the server reports them.
    oplog: Arc<Mutex<Option<(f64, f64)>>>,
    /// Pipelines a reload removed: their series are no longer exported.
    retired: Arc<Mutex<std::collections::HashSet<String>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every family in a fresh registry.
    pub fn new() -> Self {
        let r = Registry::new();
        let p = &["pipeline"];
        let build = IntGaugeVec::new(
            Opts::new(BUILD_INFO, "Build information."),
            &["version", "git_sha"],
        )
        .expect("metric names are valid");
        r.register(Box::new(build.clone()))
            .expect("each metric is registered once");
        build
            .with_label_values(&[env!("CARGO_PKG_VERSION"), GIT_SHA])
            .set(1);
        let pt = &["pipeline", "topic"];
        let history_window =
            GaugeVec::new(Opts::new(HISTORY_WINDOW, "Oplog window, seconds."), &[])
                .expect("metric names are valid");
        r.register(Box::new(history_window.clone()))
            .expect("each metric is registered once");
        Self {
            source_events: counter(
                &r,
                SOURCE_EVENTS,
                "Change events read.",
                &["pipeline", "operation_type"],
            ),
            source_bytes: counter(&r, SOURCE_BYTES, "Change event bytes read.", p),
            source_watermarks: counter(&r, SOURCE_WATERMARKS, "Post-batch resume tokens taken.", p),
            enqueued: counter(&r, MESSAGES_ENQUEUED, "Records handed to librdkafka.", pt),
            delivered: counter(
                &r,
                MESSAGES_DELIVERED,
                "Records acknowledged by Kafka.",
                &["pipeline", "topic", "operation_type"],
            ),
            delivery_errors: counter(
                &r,
                DELIVERY_ERRORS,
                "Records Kafka did not acknowledge.",
                &["pipeline", "topic", "error_code"],
            ),
            ambiguous: counter(
                &r,
                AMBIGUOUS_EVENTS,
                "Events JSON cannot carry exactly, diverted by on_ambiguous.",
                &["pipeline", "outcome"],
            ),
            queue_full: counter(&r, QUEUE_FULL, "Waits on a full librdkafka queue.", p),
            delivery_duration: histogram(
                &r,
                DELIVERY_DURATION,
                "Enqueue to delivery, seconds.",
                pt,
                seconds_buckets(17),
            ),
            end_to_end: histogram(
                &r,
                END_TO_END_LATENCY,
                "Event wallTime (else clusterTime) to delivery, seconds.",
                p,
                seconds_buckets(20),
            ),
            in_flight_events: gauge(&r, IN_FLIGHT_EVENTS, "Events enqueued, not yet delivered."),
            in_flight_bytes: gauge(
                &r,
                IN_FLIGHT_BYTES,
                "Record bytes enqueued, not yet delivered.",
            ),
            commits: counter(
                &r,
                CHECKPOINT_COMMITS,
                "Offsets writes.",
                &["pipeline", "outcome"],
            ),
            commit_duration: histogram(
                &r,
                CHECKPOINT_DURATION,
                "Offsets write duration, seconds.",
                p,
                seconds_buckets(17),
            ),
            checkpoint_timestamp: float_gauge(
                &r,
                CHECKPOINT_TIMESTAMP,
                "clusterTime of the last committed event.",
            ),
            checkpoint_lag: float_gauge(
                &r,
                CHECKPOINT_LAG,
                "Now minus the committed position's cluster time.",
            ),
            source_lag: float_gauge(
                &r,
                SOURCE_LAG,
                "Now minus clusterTime of the last event read; 0 once the stream is caught up.",
            ),
            history_headroom: float_gauge(
                &r,
                HISTORY_HEADROOM,
                "Committed position's cluster time minus the oldest oplog entry's, seconds.",
            ),
            history_window,
            errors: counter(
                &r,
                ERRORS,
                "Errors by stage and class.",
                &["pipeline", "stage", "class"],
            ),
            restarts: counter(&r, RESTARTS, "Pipeline restarts.", &["pipeline", "reason"]),
            stream_open: gauge(&r, STREAM_OPEN, "1 while the change stream is open."),
            pipeline_owned: gauge(
                &r,
                PIPELINE_OWNED,
                "1 while this instance owns the pipeline, 0 while it stands by.",
            ),
            pipeline_refused: gauge(
                &r,
                PIPELINE_REFUSED,
                "1 when the configured stream differs from the committed position's.",
            ),
            rdkafka: librdkafka::Families::register(&r),
            snapshot: snapshot::Families::register(&r),
            transactions: transactions::Families::register(&r),
            group: GroupMetrics::register(&r),
            reloads: counter(
                &r,
                CONFIG_RELOADS,
                "Configuration reloads (SIGHUP), by outcome.",
                &["outcome"],
            ),
            committed: Arc::default(),
            oplog: Arc::default(),
            retired: Arc::default(),
            registry: r,
        }
    }

    /// The handles of one pipeline.
    pub fn pipeline(&self, name: &str) -> PipelineMetrics {
        PipelineMetrics {
            name: name.to_owned(),
            family: self.clone(),
            source_bytes: self.source_bytes.with_label_values(&[name]),
            source_watermarks: self.source_watermarks.with_label_values(&[name]),
            topics: Arc::default(),
            queue_full: self.queue_full.with_label_values(&[name]),
            end_to_end: self.end_to_end.with_label_values(&[name]),
            in_flight_events: self.in_flight_events.with_label_values(&[name]),
            in_flight_bytes: self.in_flight_bytes.with_label_values(&[name]),
            commit_duration: self.commit_duration.with_label_values(&[name]),
            checkpoint_timestamp: self.checkpoint_timestamp.with_label_values(&[name]),
            source_lag: self.source_lag.with_label_values(&[name]),
            stream_open: self.stream_open.with_label_values(&[name]),
            owned: self.pipeline_owned.with_label_values(&[name]),
            refused: self.pipeline_refused.with_label_values(&[name]),
            events_read: handles::OpCounters::default(),
        }
    }

    /// The Kafka transaction handles of pipeline `name` (exactly-once pipelines only, so
    /// at-least-once ones export no transaction series).
    pub fn transactions(&self, name: &str) -> TransactionMetrics {
        self.transactions.pipeline(name)
    }

    /// Committed position times (Unix seconds) by pipeline, as last reported by the checkpointer.
    fn committed_positions(&self) -> Vec<(String, f64)> {
        let map = self.committed.lock().unwrap_or_else(|e| e.into_inner());
        map.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Stores the oldest and newest oplog entry times (Unix seconds) the server reported, or
    /// `None` when it could not tell: then the history series are absent.
    pub fn set_history(&self, oplog: Option<(f64, f64)>) {
        *self.oplog.lock().unwrap_or_else(|e| e.into_inner()) = oplog;
    }

    /// Sets the scrape-time gauges: checkpoint lag and history headroom from the committed
    /// positions, the oplog window.
    fn refresh(&self) {
        let now = chrono::Utc::now().timestamp_millis() as f64 / 1000.0;
        let positions = self.committed_positions();
        for (pipeline, at) in &positions {
            self.checkpoint_lag
                .with_label_values(&[pipeline])
                .set((now - at).max(0.0));
        }
        let oplog = *self.oplog.lock().unwrap_or_else(|e| e.into_inner());
        match oplog {
            Some((oldest, newest)) => {
                self.history_window
                    .with_label_values(&[] as &[&str])
                    .set((newest - oldest).max(0.0));
                for (pipeline, at) in &positions {
                    self.history_headroom
                        .with_label_values(&[pipeline])
                        .set(at - oldest);
                }
            }
            None => {
                self.history_window.reset();
                self.history_headroom.reset();
            }
        }
    }

    /// The text exposition format of every family; refreshes the scrape-time gauges first.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.gather(), &mut out)
            .unwrap_or_default();
        String::from_utf8(out).unwrap_or_default()
    }

    /// Every family's current samples (for the terminal status), without the series of
    /// retired pipelines.
    pub fn gather(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.refresh();
        let mut families = self.registry.gather();
        let retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        if retired.is_empty() {
            return families;
        }
        let live = |m: &prometheus::proto::Metric| {
            !m.get_label()
                .iter()
                .any(|l| l.name() == "pipeline" && retired.contains(l.value()))
        };
        for family in &mut families {
            let kept: Vec<_> = family.take_metric().into_iter().filter(live).collect();
            family.set_metric(kept);
        }
        families.retain(|f| !f.get_metric().is_empty());
        families
    }

    /// Counts one configuration reload with `outcome` (`applied`, `unchanged`, `rejected`).
    pub fn reload(&self, outcome: &'static str) {
        self.reloads.with_label_values(&[outcome]).inc();
    }

    /// Stops (`true`) or resumes (`false`) exporting the series of pipeline `name` (a reload
    /// removed or added it).
    pub fn retire(&self, name: &str, retired: bool) {
        let mut set = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        if retired {
            set.insert(name.to_owned());
        } else {
            set.remove(name);
        }
    }
}

#[cfg(test)]
mod tests;
