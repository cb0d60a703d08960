//! Exactly-once's Kafka side (`delivery = "exactly_once"`, KIP-98; librdkafka
//! `INTRODUCTION.md` "Transactional Producer"): the transactional producer's calls, and the
//! progress topic where each Kafka transaction writes its position
//! ([`crate::offsets::exactly_once`] has the record's shape), with the startup read of the
//! newest committed one. The design is in `relay/exactly_once.rs`.
//!
//! Invariants:
//! - The producer's `transactional.id` is stable per pipeline
//!   ([`Config::transactional_id`](crate::config::Config::transactional_id)):
//!   `init_transactions` on a new producer fences every earlier one of the same id and aborts
//!   its open transaction, so a crashed or paused owner's records never become visible.
//! - `init_transactions`, commit and abort block (they wait for the coordinator): they run on
//!   the blocking pool, never on a runtime thread. `begin_transaction` is local.
//! - A producer whose transaction failed is never reused: the pipeline builds a new one,
//!   whose `init_transactions` aborts what the old one left open.
//! - Each exactly-once pipeline has its own progress topic,
//!   `__mongo_kafka_bridge.<offsets_database>.progress.<streamUid>`, compacted; every record
//!   goes to partition 0 (records are told apart by key too, as in the topic older versions
//!   shared), so one partition holds a pipeline's whole history in order.
//! - The startup read runs after `init_transactions` (our earlier transaction is then aborted)
//!   with `isolation.level = read_committed`, from the partition's beginning (its low
//!   watermark) up to the high watermark taken before the read. From the beginning, because its
//!   result must not depend on an offset stored elsewhere: a topic re-created since, or a
//!   consumer that cannot resolve aborted transactions before its start offset (noida-db 0.2.3
//!   hides every later committed record of a producer from a fresh consumer that starts after
//!   one of its aborts), would make a later offset miss the newest record and repeat a
//!   committed transaction. The bridge creates the topic compacted with `segment.ms` =
//!   [`SEGMENT_MS`](crate::config::exactly_once::SEGMENT_MS), so on Kafka the read covers one
//!   record plus at most that long of newer ones. No other pipeline writes the topic, so no
//!   other pipeline's open transaction holds the read at the last stable offset.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::Producer;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::sink::KafkaSink;
use crate::config::KafkaConfig;
use crate::config::exactly_once::progress_reader_config;
use crate::offsets::exactly_once::{ProgressKey, ProgressRecord, newer};

impl KafkaSink {
    /// Whether the producer is transactional.
    pub(crate) fn is_transactional(&self) -> bool {
        self.transactional_id.is_some()
    }

    /// Registers the `transactional.id` with its coordinator (fencing earlier producers of the
    /// id, aborting their open transaction), once per producer: later calls return at once.
    /// Waits up to `timeout`.
    ///
    /// Errors: librdkafka's, e.g. a timeout when no coordinator answers (retriable), or
    /// `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`.
    pub(crate) async fn init_transactions(&self, timeout: Duration) -> Result<(), KafkaError> {
        if self.initialized.load(Ordering::Acquire) {
            return Ok(());
        }
        let producer = Arc::clone(&self.producer);
        tokio::task::spawn_blocking(move || producer.init_transactions(timeout))
            .await
            .unwrap_or_else(|_| Err(KafkaError::Canceled))?;
        self.initialized.store(true, Ordering::Release);
        Ok(())
    }

    /// Begins a transaction (local: no request is made until a record is produced).
    ///
    /// Errors: librdkafka's state errors (a transaction already open, a fatal error).
    pub(crate) fn begin_transaction(&self) -> Result<(), KafkaError> {
        self.producer.begin_transaction()
    }

    /// Flushes and commits the open transaction, waiting up to `timeout`.
    ///
    /// Errors: librdkafka's; a failed commit leaves the transaction to abort.
    pub(crate) async fn commit_transaction(&self, timeout: Duration) -> Result<(), KafkaError> {
        let producer = Arc::clone(&self.producer);
        tokio::task::spawn_blocking(move || producer.commit_transaction(timeout))
            .await
            .unwrap_or_else(|_| Err(KafkaError::Canceled))
    }

    /// Aborts the open transaction (its records stay invisible to `read_committed` consumers),
    /// waiting up to `timeout`.
    ///
    /// Errors: librdkafka's (e.g. a fenced producer cannot abort; the next producer's
    /// `init_transactions` does it then).
    pub(crate) async fn abort_transaction(&self, timeout: Duration) -> Result<(), KafkaError> {
        let producer = Arc::clone(&self.producer);
        tokio::task::spawn_blocking(move || producer.abort_transaction(timeout))
            .await
            .unwrap_or_else(|_| Err(KafkaError::Canceled))
    }
}

/// The partition every progress record goes to.
pub(crate) const PARTITION: i32 = 0;

/// The newest committed progress record of `owner` ([`ProgressKey`]) in [`PARTITION`], with
/// its offset; `None` when there is none.
/// Blocks: call it on the blocking pool. Waits up to `timeout` in all.
///
/// Errors: librdkafka's (no broker, a missing topic), a timeout before the high watermark
/// taken at the start was reached, or a record of ours that cannot be decoded.
pub(crate) fn read_latest(
    kafka: &KafkaConfig,
    topic: &str,
    owner: &ProgressKey,
    timeout: Duration,
) -> Result<Option<(ProgressRecord, i64)>, String> {
    let deadline = Instant::now() + timeout;
    let consumer = |isolation: &str| -> Result<BaseConsumer<Reader>, KafkaError> {
        progress_reader_config(kafka, isolation).create_with_context(Reader)
    };
    let describe = |e: KafkaError| format!("{e}");
    // The high watermark counts undecided records too: everything of ours up to it is
    // decided once init_transactions returned.
    let (low, high) = consumer("read_uncommitted")
        .map_err(describe)?
        .fetch_watermarks(topic, PARTITION, timeout)
        .map_err(describe)?;
    let start = low;
    if start >= high {
        return Ok(None);
    }
    let reader = consumer("read_committed").map_err(describe)?;
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, PARTITION, Offset::Offset(start))
        .map_err(describe)?;
    reader.assign(&assignment).map_err(describe)?;
    let key = owner.bytes();
    let mut latest: Option<(ProgressRecord, i64)> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "the progress topic {topic} was not read up to offset {high} within {} ms (an \
                 open transaction holds its last stable offset back?)",
                timeout.as_millis()
            ));
        }
        match reader.poll(left.min(Duration::from_millis(500))) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(_))) if reader_position(&reader, topic)? >= high => {
                return Ok(latest);
            }
            Some(Err(KafkaError::PartitionEOF(_))) => {}
            // One broker of several down (a node killed): librdkafka reports it through the
            // poll and goes on with the others; the deadline bounds the read.
            Some(Err(e)) if transient(&e) => {}
            Some(Err(e)) => return Err(describe(e)),
            Some(Ok(message)) => {
                let offset = message.offset();
                if message.key() == Some(key.as_slice())
                    && let Some(value) = message.payload()
                    && let Some(record) = owner
                        .decode(value)
                        .map_err(|e| format!("progress record at offset {offset}: {e}"))?
                    && latest
                        .as_ref()
                        .is_none_or(|(l, _)| !newer(l.sequences, record.sequences))
                {
                    latest = Some((record, offset));
                }
                if offset + 1 >= high {
                    return Ok(latest);
                }
            }
        }
    }
}

/// A consumer error that is a broker's connection state, not the read's failure.
fn transient(error: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        error.rdkafka_error_code(),
        Some(
            C::BrokerTransportFailure
                | C::AllBrokersDown
                | C::Resolve
                | C::OperationTimedOut
                | C::NotCoordinator
                | C::LeaderNotAvailable
                | C::NotLeaderForPartition
        )
    )
}

/// The startup reader's client context: the end of the partition is how the read ends, not
/// an error worth a log line.
struct Reader;

impl ClientContext for Reader {
    fn error(&self, error: KafkaError, reason: &str) {
        let end = matches!(error, KafkaError::PartitionEOF(_))
            || matches!(error, KafkaError::Global(RDKafkaErrorCode::PartitionEOF));
        if end {
            return;
        }
        if transient(&error) {
            // A broker down while the read goes on: the pipeline's clients say so already.
            tracing::debug!(error = %error, reason, "reading the progress topic");
        } else {
            tracing::warn!(error = %error, reason, "reading the progress topic");
        }
    }
}

impl ConsumerContext for Reader {}

/// The consumer's next offset in [`PARTITION`] of `topic`.
fn reader_position(reader: &BaseConsumer<Reader>, topic: &str) -> Result<i64, String> {
    let position = reader.position().map_err(|e| e.to_string())?;
    Ok(position
        .find_partition(topic, PARTITION)
        .and_then(|p| match p.offset() {
            Offset::Offset(o) => Some(o),
            _ => None,
        })
        .unwrap_or(0))
}
