//! The progress topic of `delivery = "exactly_once"`: where each Kafka transaction writes its
//! position ([`crate::offsets::exactly_once`] has the record's shape), and the startup read of the
//! newest committed one.
//!
//! Invariants:
//! - The topic is `__mongo_kafka_bridge.<offsets_database>.progress`, compacted, and every
//!   record goes to partition 0 (pipelines of one deployment share it; records are told apart
//!   by key), so one partition holds a pipeline's whole history in order.
//! - The startup read runs after `init_transactions` (our earlier transaction is then aborted)
//!   with `isolation.level = read_committed`, from the partition's beginning (its low
//!   watermark) up to the high watermark taken before the read. From the beginning, because its
//!   result must not depend on an offset stored elsewhere: a topic re-created since, or a
//!   consumer that cannot resolve aborted transactions before its start offset (noida-db 0.2.3
//!   hides every later committed record of a producer from a fresh consumer that starts after
//!   one of its aborts), would make a later offset miss the newest record and repeat a
//!   committed transaction. The bridge creates the topic compacted with `segment.ms` =
//!   [`SEGMENT_MS`], so on Kafka the read covers one record per pipeline plus at most that
//!   long of newer ones. Another pipeline's open transaction holds the read at the last stable
//!   offset until it ends (at most `transaction.timeout.ms`).

use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::config::KafkaConfig;
use crate::config::exactly_once::progress_reader_config;
use crate::offsets::exactly_once::{ProgressKey, ProgressRecord, newer};

/// The partition every progress record goes to.
pub const PARTITION: i32 = 0;

/// The newest committed progress record of `owner` ([`ProgressKey`]) in [`PARTITION`], with
/// its offset; `None` when there is none.
/// Blocks: call it on the blocking pool. Waits up to `timeout` in all.
///
/// Errors: librdkafka's (no broker, a missing topic), a timeout before the high watermark
/// taken at the start was reached, or a record of ours that cannot be decoded.
pub fn read_latest(
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

/// The startup reader's client context: the end of the partition is how the read ends, not
/// an error worth a log line.
struct Reader;

impl ClientContext for Reader {
    fn error(&self, error: KafkaError, reason: &str) {
        let end = matches!(error, KafkaError::PartitionEOF(_))
            || matches!(error, KafkaError::Global(RDKafkaErrorCode::PartitionEOF));
        if !end {
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
