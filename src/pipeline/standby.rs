//! Standing by: after another instance fenced this one, watch the owner's lease and take the
//! pipeline back only once it lapsed, with one compare-and-set ([`OffsetsStore::take_lapsed`]).
//!
//! Invariants:
//! - A standby is live: its loop ticks the pipeline's heartbeat on every look.
//! - A standby is ready: it records the owner and the lease end for `/readyz`.
//! - Of several standbys of one pipeline, exactly one takes it when its owner dies (the take
//!   filters on the epoch read and on the lapsed lease); the others keep standing by.

use std::time::Duration;

use bson::DateTime;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::cancellable;
use crate::error::report;
use crate::health::PipelineHealth;
use crate::offsets::OffsetsStore;

/// How often a standby reads the offsets document.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Stands by until this instance took the pipeline over; the new epoch, or `None` when
/// `cancel` fires first. Read errors just wait for the next look.
pub(super) async fn wait(
    store: &OffsetsStore,
    health: &PipelineHealth,
    cancel: &CancellationToken,
) -> Option<i64> {
    let taken = loop {
        health.beat();
        match cancellable(cancel, look(store, health)).await {
            None => break None,
            Some(Some(epoch)) => break Some(epoch),
            Some(None) => {}
        }
        if cancellable(cancel, tokio::time::sleep(LOOK_EVERY))
            .await
            .is_none()
        {
            break None;
        }
    };
    health.clear_standby();
    health.loop_ended();
    taken
}

/// One look: records the live owner, or tries to take a lapsed pipeline. The new epoch when
/// this instance won.
async fn look(store: &OffsetsStore, health: &PipelineHealth) -> Option<i64> {
    let doc = match store.read().await {
        Ok(doc) => doc,
        Err(e) => {
            debug!(error = %report(&e, &[]), "standby: offsets not readable; looking again");
            return None;
        }
    };
    if let Some((owner, until)) = doc.as_ref().and_then(|d| d.live_owner(DateTime::now())) {
        health.set_standby(owner, until.timestamp_millis());
        return None;
    }
    match store.take_lapsed(doc.as_ref()).await {
        Ok(Some(taken)) => taken.epoch,
        // Another standby was first, or the owner renewed in between: keep standing by.
        Ok(None) => None,
        Err(e) => {
            debug!(error = %report(&e, &[]), "standby: take-over failed; looking again");
            None
        }
    }
}
