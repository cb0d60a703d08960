//! History headroom: how far the oldest oplog entry is behind each committed position.
//!
//! A resume token is only usable while its event is still in the oplog; once the oplog rolls
//! past it the pipeline fails with `ChangeStreamHistoryLost` (286). The bridge samples the oldest
//! and newest oplog entry times every `[metrics] history_interval_ms` (default 15 s; 0 = off) and
//! exports
//! `history_headroom_seconds = committed position time − oldest entry time` per pipeline
//! (= the oplog window minus the position's age; see [`crate::metrics::HISTORY_HEADROOM`]).
//!
//! Invariants:
//! - Only what the server reports is exported. When it cannot tell (a `mongos`, a user without
//!   `find` on `local.oplog.rs`, an empty oplog), the series are absent and one log line names
//!   the call that failed; the line is repeated only when the reason changes.
//! - The oldest entry comes from `find` on `local.oplog.rs` sorted `{$natural: 1}`, limit 1 (what
//!   `rs.printReplicationInfo()` reads): an index-free read of one document at the oplog's start.

use std::time::Duration;

use bson::{Document, Timestamp, doc};
use mongodb::Client;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::metrics::Metrics;

/// Bound of one sample's calls.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The oldest and newest entry times of the oplog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OplogBounds {
    /// `ts` of the oldest entry.
    pub oldest: Timestamp,
    /// `ts` of the newest entry.
    pub newest: Timestamp,
}

impl OplogBounds {
    /// Newest minus oldest, in seconds.
    pub fn window_secs(&self) -> u32 {
        self.newest.time.saturating_sub(self.oldest.time)
    }
}

/// Reads the oplog bounds. Errors: a sentence naming the call that failed and why (for a log
/// line or a check; never a metric label).
pub async fn oplog_bounds(client: &Client) -> Result<OplogBounds, String> {
    let oldest = edge(client, 1).await?;
    let newest = edge(client, -1).await?;
    Ok(OplogBounds { oldest, newest })
}

async fn edge(client: &Client, direction: i32) -> Result<Timestamp, String> {
    let call = format!("find on local.oplog.rs sorted {{$natural: {direction}}}");
    let oplog = client.database("local").collection::<Document>("oplog.rs");
    let find = oplog
        .find_one(doc! {})
        .sort(doc! { "$natural": direction })
        .projection(doc! { "ts": 1, "_id": 0 })
        .max_time(CALL_TIMEOUT);
    // `maxTimeMS` bounds the server's work; this bounds the wait for an unreachable server.
    let found = tokio::time::timeout(CALL_TIMEOUT + Duration::from_secs(1), find.into_future())
        .await
        .map_err(|_| format!("{call} timed out"))?;
    match found {
        Ok(Some(entry)) => entry
            .get_timestamp("ts")
            .map_err(|_| format!("{call} returned an entry without a `ts` timestamp")),
        Ok(None) => Err(format!(
            "{call} found no entry (no oplog here: a mongos, or a standalone server)"
        )),
        Err(e) => Err(format!(
            "{call} failed: {}",
            crate::error::describe_mongo(&e)
        )),
    }
}

/// A short description of a driver error: the server's code name and code when there is one.
/// Samples the oplog bounds every `interval` (the first at once) into `metrics` until `cancel`
/// fires. A zero `interval` returns at once: the history series stay absent.
pub async fn run(client: Client, metrics: Metrics, interval: Duration, cancel: CancellationToken) {
    if interval.is_zero() {
        tracing::info!("history headroom sampling is off ([metrics] history_interval_ms = 0)");
        return;
    }
    let mut last_error: Option<String> = None;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticker.tick() => {}
        }
        match oplog_bounds(&client).await {
            Ok(bounds) => {
                if last_error.take().is_some() {
                    info!(
                        window_s = bounds.window_secs(),
                        "history headroom: oplog bounds known again"
                    );
                }
                metrics.set_history(Some((
                    f64::from(bounds.oldest.time),
                    f64::from(bounds.newest.time),
                )));
            }
            Err(reason) => {
                metrics.set_history(None);
                if last_error.as_deref() != Some(reason.as_str()) {
                    warn!(
                        reason = %reason,
                        "history headroom unknown: the server does not report its oldest oplog \
                         entry, so mongo_kafka_bridge_history_headroom_seconds is not exported \
                         (if the server is reachable, grant `find` on local.oplog.rs, e.g. the \
                         clusterMonitor role, to fix)"
                    );
                    last_error = Some(reason);
                }
            }
        }
    }
}
