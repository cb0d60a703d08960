//! A running pipeline's writes of its position: the commit (with the snapshot's delivered
//! state and, exactly-once, the commit sequence Kafka committed it under), the start time of
//! a first start, snapshot requests, and the move of the history-loss policy `skip`.
//!
//! Invariants: every write filters on `{_id, epoch}` and uses write concern `majority`
//! ([`OffsetsStore`]'s `update`); a position is only ever one the relay published, written in
//! the order published, so the committed position never regresses.

use bson::{DateTime, Timestamp, doc};

use super::store::{OffsetsStore, majority};
use super::{fields, moved_to, snapshot};
use crate::error::BridgeError;
use crate::event::Position;
use crate::snapshot::{Request, SnapshotState};

impl OffsetsStore {
    /// Stores `startAtOperationTime` so a restart before the first commit starts there too.
    pub(crate) async fn set_start_time(
        &self,
        epoch: i64,
        at: Timestamp,
    ) -> Result<(), BridgeError> {
        self.update(
            epoch,
            doc! { "$set": { fields::START_AT_OPERATION_TIME: at } },
        )
        .await
    }

    /// Writes `position` (and `events` more committed events) and the snapshot's delivered
    /// state, when given, with majority write concern, in one update. A finished snapshot's
    /// state is replaced by its `lastSnapshot` summary. `sequenced`: for a position Kafka
    /// committed first (exactly-once), its commit sequence and progress-record offset, stored
    /// as they are (`commitSequence` only rises: `$max`); `None` raises `commitSequence` by one.
    ///
    /// The write also extends `leaseUntil`; once it succeeded, the lease is recorded as valid
    /// until the time the write started plus the lease.
    ///
    /// Errors: [`BridgeError::Fenced`] when our epoch is no longer current.
    pub(crate) async fn commit(
        &self,
        epoch: i64,
        position: Option<&Position>,
        snapshot: Option<&SnapshotState>,
        events: u64,
        sequenced: Option<(i64, Option<i64>)>,
    ) -> Result<(), BridgeError> {
        let started_ms = DateTime::now().timestamp_millis();
        let (mut set, unset) = super::exactly_once::position_fields(position, snapshot)
            .map_err(|r| self.invalid(r))?;
        set.insert(fields::OWNER, &self.owner);
        set.insert(fields::LEASE_UNTIL, self.lease_until());
        set.insert(fields::BRIDGE_VERSION, env!("CARGO_PKG_VERSION"));
        let mut inc = doc! { fields::EVENTS_COMMITTED: events as i64 };
        let mut update = doc! {};
        match sequenced {
            Some((sequence, offset)) => {
                update.insert("$max", doc! { fields::COMMIT_SEQUENCE: sequence });
                set.insert(fields::DELIVERY, "exactly_once");
                if let Some(offset) = offset {
                    set.insert(fields::PROGRESS_OFFSET, offset);
                }
            }
            None => {
                inc.insert(fields::COMMIT_SEQUENCE, 1_i64);
                set.insert(fields::DELIVERY, "at_least_once");
            }
        }
        update.insert("$set", set);
        update.insert("$inc", inc);
        if !unset.is_empty() {
            update.insert("$unset", unset);
        }
        self.update(epoch, update).await?;
        self.lease_written(started_ms);
        Ok(())
    }

    /// Removes the snapshot request answered by the snapshot that recorded `requested_at`
    /// (only that one: a newer request waits for its turn).
    pub(crate) async fn consume_request(
        &self,
        epoch: i64,
        requested_at: DateTime,
    ) -> Result<(), BridgeError> {
        let request_at = format!("{}.requestedAt", fields::SNAPSHOT_REQUEST);
        self.collection
            .update_one(
                doc! { fields::ID: &self.pipeline, fields::EPOCH: epoch, request_at: requested_at },
                doc! { "$unset": { fields::SNAPSHOT_REQUEST: "" } },
            )
            .write_concern(majority())
            .await
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// Stores a snapshot request (the first start of a `snapshot = "initial"` pipeline, or a
    /// re-sync after a lost history) if none waits yet.
    pub(crate) async fn request_snapshot(
        &self,
        epoch: i64,
        request: &Request,
    ) -> Result<(), BridgeError> {
        let stored = snapshot::request_doc(request, &self.owner);
        self.update(epoch, doc! { "$set": { fields::SNAPSHOT_REQUEST: stored } })
            .await
    }

    /// Moves the position to `at` on purpose (history-loss policy `skip`): the token is removed
    /// and the next start uses `startAtOperationTime: at` ([`moved_to`]).
    /// With `resync` (`on_history_lost = "snapshot"`), the same update stores that snapshot
    /// request, so a crash after it still re-syncs.
    pub(crate) async fn move_to(
        &self,
        epoch: i64,
        at: Timestamp,
        resync: Option<&Request>,
    ) -> Result<(), BridgeError> {
        let (mut set, unset) = moved_to(at);
        if let Some(request) = resync {
            set.insert(
                fields::SNAPSHOT_REQUEST,
                snapshot::request_doc(request, &self.owner),
            );
        }
        self.update(epoch, doc! { "$set": set, "$unset": unset })
            .await
    }
}
