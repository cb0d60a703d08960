//! Exactly-once positions with no record behind them (watermarks, snapshot states): each
//! reaches the offsets document only through a Kafka transaction that carries its progress
//! record alone, so the document never holds a position Kafka did not commit first
//! (`offsets/exactly_once/standing.rs` relies on it to tell a document ahead of Kafka).
//!
//! Invariants:
//! - While a transaction is open, such a position waits for it (its commit carries the
//!   delivered prefix's position, whatever it is).
//! - With none open, it is committed at rest (an empty batch, the relay's tick) at most every
//!   [`POSITION_INTERVALS`] × `commit_interval_ms`, and at a drain: a quiet or filtered stream
//!   writes one small transaction per ten commit intervals (10 s by default) while its
//!   position moves, and none while it does not (heartbeats aside, below). A restart in between resumes from the last
//!   committed record and reads again only events that publish nothing (none were delivered
//!   after it), at most that much of the stream.
//! - A due heartbeat (`relay/heartbeat.rs`) rides in such a transaction, written just before
//!   its progress record, whether or not the position moved: a heartbeat is never outside a
//!   transaction, and it commits the latest post-batch token with it.
//! - A failed drain-time commit of such a position is logged, never an error: nothing was
//!   published after the last committed record, so nothing can be lost or repeated by it.

use std::time::Instant;

use super::Open;
use crate::error::BridgeError;
use crate::relay::Relay;

/// How many commit intervals a position with no record behind it waits at most before a
/// transaction of its progress record alone commits it.
pub(crate) const POSITION_INTERVALS: u32 = 10;

impl Relay {
    /// Whether the delivered prefix's state may be published now, with no transaction:
    /// at least once always; exactly once never (a transaction publishes it: the open one,
    /// or [`Relay::commit_unsent`]'s), noting it is due when no transaction is open.
    pub(crate) fn publishes_untransacted(&mut self) -> bool {
        let Some(t) = &mut self.transactions else {
            return true;
        };
        if t.open.is_none() {
            t.unsent = true;
        }
        false
    }

    /// Commits the delivered position in a transaction of its progress record alone (and a
    /// due heartbeat, `relay/heartbeat.rs`), when one is due (no transaction open, and a
    /// heartbeat due, or a position waiting [`POSITION_INTERVALS`] commit intervals since the
    /// last commit or `now`).
    ///
    /// Errors: a failed begin or commit.
    pub(crate) async fn commit_unsent(&mut self, now: bool) -> Result<(), BridgeError> {
        let beat = self.heartbeat_due();
        let Some(t) = &mut self.transactions else {
            return Ok(());
        };
        let waited = t.last_commit.elapsed() >= t.interval * POSITION_INTERVALS;
        if t.open.is_some() || !(beat || t.unsent && (now || waited)) {
            return Ok(());
        }
        self.sink
            .begin_transaction()
            .map_err(|e| self.transaction_error("begin", e))?;
        if let Some(t) = &mut self.transactions {
            t.open = Some(Open {
                since: Instant::now(),
                events: 0,
                records: 0,
                txn: None,
            });
        }
        self.commit_transaction().await
    }

    /// [`Relay::commit_unsent`] at a drain, best effort (its failure loses nothing).
    pub(crate) async fn commit_unsent_at_drain(&mut self) -> Result<(), BridgeError> {
        if let Err(e) = self.commit_unsent(true).await {
            tracing::warn!(pipeline = %self.pipeline, error = %e,
                "committing the last position (no record behind it) failed at the drain; the \
                 next run resumes from the last committed transaction");
            self.abort_transaction().await;
        }
        Ok(())
    }
}
