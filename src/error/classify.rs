//! Error codes, labels and kinds → [`ErrorClass`]: the only place that inspects them.
//!
//! Invariants:
//! - Every driver [`MongoErrorKind`] is named in [`kind_of`]; a kind a later driver adds is
//!   [`ErrorClass::Persistent`] (retried a bounded number of times), never retried forever.
//! - Outages retry forever: network, server selection, connection-pool clears, timeouts,
//!   resumable change-stream errors, brokers down. A failure that needs an operator is never
//!   retried forever.

use mongodb::error::{Error as MongoError, ErrorKind as MongoErrorKind, WriteFailure};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::BridgeError;

/// What a failure calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// An outage or a momentary failure: restart the pipeline from its committed resume token,
    /// with capped jittered backoff, for as long as it lasts.
    Transient,
    /// Usually needs an operator, but can be momentary (a topic being created, a replica set
    /// being reconfigured): restarted up to `[bridge] persistent_error_attempts` consecutive
    /// times, then the pipeline stops with the fix named.
    Persistent,
    /// Stop: drain and commit the other pipelines, then exit non-zero with the message.
    Fatal,
}

/// `ChangeStreamHistoryLost`: the resume point is no longer in the oplog.
pub(crate) const CODE_HISTORY_LOST: i32 = 286;
/// `ChangeStreamFatalError`: the stream cannot be resumed (e.g. the token's event is gone).
pub(crate) const CODE_CHANGE_STREAM_FATAL: i32 = 280;
/// `DuplicateKey`: an upsert lost a race with a concurrent insert.
pub(crate) const CODE_DUPLICATE_KEY: i32 = 11000;
/// `Unrecognized pipeline stage name` (e.g. `$changeStreamSplitLargeEvent` before 7.0).
pub(crate) const CODE_UNKNOWN_STAGE: i32 = 40324;
/// `Unauthorized`: the user lacks a privilege.
pub(crate) const CODE_UNAUTHORIZED: i32 = 13;
/// `CommandNotFound`: the server has no such command.
pub(crate) const CODE_COMMAND_NOT_FOUND: i32 = 59;
/// `AuthenticationFailed`.
const CODE_AUTHENTICATION_FAILED: i32 = 18;
/// `NoMatchingDocument`: in a change stream, a `required` pre- or post-image the server does not
/// have (fatal, as every code off the lists below).
pub(crate) const CODE_NO_MATCHING_DOCUMENT: i32 = 47;

/// Server error codes that a restart from the committed token can outlive: the change streams
/// spec's resumable codes (for servers without error labels), retryable-write codes, and
/// write-concern / time-limit errors of the offsets writes. Any other server error is fatal, so
/// an unwatchable namespace or a bad stage fails at once instead of retrying forever (C23).
const TRANSIENT_CODES: [i32; 22] = [
    6, 7, 43, 50, 63, 64, 89, 91, 133, 150, 189, 234, 262, 9001, 10058, 10107, 11600, 11601, 11602,
    13388, 13435, 13436,
];

/// Server error codes that need an operator but may be momentary. `DuplicateKey` (11000): the
/// offsets writes that can meet it retry it themselves; elsewhere it means another writer
/// fights over the document.
const PERSISTENT_CODES: [i32; 1] = [CODE_DUPLICATE_KEY];

/// The driver's error kinds, as the classification sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MongoKind {
    /// The server answered with an error code (command, write or write-concern error).
    Server,
    /// The network, DNS, a cleared pool, or no selectable server: an outage.
    Outage,
    /// The configuration is wrong (bad option, TLS, credentials, an unsupported deployment or
    /// stream: sessions not supported, server too old, `_id` removed by the user's stages).
    Configuration,
    /// Neither: a malformed reply, a driver-internal error, the client shut down, a kind this
    /// version does not know.
    Other,
}

/// Names every kind of the driver's [`MongoErrorKind`].
fn kind_of(kind: &MongoErrorKind) -> MongoKind {
    use MongoErrorKind as K;
    match kind {
        K::Command(_) | K::Write(_) => MongoKind::Server,
        K::Io(_) | K::DnsResolve { .. } | K::ConnectionPoolCleared { .. } => MongoKind::Outage,
        K::ServerSelection { .. } => MongoKind::Outage,
        K::InvalidArgument { .. }
        | K::Authentication { .. }
        | K::InvalidTlsConfig { .. }
        | K::SessionsNotSupported
        | K::IncompatibleServer { .. }
        | K::MissingResumeToken => MongoKind::Configuration,
        K::BsonDeserialization(_)
        | K::BsonSerialization(_)
        | K::InsertMany(_)
        | K::BulkWrite(_)
        | K::GridFs(_)
        | K::Internal { .. }
        | K::InvalidResponse { .. }
        | K::Transaction { .. }
        | K::Custom(_)
        | K::Shutdown => MongoKind::Other,
        // Kinds behind driver features the bridge does not enable, and kinds of later versions.
        _ => MongoKind::Other,
    }
}

/// The class of a driver error of `kind` with server `code` (for [`MongoKind::Server`]).
fn class_of(kind: MongoKind, code: Option<i32>) -> ErrorClass {
    match (kind, code) {
        (MongoKind::Outage, _) => ErrorClass::Transient,
        (MongoKind::Configuration, _) => ErrorClass::Fatal,
        (MongoKind::Other, _) => ErrorClass::Persistent,
        (MongoKind::Server, Some(c)) if TRANSIENT_CODES.contains(&c) => ErrorClass::Transient,
        (MongoKind::Server, Some(c)) if PERSISTENT_CODES.contains(&c) => ErrorClass::Persistent,
        (MongoKind::Server, _) => ErrorClass::Fatal,
    }
}

/// True when the server says the resume point is no longer in the oplog (286). When
/// `at_open` (the `aggregate` that resumes from a token), 280 also means the token's own event
/// is gone (case C01); later, 280 has other causes (e.g. a required image is missing).
pub(crate) fn is_history_lost(error: &MongoError, at_open: bool) -> bool {
    match mongo_code(error) {
        Some(CODE_HISTORY_LOST) => true,
        Some(CODE_CHANGE_STREAM_FATAL) => at_open,
        _ => false,
    }
}

/// The server's error code, if the error came from a server reply.
pub(crate) fn mongo_code(error: &MongoError) -> Option<i32> {
    match error.kind.as_ref() {
        MongoErrorKind::Command(c) => Some(c.code),
        MongoErrorKind::Write(WriteFailure::WriteConcernError(w)) => Some(w.code),
        MongoErrorKind::Write(WriteFailure::WriteError(w)) => Some(w.code),
        _ => None,
    }
}

/// Classifies a MongoDB driver error by label, then kind and code.
pub(crate) fn classify_mongo(error: &MongoError) -> ErrorClass {
    if error.contains_label("NonResumableChangeStreamError") || is_history_lost(error, true) {
        return ErrorClass::Fatal;
    }
    if error.contains_label("ResumableChangeStreamError")
        || error.contains_label(mongodb::error::RETRYABLE_WRITE_ERROR)
    {
        return ErrorClass::Transient;
    }
    class_of(kind_of(&error.kind), mongo_code(error))
}

/// Whether no server could be selected (the cluster is down, or the URI does not match it).
pub(crate) fn is_server_selection(error: &MongoError) -> bool {
    matches!(error.kind.as_ref(), MongoErrorKind::ServerSelection { .. })
}

/// Whether the driver error is an authentication failure (a client-side SCRAM/X.509 failure or
/// the server's `AuthenticationFailed` 18).
pub(crate) fn is_auth_failure(error: &MongoError) -> bool {
    matches!(error.kind.as_ref(), MongoErrorKind::Authentication { .. })
        || mongo_code(error) == Some(CODE_AUTHENTICATION_FAILED)
}

/// The librdkafka error codes that no retry can fix: the record or the topic is refused.
/// See librdkafka `INTRODUCTION.md`, "Error handling" and "Idempotent Producer".
fn is_permanent_kafka(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        code,
        C::MessageSizeTooLarge
            | C::InvalidMessageSize
            | C::InvalidMessage
            | C::TopicAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::TransactionalIdAuthorizationFailed
            | C::InvalidTopic
            | C::InvalidRecord
            | C::UnsupportedForMessageFormat
            | C::SaslAuthenticationFailed
            | C::Authentication
            | C::InvalidArgument
            | C::InvalidPartitions
            | C::InvalidReplicationFactor
            | C::InvalidConfig
            | C::PolicyViolation
    )
}

/// librdkafka error codes that need an operator but may be momentary: a topic that does not
/// exist (librdkafka also reports it briefly while a topic is being created).
fn is_persistent_kafka(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::UnknownTopic | RDKafkaErrorCode::UnknownTopicOrPartition
    )
}

/// Classifies a Kafka error: permanent rejections are fatal, unknown topics persistent,
/// everything else restarts the pipeline (a fatal idempotent-producer error rebuilds the
/// producer on restart).
pub(crate) fn classify_kafka(error: &KafkaError) -> ErrorClass {
    match error.rdkafka_error_code() {
        Some(code) if is_permanent_kafka(code) => ErrorClass::Fatal,
        Some(code) if is_persistent_kafka(code) => ErrorClass::Persistent,
        _ => ErrorClass::Transient,
    }
}

/// Whether `error` means the record is too large for the producer or the topic.
pub(crate) fn is_oversize(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::InvalidMessageSize)
    )
}

impl BridgeError {
    /// Classifies this error (this module's rules).
    ///
    /// Transient: network and resumable MongoDB errors, server selection, write-concern and
    /// checkpoint timeouts, Kafka delivery errors that librdkafka gave up on within
    /// `message.timeout.ms`, cancelled deliveries and fatal idempotent-producer errors (a new
    /// producer is built on restart). Persistent: unknown topics, a replica-set name mismatch,
    /// driver failures that are neither network nor configuration, panics. Fatal:
    /// configuration, authentication and authorization, invalid pipeline stages, history lost,
    /// fencing, records Kafka rejects permanently (size, authorization), a missing required
    /// pre-image (the server's `NoMatchingDocument` 47, or the bridge's [`Self::MissingPreImage`]).
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::Config { .. }
            | Self::HistoryLost { .. }
            | Self::Fenced { .. }
            | Self::Encode { .. }
            | Self::SplitEvent { .. }
            | Self::OffsetsDocument { .. }
            | Self::Producer(_)
            | Self::ConfigChanged { .. }
            | Self::SnapshotFilterChanged(_)
            | Self::CopyCheck(_)
            | Self::TransactionTooLong { .. }
            | Self::KafkaAuthentication { .. }
            | Self::MissingPreImage(_)
            | Self::Oversize { .. } => ErrorClass::Fatal,
            Self::ReplicaSetMismatch { .. } | Self::TaskPanicked { .. } => ErrorClass::Persistent,
            Self::DeliveryCancelled { .. }
            | Self::DeliveryStalled { .. }
            | Self::StreamClosed { .. }
            | Self::Group { .. }
            | Self::BatchAboveTopicLimit { .. }
            | Self::RefusedInTransaction { .. }
            | Self::Progress { .. } => ErrorClass::Transient,
            Self::Source { source, .. }
            | Self::Checkpoint { source, .. }
            | Self::Copy { source, .. } => classify_mongo(source),
            Self::Cluster(e) => e.class(),
            Self::Delivery { source, .. } | Self::TopicCreation { source, .. } => {
                classify_kafka(source)
            }
            Self::DeadLetterRefused { source, .. } if is_oversize(source) => ErrorClass::Fatal,
            Self::DeadLetterRefused { source, .. } | Self::Transaction { source, .. } => {
                classify_kafka(source)
            }
        }
    }

    /// Whether librdkafka reported the producer fenced (`PRODUCER_FENCED`,
    /// `INVALID_PRODUCER_EPOCH`, `_FENCED`, or `_FATAL`, which a transactional call returns once
    /// the producer raised a fatal error such as a fencing): either a newer producer of the same
    /// `transactional.id` started, or the coordinator timed a transaction out and bumped the
    /// epoch (KAFKA-6119, librdkafka#3297). The pipeline's lifecycle tells the two apart by the
    /// offsets document's epoch.
    pub(crate) fn is_producer_fenced(&self) -> bool {
        use rdkafka::types::RDKafkaErrorCode as C;
        let code = match self {
            Self::Transaction { source, .. } | Self::Delivery { source, .. } => {
                source.rdkafka_error_code()
            }
            _ => None,
        };
        matches!(
            code,
            Some(C::Fenced | C::ProducerFenced | C::InvalidProducerEpoch | C::Fatal)
        )
    }

    /// Whether the run failed in Kafka (the next run gets new clients, `pipeline/recovery.rs`).
    pub(crate) fn is_kafka_failure(&self) -> bool {
        let other = matches!(self, Self::Progress { .. } | Self::TopicCreation { .. });
        other || self.is_producer_failure() || matches!(self, Self::Producer(_))
    }

    /// Whether the failure came from the pipeline's producer, which is then rebuilt before the
    /// next run (a fatal idempotent-producer state only clears with a new producer).
    pub(crate) fn is_producer_failure(&self) -> bool {
        matches!(
            self,
            Self::Delivery { .. }
                | Self::DeliveryCancelled { .. }
                | Self::DeliveryStalled { .. }
                | Self::DeadLetterRefused { .. }
                | Self::RefusedInTransaction { .. }
                | Self::Transaction { .. }
        )
    }
}

#[cfg(test)]
mod tests;
