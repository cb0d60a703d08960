//! The bridge's error type, and the rooms that decide what an error means.
//!
//! - `classify`: MongoDB and Kafka error codes, labels and kinds → an [`ErrorClass`]
//!   ([`BridgeError::class`]). The only place that inspects error codes.
//! - `report`: one-line descriptions of errors for logs, with secrets redacted; the bounded
//!   metric label ([`BridgeError::kind`]) and the operator's remedy ([`BridgeError::remedy`]).
//! - [`encode`], [`split`], [`images`]: the errors of one change event (it cannot be encoded,
//!   its fragments do not form one event, it lacks its required pre-image), [`snapshot`]: a
//!   copy that would finish short, and [`cluster`]: a position on another MongoDB cluster;
//!   defined here so that [`BridgeError`] can carry them.
//!
//! What a pipeline *does* after a failure is decided beside its lifecycle (`pipeline/policy.rs`).
//!
//! Invariants:
//! - MongoDB server errors are classified by error code and error label, never by message text
//!   (<https://www.mongodb.com/docs/manual/reference/error-codes/>,
//!   <https://github.com/mongodb/specifications/blob/master/source/change-streams/change-streams.md#resumable-error>).
//! - Messages never interpolate their source error and never contain a secret: the source is kept
//!   as `#[source]` and printed by the caller through [`report()`], which redacts.

use mongodb::error::Error as MongoError;
use rdkafka::error::KafkaError;

mod classify;
pub mod cluster;
pub mod encode;
pub mod images;
mod report;
pub mod snapshot;
pub mod split;

pub use classify::ErrorClass;
pub(crate) use classify::{
    CODE_COMMAND_NOT_FOUND, CODE_DUPLICATE_KEY, CODE_NO_MATCHING_DOCUMENT, CODE_UNAUTHORIZED,
    CODE_UNKNOWN_STAGE, is_auth_failure, is_history_lost, is_oversize, is_server_selection,
    mongo_code,
};
pub(crate) use report::describe_mongo;
pub use report::{KINDS, redact, report};

/// Every failure a pipeline or the process can meet.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The configuration is invalid; `field` is the TOML path, `reason` says what to change.
    #[error("invalid configuration: {field}: {reason}")]
    Config {
        /// TOML path of the offending key, e.g. `pipelines[0].full_document`.
        field: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The server closed the change stream (after an `invalidate`): reopen with `startAfter`.
    #[error("change stream of pipeline {pipeline:?} was closed by the server (invalidate)")]
    StreamClosed {
        /// Pipeline name.
        pipeline: String,
    },
    /// The change stream could not be opened or read.
    #[error("change stream failed on pipeline {pipeline:?}")]
    Source {
        /// Pipeline name.
        pipeline: String,
        /// Driver error.
        #[source]
        source: Box<MongoError>,
    },
    /// A snapshot's copy of a namespace could not be read (listing, `find`, `getMore`).
    #[error("the snapshot's copy of {namespace} failed on pipeline {pipeline:?}")]
    Copy {
        /// Pipeline name.
        pipeline: String,
        /// `db.coll` (or the scope, while listing it).
        namespace: String,
        /// Driver error.
        #[source]
        source: Box<MongoError>,
    },
    /// A copy stopped rather than finish short (its `_id`s out of order, its count off).
    #[error("the snapshot's copy stopped rather than finish short")]
    CopyCheck(#[source] Box<snapshot::CopyCheckError>),
    /// A running snapshot was started with another `snapshot_filter`: resuming would mix two.
    #[error(transparent)]
    SnapshotFilterChanged(Box<snapshot::FilterChanged>),
    /// The resume token is no longer in the oplog (codes 286 / 280).
    #[error(
        "pipeline {pipeline:?} cannot resume: its committed resume token (clusterTime {cluster_time}) \
         is no longer in the oplog. Nothing was skipped. To start again from now, losing the changes \
         since then, run `mongo-kafka-bridge offsets reset {pipeline} --to-now --config FILE`, \
         or delete the pipeline's document in the offsets collection"
    )]
    HistoryLost {
        /// Pipeline name.
        pipeline: String,
        /// Committed clusterTime as `<seconds>.<increment>`, or `unknown`.
        cluster_time: String,
        /// Driver error carrying the code.
        #[source]
        source: Box<MongoError>,
    },
    /// `mongodb.uri` names a replica set that the server does not belong to.
    #[error(
        "mongodb.uri names replica set {configured:?}, but the server at {host} belongs to replica \
         set {reported:?}, so the driver ignores it. Remedy: set replicaSet={reported} in \
         mongodb.uri (or, for a single server, remove replicaSet and add directConnection=true)"
    )]
    ReplicaSetMismatch {
        /// The URI's `replicaSet`.
        configured: String,
        /// `setName` the server reports in `hello`.
        reported: String,
        /// `host:port` that answered.
        host: String,
    },
    /// A change event could not be encoded.
    #[error("change event could not be encoded on pipeline {pipeline:?}")]
    Encode {
        /// Pipeline name.
        pipeline: String,
        /// What was wrong with the event.
        #[source]
        source: encode::EncodeError,
    },
    /// A captured event lacks the pre-image `required` asks for (a database or deployment scope).
    #[error(transparent)]
    MissingPreImage(Box<images::MissingPreImage>),
    /// The fragments of a split event (`$changeStreamSplitLargeEvent`) do not form one event.
    #[error("a split change event could not be reassembled on pipeline {pipeline:?}")]
    SplitEvent {
        /// Pipeline name.
        pipeline: String,
        /// Which fragment was wrong.
        #[source]
        source: split::SplitError,
    },
    /// The producer could not authenticate (SASL, TLS): not retried, as Kafka's clients do not.
    #[error(
        "kafka authentication failed on pipeline {pipeline:?}: {reason}. Remedy: check sasl.*, \
         security.protocol, ssl.* and the password (sasl.password or \
         MONGO_KAFKA_BRIDGE__KAFKA__PROPERTIES__SASL_PASSWORD) in [kafka.properties]"
    )]
    KafkaAuthentication {
        /// Pipeline name.
        pipeline: String,
        /// librdkafka's reason (no credential in it).
        reason: String,
    },
    /// Kafka did not acknowledge a record (after librdkafka's own retries).
    #[error("kafka delivery failed on pipeline {pipeline:?} for topic {topic:?}")]
    Delivery {
        /// Pipeline name.
        pipeline: String,
        /// Target topic.
        topic: String,
        /// librdkafka error.
        #[source]
        source: Box<KafkaError>,
    },
    /// A record is larger than Kafka accepts and the pipeline's policy is `on_oversize = "fail"`.
    #[error(
        "record of {size} bytes for topic {topic:?} (pipeline {pipeline:?}, key {key}) is larger \
         than Kafka accepts (producer message.max.bytes, the topic's max.message.bytes, or the \
         producer's whole queue, queue.buffering.max.kbytes). Set on_oversize = \"dead_letter\" \
         with a dead_letter_topic, or raise the limits"
    )]
    Oversize {
        /// Pipeline name.
        pipeline: String,
        /// Target topic.
        topic: String,
        /// The record key (canonical Extended JSON of the documentKey).
        key: String,
        /// Record size in bytes.
        size: usize,
    },
    /// The stub of an oversized record could not be published to the dead-letter topic. The
    /// event is not skipped: the pipeline stops before it.
    #[error(
        "the dead-letter stub for key {key} (pipeline {pipeline:?}) was refused on topic \
         {topic:?}. The event is not skipped. Remedy: make sure the dead-letter topic exists and \
         accepts records of this key's size (its max.message.bytes, the producer's \
         message.max.bytes)"
    )]
    DeadLetterRefused {
        /// Pipeline name.
        pipeline: String,
        /// The dead-letter topic.
        topic: String,
        /// The record key (canonical Extended JSON of the documentKey).
        key: String,
        /// librdkafka error.
        #[source]
        source: Box<KafkaError>,
    },
    /// The delivery future was dropped without a result: treated as not delivered.
    #[error("kafka delivery was cancelled on pipeline {pipeline:?} (producer closed)")]
    DeliveryCancelled {
        /// Pipeline name.
        pipeline: String,
    },
    /// A record stayed unacknowledged for most of `message.timeout.ms`: the run ends with every
    /// queued record purged at once, before librdkafka would time them out one by one
    /// (`relay/stall.rs` says why).
    #[error(
        "kafka delivery stalled on pipeline {pipeline:?}: a record for topic {topic:?} waited \
         {waited_ms} ms for its acknowledgement (message.timeout.ms {timeout_ms})"
    )]
    DeliveryStalled {
        /// Pipeline name.
        pipeline: String,
        /// The topic of the record that waited.
        topic: String,
        /// How long the oldest record had waited (ms).
        waited_ms: u64,
        /// The producer's `message.timeout.ms`.
        timeout_ms: u64,
    },
    /// The Kafka producer could not be created or configured.
    #[error("kafka producer could not be created")]
    Producer(#[source] Box<KafkaError>),
    /// A missing topic could not be created (`[kafka.topic_creation]`).
    #[error("topic {topic:?} of pipeline {pipeline:?} could not be created")]
    TopicCreation {
        /// Pipeline name.
        pipeline: String,
        /// The topic.
        topic: String,
        /// librdkafka error.
        #[source]
        source: Box<KafkaError>,
    },
    /// The offsets collection could not be read or written.
    #[error("offsets collection access failed on pipeline {pipeline:?}")]
    Checkpoint {
        /// Pipeline name.
        pipeline: String,
        /// Driver error.
        #[source]
        source: Box<MongoError>,
    },
    /// The offsets document holds something this version cannot read.
    #[error("offsets document of pipeline {pipeline:?} is invalid: {reason}")]
    OffsetsDocument {
        /// Pipeline name.
        pipeline: String,
        /// What is wrong, and what to do.
        reason: String,
    },
    /// The committed position belongs to another stream identity (scope or `pipeline` stages)
    /// than the one configured: resuming would silently miss, or invent, events.
    #[error(
        "pipeline {pipeline:?} was changed since its position was committed: the offsets \
         document records the stream {stored} but the configuration says {configured}. The \
         pipeline is refused (the others run on). Either start the changed stream elsewhere \
         with `mongo-kafka-bridge offsets reset {pipeline} --to-now --config FILE` (or \
         --to-timestamp T), or accept that the new filter resumes from the old position with \
         `mongo-kafka-bridge offsets accept-config {pipeline} --config FILE`"
    )]
    ConfigChanged {
        /// Pipeline name.
        pipeline: String,
        /// The recorded stream identity (relaxed Extended JSON).
        stored: String,
        /// The configured one.
        configured: String,
    },
    /// A start found the position on another MongoDB cluster, or could not read the cluster's.
    #[error(transparent)]
    Cluster(Box<cluster::ClusterError>),
    /// Another instance took the pipeline over (its epoch is newer than ours).
    #[error(
        "pipeline {pipeline:?} was fenced: another bridge instance or an `offsets reset` took it over (epoch {epoch} is \
         no longer current). This instance stops the pipeline; nothing after the last commit was \
         committed by it"
    )]
    Fenced {
        /// Pipeline name.
        pipeline: String,
        /// Our (stale) epoch.
        epoch: i64,
    },
    /// Group membership (`[bridge] group_id`) could not be set up or kept: the slots in
    /// MongoDB, the control topic or the group consumer in Kafka.
    #[error("group {group:?}: {reason}")]
    Group {
        /// The `group_id`.
        group: String,
        /// What failed, and what to do.
        reason: String,
    },
    /// A step of a Kafka transaction (`init_transactions`, begin, the progress record, commit,
    /// abort) failed (`delivery = "exactly_once"`). Nothing of the open transaction becomes
    /// visible: it is aborted, at the latest by the next producer's `init_transactions`, and
    /// the pipeline restarts from the last committed progress.
    #[error("kafka transaction ({operation}) failed on pipeline {pipeline:?}")]
    Transaction {
        /// Pipeline name.
        pipeline: String,
        /// Which step: `init`, `begin`, `progress`, `commit`, `abort`, `read_progress`.
        operation: &'static str,
        /// librdkafka error.
        #[source]
        source: Box<KafkaError>,
    },
    /// The progress topic could not be read at the start of an exactly-once run (no broker, a
    /// record that is not a progress record, or an open transaction holding the read back).
    #[error("the progress topic of pipeline {pipeline:?} could not be read: {reason}")]
    Progress {
        /// Pipeline name.
        pipeline: String,
        /// What failed.
        reason: String,
    },
    /// The events of a MongoDB transaction were not all read when its Kafka transaction neared
    /// `transaction.timeout.ms`: the Kafka transaction was aborted rather than split.
    #[error(
        "pipeline {pipeline:?}: the events of the MongoDB transaction lsid {lsid} txnNumber \
         {txn_number} had not all been read after {events} events and {elapsed_ms} ms, the \
         Kafka transaction's limit ({limit_ms} ms: transaction.timeout.ms minus a 5 s margin). \
         Its events must be committed in one Kafka transaction, so nothing of it was made \
         visible. Remedy: raise [kafka.properties] \"transaction.timeout.ms\" (up to the \
         broker's transaction.max.timeout.ms), or keep MongoDB transactions smaller"
    )]
    TransactionTooLong {
        /// Pipeline name.
        pipeline: String,
        /// The transaction's `lsid` (relaxed Extended JSON).
        lsid: String,
        /// Its `txnNumber`.
        txn_number: i64,
        /// Events of the Kafka transaction when it was aborted.
        events: usize,
        /// Its age then (ms).
        elapsed_ms: u64,
        /// The bound it neared: `transaction.timeout.ms` minus the margin (ms).
        limit_ms: u64,
    },
    /// A topic accepts smaller record batches than the producer builds: its records would be
    /// refused as too large although each fits. The pipeline rebuilds its producer with
    /// `batch.size` = the topic's limit and runs again (`crate::kafka::limits`).
    #[error(
        "pipeline {pipeline:?}: topic {topic:?} accepts record batches of at most {topic_limit} \
         bytes (its max.message.bytes), below the producer's {batch_bytes} (batch.size, \
         message.max.bytes); rebuilding the producer with batch.size = {topic_limit}. To avoid \
         the restart, set [kafka.properties] \"batch.size\" = {topic_limit} or less"
    )]
    BatchAboveTopicLimit {
        /// Pipeline name.
        pipeline: String,
        /// The topic.
        topic: String,
        /// Its `max.message.bytes` (bytes).
        topic_limit: usize,
        /// The producer's batch bound (bytes).
        batch_bytes: usize,
    },
    /// The broker refused a record as too large inside a Kafka transaction (exactly-once), which
    /// then can only abort. The run ends; the next one stubs records of that size for the topic
    /// at enqueue (`crate::kafka::limits::Learned`).
    #[error(
        "pipeline {pipeline:?}: the broker refused a record of {size} bytes for topic {topic:?} \
         as too large inside a Kafka transaction, which can then only abort: it was aborted and \
         its span is read again with records of this size for the topic stubbed at enqueue \
         (on_oversize = \"dead_letter\"). Check the topic's max.message.bytes"
    )]
    RefusedInTransaction {
        /// Pipeline name.
        pipeline: String,
        /// The topic.
        topic: String,
        /// The record's key plus value bytes.
        size: usize,
    },
    /// A task of a pipeline panicked (a bug): it is restarted like a failure, never taken for a
    /// clean stop.
    #[error("the {task} task of pipeline {pipeline:?} panicked: {message}")]
    TaskPanicked {
        /// Pipeline name (`*` for a task of the whole process).
        pipeline: String,
        /// Which task: `source`, `relay`, `checkpointer`, `pipeline`, `bridge`.
        task: &'static str,
        /// The panic's message, when it is text.
        message: String,
    },
}

impl BridgeError {
    /// A configuration error about `field` (its TOML path), saying what to write instead.
    pub(crate) fn config(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Config {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
