//! The offsets document: one per pipeline in `<offsets_database>.<offsets_collection>`. This
//! module owns it: its field names, its parsed type, its schema version, and every read and
//! write ([`OffsetsStore`] for a running pipeline, with its commits in `commit.rs`;
//! `operator` for the `offsets` command and `check`; `debezium` for `offsets import debezium`,
//! the only write of a position the bridge did not read itself). Beside it in the offsets
//! database, the group slots (`group`).
//!
//! Shape (a public contract, README "Offsets"):
//! `{_id: <pipeline>, schemaVersion, resumeToken?, clusterTime?, positionTime?, wallTime?,
//!   updatedAt, eventsCommitted: Int64, epoch: Int64, owner, leaseUntil, bridgeVersion,
//!   startAtOperationTime?, fingerprint?, stream?, keyFormat?, cluster?, snapshot?,
//!   snapshotRequest?, lastSnapshot?, commitSequence?, resetSequence?, delivery?,
//!   progressOffset?, streamUid, importedFrom?}` (`snapshot`
//!   has the snapshot's fields, `exactly_once` the exactly-once ones and the progress record).
//!
//! Invariants:
//! - Only this module names the document's fields (`fields`).
//! - Every write sets `schemaVersion`; a document with a newer one than [`SCHEMA_VERSION`] is
//!   refused before anything is written, so an older binary in a rolling update never ignores
//!   fields a newer one relies on.
//! - Ownership: taking a pipeline increments `epoch`; every later write of the owner filters on
//!   `{_id, epoch}` (fencing, see `store`); operator writes filter on the epoch they read and
//!   increment it, so a running owner is fenced instead of overwriting them.
//! - Every write uses write concern `majority`, so a committed position survives a failover.
//! - Moving a position to a cluster time without a token is one update (`moved_to`), whoever
//!   makes it (the history-loss policy `skip`, `offsets reset`).
//! - `commitSequence` rises with every commit and never resets; `resetSequence` rises with every
//!   operator reset. With `delivery = "exactly_once"` they decide whether the progress record
//!   in Kafka or this document is newer (`exactly_once::newer`).
//! - The position belongs to the stream identity recorded with it (`identity`): a take-over by
//!   an instance whose configured identity differs is refused before the epoch moves, so it
//!   never fences the owner that runs the recorded one. An operator's reset removes the
//!   identity; `offsets accept-config` records the configured one, keeping the position.
//! - The position belongs to the MongoDB cluster recorded with it (`cluster`): a take by an
//!   instance whose client reaches another cluster is refused before the epoch moves. A reset
//!   or an import removes it; `offsets accept-cluster` records the one reached, keeping the
//!   position.

use bson::{Bson, DateTime, Document, RawDocumentBuf, Timestamp, doc};

pub(crate) mod cluster;
mod commit;
pub(crate) mod debezium;
pub(crate) mod deployment;
pub(crate) mod exactly_once;
pub(crate) mod group;
pub(crate) mod identity;
pub(crate) mod operator;
pub(crate) mod snapshot;
mod store;

pub use crate::mongo::cluster::{ClusterIdentity, IdKind};
pub use identity::StreamIdentity;
pub use store::OffsetsStore;

/// This host's name (`$HOSTNAME`, else `/etc/hostname`), for owner strings in the offsets.
pub(crate) fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

/// The schema version this binary writes and understands. 2: the stream identity
/// (`fingerprint`, `stream`, `keyFormat`), which an older binary must not ignore. 3: the
/// snapshot (`snapshot`, `snapshotRequest`): an older binary would stream on and leave the copy
/// unfinished without a word. 4: the cluster (`cluster`): an older binary would resume a
/// position on another MongoDB cluster without a word.
pub const SCHEMA_VERSION: i64 = 4;

/// The document's field names.
pub(crate) mod fields {
    /// The pipeline name.
    pub(crate) const ID: &str = "_id";
    /// Version of the document's shape ([`super::SCHEMA_VERSION`]).
    pub(crate) const SCHEMA_VERSION: &str = "schemaVersion";
    /// The committed resume token, as the server sent it.
    pub(crate) const RESUME_TOKEN: &str = "resumeToken";
    /// `clusterTime` of the last committed event.
    pub(crate) const CLUSTER_TIME: &str = "clusterTime";
    /// Best-known cluster time of the committed position.
    pub(crate) const POSITION_TIME: &str = "positionTime";
    /// `wallTime` of the last committed event.
    pub(crate) const WALL_TIME: &str = "wallTime";
    /// When the document was last written with a position.
    pub(crate) const UPDATED_AT: &str = "updatedAt";
    /// Events committed over the pipeline's life.
    pub(crate) const EVENTS_COMMITTED: &str = "eventsCommitted";
    /// Incremented by every take-over and operator reset (fencing).
    pub(crate) const EPOCH: &str = "epoch";
    /// `host:pid:uuid` of the owning instance, or the operator's reset.
    pub(crate) const OWNER: &str = "owner";
    /// Until when the owner's lease holds.
    pub(crate) const LEASE_UNTIL: &str = "leaseUntil";
    /// Version of the binary that wrote last.
    pub(crate) const BRIDGE_VERSION: &str = "bridgeVersion";
    /// Where to start when there is no token (`start_at`, `offsets reset`, history skip).
    pub(crate) const START_AT_OPERATION_TIME: &str = "startAtOperationTime";
    /// The stream identity's fingerprint ([`super::identity`]).
    pub(crate) const FINGERPRINT: &str = "fingerprint";
    /// The stream identity itself: `{database, collection, pipeline}`.
    pub(crate) const STREAM: &str = "stream";
    /// The key format the records were written in: `json` or `bson`.
    pub(crate) const KEY_FORMAT: &str = "keyFormat";
    /// The MongoDB cluster the position belongs to: `{setName?, kind, id}` ([`super::cluster`]).
    pub(crate) const CLUSTER: &str = "cluster";
    /// The running snapshot's state ([`super::snapshot`]).
    pub(crate) const SNAPSHOT: &str = "snapshot";
    /// A snapshot asked for and not started yet.
    pub(crate) const SNAPSHOT_REQUEST: &str = "snapshotRequest";
    /// The last finished snapshot's summary.
    pub(crate) const LAST_SNAPSHOT: &str = "lastSnapshot";
    /// Commits over the pipeline's life (never resets).
    pub(crate) const COMMIT_SEQUENCE: &str = "commitSequence";
    /// Operator resets over the pipeline's life.
    pub(crate) const RESET_SEQUENCE: &str = "resetSequence";
    /// The delivery mode of the last owner: `at_least_once` or `exactly_once`.
    pub(crate) const DELIVERY: &str = "delivery";
    /// Offset of the last committed progress record in the progress topic (exactly-once).
    pub(crate) const PROGRESS_OFFSET: &str = "progressOffset";
    /// In a progress record: the topic prefix of the deployment that wrote it.
    pub(crate) const TOPIC_PREFIX: &str = "topicPrefix";
    /// A random identity (ObjectId hex) created with the document and kept by every reset:
    /// names the pipeline's stream in Kafka (`transactional.id`, progress records), so two
    /// deployments sharing a Kafka cluster never collide there.
    pub(crate) const STREAM_UID: &str = "streamUid";
    /// Where an imported position came from (`offsets import debezium`): `{system,
    /// serverId, connector?, offset, at}`; removed by the next reset.
    pub(crate) const IMPORTED_FROM: &str = "importedFrom";
    /// Why the last owner stopped the pipeline on a failure: `{at, error}` (the error with its
    /// remedy, secrets redacted); removed by the next take.
    pub(crate) const FAILURE: &str = "failure";
}

/// An offsets document as read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OffsetsDoc {
    /// The committed resume token, if any.
    pub resume_token: Option<RawDocumentBuf>,
    /// Where to start when there is no token.
    pub start_at_operation_time: Option<Timestamp>,
    /// `clusterTime` of the last committed event.
    pub cluster_time: Option<Timestamp>,
    /// Best-known cluster time of the committed position.
    pub position_time: Option<Timestamp>,
    /// The current epoch; `None` before the first take.
    pub epoch: Option<i64>,
    /// The owner that wrote last.
    pub owner: Option<String>,
    /// Until when the owner's lease holds.
    pub lease_until: Option<DateTime>,
    /// Events committed so far.
    pub events_committed: i64,
    /// Version of its shape; 0 for documents written before versions existed.
    pub schema_version: i64,
    /// The fingerprint of the stream identity the position belongs to, when recorded.
    pub fingerprint: Option<String>,
    /// That identity, `{database, collection, pipeline}`.
    pub stream: Option<Document>,
    /// The key format of the records written so far.
    pub key_format: Option<String>,
    /// The MongoDB cluster the position belongs to, when recorded.
    pub cluster: Option<ClusterIdentity>,
    /// The running snapshot, as far as it is delivered.
    pub snapshot: Option<crate::snapshot::SnapshotState>,
    /// A snapshot asked for and not started yet.
    pub snapshot_request: Option<crate::snapshot::Request>,
    /// The `requestedAt` of a request still stored though `lastSnapshot` answered it (to
    /// remove; it reads as no request).
    pub answered_request: Option<DateTime>,
    /// Commits so far (0 when never written).
    pub commit_sequence: i64,
    /// Operator resets so far.
    pub reset_sequence: i64,
    /// The delivery mode of the owner that wrote last, when recorded.
    pub delivery: Option<String>,
    /// Offset of the last committed progress record (exactly-once).
    pub progress_offset: Option<i64>,
    /// `streamUid`: recorded by the first take (and by a take of a document without one).
    pub stream_uid: Option<String>,
    /// When and why the last owner stopped the pipeline on a failure (until the next take).
    pub failure: Option<(DateTime, String)>,
}

fn integer(d: &Document, key: &str) -> Result<Option<i64>, String> {
    match d.get(key) {
        None => Ok(None),
        Some(Bson::Int64(v)) => Ok(Some(*v)),
        Some(Bson::Int32(v)) => Ok(Some(i64::from(*v))),
        Some(_) => Err(format!("{key} must be an integer")),
    }
}

impl OffsetsDoc {
    /// Reads a stored document.
    ///
    /// Errors: a sentence naming the field that is wrong, or saying that a newer version of
    /// the bridge wrote it (with what to do).
    pub fn parse(d: &Document) -> Result<Self, String> {
        let schema_version = integer(d, fields::SCHEMA_VERSION)?.unwrap_or(0);
        if schema_version > SCHEMA_VERSION {
            return Err(format!(
                "it was written by a newer version of the bridge (schemaVersion {schema_version}; \
                 this binary, version {}, understands up to {SCHEMA_VERSION}). Remedy: run the \
                 newer version (finish the rolling update), or reset the pipeline with \
                 `offsets reset` to let this version start it anew",
                env!("CARGO_PKG_VERSION")
            ));
        }
        let resume_token = match d.get(fields::RESUME_TOKEN) {
            None | Some(Bson::Null) => None,
            Some(Bson::Document(token)) => Some(
                RawDocumentBuf::from_document(token)
                    .map_err(|_| "resumeToken is not valid BSON".to_owned())?,
            ),
            Some(_) => return Err("resumeToken must be a document".to_owned()),
        };
        let ts = |key: &str| d.get_timestamp(key).ok();
        Ok(Self {
            resume_token,
            start_at_operation_time: ts(fields::START_AT_OPERATION_TIME),
            cluster_time: ts(fields::CLUSTER_TIME),
            position_time: ts(fields::POSITION_TIME),
            epoch: integer(d, fields::EPOCH)?,
            owner: d.get_str(fields::OWNER).ok().map(str::to_owned),
            lease_until: d.get_datetime(fields::LEASE_UNTIL).ok().copied(),
            events_committed: integer(d, fields::EVENTS_COMMITTED)?.unwrap_or(0),
            schema_version,
            fingerprint: d.get_str(fields::FINGERPRINT).ok().map(str::to_owned),
            stream: d.get_document(fields::STREAM).ok().cloned(),
            key_format: d.get_str(fields::KEY_FORMAT).ok().map(str::to_owned),
            cluster: cluster::from_doc(d)?,
            snapshot: snapshot::state_from(d)?,
            snapshot_request: snapshot::request_from(d)?,
            answered_request: snapshot::answered_request(d),
            commit_sequence: integer(d, fields::COMMIT_SEQUENCE)?.unwrap_or(0),
            reset_sequence: integer(d, fields::RESET_SEQUENCE)?.unwrap_or(0),
            delivery: d.get_str(fields::DELIVERY).ok().map(str::to_owned),
            progress_offset: integer(d, fields::PROGRESS_OFFSET)?,
            stream_uid: d.get_str(fields::STREAM_UID).ok().map(str::to_owned),
            failure: d.get_document(fields::FAILURE).ok().map(|f| {
                let at = f.get_datetime("at").copied().unwrap_or(DateTime::MIN);
                (at, f.get_str("error").unwrap_or("unknown").to_owned())
            }),
        })
    }

    /// The owner and the end of its lease, when the lease is still running at `now`.
    pub(crate) fn live_owner(&self, now: DateTime) -> Option<(&str, DateTime)> {
        let until = self.lease_until.filter(|until| *until > now)?;
        Some((self.owner.as_deref().unwrap_or("unknown"), until))
    }

    /// The position the document stands for: its token's `positionTime` (else `clusterTime`),
    /// or its `startAtOperationTime`, labelled `token` / `startAt`.
    pub(crate) fn position(&self) -> Option<(&'static str, Timestamp)> {
        if self.resume_token.is_some() {
            self.position_time
                .or(self.cluster_time)
                .map(|t| ("token", t))
        } else {
            self.start_at_operation_time.map(|t| ("startAt", t))
        }
    }
}

/// The `$set` and `$unset` of an update that moves a position to cluster time `at` without a
/// token: the next start uses `startAtOperationTime: at`. The event fields of the old position
/// (`clusterTime`, `wallTime`) go with the token: they describe an event that is no longer the
/// position.
pub(crate) fn moved_to(at: Timestamp) -> (Document, Document) {
    let set = doc! {
        fields::START_AT_OPERATION_TIME: at,
        fields::POSITION_TIME: at,
        fields::UPDATED_AT: DateTime::now(),
        fields::SCHEMA_VERSION: SCHEMA_VERSION,
        fields::BRIDGE_VERSION: env!("CARGO_PKG_VERSION"),
    };
    let unset = doc! {
        fields::RESUME_TOKEN: "", fields::CLUSTER_TIME: "", fields::WALL_TIME: "",
        fields::IMPORTED_FROM: "",
    };
    (set, unset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compatibility_policy_names_the_current_schema_version() {
        let policy = include_str!("../docs/COMPATIBILITY.md");
        let stated = format!("`schemaVersion` ({SCHEMA_VERSION} today)");
        assert!(
            policy.contains(&stated),
            "docs/COMPATIBILITY.md must say {stated}"
        );
    }

    #[test]
    fn a_document_of_a_newer_version_is_refused_with_the_way_forward() {
        let error =
            OffsetsDoc::parse(&doc! { "_id": "p", "epoch": 3_i64, "schemaVersion": 99_i64 })
                .expect_err("newer");
        assert!(error.contains("schemaVersion 99"), "{error}");
        assert!(error.contains("understands up to 4"), "{error}");
        let older = OffsetsDoc::parse(&doc! { "_id": "p", "epoch": 3_i64 }).expect("older");
        assert_eq!(older.schema_version, 0);
        assert_eq!(older.epoch, Some(3));
    }

    #[test]
    fn the_position_prefers_the_token_and_falls_back_to_start_at() {
        let ts = Timestamp {
            time: 5,
            increment: 1,
        };
        let with_token =
            OffsetsDoc::parse(&doc! { "resumeToken": { "_data": "82" }, "positionTime": ts })
                .expect("valid");
        assert_eq!(with_token.position(), Some(("token", ts)));
        let reset = OffsetsDoc::parse(&doc! { "startAtOperationTime": ts }).expect("valid");
        assert_eq!(reset.position(), Some(("startAt", ts)));
        assert_eq!(OffsetsDoc::parse(&doc! {}).expect("valid").position(), None);
    }

    #[test]
    fn wrong_types_name_their_field() {
        assert_eq!(
            OffsetsDoc::parse(&doc! { "epoch": "one" }),
            Err("epoch must be an integer".to_owned())
        );
        assert_eq!(
            OffsetsDoc::parse(&doc! { "resumeToken": "x" }),
            Err("resumeToken must be a document".to_owned())
        );
    }

    #[test]
    fn a_live_owner_is_one_whose_lease_has_not_ended() {
        let now = DateTime::now();
        let later = DateTime::from_millis(now.timestamp_millis() + 5000);
        let held = OffsetsDoc {
            owner: Some("a".into()),
            lease_until: Some(later),
            ..OffsetsDoc::default()
        };
        assert_eq!(held.live_owner(now), Some(("a", later)));
        assert_eq!(
            held.live_owner(DateTime::from_millis(later.timestamp_millis() + 1)),
            None
        );
    }
}
