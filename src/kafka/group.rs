//! Group membership: one Kafka consumer per process, in the group `[bridge] group_id`,
//! subscribed to the group's control topic, whose partitions stand for pipelines (slots). The
//! group coordinator decides which member owns which slot; this module only reports the
//! changes ([`Change`]) to the supervisor ([`crate::supervisor::group`]). The control topic carries no
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

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::topic_partition_list::TopicPartitionList;
use tokio::sync::mpsc::UnboundedSender;

use super::context::KafkaContext;
use crate::config::KafkaConfig;
use crate::config::group::consumer_config;

/// How long one poll of the member thread waits (ms); also how soon it notices [`Member::leave`].
const POLL: Duration = Duration::from_millis(100);

/// A change of this member's slots, reported by the rebalance callback.
#[derive(Debug)]
pub(crate) enum Change {
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
pub(crate) struct Member {
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
    pub(crate) fn join(
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
    pub(crate) fn refresher(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.refresh)
    }

    /// Leaves the group: stops polling and closes the consumer (which revokes what it still
    /// holds through the callback). Blocks until librdkafka closed it: call it on the blocking
    /// pool.
    pub(crate) fn leave(mut self) {
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
