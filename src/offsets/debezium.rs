//! `offsets import debezium`'s write (the feature's pieces are listed in `encode/debezium.rs`):
//! a position read by another system, Debezium's resume token, stored as the pipeline's.
//!
//! Invariants (those of every operator write, `operator.rs`): the write filters on the epoch
//! read before it and increments it, so a running owner is fenced on its next write instead of
//! overwriting the import; `resetSequence` rises, so an exactly-once pipeline's older progress
//! record never wins over it; the lease ends; write concern `majority`. Like a reset, it
//! removes the stream identity and the cluster (the next start records the configured stream
//! and the cluster it reaches: Debezium's offset names none) and any running
//! snapshot's state (the imported position is Debezium's, whose snapshot was complete); it
//! records where the position came from (`importedFrom`) and the key format of the records
//! before it (`debezium`).

use bson::{DateTime, Document, Timestamp, doc};
use mongodb::error::Error as MongoError;

use super::operator::{OffsetsAdmin, sequence};
use super::{SCHEMA_VERSION, fields};

/// A position to import.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Imported {
    /// The resume token, as the change stream gave it (`{_data: …}`).
    pub token: Document,
    /// The cluster time of the event it follows, when the offset says (`sec`, `ord`).
    pub cluster_time: Option<Timestamp>,
    /// Where it came from, stored as `importedFrom`.
    pub from: Document,
}

impl OffsetsAdmin {
    /// Stores `imported` as pipeline `name`'s position if its epoch is still `epoch`, with
    /// `owner` as the writer. `before` is the document as read (`None`: there is none, and one
    /// is created; its `resetSequence` is raised). Whether the write applied (`false`: the
    /// document changed in between).
    pub(crate) async fn import(
        &self,
        name: &str,
        epoch: Option<i64>,
        before: Option<&Document>,
        imported: &Imported,
        owner: &str,
    ) -> Result<bool, MongoError> {
        let now = DateTime::now();
        let mut set = doc! {
            fields::RESUME_TOKEN: imported.token.clone(),
            fields::KEY_FORMAT: "debezium",
            fields::IMPORTED_FROM: imported.from.clone(),
            fields::UPDATED_AT: now,
            fields::LEASE_UNTIL: now,
            fields::OWNER: owner,
            fields::SCHEMA_VERSION: SCHEMA_VERSION,
            fields::BRIDGE_VERSION: env!("CARGO_PKG_VERSION"),
        };
        let mut unset = doc! {
            fields::START_AT_OPERATION_TIME: "", fields::WALL_TIME: "",
            fields::FINGERPRINT: "", fields::STREAM: "", fields::CLUSTER: "",
            fields::SNAPSHOT: "",
        };
        match imported.cluster_time {
            Some(at) => {
                set.insert(fields::CLUSTER_TIME, at);
                set.insert(fields::POSITION_TIME, at);
            }
            None => {
                unset.insert(fields::CLUSTER_TIME, "");
                unset.insert(fields::POSITION_TIME, "");
            }
        }
        let Some(before) = before else {
            return self.insert_first(name, set).await;
        };
        set.insert(fields::EPOCH, epoch.unwrap_or(0) + 1);
        set.insert(
            fields::RESET_SEQUENCE,
            sequence(before, fields::RESET_SEQUENCE) + 1,
        );
        // A document without an epoch (a snapshot request made before any start) has no
        // owner to fence: it matches only while it still has none.
        let filter = match epoch {
            Some(epoch) => doc! { fields::ID: name, fields::EPOCH: epoch },
            None => doc! { fields::ID: name, fields::EPOCH: { "$exists": false } },
        };
        let update = doc! { "$set": set, "$unset": unset };
        self.update_matching(filter, update).await
    }
}
