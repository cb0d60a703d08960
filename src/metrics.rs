//! Prometheus metrics: every name is a `const` here, every handle is resolved once per pipeline.
//!
//! Invariants: names carry the `mongo_kafka_bridge_` prefix and base units, counters end in
//! `_total`, and labels are bounded sets (pipeline names from the config, operation types, topic
//! names, error kinds) — never a document id, a token or an error message.
//! Naming follows <https://prometheus.io/docs/practices/naming/>.

use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Change events read, by `pipeline`, `operation_type`.
pub const SOURCE_EVENTS: &str = "mongo_kafka_bridge_source_events_total";
/// Raw change event bytes read, by `pipeline`.
pub const SOURCE_BYTES: &str = "mongo_kafka_bridge_source_bytes_total";
/// Post-batch resume tokens taken as positions, by `pipeline`.
pub const SOURCE_WATERMARKS: &str = "mongo_kafka_bridge_source_watermarks_total";
/// Records handed to librdkafka, by `pipeline`.
pub const MESSAGES_ENQUEUED: &str = "mongo_kafka_bridge_kafka_messages_enqueued_total";
/// Records acknowledged by the broker, by `pipeline`, `operation_type`.
pub const MESSAGES_DELIVERED: &str = "mongo_kafka_bridge_kafka_messages_delivered_total";
/// Records Kafka did not acknowledge, by `pipeline`, `error_code`.
pub const DELIVERY_ERRORS: &str = "mongo_kafka_bridge_kafka_delivery_errors_total";
/// Times librdkafka's queue was full and the relay waited, by `pipeline`.
pub const QUEUE_FULL: &str = "mongo_kafka_bridge_kafka_queue_full_total";
/// Seconds from enqueue to delivery of an event's records, by `pipeline`.
pub const DELIVERY_DURATION: &str = "mongo_kafka_bridge_kafka_delivery_duration_seconds";
/// Events enqueued and not yet delivered, by `pipeline`.
pub const IN_FLIGHT_EVENTS: &str = "mongo_kafka_bridge_in_flight_messages";
/// Bytes of records enqueued and not yet delivered, by `pipeline`.
pub const IN_FLIGHT_BYTES: &str = "mongo_kafka_bridge_in_flight_bytes";
/// Offsets writes, by `pipeline`, `outcome` (`ok`, `error`, `lease`).
pub const CHECKPOINT_COMMITS: &str = "mongo_kafka_bridge_checkpoint_commits_total";
/// Seconds an offsets write took, by `pipeline`.
pub const CHECKPOINT_DURATION: &str = "mongo_kafka_bridge_checkpoint_commit_duration_seconds";
/// `clusterTime` of the committed position (Unix seconds), by `pipeline`.
pub const CHECKPOINT_TIMESTAMP: &str = "mongo_kafka_bridge_checkpoint_timestamp_seconds";
/// Now minus the `clusterTime` of the last event read (seconds), by `pipeline`.
pub const SOURCE_LAG: &str = "mongo_kafka_bridge_source_lag_seconds";
/// Errors, by `pipeline`, `stage`, `class`.
pub const ERRORS: &str = "mongo_kafka_bridge_errors_total";
/// Pipeline restarts, by `pipeline`, `reason`.
pub const RESTARTS: &str = "mongo_kafka_bridge_pipeline_restarts_total";
/// 1 while the pipeline's change stream is open, by `pipeline`.
pub const STREAM_OPEN: &str = "mongo_kafka_bridge_stream_open";
/// Constant 1 with `version` and `git_sha`.
pub const BUILD_INFO: &str = "mongo_kafka_bridge_build_info";

/// All metric families, registered in one (non-global) registry.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    source_events: IntCounterVec,
    source_bytes: IntCounterVec,
    source_watermarks: IntCounterVec,
    enqueued: IntCounterVec,
    delivered: IntCounterVec,
    delivery_errors: IntCounterVec,
    queue_full: IntCounterVec,
    delivery_duration: HistogramVec,
    in_flight_events: IntGaugeVec,
    in_flight_bytes: IntGaugeVec,
    commits: IntCounterVec,
    commit_duration: HistogramVec,
    checkpoint_timestamp: GaugeVec,
    source_lag: GaugeVec,
    errors: IntCounterVec,
    restarts: IntCounterVec,
    stream_open: IntGaugeVec,
}

fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("metric names are valid");
    r.register(Box::new(c.clone()))
        .expect("each metric is registered once");
    c
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), &["pipeline"]).expect("metric names are valid");
    r.register(Box::new(g.clone()))
        .expect("each metric is registered once");
    g
}

fn float_gauge(r: &Registry, name: &str, help: &str) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(name, help), &["pipeline"]).expect("metric names are valid");
    r.register(Box::new(g.clone()))
        .expect("each metric is registered once");
    g
}

fn histogram(r: &Registry, name: &str, help: &str) -> HistogramVec {
    let buckets = prometheus::exponential_buckets(0.001, 2.0, 17).expect("valid bucket layout");
    let h = HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets),
        &["pipeline"],
    )
    .expect("metric names are valid");
    r.register(Box::new(h.clone()))
        .expect("each metric is registered once");
    h
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
            .with_label_values(&[
                env!("CARGO_PKG_VERSION"),
                option_env!("MKB_GIT_SHA").unwrap_or("unknown"),
            ])
            .set(1);
        Self {
            source_events: counter(
                &r,
                SOURCE_EVENTS,
                "Change events read.",
                &["pipeline", "operation_type"],
            ),
            source_bytes: counter(&r, SOURCE_BYTES, "Change event bytes read.", p),
            source_watermarks: counter(&r, SOURCE_WATERMARKS, "Post-batch resume tokens taken.", p),
            enqueued: counter(&r, MESSAGES_ENQUEUED, "Records handed to librdkafka.", p),
            delivered: counter(
                &r,
                MESSAGES_DELIVERED,
                "Records acknowledged by Kafka.",
                &["pipeline", "operation_type"],
            ),
            delivery_errors: counter(
                &r,
                DELIVERY_ERRORS,
                "Records Kafka did not acknowledge.",
                &["pipeline", "error_code"],
            ),
            queue_full: counter(&r, QUEUE_FULL, "Waits on a full librdkafka queue.", p),
            delivery_duration: histogram(&r, DELIVERY_DURATION, "Enqueue to delivery, seconds."),
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
            commit_duration: histogram(&r, CHECKPOINT_DURATION, "Offsets write duration, seconds."),
            checkpoint_timestamp: float_gauge(
                &r,
                CHECKPOINT_TIMESTAMP,
                "clusterTime of the committed position.",
            ),
            source_lag: float_gauge(
                &r,
                SOURCE_LAG,
                "Now minus clusterTime of the last event read.",
            ),
            errors: counter(
                &r,
                ERRORS,
                "Errors by stage and class.",
                &["pipeline", "stage", "class"],
            ),
            restarts: counter(&r, RESTARTS, "Pipeline restarts.", &["pipeline", "reason"]),
            stream_open: gauge(&r, STREAM_OPEN, "1 while the change stream is open."),
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
            enqueued: self.enqueued.with_label_values(&[name]),
            queue_full: self.queue_full.with_label_values(&[name]),
            delivery_duration: self.delivery_duration.with_label_values(&[name]),
            in_flight_events: self.in_flight_events.with_label_values(&[name]),
            in_flight_bytes: self.in_flight_bytes.with_label_values(&[name]),
            commit_duration: self.commit_duration.with_label_values(&[name]),
            checkpoint_timestamp: self.checkpoint_timestamp.with_label_values(&[name]),
            source_lag: self.source_lag.with_label_values(&[name]),
            stream_open: self.stream_open.with_label_values(&[name]),
        }
    }

    /// The text exposition format of every family.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .unwrap_or_default();
        String::from_utf8(out).unwrap_or_default()
    }
}

/// Handles of one pipeline's series.
#[derive(Clone)]
pub struct PipelineMetrics {
    name: String,
    family: Metrics,
    /// Raw event bytes read.
    pub source_bytes: IntCounter,
    /// Watermarks taken.
    pub source_watermarks: IntCounter,
    /// Records enqueued.
    pub enqueued: IntCounter,
    /// Full-queue waits.
    pub queue_full: IntCounter,
    /// Enqueue → delivery seconds.
    pub delivery_duration: Histogram,
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
}

impl PipelineMetrics {
    /// Counts one event read of `operation_type`.
    pub fn event_read(&self, operation_type: &str) {
        self.family
            .source_events
            .with_label_values(&[&self.name, operation_type])
            .inc();
    }
    /// Counts `records` delivered records of an event of `operation_type`.
    pub fn delivered(&self, operation_type: &str, records: u64) {
        self.family
            .delivered
            .with_label_values(&[&self.name, operation_type])
            .inc_by(records);
    }
    /// Counts a delivery error with a bounded `error_code` (librdkafka code name).
    pub fn delivery_error(&self, error_code: &str) {
        self.family
            .delivery_errors
            .with_label_values(&[&self.name, error_code])
            .inc();
    }
    /// Counts an offsets write with `outcome` `ok` | `error` | `lease`.
    pub fn commit(&self, outcome: &str) {
        self.family
            .commits
            .with_label_values(&[&self.name, outcome])
            .inc();
    }
    /// Counts an error at `stage` of `class` (`transient` | `fatal`).
    pub fn error(&self, stage: &str, class: &str) {
        self.family
            .errors
            .with_label_values(&[&self.name, stage, class])
            .inc();
    }
    /// Counts a restart for `reason` (an error kind).
    pub fn restart(&self, reason: &str) {
        self.family
            .restarts
            .with_label_values(&[&self.name, reason])
            .inc();
    }
}
