//! History headroom: how far the oldest oplog entry is behind each committed position.
//!
//! A resume token is only usable while its event is still in the oplog; once the oplog rolls
//! past it the pipeline fails with `ChangeStreamHistoryLost` (286). The bridge samples the oldest
//! and newest oplog entry times every `[metrics] history_interval_ms` (default 15 s; 0 = off) and
//! exports
//! `history_headroom_seconds = committed position time − oldest entry time` per pipeline
//! (= the oplog window minus the position's age; see [`crate::observe::metrics::HISTORY_HEADROOM`]).
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

use crate::observe::metrics::Metrics;

/// Bound of one sample's calls.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The oldest and newest entry times of the oplog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OplogBounds {
    /// `ts` of the oldest entry.
    pub oldest: Timestamp,
    /// `ts` of the newest entry.
    pub newest: Timestamp,
}

impl OplogBounds {
    /// Newest minus oldest, in seconds.
    pub(crate) fn window_secs(&self) -> u32 {
        self.newest.time.saturating_sub(self.oldest.time)
    }
}

/// Why the oplog bounds are unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OplogUnknown {
    /// A sentence naming the call that failed and why (for a log line or a check; never a
    /// metric label).
    pub reason: String,
    /// The server refused the read (`Unauthorized`): a privilege is missing.
    pub refused: bool,
}

impl std::fmt::Display for OplogUnknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// The hint that goes with an [`OplogUnknown`] the server refused.
pub(crate) const PRIVILEGE_HINT: &str =
    "grant `find` on local.oplog.rs (e.g. the clusterMonitor role)";

/// Reads the oplog bounds. Errors: [`OplogUnknown`].
pub(crate) async fn oplog_bounds(client: &Client) -> Result<OplogBounds, OplogUnknown> {
    let oldest = edge(client, 1).await?;
    let newest = edge(client, -1).await?;
    Ok(OplogBounds { oldest, newest })
}

async fn edge(client: &Client, direction: i32) -> Result<Timestamp, OplogUnknown> {
    let call = format!("find on local.oplog.rs sorted {{$natural: {direction}}}");
    let oplog = client.database("local").collection::<Document>("oplog.rs");
    let find = oplog
        .find_one(doc! {})
        .sort(doc! { "$natural": direction })
        .projection(doc! { "ts": 1, "_id": 0 })
        .max_time(CALL_TIMEOUT);
    // `maxTimeMS` bounds the server's work; this bounds the wait for an unreachable server.
    let unknown = |reason: String, refused| OplogUnknown { reason, refused };
    let found = tokio::time::timeout(CALL_TIMEOUT + Duration::from_secs(1), find.into_future())
        .await
        .map_err(|_| unknown(format!("{call} timed out"), false))?;
    match found {
        Ok(Some(entry)) => entry.get_timestamp("ts").map_err(|_| {
            unknown(
                format!("{call} returned an entry without a `ts` timestamp"),
                false,
            )
        }),
        Ok(None) => Err(unknown(
            format!("{call} found no entry (no oplog here: a mongos, or a standalone server)"),
            false,
        )),
        Err(e) => Err(unknown(
            format!("{call} failed: {}", crate::error::describe_mongo(&e)),
            crate::error::mongo_code(&e) == Some(crate::error::CODE_UNAUTHORIZED),
        )),
    }
}

/// Samples the oplog bounds every `interval` (the first at once) into `metrics` until `cancel`
/// fires. A zero `interval` returns at once: the history series stay absent.
pub(crate) async fn run(
    client: Client,
    metrics: Metrics,
    interval: Duration,
    cancel: CancellationToken,
) {
    if interval.is_zero() {
        tracing::info!("history headroom sampling is off ([metrics] history_interval_ms = 0)");
        return;
    }
    let mut last_error: Option<OplogUnknown> = None;
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
            Err(unknown) => {
                metrics.set_history(None);
                if last_error.as_ref() != Some(&unknown) {
                    if unknown.refused {
                        warn!(reason = %unknown, hint = PRIVILEGE_HINT,
                            "history headroom unknown: the server refuses to read its oplog, so \
                             mongo_kafka_bridge_history_headroom_seconds is not exported");
                    } else {
                        warn!(reason = %unknown,
                            "history headroom unknown for now: \
                             mongo_kafka_bridge_history_headroom_seconds is not exported until \
                             the oplog's bounds can be read again");
                    }
                    last_error = Some(unknown);
                }
            }
        }
    }
}
