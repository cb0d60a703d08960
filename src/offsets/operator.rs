//! Operator access to the offsets documents, for the `offsets` command and `check`: read any
//! pipeline's document, move its position, delete it.
//!
//! Invariants: every write filters on the epoch read before it (a concurrent take-over makes it
//! match nothing instead of racing), increments the epoch (a running owner is fenced on its next
//! write instead of overwriting the reset), ends the lease, and uses write concern `majority`.
//! A reset removes the stream identity and the cluster (the next start records the configured
//! stream and the cluster it reaches); accepting a configuration (or a cluster, `cluster.rs`)
//! records it and keeps the position.

use bson::{Bson, DateTime, Document, Timestamp, doc};
use mongodb::error::Error as MongoError;
use mongodb::{Client, Collection};

use super::snapshot::{request_doc, request_from};
use super::store::majority;
use super::{SCHEMA_VERSION, StreamIdentity, fields, moved_to};
use crate::config::MongoConfig;
use crate::error::{BridgeError, CODE_DUPLICATE_KEY, mongo_code};
use crate::snapshot::Request;

/// How often a snapshot request is merged again after another writer changed the waiting one.
const REQUEST_ATTEMPTS: usize = 16;

/// The offsets collection of a configuration.
pub(crate) struct OffsetsAdmin {
    pub(super) collection: Collection<Document>,
}

impl OffsetsAdmin {
    /// The offsets collection `[mongodb]` names.
    pub(crate) fn new(client: &Client, mongodb: &MongoConfig) -> Self {
        Self {
            collection: client
                .database(&mongodb.offsets_database)
                .collection(&mongodb.offsets_collection),
        }
    }

    /// The document of pipeline `name`, as stored.
    pub(crate) async fn find(&self, name: &str) -> Result<Option<Document>, MongoError> {
        self.collection.find_one(doc! { fields::ID: name }).await
    }

    /// Stores a snapshot request for pipeline `name` (creating its document if it has none),
    /// without touching its epoch: the owner is not fenced, it picks the request up while it
    /// streams. A request already waiting is merged with this one ([`Request::merge`]), never
    /// replaced, unless the running snapshot answers it (then this one runs after that
    /// snapshot): the write is a compare-and-set on the waiting request as read, tried again
    /// when another writer (a second `snapshot` command, the owner starting a snapshot) got
    /// there first. Returns the request as stored, and whether a live owner held the pipeline
    /// then (its lease had not lapsed).
    ///
    /// Errors: [`BridgeError::Checkpoint`] when MongoDB fails; [`BridgeError::OffsetsDocument`]
    /// when the waiting request cannot be read, or kept changing for every attempt.
    pub(crate) async fn request_snapshot(
        &self,
        name: &str,
        request: &Request,
        by: &str,
    ) -> Result<(Request, bool), BridgeError> {
        let failed = |e: MongoError| BridgeError::Checkpoint {
            pipeline: name.to_owned(),
            source: Box::new(e),
        };
        let invalid = |reason: String| BridgeError::OffsetsDocument {
            pipeline: name.to_owned(),
            reason,
        };
        for _ in 0..REQUEST_ATTEMPTS {
            let Some(current) = self.find(name).await.map_err(failed)? else {
                let created = doc! {
                    fields::ID: name,
                    fields::SNAPSHOT_REQUEST: request_doc(request, by),
                    fields::EVENTS_COMMITTED: 0_i64,
                    fields::SCHEMA_VERSION: SCHEMA_VERSION,
                };
                match self
                    .collection
                    .insert_one(created)
                    .write_concern(majority())
                    .await
                {
                    Ok(_) => return Ok((request.clone(), false)),
                    Err(e) if mongo_code(&e) == Some(CODE_DUPLICATE_KEY) => continue,
                    Err(e) => return Err(failed(e)),
                }
            };
            // A request the running snapshot answers (it recorded its `requestedAt`) is not
            // merged: its namespaces are being copied now, and the owner removes the request
            // only if its `requestedAt` is unchanged; this one replaces it and runs after.
            let answering = current
                .get_document(fields::SNAPSHOT)
                .ok()
                .and_then(|s| s.get_datetime("requestedAt").ok().copied());
            let stored = match request_from(&current).map_err(invalid)? {
                Some(waiting) if Some(waiting.requested_at) != answering => {
                    waiting.merge(request.clone())
                }
                _ => request.clone(),
            };
            let seen = current
                .get(fields::SNAPSHOT_REQUEST)
                .cloned()
                .unwrap_or(Bson::Null);
            let applied = self
                .collection
                .update_one(
                    doc! { fields::ID: name, fields::SNAPSHOT_REQUEST: seen },
                    doc! { "$set": { fields::SNAPSHOT_REQUEST: request_doc(&stored, by) } },
                )
                .write_concern(majority())
                .await
                .map_err(failed)?;
            if applied.matched_count == 1 {
                let live = current
                    .get_datetime(fields::LEASE_UNTIL)
                    .is_ok_and(|until| *until > DateTime::now());
                return Ok((stored, live));
            }
        }
        Err(invalid(format!(
            "its snapshot request changed {REQUEST_ATTEMPTS} times while this one was being \
             merged with it: run the command again"
        )))
    }

    /// Every document, by pipeline name.
    pub(crate) async fn list(&self) -> Result<Vec<Document>, MongoError> {
        use futures::TryStreamExt;
        self.collection
            .find(doc! {})
            .sort(doc! { fields::ID: 1 })
            .await?
            .try_collect()
            .await
    }

    /// Forgets the position of `name` if its epoch is still `epoch`: removes every field but
    /// the epoch, which is incremented, the sequences and `streamUid` (the next start follows the pipeline's `start_at`).
    /// The document itself stays so that epochs are never reused: an instance still holding
    /// an old epoch (a paused process) is fenced on its next write, as after any reset, instead
    /// of matching a re-created document that starts again at epoch 1. Whether it applied.
    ///
    /// `before` is the document as read: its `commitSequence` is kept and its `resetSequence`
    /// raised, so an exactly-once pipeline's older progress record never wins over the reset.
    pub(crate) async fn forget(
        &self,
        name: &str,
        epoch: Option<i64>,
        before: &Document,
        owner: &str,
    ) -> Result<bool, MongoError> {
        let Some(epoch) = epoch else {
            // Not even an epoch: nothing anyone could still hold.
            let result = self
                .collection
                .delete_one(doc! { fields::ID: name, fields::EPOCH: { "$exists": false } })
                .write_concern(majority())
                .await?;
            return Ok(result.deleted_count == 1);
        };
        let mut kept = doc! {
            fields::ID: name,
            fields::EPOCH: epoch + 1,
            fields::EVENTS_COMMITTED: 0_i64,
            fields::COMMIT_SEQUENCE: sequence(before, fields::COMMIT_SEQUENCE),
            fields::RESET_SEQUENCE: sequence(before, fields::RESET_SEQUENCE) + 1,
            fields::LEASE_UNTIL: DateTime::now(),
            fields::OWNER: owner,
            fields::UPDATED_AT: DateTime::now(),
            fields::SCHEMA_VERSION: SCHEMA_VERSION,
            fields::BRIDGE_VERSION: env!("CARGO_PKG_VERSION"),
        };
        // Kept: the pipeline's Kafka transactional.id and progress records stay its own.
        if let Ok(uid) = before.get_str(fields::STREAM_UID) {
            kept.insert(fields::STREAM_UID, uid);
        }
        let result = self
            .collection
            .replace_one(doc! { fields::ID: name, fields::EPOCH: epoch }, kept)
            .write_concern(majority())
            .await?;
        Ok(result.matched_count == 1)
    }

    /// Moves `name` to cluster time `at` without a token ([`moved_to`]), increments the epoch
    /// (read as `epoch`; `None` creates the document) and ends the lease, recording `owner` as
    /// the writer. Whether the write applied (`false`: the document changed in between).
    pub(crate) async fn move_to(
        &self,
        name: &str,
        epoch: Option<i64>,
        at: Timestamp,
        owner: &str,
    ) -> Result<bool, MongoError> {
        let (mut set, mut unset) = moved_to(at);
        set.insert(fields::LEASE_UNTIL, DateTime::now());
        set.insert(fields::OWNER, owner);
        unset.insert(fields::FINGERPRINT, "");
        unset.insert(fields::STREAM, "");
        unset.insert(fields::CLUSTER, "");
        let Some(epoch) = epoch else {
            set.insert(fields::SCHEMA_VERSION, SCHEMA_VERSION);
            return self.insert_first(name, set).await;
        };
        let update = doc! {
            "$set": set,
            "$unset": unset,
            "$inc": { fields::EPOCH: 1_i64, fields::RESET_SEQUENCE: 1_i64 },
        };
        self.update_matching(doc! { fields::ID: name, fields::EPOCH: epoch }, update)
            .await
    }

    /// Records `identity` as the stream `name`'s position belongs to, keeping the position,
    /// incrementing the epoch (read as `epoch`) and ending the lease, with `owner` as the
    /// writer. Whether the write applied (`false`: the document changed in between).
    pub(crate) async fn accept_config(
        &self,
        name: &str,
        epoch: Option<i64>,
        identity: &StreamIdentity,
        owner: &str,
    ) -> Result<bool, MongoError> {
        let set = doc! {
            fields::FINGERPRINT: &identity.fingerprint,
            fields::STREAM: identity.stream.clone(),
            fields::KEY_FORMAT: identity.key_format,
            fields::LEASE_UNTIL: DateTime::now(),
            fields::OWNER: owner,
            fields::SCHEMA_VERSION: SCHEMA_VERSION,
            fields::BRIDGE_VERSION: env!("CARGO_PKG_VERSION"),
        };
        let update = doc! { "$set": set, "$inc": { fields::EPOCH: 1_i64 } };
        self.update_matching(doc! { fields::ID: name, fields::EPOCH: epoch }, update)
            .await
    }
}

/// An integer sequence field of `d` (0 when absent or of another type).
pub(super) fn sequence(d: &Document, key: &str) -> i64 {
    match d.get(key) {
        Some(bson::Bson::Int64(v)) => *v,
        Some(bson::Bson::Int32(v)) => i64::from(*v),
        _ => 0,
    }
}

impl OffsetsAdmin {
    /// Applies `update` to the document `filter` matches (the epoch read before an operator
    /// write), with write concern `majority`. Whether it matched (`false`: the document changed
    /// in between).
    pub(super) async fn update_matching(
        &self,
        filter: Document,
        update: Document,
    ) -> Result<bool, MongoError> {
        let result = self
            .collection
            .update_one(filter, update)
            .write_concern(majority())
            .await?;
        Ok(result.matched_count == 1)
    }

    /// Creates pipeline `name`'s document from `fields_set` (what an operator write sets) with
    /// epoch 1, no event committed and `resetSequence` 1, with write concern `majority`.
    /// Whether it was created (`false`: a document of that name appeared in between).
    pub(super) async fn insert_first(
        &self,
        name: &str,
        mut fields_set: Document,
    ) -> Result<bool, MongoError> {
        fields_set.insert(fields::ID, name);
        fields_set.insert(fields::EPOCH, 1_i64);
        fields_set.insert(fields::EVENTS_COMMITTED, 0_i64);
        fields_set.insert(fields::RESET_SEQUENCE, 1_i64);
        match self
            .collection
            .insert_one(fields_set)
            .write_concern(majority())
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if mongo_code(&e) == Some(CODE_DUPLICATE_KEY) => Ok(false),
            Err(e) => Err(e),
        }
    }
}
