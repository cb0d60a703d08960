//! Offsets in MongoDB: one document per pipeline in `<offsets_database>.<offsets_collection>`,
//! and the checkpointer task that writes the relay's safe position.
//!
//! Document shape (a public contract, see README "Offsets"):
//! `{_id: <pipeline>, resumeToken, clusterTime, positionTime, wallTime, updatedAt,
//!   eventsCommitted: Int64, epoch: Int64, owner, leaseUntil, bridgeVersion,
//!   startAtOperationTime?}`.
//!
//! Invariants:
//! - Ownership: [`OffsetsStore::take`] increments `epoch` (`findOneAndUpdate`, upsert); every
//!   later write filters on `{_id, epoch}`. A write that matches nothing means another instance
//!   took the pipeline: [`BridgeError::Fenced`].
//! - Never regresses: only positions from the relay's ordered window are written, by one task,
//!   in the order they were published (see `window.rs`), and a fenced writer writes nothing.
//! - Every write uses write concern `majority` so a committed position survives a failover.
//! - `leaseUntil` is refreshed every interval even when the position did not move, so tools can
//!   tell a live owner from a dead one.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use bson::{Bson, DateTime, Document, RawDocumentBuf, Timestamp, doc};
use mongodb::options::{ReturnDocument, WriteConcern};
use mongodb::{Client, Collection};
use tokio::sync::watch;

use crate::error::BridgeError;
use crate::event::Position;
use crate::metrics::PipelineMetrics;

/// What the offsets document says when a pipeline starts.
#[derive(Debug, Clone, Default)]
pub struct Offsets {
    /// The committed resume token, if any.
    pub resume_token: Option<RawDocumentBuf>,
    /// Where to start when there is no token (set by `start_at` or an operator reset).
    pub start_at_operation_time: Option<Timestamp>,
    /// `clusterTime` of the last committed event.
    pub cluster_time: Option<Timestamp>,
    /// Our epoch after taking the pipeline.
    pub epoch: i64,
}

/// Attempts of the read-then-increment take-over before giving up.
const TAKE_ATTEMPTS: usize = 10;
/// `DuplicateKey`: an upsert lost a race with a concurrent insert.
pub(crate) const DUPLICATE_KEY: i32 = 11000;

/// Access to the offsets collection for one pipeline.
#[derive(Clone)]
pub struct OffsetsStore {
    collection: Collection<Document>,
    pipeline: String,
    owner: String,
    lease: Duration,
    lease_valid_until: Arc<AtomicI64>,
}

fn majority() -> WriteConcern {
    WriteConcern::majority()
}

impl OffsetsStore {
    /// A store for `pipeline`, owned by instance `owner`, with leases of `lease`.
    pub fn new(
        client: &Client,
        database: &str,
        collection: &str,
        pipeline: &str,
        owner: &str,
        lease: Duration,
    ) -> Self {
        let collection = client.database(database).collection::<Document>(collection);
        Self {
            collection,
            pipeline: pipeline.to_owned(),
            owner: owner.to_owned(),
            lease,
            lease_valid_until: Arc::default(),
        }
    }

    /// Unix ms until which our lease is known to hold: the start of the last successful write
    /// of `leaseUntil` plus the lease. Shared by clones. The relay takes no new event after it
    /// (self-fencing: a paused or partitioned instance stops publishing before its successor's
    /// takeover could go unnoticed for long).
    pub fn lease_valid_until(&self) -> Arc<AtomicI64> {
        Arc::clone(&self.lease_valid_until)
    }

    fn lease_written(&self, started_ms: i64) {
        let until = started_ms + self.lease.as_millis() as i64;
        self.lease_valid_until.fetch_max(until, Ordering::Relaxed);
    }

    fn error(&self, source: mongodb::error::Error) -> BridgeError {
        BridgeError::Checkpoint {
            pipeline: self.pipeline.clone(),
            source: Box::new(source),
        }
    }

    fn lease_until(&self) -> DateTime {
        DateTime::from_millis(DateTime::now().timestamp_millis() + self.lease.as_millis() as i64)
    }

    /// Takes the pipeline: increments `epoch`, sets `owner` and `leaseUntil`, returns the stored
    /// position. Any instance holding an older epoch is fenced from now on.
    pub async fn take(&self) -> Result<Offsets, BridgeError> {
        // Conditional on the epoch just read, so a stale request (say, of a process killed while
        // its take-over was in flight) cannot bump the epoch after a successor took it.
        for _ in 0..TAKE_ATTEMPTS {
            // Read (creating the document if it is missing) with findAndModify, like every
            // other write here, rather than a plain find.
            let current = self
                .collection
                .find_one_and_update(
                    doc! { "_id": &self.pipeline },
                    doc! { "$setOnInsert": { "eventsCommitted": 0_i64 } },
                )
                .upsert(true)
                .return_document(ReturnDocument::After)
                .write_concern(majority())
                .await;
            let current = match current {
                Ok(current) => current,
                Err(e) if crate::error::mongo_code(&e) == Some(DUPLICATE_KEY) => continue,
                Err(e) => return Err(self.error(e)),
            };
            let filter = match current.as_ref().map(|d| d.get("epoch")) {
                Some(Some(epoch)) => doc! { "_id": &self.pipeline, "epoch": epoch.clone() },
                _ => doc! { "_id": &self.pipeline, "epoch": { "$exists": false } },
            };
            let started_ms = DateTime::now().timestamp_millis();
            let update = doc! {
            "$inc": { "epoch": 1_i64 },
            "$set": { "owner": &self.owner, "leaseUntil": self.lease_until(),
                      "bridgeVersion": env!("CARGO_PKG_VERSION") },
            };
            let taken = self
                .collection
                .find_one_and_update(filter, update)
                .return_document(ReturnDocument::After)
                .write_concern(majority())
                .await;
            match taken {
                Ok(Some(found)) => {
                    self.lease_written(started_ms);
                    return self.parse(&found);
                }
                // Another instance changed the epoch in between (or inserted first): read again.
                Ok(None) => {}
                Err(e) if crate::error::mongo_code(&e) == Some(DUPLICATE_KEY) => {}
                Err(e) => return Err(self.error(e)),
            }
        }
        Err(self.invalid(
            "the epoch kept changing while taking the pipeline; another instance \
                          is taking it at the same time",
        ))
    }

    /// Reads the stored position again (on a restart) and checks we still own it.
    pub async fn load(&self, epoch: i64) -> Result<Offsets, BridgeError> {
        let found = self
            .collection
            .find_one(doc! { "_id": &self.pipeline })
            .await
            .map_err(|e| self.error(e))?
            .ok_or_else(|| self.invalid("the document was deleted while the pipeline ran"))?;
        let offsets = self.parse(&found)?;
        if offsets.epoch != epoch {
            return Err(BridgeError::Fenced {
                pipeline: self.pipeline.clone(),
                epoch,
            });
        }
        Ok(offsets)
    }

    fn invalid(&self, reason: &str) -> BridgeError {
        BridgeError::OffsetsDocument {
            pipeline: self.pipeline.clone(),
            reason: reason.to_owned(),
        }
    }

    fn parse(&self, found: &Document) -> Result<Offsets, BridgeError> {
        let epoch = match found.get("epoch") {
            Some(Bson::Int64(e)) => *e,
            Some(Bson::Int32(e)) => i64::from(*e),
            _ => return Err(self.invalid("epoch must be an Int64")),
        };
        let resume_token = match found.get("resumeToken") {
            None | Some(Bson::Null) => None,
            Some(Bson::Document(d)) => Some(
                RawDocumentBuf::from_document(d)
                    .map_err(|_| self.invalid("resumeToken is not valid BSON"))?,
            ),
            Some(_) => return Err(self.invalid("resumeToken must be a document")),
        };
        let ts = |key: &str| match found.get(key) {
            Some(Bson::Timestamp(t)) => Some(*t),
            _ => None,
        };
        Ok(Offsets {
            resume_token,
            start_at_operation_time: ts("startAtOperationTime"),
            cluster_time: ts("clusterTime"),
            epoch,
        })
    }

    /// Stores `startAtOperationTime` so a restart before the first commit starts there too.
    pub async fn set_start_time(&self, epoch: i64, at: Timestamp) -> Result<(), BridgeError> {
        self.update(epoch, doc! { "$set": { "startAtOperationTime": at } })
            .await
    }

    /// [`OffsetsStore::commit`] (which also sets `leaseUntil`), recording the lease's validity.
    pub async fn commit_and_renew(
        &self,
        epoch: i64,
        position: &Position,
        events: u64,
    ) -> Result<(), BridgeError> {
        let started_ms = DateTime::now().timestamp_millis();
        self.commit(epoch, position, events).await?;
        self.lease_written(started_ms);
        Ok(())
    }

    /// Writes `position` (and `events` more committed events) with majority write concern.
    /// Errors: [`BridgeError::Fenced`] when our epoch is no longer current.
    pub async fn commit(
        &self,
        epoch: i64,
        position: &Position,
        events: u64,
    ) -> Result<(), BridgeError> {
        let token = position
            .token
            .to_document()
            .map_err(|_| self.invalid("token is not valid BSON"))?;
        let mut set = doc! {
            "resumeToken": token,
            "positionTime": position.position_time,
            "updatedAt": DateTime::now(),
            "owner": &self.owner,
            "leaseUntil": self.lease_until(),
            "bridgeVersion": env!("CARGO_PKG_VERSION"),
        };
        if let Some(ts) = position.cluster_time {
            set.insert("clusterTime", ts);
        }
        if let Some(ms) = position.wall_time_ms {
            set.insert("wallTime", DateTime::from_millis(ms));
        }
        let update = doc! {
            "$set": set,
            "$inc": { "eventsCommitted": events as i64 },
            "$unset": { "startAtOperationTime": "" },
        };
        self.update(epoch, update).await
    }

    /// Moves the position to `at` on purpose (history-loss policy `skip`): the token is removed
    /// and the next start uses `startAtOperationTime: at`.
    pub async fn reset_to(&self, epoch: i64, at: Timestamp) -> Result<(), BridgeError> {
        let update = doc! {
            "$set": { "startAtOperationTime": at, "positionTime": at, "updatedAt": DateTime::now() },
            "$unset": { "resumeToken": "" },
        };
        self.update(epoch, update).await
    }

    /// Whether a live owner holds the pipeline (its `leaseUntil` is in the future).
    pub async fn is_held(&self) -> Result<bool, BridgeError> {
        let found = self
            .collection
            .find_one(doc! { "_id": &self.pipeline })
            .await
            .map_err(|e| self.error(e))?;
        let until = found
            .as_ref()
            .and_then(|d| d.get_datetime("leaseUntil").ok().copied());
        Ok(until.is_some_and(|t| t > DateTime::now()))
    }

    /// Ends the lease now (clean shutdown), so tools and `offsets reset` see no live owner.
    pub async fn release(&self, epoch: i64) -> Result<(), BridgeError> {
        self.update(epoch, doc! { "$set": { "leaseUntil": DateTime::now() } })
            .await
    }

    /// Refreshes `leaseUntil` only.
    pub async fn renew(&self, epoch: i64) -> Result<(), BridgeError> {
        let started_ms = DateTime::now().timestamp_millis();
        self.renew_lease(epoch).await?;
        self.lease_written(started_ms);
        Ok(())
    }

    async fn renew_lease(&self, epoch: i64) -> Result<(), BridgeError> {
        self.update(epoch, doc! { "$set": { "leaseUntil": self.lease_until() } })
            .await
    }

    async fn update(&self, epoch: i64, update: Document) -> Result<(), BridgeError> {
        let result = self
            .collection
            .update_one(doc! { "_id": &self.pipeline, "epoch": epoch }, update)
            .write_concern(majority())
            .await
            .map_err(|e| self.error(e))?;
        if result.matched_count == 0 {
            return Err(BridgeError::Fenced {
                pipeline: self.pipeline.clone(),
                epoch,
            });
        }
        Ok(())
    }
}

/// Writes the relay's safe position every `interval` while it moves, renews the lease while it
/// does not, and makes a final commit when the relay drops its sender. Returns the last
/// committed position.
pub async fn run_checkpointer(
    store: OffsetsStore,
    epoch: i64,
    mut safe: watch::Receiver<Option<Position>>,
    interval: Duration,
    metrics: PipelineMetrics,
    mut committed_events: u64,
) -> Result<(), BridgeError> {
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
        let started = std::time::Instant::now();
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
