//! The relay's acknowledgements: entries the window yields fold into the delivered prefix's
//! state, which is published for the checkpointer; and the drain at the end of a run.
//!
//! WARNING: this code decides what gets committed. The window yields entries in read order and
//! the relay stops at the first `Err`, so every folded entry ends a contiguous prefix of
//! delivered entries (the proof is in `window.rs`); only such a prefix's state is published.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::enqueue::Pending;
use super::window::Completed;
use super::{Mark, Relay};
use crate::error::BridgeError;
use crate::observe::health::now_ms;

/// Bound of one burst in `complete_ready`, so a full window of completed entries (up to
/// `max_in_flight_events`) does not hold the runtime thread for long without a yield.
const MAX_COMPLETIONS_PER_WAKE: usize = 1024;

impl Relay {
    /// Takes `first` and up to [`MAX_COMPLETIONS_PER_WAKE`] further entries the window has ready
    /// without waiting, then publishes the last position once (one checkpointer wake-up and one
    /// gauge update per burst of deliveries, not per event). On an error, the positions before
    /// it are still published.
    pub(super) fn complete_ready(
        &mut self,
        first: Result<Completed<Mark>, BridgeError>,
    ) -> Result<(), BridgeError> {
        use futures::FutureExt as _;
        let mut next = Some(first);
        let mut taken = 0;
        let mut any = false;
        while let Some(result) = next {
            taken += 1;
            match result {
                Ok(done) => {
                    any = true;
                    self.fold(done);
                }
                Err(e) => {
                    if any {
                        self.publish();
                    }
                    return Err(e);
                }
            }
            if taken > MAX_COMPLETIONS_PER_WAKE {
                break;
            }
            next = self.window.next().now_or_never().flatten();
        }
        if any {
            self.publish();
        }
        Ok(())
    }

    /// Takes one delivered entry into the delivered prefix's state.
    pub(super) fn fold(&mut self, done: Completed<Mark>) {
        // The window yields in read order and we stop at the first error, so this entry ends
        // a contiguous prefix of delivered entries (proof in `window.rs`).
        match done.position {
            Mark::Stream(position) => self.delivered.stream = Some(position),
            Mark::Snapshot(state) => self.delivered.snapshot = Some(state),
            Mark::Nothing => {}
        }
        if done.is_event {
            self.health.kafka_failing.store(false, Ordering::Relaxed);
            if let Some(topic) = &done.topic {
                self.health.delivered_to(topic);
            }
        }
    }

    /// Publishes the delivered prefix's state for the checkpointer; exactly-once, only a state
    /// no open transaction holds (the commit publishes the others, see [`transaction`](super::exactly_once)).
    pub(super) fn publish(&mut self) {
        if self.publishes_untransacted() {
            self.safe.send_replace(self.delivered.clone());
        }
        self.publish_gauges();
    }

    pub(super) fn complete(&mut self, done: Completed<Mark>) {
        self.fold(done);
        self.publish();
    }

    pub(super) fn publish_gauges(&self) {
        self.metrics
            .in_flight_events
            .set(self.window.events() as i64);
        self.metrics.in_flight_bytes.set(self.window.bytes() as i64);
        let oldest = self
            .window
            .oldest()
            .map_or(0, |at| now_ms() - at.elapsed().as_millis() as i64);
        self.health
            .oldest_in_flight_ms
            .store(oldest, Ordering::Relaxed);
    }

    /// Waits for in-flight deliveries up to the drain timeout, publishing each safe position,
    /// then flushes the producer explicitly (its `Drop` would purge the queue). Ends by the
    /// deadline whatever is still in flight, including an event waiting for room in the queue.
    pub(super) async fn drain(&mut self, pending: Option<Pending>) -> Result<(), BridgeError> {
        let deadline = Instant::now() + self.limits.drain_timeout;
        let mut pending = pending;
        loop {
            if let Some(p) = pending.take() {
                pending = self.enqueue(p)?;
            }
            if self.window.is_empty() && pending.is_none() {
                break;
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            let next = async {
                match self.window.next().await {
                    Some(done) => Some(done),
                    // Nothing of ours in flight: wait for room in the queue, then try again.
                    None => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        None
                    }
                }
            };
            match tokio::time::timeout(remaining, next).await {
                Ok(Some(done)) => self.complete(done?),
                Ok(None) => {}
                Err(_) => {
                    tracing::warn!(
                        pipeline = %self.pipeline,
                        undelivered_events = self.window.events() + usize::from(pending.is_some()),
                        "drain timed out; the undelivered events will be read again after restart"
                    );
                    break;
                }
            }
        }
        if self.window.is_empty() && pending.is_none() {
            self.end_transaction().await?;
        } else {
            self.abort_transaction().await;
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        self.sink
            .flush(remaining.max(Duration::from_millis(100)))
            .await;
        self.publish_gauges();
        Ok(())
    }
}
