//! The bridge's error type, and the rooms that decide what an error means.
//!
//! - [`classify`]: MongoDB and Kafka error codes, labels and kinds → an [`ErrorClass`]. The only
//!   place that inspects error codes.
//! - [`policy`]: error → the pipeline's next [`policy::Action`] (restart, reopen, skip the lost
//!   history, stand by, stop). The only place that decides what a pipeline does after a failure.
//! - [`report`]: one-line descriptions of errors for logs, with secrets redacted.
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
pub mod policy;
mod report;

pub use classify::{
    CODE_CHANGE_STREAM_FATAL, CODE_DUPLICATE_KEY, CODE_HISTORY_LOST, CODE_UNAUTHORIZED,
    CODE_UNKNOWN_STAGE, classify_kafka, classify_mongo, is_auth_failure, is_history_lost,
    is_oversize, is_server_selection, mongo_code,
};
pub use report::{describe_mongo, redact, report};

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

impl ErrorClass {
    /// The bounded metric label of the class.
    pub fn label(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Persistent => "persistent",
            Self::Fatal => "fatal",
        }
    }
}

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
        source: crate::encode::EncodeError,
    },
    /// The fragments of a split event (`$changeStreamSplitLargeEvent`) do not form one event.
    #[error("a split change event could not be reassembled on pipeline {pipeline:?}")]
    SplitEvent {
        /// Pipeline name.
        pipeline: String,
        /// Which fragment was wrong.
        #[source]
        source: crate::split::SplitError,
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
         with `mongo-kafka-bridge offsets reset {pipeline} --to-now` (or --to-timestamp T), or \
         accept that the new filter resumes from the old position with `mongo-kafka-bridge \
         offsets accept-config {pipeline}`"
    )]
    ConfigChanged {
        /// Pipeline name.
        pipeline: String,
        /// The recorded stream identity (relaxed Extended JSON).
        stored: String,
        /// The configured one.
        configured: String,
    },
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
    /// Classifies this error; see [`classify`].
    ///
    /// Transient: network and resumable MongoDB errors, server selection, write-concern and
    /// checkpoint timeouts, Kafka delivery errors that librdkafka gave up on within
    /// `message.timeout.ms`, cancelled deliveries and fatal idempotent-producer errors (a new
    /// producer is built on restart). Persistent: unknown topics, a replica-set name mismatch,
    /// driver failures that are neither network nor configuration, panics. Fatal:
    /// configuration, authentication and authorization, invalid pipeline stages, history lost,
    /// fencing, records Kafka rejects permanently (size, authorization).
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
            | Self::Oversize { .. } => ErrorClass::Fatal,
            Self::ReplicaSetMismatch { .. } | Self::TaskPanicked { .. } => ErrorClass::Persistent,
            Self::DeliveryCancelled { .. } | Self::StreamClosed { .. } => ErrorClass::Transient,
            Self::Source { source, .. } | Self::Checkpoint { source, .. } => classify_mongo(source),
            Self::Delivery { source, .. } | Self::TopicCreation { source, .. } => {
                classify_kafka(source)
            }
            Self::DeadLetterRefused { source, .. } if is_oversize(source) => ErrorClass::Fatal,
            Self::DeadLetterRefused { source, .. } => classify_kafka(source),
        }
    }

    /// A short, bounded label for metrics (`reason`, `stage` labels); never a message.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Config { .. } => "config",
            Self::Source { .. } => "source",
            Self::StreamClosed { .. } => "invalidate",
            Self::HistoryLost { .. } => "history_lost",
            Self::ReplicaSetMismatch { .. } => "replica_set",
            Self::Encode { .. } => "encode",
            Self::SplitEvent { .. } => "split",
            Self::Delivery { .. } => "delivery",
            Self::Oversize { .. } => "oversize",
            Self::DeadLetterRefused { .. } => "dead_letter",
            Self::DeliveryCancelled { .. } => "delivery_cancelled",
            Self::Producer(_) => "producer",
            Self::TopicCreation { .. } => "topic_creation",
            Self::Checkpoint { .. } => "checkpoint",
            Self::OffsetsDocument { .. } => "offsets_document",
            Self::Fenced { .. } => "fenced",
            Self::ConfigChanged { .. } => "config_changed",
            Self::TaskPanicked { .. } => "panic",
        }
    }

    /// Whether the failure came from the pipeline's producer, which is then rebuilt before the
    /// next run (a fatal idempotent-producer state only clears with a new producer).
    pub fn is_producer_failure(&self) -> bool {
        matches!(
            self,
            Self::Delivery { .. } | Self::DeliveryCancelled { .. } | Self::DeadLetterRefused { .. }
        )
    }

    /// What an operator can do about an error that kept coming back, for the log line of a
    /// pipeline that stops after `[bridge] persistent_error_attempts` failed runs.
    pub fn remedy(&self) -> &'static str {
        use rdkafka::types::RDKafkaErrorCode as C;
        let kafka = match self {
            Self::Delivery { source, .. } | Self::TopicCreation { source, .. } => {
                source.rdkafka_error_code()
            }
            _ => None,
        };
        match (self, kafka) {
            (_, Some(C::UnknownTopic | C::UnknownTopicOrPartition)) => {
                "the topic does not exist: create it, set [kafka.topic_creation] enabled = true, \
                 or enable the broker's auto.create.topics.enable"
            }
            (Self::TaskPanicked { .. }, _) => {
                "this is a bug of the bridge: please report it with the log lines above"
            }
            (Self::ReplicaSetMismatch { .. }, _) => "correct replicaSet in mongodb.uri",
            _ => {
                "see the error above; the pipeline restarts from its committed position once \
                  the cause is fixed and the bridge is started again"
            }
        }
    }
}

/// A server command error with `code` (the driver offers no public way to attach labels, so
/// label handling is covered by the fail-point integration tests).
#[cfg(test)]
pub(crate) fn command_error(code: i32) -> MongoError {
    let raw = bson::doc! { "code": code, "codeName": "X", "errmsg": "boom" };
    let cmd: mongodb::error::CommandError =
        bson::from_document(raw).expect("a well-formed command error document");
    mongodb::error::ErrorKind::Command(cmd).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_one_class_and_a_bounded_label() {
        let cases = [
            (
                BridgeError::TaskPanicked {
                    pipeline: "p".into(),
                    task: "source",
                    message: "boom".into(),
                },
                ErrorClass::Persistent,
                "panic",
            ),
            (
                BridgeError::ReplicaSetMismatch {
                    configured: "rs0".into(),
                    reported: "secantus".into(),
                    host: "h:1".into(),
                },
                ErrorClass::Persistent,
                "replica_set",
            ),
            (
                BridgeError::Fenced {
                    pipeline: "p".into(),
                    epoch: 3,
                },
                ErrorClass::Fatal,
                "fenced",
            ),
            (
                BridgeError::DeliveryCancelled {
                    pipeline: "p".into(),
                },
                ErrorClass::Transient,
                "delivery_cancelled",
            ),
        ];
        for (error, class, kind) in cases {
            assert_eq!(error.class(), class, "{error}");
            assert_eq!(error.kind(), kind, "{error}");
        }
    }

    #[test]
    fn a_refused_stub_is_fatal_when_too_large_and_follows_kafka_otherwise() {
        use rdkafka::types::RDKafkaErrorCode as C;
        let refused = |code| BridgeError::DeadLetterRefused {
            pipeline: "p".into(),
            topic: "dlq".into(),
            key: "{}".into(),
            source: Box::new(KafkaError::MessageProduction(code)),
        };
        assert_eq!(refused(C::MessageSizeTooLarge).class(), ErrorClass::Fatal);
        assert_eq!(refused(C::MessageTimedOut).class(), ErrorClass::Transient);
    }

    #[test]
    fn a_missing_topic_names_its_remedy() {
        let error = BridgeError::Delivery {
            pipeline: "p".into(),
            topic: "t".into(),
            source: Box::new(KafkaError::MessageProduction(
                rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition,
            )),
        };
        assert_eq!(error.class(), ErrorClass::Persistent);
        assert!(error.remedy().contains("[kafka.topic_creation]"));
    }
}
