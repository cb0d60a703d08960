//! What each topic accepts per record batch, against what the producer batches.
//!
//! librdkafka fills one record batch per partition up to `batch.size` (and the request up to
//! `message.max.bytes`); the broker checks a whole batch against the topic's
//! `max.message.bytes` and refuses it with `MESSAGE_TOO_LARGE` when larger, although every
//! record in it fits (Kafka docs, topic config `max.message.bytes`: "the largest record batch
//! size allowed"). librdkafka does not split a refused batch, so each of its records would
//! fail as if too large.
//!
//! Invariants:
//! - A topic's `max.message.bytes` is read once per run, before its first record is enqueued
//!   ([`TopicLimits::admit`]); a topic whose limit is below the producer's batch bound is
//!   refused with [`BridgeError::BatchAboveTopicLimit`] before anything of it is enqueued. The
//!   pipeline then rebuilds its producer with `batch.size` = that limit
//!   ([`crate::pipeline`]) and runs again from the committed position.
//! - What a run learned outlives it ([`Learned`]): the producer's batch bound, and for each
//!   topic whose broker refused a record inside a Kafka transaction an upper bound on what it
//!   accepts, so the next run stubs such a record at enqueue instead of meeting the refusal
//!   again (a refused record leaves the transaction only able to abort).
//! - A record larger than `batch.size` is still produced, alone in its batch (librdkafka
//!   `CONFIGURATION.md`, `batch.size`), so a lower bound never refuses a record that fits.

use std::collections::HashMap;
use std::sync::Arc;

use rdkafka::admin::ResourceSpecifier;

use super::admin::KafkaAdmin;
use crate::error::BridgeError;

/// The bytes of a record batch that holds one record of `bytes` (key, value, header names and
/// values) with `headers` headers: the batch header (61 bytes, Kafka's record batch format
/// v2) plus the record's own fields at their largest varint sizes (36 bytes) plus two length
/// varints per header.
pub(crate) fn single_record_batch(bytes: usize, headers: usize) -> usize {
    61 + 36 + 10 * headers + bytes
}

/// What a pipeline's runs learned about the topics, kept across its restarts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Learned {
    /// The producer's `batch.size` when a topic accepts smaller batches than
    /// `[kafka.properties]` gives; `None` until then.
    pub batch_cap: Option<usize>,
    /// By topic: bytes it accepts at most, learned from a record it refused (its size − 1).
    pub refused: HashMap<Arc<str>, usize>,
}

impl Learned {
    /// Lowers the producer's batch bound to `limit`.
    pub(crate) fn cap_batches(&mut self, limit: usize) {
        self.batch_cap = Some(self.batch_cap.map_or(limit, |c| c.min(limit)));
    }

    /// Records that `topic` refused a record of `size` bytes (key + value).
    pub(crate) fn refused(&mut self, topic: &str, size: usize) {
        let bound = size.saturating_sub(1);
        let entry = self.refused.entry(Arc::from(topic)).or_insert(bound);
        *entry = (*entry).min(bound);
    }
}

/// The topics' `max.message.bytes`, learned once each.
pub(crate) struct TopicLimits {
    admin: KafkaAdmin,
    pipeline: Arc<str>,
    batch_bytes: usize,
    /// `None`: unknown (the broker did not say); the broker decides.
    by_topic: HashMap<Arc<str>, Option<usize>>,
    /// Bounds learned from refusals ([`Learned::refused`]).
    refused: HashMap<Arc<str>, usize>,
    /// The producer compresses ([`compresses`](crate::config::kafka::compresses)).
    compressed: bool,
    last: Option<Arc<str>>,
}

impl TopicLimits {
    /// The limits of `pipeline`'s topics, for a producer batching up to `batch_bytes`
    /// ([`batch_bytes`](crate::config::kafka::batch_bytes)), `compressed` or not ([`compresses`](crate::config::kafka::compresses)), with what earlier runs
    /// `learned`.
    pub(crate) fn new(
        admin: KafkaAdmin,
        pipeline: &str,
        (batch_bytes, compressed): (usize, bool),
        learned: &Learned,
    ) -> Self {
        Self {
            admin,
            pipeline: Arc::from(pipeline),
            batch_bytes,
            by_topic: HashMap::new(),
            refused: learned.refused.clone(),
            compressed,
            last: None,
        }
    }

    /// Learns `topic`'s `max.message.bytes` (once; the topic exists by now).
    ///
    /// Errors: [`BridgeError::BatchAboveTopicLimit`] when it is below the producer's batch
    /// bound.
    pub(crate) async fn admit(&mut self, topic: &Arc<str>) -> Result<(), BridgeError> {
        if self.last.as_ref().is_some_and(|t| Arc::ptr_eq(t, topic)) {
            return Ok(());
        }
        let limit = match self.by_topic.get(topic) {
            Some(limit) => *limit,
            None => {
                let found = self
                    .admin
                    .describe(ResourceSpecifier::Topic(topic), &["max.message.bytes"])
                    .await
                    .remove(0)
                    .and_then(|v| v.parse::<usize>().ok());
                let found = match (found, self.refused.get(topic)) {
                    (Some(f), Some(&r)) => Some(f.min(r)),
                    (f, r) => f.or(r.copied()),
                };
                self.by_topic.insert(Arc::clone(topic), found);
                found
            }
        };
        self.check(topic, limit)?;
        self.last = Some(Arc::clone(topic));
        Ok(())
    }

    fn check(&self, topic: &str, limit: Option<usize>) -> Result<(), BridgeError> {
        match limit {
            Some(limit) if limit < self.batch_bytes => Err(BridgeError::BatchAboveTopicLimit {
                pipeline: self.pipeline.to_string(),
                topic: topic.to_owned(),
                topic_limit: limit,
                batch_bytes: self.batch_bytes,
            }),
            _ => Ok(()),
        }
    }

    /// Whether `topic`'s limit was read already (no admin call before its next record).
    pub(crate) fn knows(&self, topic: &Arc<str>) -> bool {
        self.last.as_ref().is_some_and(|t| Arc::ptr_eq(t, topic))
            || self.by_topic.contains_key(topic)
    }

    /// The admin client and the producer's batch bound, for the delivery path's check
    /// ([`crate::kafka::delivery`]).
    pub(crate) fn batch_check(&self) -> (KafkaAdmin, usize) {
        (self.admin.clone(), self.batch_bytes)
    }

    /// The bound a record's uncompressed bytes are held to at enqueue: `topic`'s
    /// `max.message.bytes` (or a refusal's lower bound), when learned; with compression only
    /// a refusal's bound (a record above the limit may fit compressed).
    pub(crate) fn get(&self, topic: &str) -> Option<usize> {
        if self.compressed {
            return self.refused.get(topic).copied();
        }
        self.by_topic.get(topic).copied().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KafkaConfig;

    fn kafka(properties: &str) -> KafkaConfig {
        KafkaConfig::for_test(properties)
    }

    #[test]
    fn a_topic_below_the_batch_bound_is_refused_naming_both() {
        let admin = KafkaAdmin::new(&kafka("")).expect("admin client");
        let limits = TopicLimits::new(admin, "p", (1_000_000, false), &Learned::default());
        assert!(
            limits.check("t", None).is_ok(),
            "unknown: the broker decides"
        );
        assert!(limits.check("t", Some(1_000_000)).is_ok());
        match limits.check("t", Some(50_000)) {
            Err(BridgeError::BatchAboveTopicLimit {
                topic,
                topic_limit,
                batch_bytes,
                ..
            }) => assert_eq!(
                (topic.as_str(), topic_limit, batch_bytes),
                ("t", 50_000, 1_000_000)
            ),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn what_runs_learned_only_lowers_the_bounds() {
        let mut learned = Learned::default();
        learned.cap_batches(50_000);
        learned.cap_batches(80_000);
        assert_eq!(learned.batch_cap, Some(50_000));
        learned.refused("t", 30_000);
        learned.refused("t", 40_000);
        assert_eq!(learned.refused.get("t"), Some(&29_999));
    }
}
