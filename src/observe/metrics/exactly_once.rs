//! The Kafka transaction series of exactly-once pipelines (`delivery = "exactly_once"`):
//! transactions ended by outcome, their duration, the `commit_transaction` call alone, and
//! records per committed transaction, and the starts that found the offsets document ahead of
//! Kafka.
//!
//! Invariant: the `outcome` label is `committed` or `aborted`.

use prometheus::{Histogram, HistogramVec, IntCounter, IntCounterVec, Registry};

use super::families::{counter, histogram, seconds_buckets};
use super::names::{
    DOCUMENT_AHEAD, TRANSACTION_COMMIT_DURATION, TRANSACTION_DURATION, TRANSACTION_RECORDS,
    TRANSACTIONS,
};

/// The families, registered once.
#[derive(Clone)]
pub(super) struct Families {
    ended: IntCounterVec,
    duration: HistogramVec,
    commit: HistogramVec,
    records: HistogramVec,
    ahead: IntCounterVec,
}

impl Families {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            ended: counter(
                r,
                TRANSACTIONS,
                "Kafka transactions of exactly-once pipelines, by outcome.",
                &["pipeline", "outcome"],
            ),
            duration: histogram(
                r,
                TRANSACTION_DURATION,
                "First record to the end of a Kafka transaction, seconds.",
                &["pipeline"],
                seconds_buckets(17),
            ),
            commit: histogram(
                r,
                TRANSACTION_COMMIT_DURATION,
                "The commit_transaction call (EndTxn after the flush), seconds.",
                &["pipeline"],
                seconds_buckets(17),
            ),
            records: histogram(
                r,
                TRANSACTION_RECORDS,
                "Records per committed Kafka transaction, the progress record included.",
                &["pipeline"],
                prometheus::exponential_buckets(1.0, 4.0, 11).expect("valid bucket layout"),
            ),
            ahead: counter(
                r,
                DOCUMENT_AHEAD,
                "Starts that found the offsets document ahead of Kafka's progress record.",
                &["pipeline"],
            ),
        }
    }

    pub(super) fn pipeline(&self, name: &str) -> TransactionMetrics {
        TransactionMetrics {
            committed: self.ended.with_label_values(&[name, "committed"]),
            aborted: self.ended.with_label_values(&[name, "aborted"]),
            duration: self.duration.with_label_values(&[name]),
            commit: self.commit.with_label_values(&[name]),
            records: self.records.with_label_values(&[name]),
            document_ahead: self.ahead.with_label_values(&[name]),
        }
    }
}

/// One pipeline's transaction handles. Cheap to clone.
#[derive(Clone)]
pub struct TransactionMetrics {
    /// Transactions committed.
    pub committed: IntCounter,
    /// Transactions aborted.
    pub aborted: IntCounter,
    /// First record to end, seconds.
    pub duration: Histogram,
    /// `commit_transaction` alone, seconds.
    pub commit: Histogram,
    /// Records per committed transaction.
    pub records: Histogram,
    /// Starts that found the offsets document ahead of Kafka.
    pub document_ahead: IntCounter,
}
