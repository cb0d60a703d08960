//! The deployment's identity: one random id per offsets database, so two deployments that
//! share a Kafka cluster (each with its own MongoDB, both with the default offsets settings and
//! the same `[bridge] group_id`) never join one consumer group or one control topic.
//!
//! Stored beside the group slots, in `<offsets_collection>.slots`, as the one document
//! `{_id: "deployment", uid: "<12 hex digits>", createdAt: Date}` (it has neither `group` nor
//! `slot`, so the slots' reads and their unique index leave it alone).
//!
//! Invariants:
//! - Created once, by whichever member or command first needs it, with an upsert that only
//!   inserts (`$setOnInsert`); every caller then reads the stored one, so racing members agree.
//! - Never changed or deleted by the bridge (`offsets reset --delete` forgets a pipeline's
//!   slot, not the deployment): the group's names stay the same for the deployment's life.
//!   Replicas of one deployment share it because they share the offsets database.

use bson::{DateTime, Document, doc};
use mongodb::options::WriteConcern;
use mongodb::{Client, Collection};

use crate::config::names::OffsetsLocation;
use crate::error::{CODE_DUPLICATE_KEY, mongo_code};

/// `_id` of the identity document.
const ID: &str = "deployment";

fn collection(client: &Client, offsets: &OffsetsLocation) -> Collection<Document> {
    client
        .database(&offsets.database)
        .collection(&offsets.slots_collection())
}

/// The deployment's identity, read or (the first time) created.
///
/// Errors: MongoDB's.
pub(crate) async fn identity(
    client: &Client,
    offsets: &OffsetsLocation,
) -> Result<String, mongodb::error::Error> {
    if let Some(uid) = stored(client, offsets).await? {
        return Ok(uid);
    }
    let fresh = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
    let created = collection(client, offsets)
        .update_one(
            doc! { "_id": ID },
            doc! { "$setOnInsert": { "uid": &fresh, "createdAt": DateTime::now() } },
        )
        .upsert(true)
        .write_concern(WriteConcern::majority())
        .await;
    match created {
        Ok(_) => {}
        // Two upserts raced on `_id`: the other one inserted; read it.
        Err(e) if mongo_code(&e) == Some(CODE_DUPLICATE_KEY) => {}
        Err(e) => return Err(e),
    }
    let uid = stored(client, offsets).await?;
    Ok(uid.expect("invariant: the identity document exists once its upsert returned"))
}

/// The stored identity, if any (`check` reads it without creating one).
///
/// Errors: MongoDB's.
pub(crate) async fn stored(
    client: &Client,
    offsets: &OffsetsLocation,
) -> Result<Option<String>, mongodb::error::Error> {
    let found = collection(client, offsets)
        .find_one(doc! { "_id": ID })
        .await?;
    Ok(found.and_then(|d| d.get_str("uid").ok().map(str::to_owned)))
}
