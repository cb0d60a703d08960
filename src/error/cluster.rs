//! The errors of the cluster check of a pipeline's start (`crate::offsets::cluster`): its
//! position belongs to another MongoDB cluster than the one `mongodb.uri` reaches, or that
//! cluster's identity could not be read at all (no answer; a refusal by the server is not an
//! error, it leaves the pipeline unchecked).

use mongodb::error::Error as MongoError;

use super::ErrorClass;
use super::classify::classify_mongo;

/// A failed cluster check.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The position was committed on another cluster: the server would accept the foreign
    /// token and stream its own changes after it, from a place in another cluster's history.
    #[error(
        "pipeline {pipeline:?} was committed on another MongoDB cluster: the offsets document \
         records {stored}, but mongodb.uri reaches {found}. A resume token of one cluster is no \
         position in another's history, so the pipeline is refused (the others run on; nothing \
         was written). Either start it on this cluster with `mongo-kafka-bridge offsets reset \
         {pipeline} --to-now --config FILE` (or --to-timestamp T), or, if this cluster holds \
         the same history (the move is intended), record it with `mongo-kafka-bridge offsets \
         accept-cluster {pipeline} --config FILE`"
    )]
    Changed {
        /// Pipeline name.
        pipeline: String,
        /// The recorded cluster (`replica set "rs0" (replicaSetId …)`).
        stored: String,
        /// The cluster the client reaches.
        found: String,
    },
    /// The cluster's identity could not be read: the server was not reached, or did not
    /// answer in time. The pipeline restarts and reads it again.
    #[error(
        "pipeline {pipeline:?}: the identity of the MongoDB cluster could not be read ({what})"
    )]
    Unread {
        /// Pipeline name.
        pipeline: String,
        /// What failed: `no answer within 45 s`, or the driver's failure.
        what: String,
        /// The driver's error, when there was one (not for a timeout).
        #[source]
        source: Option<Box<MongoError>>,
    },
}

impl ClusterError {
    /// Changed: fatal (the pipeline is refused); unread: as its driver error, else (a
    /// timeout) transient.
    pub(super) fn class(&self) -> ErrorClass {
        match self {
            Self::Changed { .. } => ErrorClass::Fatal,
            Self::Unread {
                source: Some(source),
                ..
            } => classify_mongo(source),
            Self::Unread { source: None, .. } => ErrorClass::Transient,
        }
    }

    /// Whether the read could not ask the server because none was selected in time (no answer
    /// at all, or the driver's server selection gave up): a wrong `replicaSet`, or an outage.
    pub(crate) fn is_unanswered(&self) -> bool {
        match self {
            Self::Unread { source: None, .. } => true,
            Self::Unread {
                source: Some(source),
                ..
            } => super::is_server_selection(source),
            Self::Changed { .. } => false,
        }
    }

    /// The driver error it carries, if any.
    pub(super) fn mongo_source(&self) -> Option<&MongoError> {
        match self {
            Self::Unread {
                source: Some(source),
                ..
            } => Some(source),
            _ => None,
        }
    }
}
