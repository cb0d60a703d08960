//! The checkpointer task: writes the relay's safe position to the offsets document every
//! `commit_interval_ms` while it moves, renews the lease while it does not, and makes a final
//! commit when the relay drops its sender.
//!
//! Invariants:
//! - Only positions the relay published are written, in the order published (`watch` keeps the
//!   latest; every one of them ends a delivered prefix, see `window.rs`), so the committed
//!   position never passes an undelivered record and never regresses.
//! - The first failed write ends the task with its error (a fenced owner writes nothing more).

use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::error::BridgeError;
use crate::event::Position;
use crate::metrics::PipelineMetrics;
use crate::offsets::OffsetsStore;

/// Writes `safe` positions of epoch `epoch` every `interval`; returns once the relay closed the
/// channel and the final commit succeeded.
///
/// Errors: the first failed write ([`BridgeError::Fenced`] when another instance took over).
pub async fn run(
    store: OffsetsStore,
    epoch: i64,
    mut safe: watch::Receiver<Option<Position>>,
    interval: Duration,
    metrics: PipelineMetrics,
) -> Result<(), BridgeError> {
    let mut committed_events = 0;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut dirty = false;
    loop {
        let closed = tokio::select! {
            _ = ticker.tick() => false,
            changed = safe.changed() => match changed {
                Ok(()) => { dirty = true; continue }
                Err(_) => true,
            },
        };
        let position = safe.borrow_and_update().clone();
        let started = Instant::now();
        let outcome = match &position {
            Some(p) if dirty => {
                let delta = p.event_count.saturating_sub(committed_events);
                store.commit_and_renew(epoch, p, delta).await.map(|()| {
                    committed_events = p.event_count;
                    dirty = false;
                    metrics.committed(p.cluster_time, p.position_time);
                    "ok"
                })
            }
            _ => store.renew(epoch).await.map(|()| "lease"),
        };
        metrics
            .commit_duration
            .observe(started.elapsed().as_secs_f64());
        match outcome {
            Ok(label) => metrics.commit(label),
            Err(e) => {
                metrics.commit("error");
                return Err(e);
            }
        }
        if closed {
            return Ok(());
        }
    }
}
