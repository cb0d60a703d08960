//! The MongoDB cluster a client reaches, as the server names it: its identity is read from the
//! server, never from `mongodb.uri`, so hosts, credentials, options and seed order may change
//! while the cluster stays the same one. The offsets document records it with the position
//! (`crate::offsets::cluster`), and a position is never resumed on another cluster.
//!
//! What is read, by [`IdKind`] (each as MongoDB documents it):
//! - a replica set (`hello.setName`): `replSetGetConfig`'s `config.settings.replicaSetId`, an
//!   ObjectId made by `replSetInitiate` that cannot be changed, so it survives reconfigurations
//!   and new hosts
//!   (<https://www.mongodb.com/docs/manual/reference/replica-configuration/#mongodb-rsconf-rsconf.settings.replicaSetId>);
//! - a sharded cluster (`hello.msg` is `"isdbgrid"`: a mongos): the `clusterId` ObjectId of
//!   the one document of the config servers' `config.version`
//!   (<https://www.mongodb.com/docs/manual/reference/config-database/#mongodb-data-config.version>);
//! - fallback, only for a server that has no `replSetGetConfig` (it answers CommandNotFound,
//!   as SecantusDB, the test server, does): the UUID of its `local.oplog.rs`, as
//!   `listCollections` reports it (`info.uuid`), made with the oplog and kept for its life. On
//!   MongoDB that UUID would name one member, not the set (each member makes its own oplog, and
//!   `local` is not replicated), which is why it is only the fallback; and only identities of
//!   one kind are the same cluster (`crate::offsets::cluster`). (The oplog's initiation entry,
//!   `{op: "n", o: {msg: "initiating set"}}`, names the set on every member, but a real oplog
//!   rolls it off, and SecantusDB answers any read of its oplog by decoding the whole of it
//!   under its global lock: 1.4 s at 50 000 entries, measured, at every pipeline's start.)
//!
//! Invariants:
//! - A reply with an error (a missing privilege, a command a managed service does not offer)
//!   is not a failure: the cluster is [`ClusterRead::Unknown`], with a reason naming what to
//!   grant (all three reads are in the `clusterMonitor` role: the `replSetGetConfig` action on
//!   the cluster, `find` on the `config` database, `listCollections` on `local`,
//!   <https://www.mongodb.com/docs/manual/reference/built-in-roles/#mongodb-authrole-clusterMonitor>).
//! - A server that cannot be reached, or does not answer within [`READ_TIMEOUT`], is a
//!   [`ReadFailure`]: the caller tries again, it never takes that for an unknown cluster.
//! - Only reads; each a single small command, a one-document `find` or a one-name
//!   `listCollections`.

use std::time::Duration;

use bson::spec::BinarySubtype;
use bson::{Binary, Document, Uuid, doc};
use futures::TryStreamExt;
use mongodb::Client;
use mongodb::error::Error as MongoError;

use crate::error::cluster::ClusterError;
use crate::error::{
    BridgeError, CODE_COMMAND_NOT_FOUND, CODE_UNAUTHORIZED, describe_mongo, mongo_code,
};

/// Bound of the whole read: longer than the driver's default `serverSelectionTimeoutMS` (30 s),
/// so a server that cannot be selected is reported by the driver's own error (which the
/// lifecycle explains, e.g. as a wrong `replicaSet`), as at any other step of a start.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(45);

/// Bound of each `find`'s work on the server.
const FIND_BOUND: Duration = Duration::from_secs(10);

/// Which identity of a cluster was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// `replSetGetConfig`'s `config.settings.replicaSetId` (ObjectId hex).
    ReplicaSetId,
    /// `config.version`'s `clusterId` of a sharded cluster (ObjectId hex).
    ClusterId,
    /// The UUID of `local.oplog.rs` (hyphenated): the fallback of a server without
    /// `replSetGetConfig`.
    OplogUuid,
}

impl IdKind {
    /// The name stored in the offsets document (`cluster.kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReplicaSetId => "replicaSetId",
            Self::ClusterId => "clusterId",
            Self::OplogUuid => "oplogUuid",
        }
    }

    /// The kind stored as `name`, if this version knows it.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::ReplicaSetId, Self::ClusterId, Self::OplogUuid]
            .into_iter()
            .find(|kind| kind.as_str() == name)
    }
}

/// A cluster's identity: what decides whether two positions are in one history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterIdentity {
    /// `hello.setName` (`None` for a mongos): for people; the `id` decides.
    pub set_name: Option<String>,
    /// Which identity `id` is.
    pub kind: IdKind,
    /// The identity itself (its form depends on `kind`).
    pub id: String,
}

impl std::fmt::Display for ClusterIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.set_name {
            Some(name) => write!(f, "replica set {name:?}")?,
            None => f.write_str("sharded cluster")?,
        }
        write!(f, " ({} {})", self.kind.as_str(), self.id)
    }
}

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClusterRead {
    /// The cluster's identity.
    Known(ClusterIdentity),
    /// The server did not tell: why, naming the privilege or command it lacks.
    Unknown(String),
}

/// The server could not be asked.
#[derive(Debug)]
pub(crate) enum ReadFailure {
    /// No answer within [`READ_TIMEOUT`].
    TimedOut,
    /// The driver's error (no server reachable, a network error, a failed login).
    Failed(MongoError),
}

impl ReadFailure {
    /// The error of pipeline `pipeline` (or `*` for a command) whose read failed so.
    pub(crate) fn into_error(self, pipeline: &str) -> BridgeError {
        let (what, source) = match self {
            Self::TimedOut => (
                format!("no answer within {} s", READ_TIMEOUT.as_secs()),
                None,
            ),
            Self::Failed(e) => ("the server could not be asked".to_owned(), Some(e)),
        };
        BridgeError::Cluster(Box::new(ClusterError::Unread {
            pipeline: pipeline.to_owned(),
            what,
            source: source.map(Box::new),
        }))
    }
}

/// Reads the identity of the cluster `client` reaches, bounded by [`READ_TIMEOUT`].
///
/// Errors: [`ReadFailure`] when the server cannot be reached or does not answer in time.
pub(crate) async fn read(client: &Client) -> Result<ClusterRead, ReadFailure> {
    match tokio::time::timeout(READ_TIMEOUT, read_unbounded(client)).await {
        Ok(read) => read.map_err(ReadFailure::Failed),
        Err(_) => Err(ReadFailure::TimedOut),
    }
}

async fn read_unbounded(client: &Client) -> Result<ClusterRead, MongoError> {
    let admin = client.database("admin");
    let hello = admin.run_command(doc! { "hello": 1 }).await?;
    if hello.get_str("msg") == Ok("isdbgrid") {
        let version = client
            .database("config")
            .collection::<Document>("version")
            .find_one(doc! {})
            .max_time(FIND_BOUND)
            .await;
        return match version {
            Ok(found) => Ok(sharded(found.as_ref())),
            Err(e) => unknown_or_failure(e, "find on config.version", "find on config.version"),
        };
    }
    let Ok(set_name) = hello.get_str("setName") else {
        return Ok(ClusterRead::Unknown(
            "the server is neither a replica set member nor a mongos (hello reports no setName \
             and no msg \"isdbgrid\")"
                .to_owned(),
        ));
    };
    match admin.run_command(doc! { "replSetGetConfig": 1 }).await {
        Ok(reply) => Ok(replica_set(set_name, &reply)),
        Err(e) if mongo_code(&e) == Some(CODE_COMMAND_NOT_FOUND) => {
            oplog_uuid(client, set_name).await
        }
        Err(e) => unknown_or_failure(
            e,
            "replSetGetConfig",
            "the replSetGetConfig action on the cluster",
        ),
    }
}

/// The fallback of a server without `replSetGetConfig`: the UUID of its oplog.
async fn oplog_uuid(client: &Client, set_name: &str) -> Result<ClusterRead, MongoError> {
    let listed = client
        .database("local")
        .list_collections()
        .filter(doc! { "name": "oplog.rs" })
        .await;
    let mut listed = match listed {
        Ok(listed) => listed,
        Err(e) => return unknown_or_failure(e, "listCollections on local", LIST_PRIVILEGE),
    };
    match listed.try_next().await {
        Ok(found) => Ok(oplog_named(set_name, found.and_then(|s| s.info.uuid))),
        Err(e) => unknown_or_failure(e, "listCollections on local", LIST_PRIVILEGE),
    }
}

/// The privilege [`oplog_uuid`] needs.
const LIST_PRIVILEGE: &str = "the listCollections action on the local database";

/// What an error of `call` means: a server's error reply makes the cluster unknown, naming
/// `privilege` when the server refused it (Unauthorized); any other error (no server, the
/// network, the login) is returned.
fn unknown_or_failure(
    e: MongoError,
    call: &str,
    privilege: &str,
) -> Result<ClusterRead, MongoError> {
    let Some(code) = mongo_code(&e) else {
        return Err(e);
    };
    let mut reason = format!("the server answered {call} with {}", describe_mongo(&e));
    if code == CODE_UNAUTHORIZED {
        reason.push_str(&format!(
            ": grant the bridge's user {privilege} (the clusterMonitor role has it)"
        ));
    }
    Ok(ClusterRead::Unknown(reason))
}

/// The identity in `replSetGetConfig`'s `reply` of set `set_name`.
fn replica_set(set_name: &str, reply: &Document) -> ClusterRead {
    let id = reply
        .get_document("config")
        .and_then(|c| c.get_document("settings"))
        .and_then(|s| s.get_object_id("replicaSetId"));
    match id {
        Ok(id) => ClusterRead::Known(ClusterIdentity {
            set_name: Some(set_name.to_owned()),
            kind: IdKind::ReplicaSetId,
            id: id.to_hex(),
        }),
        Err(_) => ClusterRead::Unknown(
            "replSetGetConfig answered without config.settings.replicaSetId (an ObjectId)"
                .to_owned(),
        ),
    }
}

/// The identity in `config.version`'s document (`None`: there is none).
fn sharded(version: Option<&Document>) -> ClusterRead {
    match version.map(|v| v.get_object_id("clusterId")) {
        Some(Ok(id)) => ClusterRead::Known(ClusterIdentity {
            set_name: None,
            kind: IdKind::ClusterId,
            id: id.to_hex(),
        }),
        _ => ClusterRead::Unknown(
            "config.version holds no document with a clusterId (an ObjectId)".to_owned(),
        ),
    }
}

/// The identity of set `set_name` from the UUID `listCollections` reports for its oplog.
fn oplog_named(set_name: &str, uuid: Option<Binary>) -> ClusterRead {
    let uuid = uuid
        .filter(|b| b.subtype == BinarySubtype::Uuid)
        .and_then(|b| <[u8; 16]>::try_from(b.bytes).ok())
        .map(Uuid::from_bytes);
    match uuid {
        Some(uuid) => ClusterRead::Known(ClusterIdentity {
            set_name: Some(set_name.to_owned()),
            kind: IdKind::OplogUuid,
            id: uuid.to_string(),
        }),
        None => ClusterRead::Unknown(
            "the server has no replSetGetConfig (CommandNotFound), and lists no local.oplog.rs \
             with a UUID"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use bson::oid::ObjectId;

    use super::*;
    use crate::error::tests::command_error;

    #[test]
    fn a_replica_set_is_named_by_its_replica_set_id() {
        let id = ObjectId::new();
        let reply = doc! { "config": { "_id": "rs0", "settings": { "replicaSetId": id } } };
        let found = replica_set("rs0", &reply);
        let ClusterRead::Known(identity) = found else {
            panic!("{found:?}");
        };
        assert_eq!(identity.kind, IdKind::ReplicaSetId);
        assert_eq!(identity.id, id.to_hex());
        assert_eq!(
            identity.to_string(),
            format!("replica set \"rs0\" (replicaSetId {})", id.to_hex())
        );
        assert!(matches!(
            replica_set("rs0", &doc! { "config": {} }),
            ClusterRead::Unknown(_)
        ));
    }

    #[test]
    fn a_sharded_cluster_is_named_by_its_cluster_id() {
        let id = ObjectId::new();
        let version = doc! { "_id": 1, "currentVersion": 6, "clusterId": id };
        let found = sharded(Some(&version));
        assert_eq!(
            found,
            ClusterRead::Known(ClusterIdentity {
                set_name: None,
                kind: IdKind::ClusterId,
                id: id.to_hex(),
            })
        );
        assert!(matches!(sharded(None), ClusterRead::Unknown(_)));
    }

    #[test]
    fn the_fallback_is_the_oplogs_uuid() {
        let uuid = Uuid::new();
        let listed = Binary {
            subtype: BinarySubtype::Uuid,
            bytes: uuid.bytes().to_vec(),
        };
        let ClusterRead::Known(identity) = oplog_named("secantus", Some(listed)) else {
            panic!("a listed UUID names the server");
        };
        assert_eq!(identity.kind, IdKind::OplogUuid);
        assert_eq!(identity.id, uuid.to_string());
        assert_eq!(
            identity.to_string(),
            format!("replica set \"secantus\" (oplogUuid {uuid})")
        );
        // No oplog listed, or no UUID of 16 bytes: nothing to compare with.
        assert!(matches!(
            oplog_named("secantus", None),
            ClusterRead::Unknown(_)
        ));
        let generic = Binary {
            subtype: BinarySubtype::Generic,
            bytes: vec![1; 16],
        };
        assert!(matches!(
            oplog_named("secantus", Some(generic)),
            ClusterRead::Unknown(_)
        ));
    }

    #[test]
    fn a_refusal_leaves_the_cluster_unknown_naming_the_privilege() {
        let refused = unknown_or_failure(command_error(13), "replSetGetConfig", "the X action");
        assert!(
            matches!(&refused, Ok(ClusterRead::Unknown(reason))
                if reason.contains("the X action") && reason.contains("clusterMonitor")),
            "{refused:?}"
        );
        let other = unknown_or_failure(command_error(8000), "replSetGetConfig", "the X action");
        assert!(
            matches!(&other, Ok(ClusterRead::Unknown(reason)) if !reason.contains("grant")),
            "{other:?}"
        );
        // No reply at all is a failure to try again, never an unknown cluster.
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let cut: MongoError = mongodb::error::ErrorKind::Io(std::sync::Arc::new(io)).into();
        assert!(unknown_or_failure(cut, "replSetGetConfig", "x").is_err());
    }

    #[test]
    fn every_kind_is_stored_under_a_name_it_is_read_back_from() {
        for kind in [IdKind::ReplicaSetId, IdKind::ClusterId, IdKind::OplogUuid] {
            assert_eq!(IdKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(IdKind::parse("uuid"), None);
    }
}
