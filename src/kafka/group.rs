//! Group membership: one Kafka consumer per process, in the group `[bridge] group_id`,
//! subscribed to the group's control topic, whose partitions stand for pipelines (slots). The
//! group coordinator decides which member owns which slot; this module only reports the
//! changes ([`Change`]) to the supervisor ([`crate::group`]). The control topic carries no
//! records; the consumer never commits offsets.
//!
//! Invariants:
//! - The consumer is polled on a dedicated OS thread ([`Member`]), never on the pipelines'
//!   runtime: librdkafka runs the rebalance callback on the polling thread, and the revoke
//!   callback blocks it.
//! - A revocation returns from the callback only after the supervisor answered (the revoked
//!   pipelines drained, committed and released their leases), or after the drain bound; only
//!   then does librdkafka tell the coordinator, which hands the slots to other members. So a
//!   slot that moves in a cooperative rebalance is never run by two members at once, except
//!   after an eviction, where the epoch fences the evicted member.
//! - The assignor is `cooperative-sticky` by default (KIP-429, client-side on the classic
//!   protocol): slots that do not move keep running through a rebalance. With an eager
//!   assignor every rebalance revokes every slot first.
//! - Dropping the consumer (on the member thread, when [`Member::leave`] is called) leaves the
//!   group: librdkafka revokes what it still holds through the same callback, then leaves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::topic_partition_list::TopicPartitionList;
use tokio::sync::mpsc::UnboundedSender;

use super::context::KafkaContext;
use crate::config::KafkaConfig;

/// The bridge's default `session.timeout.ms` for the group (ms): an evicted member's slots
/// move after at most this long (librdkafka's own default is 45 000).
pub const DEFAULT_SESSION_TIMEOUT_MS: i64 = 8_000;
/// librdkafka's default `max.poll.interval.ms` (ms).
pub const MAX_POLL_INTERVAL_MS_DEFAULT: i64 = 300_000;

/// Defaults the user may override in `[kafka.group_properties]`. The session timeout and
/// heartbeat give failover within ~15 s of a `kill -9` (eviction after the session timeout, the
/// survivors learn of the rebalance at their next heartbeat); real brokers accept sessions from
/// `group.min.session.timeout.ms` (6 000 by default) on.
/// `topic.metadata.refresh.interval.ms`: how soon the group leader notices the control topic's
/// new partitions when another member extended it (librdkafka's default is 5 minutes).
const DEFAULTS: [(&str, &str); 5] = [
    ("session.timeout.ms", "8000"),
    ("heartbeat.interval.ms", "2000"),
    ("partition.assignment.strategy", "cooperative-sticky"),
    ("topic.metadata.refresh.interval.ms", "10000"),
    ("client.id", "mongo-kafka-bridge-group"),
];

/// How long one poll of the member thread waits (ms); also how soon it notices [`Member::leave`].
const POLL: Duration = Duration::from_millis(100);

/// A change of this member's slots, reported by the rebalance callback.
#[derive(Debug)]
pub enum Change {
    /// These slots were assigned to this member.
    Assigned(Vec<i32>),
    /// These slots are taken away (`lost`: the session was lost, another member may already
    /// run them). The callback waits until `done` is answered or dropped.
    Revoked {
        /// The slots.
        slots: Vec<i32>,
        /// The assignment was lost (eviction) rather than revoked.
        lost: bool,
        /// Answered (or dropped) once the slots' pipelines stopped.
        done: std::sync::mpsc::SyncSender<()>,
    },
    /// A rebalance failed, or the consumer reported an error.
    Error(String),
}

/// `key` of `[kafka.group_properties]` as an integer, `None` when unset.
///
/// Errors: a value that is not an integer.
pub fn group_property_i64(kafka: &KafkaConfig, key: &str) -> Result<Option<i64>, String> {
    match kafka.group_properties.get(key) {
        None => Ok(None),
        Some(v) => v
            .to_string()
            .parse()
            .map(Some)
            .map_err(|_| "must be an integer (ms)".to_owned()),
    }
}

/// The group's `session.timeout.ms` (ms): `[kafka.group_properties]`'s when it is an integer,
/// else [`DEFAULT_SESSION_TIMEOUT_MS`].
pub fn session_timeout_ms(kafka: &KafkaConfig) -> i64 {
    group_property_i64(kafka, "session.timeout.ms")
        .ok()
        .flatten()
        .unwrap_or(DEFAULT_SESSION_TIMEOUT_MS)
}

/// The group consumer's configuration: connection and security properties of
/// `[kafka.properties]`, the bridge's defaults, `[kafka.group_properties]`, then `group.id` and
/// no offset commits.
pub fn consumer_config(kafka: &KafkaConfig, group_id: &str) -> ClientConfig {
    let mut config = super::admin_config(kafka);
    for (key, value) in DEFAULTS {
        config.set(key, value);
    }
    for (key, value) in &kafka.group_properties {
        config.set(key, value.to_string());
    }
    config.set("group.id", group_id);
    config.set("enable.auto.commit", "false");
    config.set("enable.auto.offset.store", "false");
    config
}

/// Checks the group consumer's configuration with librdkafka itself (no client is created).
///
/// Errors: librdkafka's sentence naming the property.
pub fn validate_properties(kafka: &KafkaConfig, group_id: &str) -> Result<(), String> {
    consumer_config(kafka, group_id)
        .create_native_config()
        .map(drop)
        .map_err(|e| match e {
            KafkaError::ClientConfig(_, description, key, value) => {
                format!("{description} (property {key:?}, value {value:?})")
            }
            other => other.to_string(),
        })
}

/// The consumer's context: forwards rebalances to the supervisor.
struct MemberContext {
    logs: KafkaContext,
    topic: String,
    changes: UnboundedSender<Change>,
    drain_bound: Duration,
}

impl rdkafka::ClientContext for MemberContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        rdkafka::ClientContext::log(&self.logs, level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        rdkafka::ClientContext::error(&self.logs, error, reason);
    }
}

impl MemberContext {
    fn slots(&self, tpl: &TopicPartitionList) -> Vec<i32> {
        let mut slots: Vec<i32> = tpl
            .elements_for_topic(&self.topic)
            .iter()
            .map(|e| e.partition())
            .collect();
        slots.sort_unstable();
        slots
    }
}

impl ConsumerContext for MemberContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else {
            return;
        };
        let slots = self.slots(tpl);
        if slots.is_empty() {
            return;
        }
        let (done, answered) = std::sync::mpsc::sync_channel(1);
        let lost = consumer.assignment_lost();
        let revoked = Change::Revoked { slots, lost, done };
        if self.changes.send(revoked).is_err() {
            return; // the supervisor has stopped: nothing runs any more
        }
        let waited = Instant::now();
        // Bounded: `shutdown_timeout_ms` (< max.poll.interval.ms, validated) plus a margin.
        if answered.recv_timeout(self.drain_bound).is_err() && waited.elapsed() >= self.drain_bound
        {
            tracing::warn!(
                waited_ms = waited.elapsed().as_millis() as u64,
                "group: revoked pipelines did not stop within the drain bound; leaving them to \
                 the epoch fence"
            );
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let _ = self.changes.send(Change::Assigned(self.slots(tpl)));
            }
            Rebalance::Error(e) => {
                let _ = self.changes.send(Change::Error(e.to_string()));
            }
            Rebalance::Revoke(_) => {}
        }
    }
}

/// This process's membership: the thread that polls the group consumer.
pub struct Member {
    stop: Arc<AtomicBool>,
    refresh: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Member {
    /// Joins `group_id` on `topic` (which must exist): builds the consumer, subscribes, and
    /// starts the polling thread. Changes of this member's slots arrive on `changes`; a
    /// revocation waits for its answer up to `drain_bound`.
    ///
    /// Errors: librdkafka's refusal of the consumer configuration or of the subscription.
    pub fn join(
        kafka: &KafkaConfig,
        group_id: &str,
        topic: &str,
        changes: UnboundedSender<Change>,
        drain_bound: Duration,
    ) -> Result<Self, KafkaError> {
        let context = MemberContext {
            logs: KafkaContext::default(),
            topic: topic.to_owned(),
            changes: changes.clone(),
            drain_bound,
        };
        let consumer: BaseConsumer<MemberContext> =
            consumer_config(kafka, group_id).create_with_context(context)?;
        consumer.subscribe(&[topic])?;
        let stop = Arc::new(AtomicBool::new(false));
        let refresh = Arc::new(AtomicBool::new(false));
        let flags = (Arc::clone(&stop), Arc::clone(&refresh));
        let topic = topic.to_owned();
        let thread = std::thread::Builder::new()
            .name("mkb-group".into())
            .spawn(move || poll_until(&consumer, &topic, &flags, &changes))
            .map_err(|_| KafkaError::Subscription("cannot start the group thread".into()))?;
        Ok(Self {
            stop,
            refresh,
            thread: Some(thread),
        })
    }

    /// A flag that makes the member thread fetch the control topic's metadata at its next
    /// poll (after this member extended it): if this member leads the group, it rebalances
    /// onto the new partitions at once instead of after `topic.metadata.refresh.interval.ms`.
    pub fn refresher(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.refresh)
    }

    /// Leaves the group: stops polling and closes the consumer (which revokes what it still
    /// holds through the callback). Blocks until librdkafka closed it: call it on the blocking
    /// pool.
    pub fn leave(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // Without `leave` (a panic elsewhere): the thread stops at its next poll and closes the
        // consumer itself.
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The member thread: polls until `stop` (`flags.0`), reporting consumer errors, and fetches
/// `topic`'s metadata when asked (`flags.1`); the consumer is dropped (closed) on this thread
/// at the end.
fn poll_until(
    consumer: &BaseConsumer<MemberContext>,
    topic: &str,
    flags: &(Arc<AtomicBool>, Arc<AtomicBool>),
    changes: &UnboundedSender<Change>,
) {
    let (stop, refresh) = flags;
    while !stop.load(Ordering::Relaxed) {
        if refresh.swap(false, Ordering::Relaxed)
            && let Err(e) = consumer.fetch_metadata(Some(topic), Duration::from_secs(5))
        {
            let _ = changes.send(Change::Error(format!("metadata refresh: {e}")));
        }
        if let Some(Err(e)) = consumer.poll(POLL) {
            let _ = changes.send(Change::Error(e.to_string()));
        }
    }
}
