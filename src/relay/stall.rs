//! The stall deadline of an at-least-once relay: when the oldest unacknowledged record has
//! waited most of `message.timeout.ms`, the run ends and every queued record is purged at
//! once, before librdkafka times any of them out on its own.
//!
//! Why (the ordering proof this relies on): librdkafka checks each record's
//! `message.timeout.ms` separately, from the time it was enqueued. Under a broker stall
//! longer than that, the records of one partition time out one after the other; when the
//! broker answers between two of them, the first has failed and the next is still sent and
//! delivered (the idempotent producer bumps its epoch and goes on, KIP-360). The restart then
//! publishes the failed record again *after* its successor: a document's change is first seen
//! behind a later one (found by the 90 s stall scenario, `tests/faults/stalls.rs`).
//!
//! Ending the run first closes that gap:
//! - the deadline is `message.timeout.ms − min(2 s, timeout / 4)` from the time the window
//!   took the record, microseconds after librdkafka took it; librdkafka times a record out
//!   at its deadline or later (its scan runs every second), never earlier, so when ours
//!   passes no record of the run has failed by timeout (the tick that checks it runs every
//!   500 ms, well inside the margin);
//! - the relay then fails the run, and `Relay::run` purges the producer's queue and in-flight
//!   records together (`KafkaSink::purge`): librdkafka sends a partition's records in order,
//!   so what can still reach the broker (requests already sent) is a prefix of what was
//!   enqueued, and the restart publishes again from a committed position at or before it;
//! - exactly-once has no such deadline: an open transaction is aborted as a whole.
//!
//! Invariant: only the relay's tick calls [`Relay::stalled`]; it never fails a run whose
//! records librdkafka would still deliver in time.

use std::time::Duration;

use super::Relay;
use crate::error::BridgeError;

/// How long before `message.timeout.ms` the run ends: the smaller of 2 s and a quarter of it.
pub(super) fn stall_after(message_timeout: Duration) -> Option<Duration> {
    if message_timeout.is_zero() {
        return None; // records never time out: nothing fails one by one
    }
    let margin = (message_timeout / 4).min(Duration::from_secs(2));
    Some(message_timeout - margin)
}

impl Relay {
    /// The error that ends an at-least-once run whose oldest unacknowledged record waited past
    /// [`stall_after`], if it did.
    pub(super) fn stalled(&self) -> Option<BridgeError> {
        if self.transactions.is_some() {
            return None;
        }
        let timeout = self.sink.message_timeout();
        let deadline = stall_after(timeout)?;
        let waited = self.window.oldest()?.elapsed();
        (waited >= deadline).then(|| BridgeError::DeliveryStalled {
            pipeline: self.pipeline.to_string(),
            topic: self.window.oldest_topic().unwrap_or_default().to_owned(),
            waited_ms: waited.as_millis() as u64,
            timeout_ms: timeout.as_millis() as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_comes_before_the_timeout_by_at_most_two_seconds() {
        assert_eq!(stall_after(Duration::ZERO), None);
        let at = |ms| stall_after(Duration::from_millis(ms)).map(|d| d.as_millis());
        assert_eq!(at(28_000), Some(26_000));
        assert_eq!(at(8_000), Some(6_000));
        assert_eq!(at(1_000), Some(750));
    }
}
