//! A running pipeline's access to its offsets document: taking it, reading it, renewing and
//! releasing the lease (its commits are in `commit.rs`).
//!
//! Invariants:
//! - Ownership: [`OffsetsStore::take`] increments `epoch` conditionally on the epoch it just read
//!   (`findOneAndUpdate`); every later write filters on `{_id, epoch}`. A write that matches
//!   nothing means another instance took the pipeline: [`BridgeError::Fenced`].
//! - A standby takes a pipeline only through [`OffsetsStore::take_lapsed`]: one compare-and-set
//!   on the epoch it read *and* a lapsed lease, so of several standbys exactly one wins.
//! - Every take-over is conditional on the stream identity recorded (or its absence): an
//!   instance configured with another identity is refused ([`BridgeError::ConfigChanged`])
//!   before the epoch moves. A document without one (written by an older version, or reset)
//!   is adopted: the take records the configured identity.
//! - Likewise for the MongoDB cluster (`cluster.rs`): read from the server once per store (a
//!   pipeline's start), bounded in time, checked by every take before the epoch moves, and
//!   recorded by it.
//! - Never regresses: only positions from the relay's ordered window are written, by one task,
//!   in the order they were published (see `window.rs`), and a fenced writer writes nothing.
//! - `leaseUntil` is refreshed every commit interval even when the position did not move, so
//!   tools can tell a live owner from a dead one; [`OffsetsStore::lease_valid_until`] is what the
//!   relay gates intake on (self-fencing).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use bson::{DateTime, Document, doc};
use mongodb::options::{ReturnDocument, WriteConcern};
use mongodb::{Client, Collection};

use super::identity::{StreamIdentity, describe};
use super::{OffsetsDoc, SCHEMA_VERSION, fields};
use crate::config::names::OffsetsLocation;
use crate::error::{BridgeError, CODE_DUPLICATE_KEY, mongo_code};
use crate::mongo::cluster::ClusterRead;

/// Attempts of the read-then-increment take-over before giving up.
const TAKE_ATTEMPTS: usize = 10;

/// Access to the offsets collection for one pipeline.
#[derive(Clone)]
pub struct OffsetsStore {
    pub(super) collection: Collection<Document>,
    pub(super) pipeline: String,
    pub(super) owner: String,
    identity: Arc<StreamIdentity>,
    /// The cluster the client reaches, once read (`cluster.rs`).
    pub(super) cluster: Arc<tokio::sync::OnceCell<ClusterRead>>,
    lease: Duration,
    lease_valid_until: Arc<AtomicI64>,
}

/// A new `streamUid`: an ObjectId's hex (12 bytes: seconds, a per-process random value, a
/// counter), unique across deployments without coordination.
fn new_stream_uid() -> String {
    bson::oid::ObjectId::new().to_hex()
}

pub(super) fn majority() -> WriteConcern {
    WriteConcern::majority()
}

impl OffsetsStore {
    /// A store for `pipeline` of stream `identity` in the offsets at `location`, owned by
    /// instance `owner`, with leases of `lease`.
    pub fn new(
        client: &Client,
        location: impl Into<OffsetsLocation>,
        pipeline: &str,
        identity: StreamIdentity,
        owner: &str,
        lease: Duration,
    ) -> Self {
        let location = location.into();
        let collection = client
            .database(&location.database)
            .collection::<Document>(&location.collection);
        Self {
            collection,
            pipeline: pipeline.to_owned(),
            owner: owner.to_owned(),
            identity: Arc::new(identity),
            cluster: Arc::default(),
            lease,
            lease_valid_until: Arc::default(),
        }
    }

    /// The pipeline's name.
    pub(crate) fn pipeline(&self) -> &str {
        &self.pipeline
    }

    /// The condition a take-over puts on the stored identity, after checking `current` against
    /// the configured one. Errors: [`BridgeError::ConfigChanged`] when they differ.
    fn identity_filter(&self, current: Option<&OffsetsDoc>) -> Result<Document, BridgeError> {
        match current.and_then(|c| c.fingerprint.as_deref()) {
            Some(stored) if stored != self.identity.fingerprint => {
                let stored_stream = current.and_then(|c| c.stream.as_ref());
                Err(BridgeError::ConfigChanged {
                    pipeline: self.pipeline.clone(),
                    stored: stored_stream.map_or_else(|| format!("fingerprint {stored}"), describe),
                    configured: describe(&self.identity.stream),
                })
            }
            Some(stored) => Ok(doc! { fields::FINGERPRINT: stored }),
            None => Ok(doc! { fields::FINGERPRINT: { "$exists": false } }),
        }
    }

    /// Unix ms until which our lease is known to hold: the start of the last successful write
    /// of `leaseUntil` plus the lease. Shared by clones. The relay takes no new event after it
    /// (self-fencing: a paused or partitioned instance stops publishing before its successor's
    /// takeover could go unnoticed for long).
    pub(crate) fn lease_valid_until(&self) -> Arc<AtomicI64> {
        Arc::clone(&self.lease_valid_until)
    }

    pub(super) fn lease_written(&self, started_ms: i64) {
        let until = started_ms + self.lease.as_millis() as i64;
        self.lease_valid_until.fetch_max(until, Ordering::Relaxed);
    }

    pub(super) fn error(&self, source: mongodb::error::Error) -> BridgeError {
        BridgeError::Checkpoint {
            pipeline: self.pipeline.clone(),
            source: Box::new(source),
        }
    }

    pub(super) fn invalid(&self, reason: String) -> BridgeError {
        BridgeError::OffsetsDocument {
            pipeline: self.pipeline.clone(),
            reason,
        }
    }

    pub(super) fn lease_until(&self) -> DateTime {
        DateTime::from_millis(DateTime::now().timestamp_millis() + self.lease.as_millis() as i64)
    }

    fn parse(&self, found: &Document) -> Result<OffsetsDoc, BridgeError> {
        OffsetsDoc::parse(found).map_err(|reason| self.invalid(reason))
    }

    /// The update of a take-over of `seen` (the document as read; `None`: there is none): the
    /// next epoch, our owner string, a fresh lease, the configured stream identity and the
    /// `cluster` found (when known). A document without a `streamUid` gets a new one (the take
    /// is conditional on the epoch read, so two takes never record two).
    fn take_update(&self, seen: Option<&OffsetsDoc>, cluster: Option<Document>) -> Document {
        let id = &*self.identity;
        let mut set = doc! { fields::OWNER: &self.owner, fields::LEASE_UNTIL: self.lease_until(),
        fields::BRIDGE_VERSION: env!("CARGO_PKG_VERSION"),
        fields::SCHEMA_VERSION: SCHEMA_VERSION,
        fields::FINGERPRINT: &id.fingerprint, fields::STREAM: id.stream.clone(),
        fields::KEY_FORMAT: id.key_format };
        if seen.is_none_or(|d| d.stream_uid.is_none()) {
            set.insert(fields::STREAM_UID, new_stream_uid());
        }
        if let Some(cluster) = cluster {
            set.insert(fields::CLUSTER, cluster);
        }
        doc! { "$inc": { fields::EPOCH: 1_i64 }, "$set": set, "$unset": { fields::FAILURE: "" } }
    }

    /// The stored document, if any (no ownership check).
    pub(crate) async fn read(&self) -> Result<Option<OffsetsDoc>, BridgeError> {
        let found = self
            .collection
            .find_one(doc! { fields::ID: &self.pipeline })
            .await
            .map_err(|e| self.error(e))?;
        found.as_ref().map(|d| self.parse(d)).transpose()
    }

    /// Takes the pipeline: increments `epoch`, sets `owner` and `leaseUntil`, returns the stored
    /// position with the new epoch. Any instance holding an older epoch is fenced from now on.
    ///
    /// Errors: [`BridgeError::OffsetsDocument`] for a document this version cannot read (before
    /// anything is written), [`BridgeError::Checkpoint`] when MongoDB fails.
    pub async fn take(&self) -> Result<OffsetsDoc, BridgeError> {
        self.take_from().await.map(|(taken, _)| taken)
    }

    /// [`OffsetsStore::take`], and the end of the previous owner's lease when it was another
    /// instance's and still running: until then its queued records may still be delivered.
    pub(crate) async fn take_from(&self) -> Result<(OffsetsDoc, Option<DateTime>), BridgeError> {
        // Conditional on the epoch just read, so a stale request (say, of a process killed while
        // its take-over was in flight) cannot bump the epoch after a successor took it.
        let found = self.cluster().await?;
        for _ in 0..TAKE_ATTEMPTS {
            // Read (creating the document if it is missing) with findAndModify, like every
            // other write here, rather than a plain find.
            let current = self
                .collection
                .find_one_and_update(
                    doc! { fields::ID: &self.pipeline },
                    doc! { "$setOnInsert": { fields::EVENTS_COMMITTED: 0_i64,
                    fields::SCHEMA_VERSION: SCHEMA_VERSION,
                    fields::STREAM_UID: new_stream_uid() } },
                )
                .upsert(true)
                .return_document(ReturnDocument::After)
                .write_concern(majority())
                .await;
            let current = match current {
                Ok(Some(current)) => self.parse(&current)?,
                Ok(None) => continue,
                Err(e) if mongo_code(&e) == Some(CODE_DUPLICATE_KEY) => continue,
                Err(e) => return Err(self.error(e)),
            };
            let mut filter = match current.epoch {
                Some(epoch) => doc! { fields::ID: &self.pipeline, fields::EPOCH: epoch },
                None => doc! { fields::ID: &self.pipeline, fields::EPOCH: { "$exists": false } },
            };
            let cluster = self.cluster_checked(Some(&current), found)?;
            filter.extend(self.identity_filter(Some(&current))?);
            if let Some(taken) = self
                .take_where(filter, Some(&current), cluster, false)
                .await?
            {
                self.log_identity_changes(&current);
                let live_until = self.live_owner_until(&current);
                return Ok((taken, live_until));
            }
            // Another instance changed the epoch in between: read again.
        }
        Err(self.invalid(
            "the epoch kept changing while taking the pipeline; another instance is taking it at \
             the same time"
                .to_owned(),
        ))
    }

    /// What a take-over changed beside ownership: a document without a stream identity adopted,
    /// a changed `key_format` (every key moves to new bytes, and compacted topics keep two
    /// records per document).
    fn log_identity_changes(&self, before: &OffsetsDoc) {
        let pipeline = &self.pipeline;
        if before.fingerprint.is_none() && before.position().is_some() {
            tracing::info!(%pipeline, stream = %describe(&self.identity.stream),
                "the offsets document had no stream identity (an older version or a reset \
                 wrote it): recorded the configured one");
        }
        if let Some(old) = before.key_format.as_deref()
            && old != self.identity.key_format
        {
            tracing::warn!(%pipeline, from = old, to = self.identity.key_format,
                "key_format changed: every key moves to new bytes (and possibly another \
                 partition), so a compacted topic keeps two records per document until the old \
                 ones are deleted");
        }
    }

    /// The end of the lease of another owner that was still running at a take-over (a rolling
    /// update, a second instance started by mistake, a crashed process); such a take-over is
    /// said, naming that owner: it is fenced at its next write.
    fn live_owner_until(&self, before: &OffsetsDoc) -> Option<DateTime> {
        let (Some(owner), Some(until)) = (&before.owner, before.lease_until) else {
            return None;
        };
        if until > DateTime::now() && *owner != self.owner {
            tracing::warn!(pipeline = %self.pipeline, from = %owner,
                lease_until = %until.try_to_rfc3339_string().unwrap_or_default(),
                "took the pipeline from an owner whose lease was still running, which is \
                 fenced at its next write and stands by if it is alive: expected in a rolling \
                 update, or after that owner's process was killed or crashed; otherwise two \
                 instances run this configuration (use [bridge] group_id for replicas)");
            return Some(until);
        }
        None
    }

    /// Takes the pipeline only if its epoch is still the one of `seen` (the document a standby
    /// read; `None`: there was none) and its lease has lapsed (or it has none): one
    /// compare-and-set, so of several standbys exactly one wins. `Ok(None)` when another
    /// instance was first, or the owner renewed in between.
    ///
    /// Errors: [`BridgeError::Cluster`] when `seen` records another cluster (or the cluster
    /// cannot be read), [`BridgeError::ConfigChanged`] another stream identity.
    pub async fn take_lapsed(
        &self,
        seen: Option<&OffsetsDoc>,
    ) -> Result<Option<OffsetsDoc>, BridgeError> {
        let epoch = match seen.and_then(|d| d.epoch) {
            Some(epoch) => bson::Bson::Int64(epoch),
            None => bson::bson!({ "$exists": false }),
        };
        let mut filter = doc! {
            fields::ID: &self.pipeline,
            fields::EPOCH: epoch,
            "$or": [
                { fields::LEASE_UNTIL: { "$lt": DateTime::now() } },
                { fields::LEASE_UNTIL: { "$exists": false } },
            ],
        };
        let cluster = self.cluster_checked(seen, self.cluster().await?)?;
        filter.extend(self.identity_filter(seen)?);
        // A deleted document (`offsets reset --delete`) is created by the winner; a concurrent
        // insert of another standby meets DuplicateKey and loses.
        let upsert = seen.is_none();
        self.take_where(filter, seen, cluster, upsert).await
    }

    async fn take_where(
        &self,
        filter: Document,
        seen: Option<&OffsetsDoc>,
        cluster: Option<Document>,
        upsert: bool,
    ) -> Result<Option<OffsetsDoc>, BridgeError> {
        let started_ms = DateTime::now().timestamp_millis();
        let taken = self
            .collection
            .find_one_and_update(filter, self.take_update(seen, cluster))
            .upsert(upsert)
            .return_document(ReturnDocument::After)
            .write_concern(majority())
            .await;
        match taken {
            Ok(Some(found)) => {
                self.lease_written(started_ms);
                self.parse(&found).map(Some)
            }
            Ok(None) => Ok(None),
            Err(e) if mongo_code(&e) == Some(CODE_DUPLICATE_KEY) => Ok(None),
            Err(e) => Err(self.error(e)),
        }
    }

    /// Reads the stored position again (on a restart) and checks we still own it.
    pub(crate) async fn load(&self, epoch: i64) -> Result<OffsetsDoc, BridgeError> {
        let offsets = self.read().await?.ok_or_else(|| {
            self.invalid("the document was deleted while the pipeline ran".to_owned())
        })?;
        if offsets.epoch != Some(epoch) {
            return Err(BridgeError::Fenced {
                pipeline: self.pipeline.clone(),
                epoch,
            });
        }
        Ok(offsets)
    }

    /// Ends the lease now (clean or fatal stop), so standbys, tools and `offsets reset` see no
    /// live owner.
    pub(crate) async fn release(&self, epoch: i64) -> Result<(), BridgeError> {
        self.update(
            epoch,
            doc! { "$set": { fields::LEASE_UNTIL: DateTime::now() } },
        )
        .await
    }

    /// Ends our lease and records why the pipeline stopped on a failure (`error`, redacted by
    /// the caller), for `offsets` and `check` to show until the next take.
    pub(crate) async fn release_failed(&self, epoch: i64, error: &str) -> Result<(), BridgeError> {
        let failure = doc! { "at": DateTime::now(), "error": error };
        self.update(
            epoch,
            doc! { "$set": { fields::LEASE_UNTIL: DateTime::now(), fields::FAILURE: failure } },
        )
        .await
    }

    /// Refreshes `leaseUntil` only.
    pub async fn renew(&self, epoch: i64) -> Result<(), BridgeError> {
        let started_ms = DateTime::now().timestamp_millis();
        self.update(
            epoch,
            doc! { "$set": { fields::LEASE_UNTIL: self.lease_until() } },
        )
        .await?;
        self.lease_written(started_ms);
        Ok(())
    }

    /// Applies `update` (whose `$set` gains `schemaVersion`) if our `epoch` is still current.
    pub(super) async fn update(&self, epoch: i64, mut update: Document) -> Result<(), BridgeError> {
        if let Ok(set) = update.get_document_mut("$set") {
            set.insert(fields::SCHEMA_VERSION, SCHEMA_VERSION);
        }
        let result = self
            .collection
            .update_one(
                doc! { fields::ID: &self.pipeline, fields::EPOCH: epoch },
                update,
            )
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
