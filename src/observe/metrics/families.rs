//! The per-pipeline families, grouped by stage, and the constructors that build a family and
//! register it once in a registry.

use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
};

use super::names::{
    AMBIGUOUS_EVENTS, CHECKPOINT_COMMITS, CHECKPOINT_DURATION, CHECKPOINT_LAG,
    CHECKPOINT_TIMESTAMP, CLIENT_REBUILDS, DELIVERY_DURATION, DELIVERY_ERRORS, END_TO_END_LATENCY,
    ERRORS, HISTORY_HEADROOM, IN_FLIGHT_BYTES, IN_FLIGHT_EVENTS, MESSAGES_DELIVERED,
    MESSAGES_ENQUEUED, PIPELINE_CLUSTER_UNCHECKED, PIPELINE_FAILED, PIPELINE_OWNED,
    PIPELINE_REFUSED, POOL_ENCODED, QUEUE_FULL, RESTARTS, SOURCE_BYTES, SOURCE_EVENTS, SOURCE_LAG,
    SOURCE_WATERMARKS, STREAM_OPEN, TOPIC_MISSING,
};

const P: &[&str] = &["pipeline"];
const PT: &[&str] = &["pipeline", "topic"];

/// The families of reading the change stream.
#[derive(Clone)]
pub(super) struct SourceFamilies {
    pub(super) source_events: IntCounterVec,
    pub(super) source_bytes: IntCounterVec,
    pub(super) source_watermarks: IntCounterVec,
    pub(super) pool_encoded: IntCounterVec,
    pub(super) source_lag: GaugeVec,
    pub(super) stream_open: IntGaugeVec,
}

impl SourceFamilies {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            source_events: counter(
                r,
                SOURCE_EVENTS,
                "Change events read.",
                &["pipeline", "operation_type"],
            ),
            source_bytes: counter(r, SOURCE_BYTES, "Change event bytes read.", P),
            source_watermarks: counter(r, SOURCE_WATERMARKS, "Post-batch resume tokens taken.", P),
            pool_encoded: counter(
                r,
                POOL_ENCODED,
                "Change events encoded on the encode pool.",
                P,
            ),
            source_lag: float_gauge(
                r,
                SOURCE_LAG,
                "Now minus clusterTime of the last event read; 0 once the stream is caught up.",
            ),
            stream_open: gauge(r, STREAM_OPEN, "1 while the change stream is open."),
        }
    }
}

/// The families of delivering records to Kafka.
#[derive(Clone)]
pub(super) struct DeliveryFamilies {
    pub(super) enqueued: IntCounterVec,
    pub(super) delivered: IntCounterVec,
    pub(super) delivery_errors: IntCounterVec,
    pub(super) ambiguous: IntCounterVec,
    pub(super) queue_full: IntCounterVec,
    pub(super) delivery_duration: HistogramVec,
    pub(super) end_to_end: HistogramVec,
    pub(super) in_flight_events: IntGaugeVec,
    pub(super) in_flight_bytes: IntGaugeVec,
}

impl DeliveryFamilies {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            enqueued: counter(r, MESSAGES_ENQUEUED, "Records handed to librdkafka.", PT),
            delivered: counter(
                r,
                MESSAGES_DELIVERED,
                "Records acknowledged by Kafka.",
                &["pipeline", "topic", "operation_type"],
            ),
            delivery_errors: counter(
                r,
                DELIVERY_ERRORS,
                "Records Kafka did not acknowledge.",
                &["pipeline", "topic", "error_code"],
            ),
            ambiguous: counter(
                r,
                AMBIGUOUS_EVENTS,
                "Events JSON cannot carry exactly, diverted by on_ambiguous.",
                &["pipeline", "outcome"],
            ),
            queue_full: counter(r, QUEUE_FULL, "Waits on a full librdkafka queue.", P),
            delivery_duration: histogram(
                r,
                DELIVERY_DURATION,
                "Enqueue to delivery, seconds.",
                PT,
                seconds_buckets(17),
            ),
            end_to_end: histogram(
                r,
                END_TO_END_LATENCY,
                "Event wallTime (else clusterTime) to delivery, seconds.",
                P,
                seconds_buckets(20),
            ),
            in_flight_events: gauge(r, IN_FLIGHT_EVENTS, "Events enqueued, not yet delivered."),
            in_flight_bytes: gauge(
                r,
                IN_FLIGHT_BYTES,
                "Record bytes enqueued, not yet delivered.",
            ),
        }
    }
}

/// The families of committing positions to the offsets document.
#[derive(Clone)]
pub(super) struct CheckpointFamilies {
    pub(super) commits: IntCounterVec,
    pub(super) commit_duration: HistogramVec,
    pub(super) checkpoint_timestamp: GaugeVec,
    pub(super) checkpoint_lag: GaugeVec,
    pub(super) history_headroom: GaugeVec,
}

impl CheckpointFamilies {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            commits: counter(
                r,
                CHECKPOINT_COMMITS,
                "Offsets writes.",
                &["pipeline", "outcome"],
            ),
            commit_duration: histogram(
                r,
                CHECKPOINT_DURATION,
                "Offsets write duration, seconds.",
                P,
                seconds_buckets(17),
            ),
            checkpoint_timestamp: float_gauge(
                r,
                CHECKPOINT_TIMESTAMP,
                "clusterTime of the last committed event.",
            ),
            checkpoint_lag: float_gauge(
                r,
                CHECKPOINT_LAG,
                "Now minus the committed position's cluster time.",
            ),
            history_headroom: float_gauge(
                r,
                HISTORY_HEADROOM,
                "Committed position's cluster time minus the oldest oplog entry's, seconds.",
            ),
        }
    }
}

/// The families of a pipeline's life: its errors, restarts, ownership, refusal and cluster check.
#[derive(Clone)]
pub(super) struct LifecycleFamilies {
    pub(super) errors: IntCounterVec,
    pub(super) restarts: IntCounterVec,
    pub(super) client_rebuilds: IntCounterVec,
    pub(super) pipeline_owned: IntGaugeVec,
    pub(super) pipeline_refused: IntGaugeVec,
    pub(super) pipeline_cluster_unchecked: IntGaugeVec,
    pub(super) pipeline_failed: IntGaugeVec,
    pub(super) topic_missing: IntCounterVec,
}

impl LifecycleFamilies {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            errors: counter(
                r,
                ERRORS,
                "Errors by stage and class.",
                &["pipeline", "stage", "class"],
            ),
            restarts: counter(r, RESTARTS, "Pipeline restarts.", &["pipeline", "reason"]),
            client_rebuilds: counter(
                r,
                CLIENT_REBUILDS,
                "Escalations: the same failure ended several runs in a row, clients rebuilt.",
                &["pipeline", "reason"],
            ),
            pipeline_owned: gauge(
                r,
                PIPELINE_OWNED,
                "1 while this instance owns the pipeline, 0 while it stands by.",
            ),
            pipeline_refused: gauge(
                r,
                PIPELINE_REFUSED,
                "1 when the configured stream or the MongoDB cluster differs from the committed \
                 position's.",
            ),
            pipeline_cluster_unchecked: gauge(
                r,
                PIPELINE_CLUSTER_UNCHECKED,
                "1 when the MongoDB cluster could not be named at the last take: unchecked.",
            ),
            pipeline_failed: gauge(
                r,
                PIPELINE_FAILED,
                "1 while the pipeline stopped on a failure; the others run on.",
            ),
            topic_missing: counter(
                r,
                TOPIC_MISSING,
                "Times a topic the pipeline writes was found missing (once per episode).",
                &["pipeline"],
            ),
        }
    }
}

/// Registers an integer counter family with `labels`.
pub(super) fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("metric names are valid");
    r.register(Box::new(c.clone()))
        .expect("each metric is registered once");
    c
}

/// Registers an integer gauge family labelled by `pipeline`.
pub(super) fn gauge(r: &Registry, name: &str, help: &str) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), &["pipeline"]).expect("metric names are valid");
    r.register(Box::new(g.clone()))
        .expect("each metric is registered once");
    g
}

/// Registers a float gauge family labelled by `pipeline`.
pub(super) fn float_gauge(r: &Registry, name: &str, help: &str) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(name, help), &["pipeline"]).expect("metric names are valid");
    r.register(Box::new(g.clone()))
        .expect("each metric is registered once");
    g
}

/// Exponential second buckets from 1 ms, doubling, `count` of them (17 → ~65 s, 20 → ~524 s).
pub(super) fn seconds_buckets(count: usize) -> Vec<f64> {
    prometheus::exponential_buckets(0.001, 2.0, count).expect("valid bucket layout")
}

/// Registers a histogram family with `labels` and `buckets` (seconds).
pub(super) fn histogram(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: Vec<f64>,
) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
        .expect("metric names are valid");
    r.register(Box::new(h.clone()))
        .expect("each metric is registered once");
    h
}
