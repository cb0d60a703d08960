//! The checkpointer task: writes the relay's delivered state (stream position and snapshot
//! state) to the offsets document every `commit_interval_ms` while it moves, renews the
//! lease while it does not, makes a final commit when the relay drops its sender, and tells
//! the source about snapshot requests.
//!
//! Invariants:
//! - Only states the relay published are written, in the order published (`watch` keeps the
//!   latest; every one of them ends a delivered prefix, see `window.rs`), so the committed
//!   position and copy state never pass an undelivered record and never regress.
//! - The first failed write ends the task with its error (a fenced owner writes nothing more).
//! - A snapshot request (`snapshot` command, stored while this owner runs) reaches the source
//!   within [`REQUEST_POLL`]; the request a snapshot answers is removed once that snapshot's
//!   state is committed, never before (a crash in between answers it again).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::error::BridgeError;
use crate::event::Safe;
use crate::observe::metrics::PipelineMetrics;
use crate::offsets::OffsetsStore;
use crate::snapshot::{Request, SharedState};

/// How often the offsets document is read for a snapshot request.
pub(crate) const REQUEST_POLL: Duration = Duration::from_secs(5);

/// Writes `safe` states of epoch `epoch` every `interval`, and feeds `requests`; returns once
/// the relay closed the channel and the final commit succeeded.
///
/// Errors: the first failed write ([`BridgeError::Fenced`] when another instance took over).
pub(crate) async fn run(
    store: OffsetsStore,
    epoch: i64,
    mut safe: watch::Receiver<Safe>,
    interval: Duration,
    metrics: PipelineMetrics,
    requests: watch::Sender<Option<Request>>,
) -> Result<(), BridgeError> {
    let mut committed_events = 0;
    let mut committed_snapshot: Option<SharedState> = None;
    let mut consumed: Option<String> = None;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut polled = Instant::now();
    let mut dirty = false;
    loop {
        let closed = tokio::select! {
            _ = ticker.tick() => false,
            changed = safe.changed() => match changed {
                Ok(()) => { dirty = true; continue }
                Err(_) => true,
            },
        };
        let state = take(&mut safe, &mut dirty);
        let started = Instant::now();
        let snapshot = state.snapshot.as_ref().filter(|s| {
            !committed_snapshot
                .as_ref()
                .is_some_and(|c| Arc::ptr_eq(c, s))
        });
        let outcome = if dirty && (state.stream.is_some() || snapshot.is_some()) {
            let events = state
                .stream
                .as_ref()
                .map_or(committed_events, |p| p.event_count);
            let delta = events.saturating_sub(committed_events);
            let stream = state.stream.as_ref();
            store
                .commit(
                    epoch,
                    stream,
                    snapshot.map(|s| &**s),
                    delta,
                    state.committed,
                )
                .await
                .map(|()| {
                    committed_events = events;
                    dirty = false;
                    if let Some(p) = stream {
                        metrics.committed(p.cluster_time, p.position_time);
                    }
                    committed_snapshot = state.snapshot.clone();
                    "ok"
                })
        } else {
            store.renew(epoch).await.map(|()| "lease")
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
        if let Some(s) = &committed_snapshot
            && let Some(at) = s.requested_at
            && consumed.as_deref() != Some(s.id.as_str())
        {
            store.consume_request(epoch, at).await?;
            consumed = Some(s.id.clone());
        }
        if closed {
            return Ok(());
        }
        if polled.elapsed() >= REQUEST_POLL {
            polled = Instant::now();
            if let Ok(Some(doc)) = store.read().await {
                requests.send_if_modified(|current| {
                    let changed = *current != doc.snapshot_request;
                    *current = doc.snapshot_request;
                    changed
                });
            }
        }
    }
}

/// The latest safe state, marked seen; sets `dirty` when it was published since the last look.
/// A value counts even when the tick (or the close) won the race against `changed()`: marking
/// it seen without a commit would lose the relay's last position (the relay then drops its
/// sender, and the final commit would find nothing new: the next owner replays it).
fn take(safe: &mut watch::Receiver<Safe>, dirty: &mut bool) -> Safe {
    let seen = safe.borrow_and_update();
    *dirty |= seen.has_changed();
    seen.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_published_but_not_yet_awaited_still_counts_as_new() {
        let (tx, mut rx) = watch::channel(Safe::default());
        let mut dirty = false;
        let _ = take(&mut rx, &mut dirty);
        assert!(!dirty, "nothing was published");
        // WHEN the relay publishes and drops its sender before `changed()` was polled
        tx.send_replace(Safe::default());
        drop(tx);
        // THEN the state taken on the tick is dirty: the final commit writes it
        let _ = take(&mut rx, &mut dirty);
        assert!(dirty);
    }
}
