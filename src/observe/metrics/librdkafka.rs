//! librdkafka statistics as gauges (the Materialize approach): the producer's client context
//! ([`crate::kafka::context`]) receives librdkafka's periodic statistics
//! (`statistics.interval.ms`) and sets one pipeline's series from them.
//!
//! Invariant: setting the series only stores numbers (it runs on librdkafka's thread).

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};
use rdkafka::statistics::Statistics;

use super::families::{counter, gauge};
use super::names::{
    RDKAFKA_OUTBUF_MESSAGES, RDKAFKA_QUEUE_BYTES, RDKAFKA_QUEUE_MESSAGES, RDKAFKA_RETRIES,
    RDKAFKA_WAITRESP_MESSAGES,
};

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

impl RdkafkaGauges {
    /// Sets the gauges from one statistics snapshot; returns the producer's total retries
    /// (`txretries` summed over brokers) for the caller to count their increase.
    pub fn apply(&self, stats: &Statistics) -> u64 {
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.queue_messages.set(clamp(stats.msg_cnt));
        self.queue_bytes.set(clamp(stats.msg_size));
        let brokers = stats.brokers.values();
        self.outbuf_messages
            .set(brokers.clone().map(|b| b.outbuf_msg_cnt.max(0)).sum());
        self.waitresp_messages
            .set(brokers.clone().map(|b| b.waitresp_msg_cnt.max(0)).sum());
        brokers.map(|b| b.txretries).sum()
    }

    /// Counts `retries` more produce request retries.
    pub(crate) fn add_retries(&self, retries: u64) {
        self.retries.inc_by(retries);
    }
}
