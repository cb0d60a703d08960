//! The snapshot's series, per pipeline and namespace: documents copied, an estimate of those
//! remaining, whether the copy runs, and copies whose count disagreed with the collection's.
//!
//! Invariant: the namespace label is bounded by the collections a pipeline's scope holds.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use super::families::counter;
use super::names::{
    SNAPSHOT_COUNT_MISMATCH, SNAPSHOT_DOCUMENTS, SNAPSHOT_REMAINING, SNAPSHOT_RUNNING,
};

/// The snapshot families of a registry.
#[derive(Clone)]
pub(super) struct Families {
    documents: IntCounterVec,
    remaining: IntGaugeVec,
    running: IntGaugeVec,
    count_mismatch: IntCounterVec,
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), &["pipeline", "namespace"])
        .expect("metric names are valid");
    r.register(Box::new(g.clone()))
        .expect("each metric is registered once");
    g
}

impl Families {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            documents: counter(
                r,
                SNAPSHOT_DOCUMENTS,
                "Documents a snapshot copied (read and handed to the relay).",
                &["pipeline", "namespace"],
            ),
            remaining: gauge(
                r,
                SNAPSHOT_REMAINING,
                "Estimate of the documents a running copy has left (estimatedDocumentCount \
                 minus those copied).",
            ),
            running: gauge(
                r,
                SNAPSHOT_RUNNING,
                "1 while the namespace is being copied.",
            ),
            count_mismatch: counter(
                r,
                SNAPSHOT_COUNT_MISMATCH,
                "Copies that read another number of documents than countDocuments found at \
                 their end, beyond the changes the stream saw meanwhile.",
                &["pipeline", "namespace"],
            ),
        }
    }

    pub(super) fn for_namespace(&self, pipeline: &str, namespace: &str) -> SnapshotMetrics {
        let labels = [pipeline, namespace];
        SnapshotMetrics {
            documents: self.documents.with_label_values(&labels),
            remaining: self.remaining.with_label_values(&labels),
            running: self.running.with_label_values(&labels),
            count_mismatch: self.count_mismatch.with_label_values(&labels),
        }
    }
}

/// One namespace's snapshot series.
#[derive(Clone)]
pub struct SnapshotMetrics {
    /// Documents copied.
    pub documents: IntCounter,
    /// Estimate of those left.
    pub remaining: IntGauge,
    /// 1 while copying.
    pub running: IntGauge,
    /// Copies whose count disagreed (failed or warned).
    pub count_mismatch: IntCounter,
}
