//! The MongoDB cluster a position belongs to: stored with it in the offsets document as
//! `cluster: {setName?, kind, id}` (what `crate::mongo::cluster` reads from the server), and
//! compared at every take, so that a position is never resumed on another cluster. A server
//! accepts a foreign resume token and streams its own changes after it: without this check a
//! copied offsets document (a restored backup, an offsets database kept elsewhere) would
//! publish from a place in another cluster's history.
//!
//! The rules ([`check`]):
//! - the same `kind` and the same `id`: the same cluster, whatever the URI says (the set name
//!   is for people: the take records the name found);
//! - nothing stored (a first start, a document of a version before this check, or after a
//!   reset or an import): the take records the cluster found;
//! - another `id`, or another `kind`: another cluster, refused. A change of kind means another
//!   kind of server (a mongos for a replica set, a replica set for the test stand-in); only an
//!   operator can say it holds the same history (`offsets accept-cluster`);
//! - the cluster cannot be read now (a missing privilege): unchecked, the stored one stays.
//!
//! Invariant: every write of `cluster` increments the epoch (a take, `accept-cluster`), and
//! every reset or import removes it, so a take's compare-and-set on the epoch it read also
//! holds the cluster it checked.

use bson::{Bson, DateTime, Document, doc};
use mongodb::error::Error as MongoError;

use super::operator::OffsetsAdmin;
use super::{OffsetsDoc, OffsetsStore, SCHEMA_VERSION, fields};
use crate::error::BridgeError;
use crate::error::cluster::ClusterError;
use crate::mongo::cluster::{self as server, ClusterIdentity, ClusterRead, IdKind};

/// What a take does with the cluster found, given the one stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// The same cluster: take it (recording the identity found, with its current set name).
    Same,
    /// Nothing stored: take it, recording the identity found.
    Record,
    /// The cluster is unknown now: take it without a check, keeping what is stored.
    Unchecked,
    /// Another cluster: refuse, before anything is written.
    Differs,
}

/// The rule for a position recorded on `stored` when the client reaches `found`.
pub(crate) fn check(stored: Option<&ClusterIdentity>, found: &ClusterRead) -> Check {
    match (stored, found) {
        (_, ClusterRead::Unknown(_)) => Check::Unchecked,
        (None, ClusterRead::Known(_)) => Check::Record,
        (Some(stored), ClusterRead::Known(found))
            if stored.kind == found.kind && stored.id == found.id =>
        {
            Check::Same
        }
        (Some(_), ClusterRead::Known(_)) => Check::Differs,
    }
}

/// The stored form of `identity`: `{setName?, kind, id}`.
pub(crate) fn to_doc(identity: &ClusterIdentity) -> Document {
    let mut stored = doc! {};
    if let Some(name) = &identity.set_name {
        stored.insert("setName", name);
    }
    stored.insert("kind", identity.kind.as_str());
    stored.insert("id", &identity.id);
    stored
}

/// The `cluster` of a stored document, if it has one.
///
/// Errors: a sentence naming what is wrong with it, and the way forward.
pub(super) fn from_doc(d: &Document) -> Result<Option<ClusterIdentity>, String> {
    let stored = match d.get(fields::CLUSTER) {
        None | Some(Bson::Null) => return Ok(None),
        Some(Bson::Document(stored)) => stored,
        Some(_) => return Err("cluster must be a document {setName, kind, id}".to_owned()),
    };
    let kind = stored.get_str("kind").ok().and_then(IdKind::parse);
    let id = stored.get_str("id").ok().filter(|id| !id.is_empty());
    let (Some(kind), Some(id)) = (kind, id) else {
        return Err(format!(
            "cluster {} has no kind (replicaSetId, clusterId or oplogUuid) or no id. \
             Remedy: `offsets accept-cluster` records the cluster the configuration reaches",
            Bson::Document(stored.clone()).into_relaxed_extjson()
        ));
    };
    Ok(Some(ClusterIdentity {
        set_name: stored.get_str("setName").ok().map(str::to_owned),
        kind,
        id: id.to_owned(),
    }))
}

impl OffsetsStore {
    /// The cluster the store's client reaches: read from the server on first use and kept for
    /// the store's life (a pipeline's start; its clones share it), so a failed read is tried
    /// again by the next take. A cluster the server does not name is said once, here.
    ///
    /// Errors: [`ClusterError::Unread`] when the server cannot be reached or does not answer
    /// within [`server::READ_TIMEOUT`].
    pub(super) async fn cluster(&self) -> Result<&ClusterRead, BridgeError> {
        self.cluster
            .get_or_try_init(|| async {
                let found = server::read(self.collection.client()).await;
                let found = found.map_err(|failure| failure.into_error(&self.pipeline))?;
                if let ClusterRead::Unknown(reason) = &found {
                    tracing::warn!(pipeline = %self.pipeline, %reason,
                        "the MongoDB cluster's identity cannot be read, so this pipeline's \
                         position is not checked against the cluster it was committed on \
                         (mongo_kafka_bridge_pipeline_cluster_unchecked is 1): a copy of its \
                         offsets document on another cluster would resume there");
                }
                Ok(found)
            })
            .await
    }

    /// Whether the cluster read for this store is unknown (its takes checked nothing).
    pub(crate) fn cluster_unchecked(&self) -> bool {
        matches!(self.cluster.get(), Some(ClusterRead::Unknown(_)))
    }

    /// Checks the cluster `current` records (`None`: there is no document) against `found`
    /// ([`check`]): the `cluster` the take records, if any (a document of an older version
    /// that had a position gets it with a log line).
    ///
    /// Errors: [`ClusterError::Changed`] when they are two clusters.
    pub(super) fn cluster_checked(
        &self,
        current: Option<&OffsetsDoc>,
        found: &ClusterRead,
    ) -> Result<Option<Document>, BridgeError> {
        let stored = current.and_then(|c| c.cluster.as_ref());
        let ClusterRead::Known(identity) = found else {
            return Ok(None);
        };
        match check(stored, found) {
            Check::Differs => Err(BridgeError::Cluster(Box::new(ClusterError::Changed {
                pipeline: self.pipeline.clone(),
                stored: stored.map(ToString::to_string).unwrap_or_default(),
                found: identity.to_string(),
            }))),
            Check::Record if current.is_some_and(|c| c.position().is_some()) => {
                tracing::info!(pipeline = %self.pipeline, cluster = %identity,
                    "the offsets document had no MongoDB cluster (a version before the check, a \
                     reset or an import wrote it): recorded the one mongodb.uri reaches");
                Ok(Some(to_doc(identity)))
            }
            Check::Same | Check::Record | Check::Unchecked => Ok(Some(to_doc(identity))),
        }
    }
}

impl OffsetsAdmin {
    /// Records `identity` as the cluster pipeline `name`'s position belongs to, keeping the
    /// position, incrementing the epoch (read as `epoch`) and ending the lease, with `owner`
    /// as the writer. Whether the write applied (`false`: the document changed in between).
    pub(crate) async fn accept_cluster(
        &self,
        name: &str,
        epoch: Option<i64>,
        identity: &ClusterIdentity,
        owner: &str,
    ) -> Result<bool, MongoError> {
        let set = doc! {
            fields::CLUSTER: to_doc(identity),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(kind: IdKind, id: &str, set_name: Option<&str>) -> ClusterIdentity {
        ClusterIdentity {
            set_name: set_name.map(str::to_owned),
            kind,
            id: id.to_owned(),
        }
    }

    #[test]
    fn a_position_resumes_only_on_the_cluster_it_was_committed_on() {
        let a = identity(IdKind::ReplicaSetId, "65f0a1", Some("rs0"));
        let known = |c: &ClusterIdentity| ClusterRead::Known(c.clone());
        // The same cluster, reached by any URI, whatever set name it reports.
        assert_eq!(check(Some(&a), &known(&a)), Check::Same);
        let renamed = identity(IdKind::ReplicaSetId, "65f0a1", Some("rs1"));
        assert_eq!(check(Some(&a), &known(&renamed)), Check::Same);
        // Another set, even of the same name (every SecantusDB is "secantus").
        let b = identity(IdKind::ReplicaSetId, "65f0b2", Some("rs0"));
        assert_eq!(check(Some(&a), &known(&b)), Check::Differs);
        // Another kind is never taken for the same cluster, even with an equal id.
        let other_kind = identity(IdKind::ClusterId, "65f0a1", None);
        assert_eq!(check(Some(&a), &known(&other_kind)), Check::Differs);
        // Nothing stored: recorded. Nothing readable: unchecked, whatever is stored.
        assert_eq!(check(None, &known(&b)), Check::Record);
        let unknown = ClusterRead::Unknown("no privilege".into());
        assert_eq!(check(Some(&a), &unknown), Check::Unchecked);
        assert_eq!(check(None, &unknown), Check::Unchecked);
    }

    #[test]
    fn the_stored_form_reads_back_and_a_damaged_one_is_named() {
        for stored in [
            identity(IdKind::ReplicaSetId, "65f0a1", Some("rs0")),
            identity(IdKind::ClusterId, "65f0c3", None),
            identity(
                IdKind::OplogUuid,
                "1acaf362-5875-455f-9fd8-a574218734d9",
                Some("s"),
            ),
        ] {
            let d = doc! { fields::CLUSTER: to_doc(&stored) };
            assert_eq!(from_doc(&d), Ok(Some(stored)));
        }
        assert_eq!(from_doc(&doc! {}), Ok(None));
        let unknown_kind = doc! { fields::CLUSTER: { "kind": "uuid", "id": "x" } };
        let error = from_doc(&unknown_kind).expect_err("an unknown kind");
        assert!(error.contains("accept-cluster"), "{error}");
        assert!(from_doc(&doc! { fields::CLUSTER: "rs0" }).is_err());
    }
}
