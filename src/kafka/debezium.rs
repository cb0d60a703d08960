//! Reading a Kafka Connect offsets topic for `offsets import debezium --connect-offsets-topic`
//! (the feature's pieces are listed in `encode/debezium.rs`).
//!
//! Connect (distributed mode, `offset.storage.topic`) keeps each source partition's offset as
//! a record keyed `["<connector>",{<partition>}]` with the offset as its JSON value (a null
//! value deletes it), in a compacted topic: the newest record of a key is the offset.
//!
//! Invariants: the read covers every partition from its low watermark to the high watermark
//! taken before it, so no offset committed before the command started is missed; records come
//! back in offset order per partition (a key lives in one partition), so the last of a key is
//! its newest; nothing is committed to any group.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::config::KafkaConfig;
use crate::config::debezium::offsets_reader_config;

/// One record of an offsets topic: key and value bytes (`None`: a tombstone).
pub(crate) type OffsetRecord = (Vec<u8>, Option<Vec<u8>>);

/// Every record of `topic`, per partition in offset order. Blocks: call it on the blocking
/// pool. Waits up to `timeout` in all.
///
/// Errors: a sentence: the topic does not exist, librdkafka's error, or the read did not reach
/// the high watermarks in time.
pub(crate) fn read_offsets_topic(
    kafka: &KafkaConfig,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<OffsetRecord>, String> {
    let deadline = Instant::now() + timeout;
    let describe = |e: KafkaError| format!("reading {topic}: {e}");
    let consumer: BaseConsumer = offsets_reader_config(kafka).create().map_err(describe)?;
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(describe)?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    if partitions.is_empty() {
        return Err(format!(
            "topic {topic} does not exist on the cluster of [kafka] bootstrap_servers: name \
             the worker's offset.storage.topic (distributed mode)"
        ));
    }
    let mut ends: HashMap<i32, i64> = HashMap::new();
    let mut assignment = TopicPartitionList::new();
    for partition in partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, timeout)
            .map_err(describe)?;
        if low < high {
            ends.insert(partition, high);
            assignment
                .add_partition_offset(topic, partition, Offset::Offset(low))
                .map_err(describe)?;
        }
    }
    consumer.assign(&assignment).map_err(describe)?;
    let mut out = Vec::new();
    while !ends.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "{topic} was not read to its end within {} s",
                timeout.as_secs()
            ));
        }
        match consumer.poll(left.min(Duration::from_millis(500))) {
            None => {}
            // At the partition's end (its high watermark, or a transaction marker before it).
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                ends.remove(&partition);
            }
            Some(Err(e)) => return Err(describe(e)),
            Some(Ok(message)) => {
                let partition = message.partition();
                out.push((
                    message.key().unwrap_or_default().to_vec(),
                    message.payload().map(<[u8]>::to_vec),
                ));
                if ends
                    .get(&partition)
                    .is_some_and(|end| message.offset() + 1 >= *end)
                {
                    ends.remove(&partition);
                }
            }
        }
    }
    Ok(out)
}
