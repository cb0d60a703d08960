//! Standing by: after another instance fenced this one, watch the owner's lease and take the
//! pipeline back only once it lapsed, with one compare-and-set ([`OffsetsStore::take_lapsed`]).
//! And the other side of a take-over: [`take_over`] waits out a fenced predecessor's lease
//! before the first record.
//!
//! Invariants:
//! - A standby is live: its loop ticks the pipeline's heartbeat on every look.
//! - A standby is ready: it records the owner and the lease end for `/readyz`.
//! - Of several standbys of one pipeline, exactly one takes it when its owner dies (the take
//!   filters on the epoch read and on the lapsed lease); the others keep standing by.
//! - Per-document order across a take-over (at-least-once): an owner fenced while its lease ran
//!   (paused, or killed with records queued) stops taking events once it cannot renew in time,
//!   and librdkafka fails each queued record `message.timeout.ms` (≤ `lease_ms −
//!   commit_interval_ms − 1 s`) after it was enqueued, so none of its records can be delivered
//!   after its lease's end. The new owner publishes its first record only after that end, so
//!   an older record of a document never lands after a newer one. (Exactly-once needs no wait:
//!   the new producer's `init_transactions` aborts the old one's open transaction.)

use std::time::Duration;

use bson::DateTime;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::stage::cancellable;
use crate::error::{BridgeError, report};
use crate::observe::health::PipelineHealth;
use crate::offsets::OffsetsStore;

/// How often a standby reads the offsets document.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// What one look found.
enum Look {
    /// Keep standing by.
    Wait,
    /// This instance took the pipeline: its epoch.
    Taken(i64),
    /// The pipeline's position belongs to another stream identity or MongoDB cluster.
    Refused(BridgeError),
}

/// Stands by until this instance took the pipeline over; the new epoch, or `None` when
/// `cancel` fires first. Read errors just wait for the next look.
///
/// Errors: [`BridgeError::ConfigChanged`] when the position (of a new owner that ran another
/// configuration) belongs to another stream identity, [`BridgeError::Cluster`] when it belongs
/// to another MongoDB cluster: this instance never takes it.
pub(super) async fn wait(
    store: &OffsetsStore,
    health: &PipelineHealth,
    cancel: &CancellationToken,
) -> Result<Option<i64>, BridgeError> {
    let taken = loop {
        health.beat();
        match cancellable(cancel, beating(health, look(store, health))).await {
            None => break Ok(None),
            Some(Look::Taken(epoch)) => break Ok(Some(epoch)),
            Some(Look::Refused(error)) => break Err(error),
            Some(Look::Wait) => {}
        }
        if cancellable(cancel, tokio::time::sleep(LOOK_EVERY))
            .await
            .is_none()
        {
            break Ok(None);
        }
    };
    health.clear_standby();
    health.loop_ended();
    taken
}

/// How often a standby's heartbeat ticks while a look waits for MongoDB.
const BEAT_EVERY: Duration = Duration::from_millis(500);

/// Runs `work`, ticking the heartbeat meanwhile: a slow offsets read (a loaded server, an
/// election) is not a dead process, and must not fail the liveness probe of a standby.
async fn beating<T>(health: &PipelineHealth, work: impl Future<Output = T>) -> T {
    let mut work = std::pin::pin!(work);
    let mut tick = tokio::time::interval(BEAT_EVERY);
    loop {
        tokio::select! {
            out = &mut work => return out,
            _ = tick.tick() => health.beat(),
        }
    }
}

/// One look: records the live owner, or tries to take a lapsed pipeline.
async fn look(store: &OffsetsStore, health: &PipelineHealth) -> Look {
    let doc = match store.read().await {
        Ok(doc) => doc,
        Err(e) => {
            debug!(error = %report(&e, &[]), "standby: offsets not readable; looking again");
            return Look::Wait;
        }
    };
    if let Some((owner, until)) = doc.as_ref().and_then(|d| d.live_owner(DateTime::now())) {
        health.set_standby(owner, until.timestamp_millis());
        return Look::Wait;
    }
    match store.take_lapsed(doc.as_ref()).await {
        Ok(Some(taken)) => taken.epoch.map_or(Look::Wait, Look::Taken),
        // Another standby was first, or the owner renewed in between: keep standing by.
        Ok(None) => Look::Wait,
        Err(e) if super::policy::is_refusal(&e) => Look::Refused(e),
        Err(e) => {
            debug!(error = %report(&e, &[]), "standby: take-over failed; looking again");
            Look::Wait
        }
    }
}

/// Takes the pipeline (fencing any older owner) and, when the previous owner's lease was still
/// running, waits for its end before the run's first record, then renews ours (the wait may
/// have used most of it). Under exactly-once it does not wait (module doc). `None` when
/// `cancel` fired during the wait.
///
/// Errors: the take's, or the renewal's (a successor fenced this instance meanwhile).
pub(super) async fn take_over(
    ctx: &super::context::PipelineContext,
    store: &OffsetsStore,
    cancel: &CancellationToken,
) -> Option<Result<crate::offsets::OffsetsDoc, BridgeError>> {
    let (name, health) = (ctx.pipeline.name.as_str(), &ctx.health);
    let wait_for_predecessor = ctx.pipeline.delivery != crate::config::Delivery::ExactlyOnce;
    let what = "taking its offsets document";
    let taken = cancellable(
        cancel,
        super::waiting::said(name, health, what, store.take_from()),
    );
    let (offsets, until) = match taken.await? {
        Ok(taken) => taken,
        Err(e) => return Some(Err(e)),
    };
    tracing::info!(pipeline = %name, epoch = offsets.epoch, "took the pipeline");
    ctx.metrics.owned.set(1);
    let Some(until) = until.filter(|_| wait_for_predecessor) else {
        return Some(Ok(offsets));
    };
    let epoch = offsets
        .epoch
        .expect("a taken offsets document has an epoch");
    let left = until.timestamp_millis() - DateTime::now().timestamp_millis();
    if left > 0 {
        tracing::info!(pipeline = %name, wait_ms = left,
            "waiting for the previous owner's lease to end before the first record: its queued \
             records expire by then (per-document order)");
        // Live meanwhile (the heartbeat ticks as a standby's does), and our own lease is
        // renewed every look: the wait may be as long as a lease, and a standby must never
        // see ours lapse before our first record.
        let end = tokio::time::Instant::now() + Duration::from_millis(left as u64);
        health.lease_wait_until_ms.store(
            until.timestamp_millis(),
            std::sync::atomic::Ordering::Relaxed,
        );
        let waited = async {
            while let Some(rest) = end.checked_duration_since(tokio::time::Instant::now())
                && !rest.is_zero()
            {
                health.beat();
                store.renew(epoch).await?;
                if cancellable(cancel, tokio::time::sleep(rest.min(LOOK_EVERY)))
                    .await
                    .is_none()
                {
                    return Ok(false);
                }
            }
            Ok(true)
        };
        let waited: Result<bool, BridgeError> = waited.await;
        health
            .lease_wait_until_ms
            .store(0, std::sync::atomic::Ordering::Relaxed);
        match waited {
            Err(e) => return Some(Err(e)),
            Ok(false) => return None,
            Ok(true) => {}
        }
    }
    Some(store.renew(epoch).await.map(|()| offsets))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    #[tokio::test]
    async fn the_heartbeat_ticks_while_a_look_waits_for_the_server() {
        let health = PipelineHealth::default();
        let slow = async {
            tokio::time::sleep(Duration::from_millis(1300)).await;
            crate::observe::health::now_ms()
        };
        let done_at = beating(&health, slow).await;
        let last = health.heartbeat_ms.load(Ordering::Relaxed);
        assert!(
            done_at - last <= 600,
            "last beat {} ms before the end",
            done_at - last
        );
    }
}
