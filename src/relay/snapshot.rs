//! The relay's side of a snapshot: copied documents and markers enter the same window as
//! change events, in the order the source sent them (`snapshot/sequence.rs`).
//!
//! Invariants: a copied document's entry yields the snapshot's state it completes (the last
//! document of a batch; the others yield nothing), a markers entry yields the state with the
//! markers delivered; markers are enqueued to explicit partitions, after every record the
//! relay enqueued before them (so a partition's `snapshot_end` follows its copied records).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{RawDocument, Timestamp};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use super::enqueue::{Kind, Pending};
use super::{Mark, Relay};
use crate::encode::debezium::SnapshotMark;
use crate::error::BridgeError;
use crate::kafka::delivery::{Delivery, EventDeliveries};
use crate::snapshot::{CopyTarget, Marker, SharedState};

/// How long the cluster may take to tell a markers topic's partitions (it may be creating it).
const PARTITIONS_TIMEOUT: Duration = Duration::from_secs(30);

impl Relay {
    /// Encodes and enqueues one copied document of `target`.
    ///
    /// Errors: the encoder's (a document without `_id`, `on_ambiguous = "fail"`), topic creation.
    pub(super) async fn accept_copy(
        &mut self,
        target: &CopyTarget,
        raw: &RawDocument,
        read_time: Option<Timestamp>,
        state: Option<SharedState>,
        snapshot_last: bool,
    ) -> Result<Option<Pending>, BridgeError> {
        let mark = if snapshot_last {
            SnapshotMark::Last
        } else {
            SnapshotMark::Within
        };
        let (records, diverted) = self
            .encoder
            .encode_copy(target, raw, read_time, mark)
            .map_err(|source| BridgeError::Encode {
                pipeline: self.pipeline.to_string(),
                source,
            })?;
        if let Some(diverted) = &diverted {
            self.diverted(diverted);
        }
        self.before_records(None, false, &records).await?;
        self.enqueue_new(records, Kind::Snapshot("snapshot", state))
            .await
    }

    /// Enqueues `target`'s `marker` to every partition of its topic.
    ///
    /// Errors: [`BridgeError::Delivery`] when the cluster does not tell the topic's partitions
    /// within 30 s; topic creation.
    pub(super) async fn accept_markers(
        &mut self,
        target: &CopyTarget,
        marker: Marker,
        copied: u64,
        state: SharedState,
    ) -> Result<Option<Pending>, BridgeError> {
        if !self.encoder.writes_markers() {
            // The Debezium form has no marker records: the state commits in order all the same.
            self.window.push_watermark(Mark::Snapshot(state));
            return Ok(None);
        }
        let topic = self.encoder.topic_of(&target.db, &target.coll);
        if let Some(creator) = &mut self.topics {
            creator.ensure(&topic).await?;
        }
        let partitions = match self.partitions.get(&topic) {
            Some(count) => *count,
            None => {
                let count = self
                    .sink
                    .partitions(&topic, PARTITIONS_TIMEOUT)
                    .await
                    .ok_or_else(|| BridgeError::Delivery {
                        pipeline: self.pipeline.to_string(),
                        topic: topic.to_string(),
                        source: Box::new(KafkaError::MetadataFetch(
                            RDKafkaErrorCode::UnknownTopicOrPartition,
                        )),
                    })?;
                self.partitions.insert(Arc::clone(&topic), count);
                count
            }
        };
        let records = self.encoder.markers(target, marker, copied, partitions);
        self.before_records(None, false, &records).await?;
        let kind = Kind::Snapshot(marker.operation_type(), Some(state));
        self.enqueue_new(records, kind).await
    }

    /// Puts a snapshot entry in the window; it yields `state` (or nothing) once delivered.
    pub(super) fn push_snapshot(
        &mut self,
        topic: Arc<str>,
        bytes: usize,
        deliveries: Vec<Delivery>,
        operation_type: &'static str,
        state: Option<SharedState>,
    ) {
        let mark = state.map_or(Mark::Nothing, Mark::Snapshot);
        self.push_untimed(topic, bytes, deliveries, operation_type, move || mark);
    }

    /// Puts an entry without an event time (a snapshot's record, a heartbeat) in the window;
    /// once its records are delivered it yields what `delivered` returns.
    pub(super) fn push_untimed(
        &mut self,
        topic: Arc<str>,
        bytes: usize,
        deliveries: Vec<Delivery>,
        operation_type: &'static str,
        delivered: impl FnOnce() -> Mark + Send + 'static,
    ) {
        let deliveries = EventDeliveries {
            context: Arc::clone(&self.context),
            topic_metrics: self.topic_metrics(&topic),
            event_time: (None, None),
            enqueued_at: Instant::now(),
            deliveries,
        };
        let at = deliveries.enqueued_at;
        let waited = deliveries.wait(operation_type);
        let entry = futures::FutureExt::map(waited, |out| out.map(|()| delivered()));
        self.window.push_event(bytes, (at, topic), entry);
    }
}
