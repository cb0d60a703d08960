//! librdkafka statistics as gauges (the Materialize approach): the producer's client context
//! receives librdkafka's periodic statistics (`statistics.interval.ms`) and sets one pipeline's
//! series from them.
//!
//! Invariants: the callback only stores numbers (it runs on librdkafka's thread); the retries
//! counter only ever increases, also when a restart builds a new producer whose own totals start
//! again at 0 (each context counts the increase of its producer's totals).

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};
use rdkafka::ClientContext;
use rdkafka::statistics::Statistics;

use super::families::{counter, gauge};
use super::{
    RDKAFKA_OUTBUF_MESSAGES, RDKAFKA_QUEUE_BYTES, RDKAFKA_QUEUE_MESSAGES, RDKAFKA_RETRIES,
    RDKAFKA_WAITRESP_MESSAGES,
};

/// Default `statistics.interval.ms` the bridge sets when `[kafka.properties]` does not (ms).
pub const DEFAULT_STATISTICS_INTERVAL_MS: &str = "5000";

/// The librdkafka families of a registry.
#[derive(Clone)]
pub(super) struct Families {
    queue_messages: IntGaugeVec,
    queue_bytes: IntGaugeVec,
    outbuf_messages: IntGaugeVec,
    waitresp_messages: IntGaugeVec,
    retries: IntCounterVec,
}

impl Families {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            queue_messages: gauge(
                r,
                RDKAFKA_QUEUE_MESSAGES,
                "librdkafka msg_cnt: queued records.",
            ),
            queue_bytes: gauge(r, RDKAFKA_QUEUE_BYTES, "librdkafka msg_size: queued bytes."),
            outbuf_messages: gauge(
                r,
                RDKAFKA_OUTBUF_MESSAGES,
                "librdkafka outbuf_msg_cnt over brokers: records awaiting transmission.",
            ),
            waitresp_messages: gauge(
                r,
                RDKAFKA_WAITRESP_MESSAGES,
                "librdkafka waitresp_msg_cnt over brokers: records awaiting a response.",
            ),
            retries: counter(
                r,
                RDKAFKA_RETRIES,
                "librdkafka txretries over brokers: produce request retries.",
                &["pipeline"],
            ),
        }
    }

    pub(super) fn for_pipeline(&self, name: &str) -> RdkafkaGauges {
        RdkafkaGauges {
            queue_messages: self.queue_messages.with_label_values(&[name]),
            queue_bytes: self.queue_bytes.with_label_values(&[name]),
            outbuf_messages: self.outbuf_messages.with_label_values(&[name]),
            waitresp_messages: self.waitresp_messages.with_label_values(&[name]),
            retries: self.retries.with_label_values(&[name]),
        }
    }
}

/// One pipeline's librdkafka series.
#[derive(Clone)]
pub struct RdkafkaGauges {
    queue_messages: IntGauge,
    queue_bytes: IntGauge,
    outbuf_messages: IntGauge,
    waitresp_messages: IntGauge,
    retries: IntCounter,
}

/// A librdkafka client context that publishes the producer's statistics; without gauges
/// (see [`StatsContext::default`]) it ignores them.
#[derive(Default)]
pub struct StatsContext {
    gauges: Option<RdkafkaGauges>,
    last_retries: AtomicU64,
    logs: crate::kafka_log::LogLimiter,
}

impl StatsContext {
    /// A context publishing into `gauges`.
    pub fn new(gauges: RdkafkaGauges) -> Self {
        Self {
            gauges: Some(gauges),
            last_retries: AtomicU64::new(0),
            logs: crate::kafka_log::LogLimiter::default(),
        }
    }

    /// Applies one statistics snapshot.
    pub fn apply(&self, stats: &Statistics) {
        let Some(g) = &self.gauges else { return };
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        g.queue_messages.set(clamp(stats.msg_cnt));
        g.queue_bytes.set(clamp(stats.msg_size));
        let brokers = stats.brokers.values();
        g.outbuf_messages
            .set(brokers.clone().map(|b| b.outbuf_msg_cnt.max(0)).sum());
        g.waitresp_messages
            .set(brokers.clone().map(|b| b.waitresp_msg_cnt.max(0)).sum());
        let retries: u64 = brokers.map(|b| b.txretries).sum();
        let before = self.last_retries.swap(retries, Ordering::Relaxed);
        g.retries.inc_by(retries.saturating_sub(before));
    }
}

impl ClientContext for StatsContext {
    fn stats(&self, statistics: Statistics) {
        self.apply(&statistics);
    }

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.logs.log(level, fac, log_message);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        self.logs.error(&error, reason);
    }
}
