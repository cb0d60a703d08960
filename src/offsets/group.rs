//! Slots: the control topic's partition of each pipeline of a group, the same for every member
//! whatever its configuration version.
//!
//! Stored beside the offsets collection, in `<offsets_collection>.slots` (so `offsets list` and
//! `check` keep showing pipelines only), one document per pipeline of a group:
//! `{_id: {group, pipeline}, group, slot: Int32, allocatedAt: Date, allocatedBy}`, under a unique
//! index on `{group, slot}`.
//!
//! Invariants:
//! - A pipeline's slot is allocated once, by whichever member first loads a configuration that
//!   names it, and never changes while its document exists: the unique index makes two members
//!   that allocate at once pick different slots (the loser of a race reads the winner's).
//! - A slot number is reused only after its document was deleted, which `offsets reset
//!   --delete` does with the pipeline's offsets document ([`forget`]).
//! - Allocation takes the lowest free number, so slots stay dense.

use std::collections::BTreeMap;

use bson::{DateTime, Document, doc};
use mongodb::options::IndexOptions;
use mongodb::{Client, Collection, IndexModel};

use crate::config::names::OffsetsLocation;
use crate::error::BridgeError;
use crate::error::{CODE_DUPLICATE_KEY, mongo_code};

/// A group's slots.
pub(crate) struct Slots {
    collection: Collection<Document>,
    group: String,
}

/// How often an allocation retries after losing a race for a number.
const ALLOCATE_ATTEMPTS: usize = 64;

impl Slots {
    fn failed(&self, e: &mongodb::error::Error) -> BridgeError {
        BridgeError::Group {
            group: self.group.clone(),
            reason: format!("reading or writing its slots in MongoDB failed: {e}"),
        }
    }

    /// The slots of `group` beside the offsets at `offsets`.
    pub(crate) fn new(client: &Client, offsets: &OffsetsLocation, group: &str) -> Self {
        let collection = client
            .database(&offsets.database)
            .collection(&offsets.slots_collection());
        Self {
            collection,
            group: group.to_owned(),
        }
    }

    /// Every slot of the group: slot → pipeline name (including pipelines that this
    /// configuration does not name).
    ///
    /// Errors: [`BridgeError::Group`] when MongoDB fails.
    pub(crate) async fn read(&self) -> Result<BTreeMap<i32, String>, BridgeError> {
        let mut cursor = self
            .collection
            .find(doc! { "group": &self.group })
            .await
            .map_err(|e| self.failed(&e))?;
        let mut out = BTreeMap::new();
        while cursor.advance().await.map_err(|e| self.failed(&e))? {
            let d = cursor.deserialize_current().map_err(|e| self.failed(&e))?;
            let (Ok(slot), Ok(id)) = (d.get_i32("slot"), d.get_document("_id")) else {
                continue;
            };
            if let Ok(name) = id.get_str("pipeline") {
                out.insert(slot, name.to_owned());
            }
        }
        Ok(out)
    }

    /// The slots of the group after allocating one to each of `names` that has none; see the
    /// module's invariants. `by` is written as `allocatedBy`.
    ///
    /// Errors: [`BridgeError::Group`] when MongoDB fails, or when an allocation kept losing
    /// races.
    pub(crate) async fn allocate(
        &self,
        names: &[String],
        by: &str,
    ) -> Result<BTreeMap<i32, String>, BridgeError> {
        let unique = IndexOptions::builder()
            .unique(true)
            .name("group_slot_unique".to_owned())
            .build();
        let index = IndexModel::builder()
            .keys(doc! { "group": 1, "slot": 1 })
            .options(unique)
            .build();
        self.collection
            .create_index(index)
            .await
            .map_err(|e| self.failed(&e))?;
        let mut slots = self.read().await?;
        for name in names {
            for attempt in 0.. {
                if slots.values().any(|n| n == name) {
                    break;
                }
                if attempt == ALLOCATE_ATTEMPTS {
                    return Err(BridgeError::Group {
                        group: self.group.clone(),
                        reason: format!("no slot could be allocated to pipeline {name:?}"),
                    });
                }
                let free = lowest_free(&slots);
                let inserted = self
                    .collection
                    .insert_one(doc! {
                        "_id": { "group": &self.group, "pipeline": name },
                        "group": &self.group, "slot": free,
                        "allocatedAt": DateTime::now(), "allocatedBy": by,
                    })
                    .await;
                match inserted {
                    Ok(_) => {
                        tracing::info!(pipeline = %name, slot = free, group = %self.group,
                                       "allocated the pipeline's slot");
                        slots.insert(free, name.clone());
                    }
                    // Another member allocated this pipeline, or took this number: read again.
                    Err(e) if mongo_code(&e) == Some(CODE_DUPLICATE_KEY) => {
                        slots = self.read().await?;
                    }
                    Err(e) => return Err(self.failed(&e)),
                }
            }
        }
        Ok(slots)
    }
}

/// The lowest slot number not in `slots`.
fn lowest_free(slots: &BTreeMap<i32, String>) -> i32 {
    let mut n = 0;
    for &taken in slots.keys() {
        if taken != n {
            break;
        }
        n += 1;
    }
    n
}

/// Deletes `pipeline`'s slot in every group, so its number may be reused
/// (`offsets reset --delete`).
///
/// Errors: MongoDB's.
pub(crate) async fn forget(
    client: &Client,
    offsets: &OffsetsLocation,
    pipeline: &str,
) -> Result<u64, mongodb::error::Error> {
    let collection: Collection<Document> = client
        .database(&offsets.database)
        .collection(&offsets.slots_collection());
    let deleted = collection
        .delete_many(doc! { "_id.pipeline": pipeline })
        .await?;
    Ok(deleted.deleted_count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_free_number_fills_gaps_first() {
        let slots = |taken: &[i32]| -> BTreeMap<i32, String> {
            taken.iter().map(|&n| (n, format!("p{n}"))).collect()
        };
        assert_eq!(lowest_free(&slots(&[])), 0);
        assert_eq!(lowest_free(&slots(&[0, 1, 2])), 3);
        assert_eq!(lowest_free(&slots(&[0, 2, 3])), 1);
        assert_eq!(lowest_free(&slots(&[1, 2])), 0);
    }
}
