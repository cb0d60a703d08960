//! The bridge's error type and the one place that classifies errors.
//!
//! Invariants:
//! - [`BridgeError::class`] is the only function that decides whether a failure restarts a pipeline
//!   from its committed resume token ([`ErrorClass::Transient`]) or stops the process
//!   ([`ErrorClass::Fatal`]). Nothing else inspects error codes.
//! - MongoDB server errors are classified by error code and error label, never by message text
//!   (<https://www.mongodb.com/docs/manual/reference/error-codes/>,
//!   <https://github.com/mongodb/specifications/blob/master/source/change-streams/change-streams.md#resumable-error>).
//! - Messages never interpolate their source error and never contain a secret: the source is kept
//!   as `#[source]` and printed by the caller through [`report`], which redacts.

use std::error::Error as StdError;

use mongodb::error::{Error as MongoError, ErrorKind as MongoErrorKind};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// `ChangeStreamHistoryLost`: the resume point is no longer in the oplog.
pub const CODE_HISTORY_LOST: i32 = 286;
/// `ChangeStreamFatalError`: the stream cannot be resumed (e.g. the token's event is gone).
pub const CODE_CHANGE_STREAM_FATAL: i32 = 280;
/// Server error codes that a restart from the committed token can outlive: the change streams
/// spec's resumable codes (for servers without error labels), retryable-write codes, and
/// write-concern / time-limit errors of the offsets writes. Any other server error is fatal, so
/// an unwatchable namespace or a bad stage fails at once instead of retrying forever (C23).
const TRANSIENT_CODES: [i32; 23] = [
    6, 7, 43, 50, 63, 64, 89, 91, 133, 150, 189, 234, 262, 9001, 10058, 10107, 11600, 11601, 11602,
    13388, 13435, 13436, 11000,
];

/// Whether a failure is worth a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Restart the pipeline from its committed resume token, with capped jittered backoff.
    Transient,
    /// Stop: drain and commit the other pipelines, then exit non-zero with the message.
    Fatal,
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
    /// A change event could not be encoded (malformed BSON from the server).
    #[error("change event could not be encoded on pipeline {pipeline:?}: {reason}")]
    Encode {
        /// Pipeline name.
        pipeline: String,
        /// What was wrong with the event.
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
         than Kafka accepts (producer message.max.bytes or the topic's max.message.bytes). Set \
         on_oversize = \"dead_letter\" with a dead_letter_topic, or raise both limits"
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
    /// The delivery future was dropped without a result: treated as not delivered.
    #[error("kafka delivery was cancelled on pipeline {pipeline:?} (producer closed)")]
    DeliveryCancelled {
        /// Pipeline name.
        pipeline: String,
    },
    /// The Kafka producer could not be created or configured.
    #[error("kafka producer could not be created")]
    Producer(#[source] Box<KafkaError>),
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
        /// What is wrong.
        reason: String,
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
}

impl BridgeError {
    /// Classifies this error: the only place that decides restart versus stop.
    ///
    /// Transient: network and resumable MongoDB errors, write-concern and checkpoint timeouts,
    /// Kafka delivery errors that librdkafka gave up on within `message.timeout.ms`, cancelled
    /// deliveries and fatal idempotent-producer errors (a new producer is built on restart).
    /// Fatal: configuration, authentication and authorization, invalid pipeline stages, history
    /// lost, fencing, records Kafka rejects permanently (size, authorization, unknown topic).
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::Config { .. }
            | Self::HistoryLost { .. }
            | Self::Fenced { .. }
            | Self::Encode { .. }
            | Self::OffsetsDocument { .. }
            | Self::Producer(_)
            | Self::Oversize { .. } => ErrorClass::Fatal,
            Self::DeliveryCancelled { .. } | Self::StreamClosed { .. } => ErrorClass::Transient,
            Self::Source { source, .. } | Self::Checkpoint { source, .. } => classify_mongo(source),
            Self::Delivery { source, .. } => classify_kafka(source),
        }
    }

    /// A short, bounded label for metrics (`reason`, `stage` labels); never a message.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Config { .. } => "config",
            Self::Source { .. } => "source",
            Self::StreamClosed { .. } => "invalidate",
            Self::HistoryLost { .. } => "history_lost",
            Self::Encode { .. } => "encode",
            Self::Delivery { .. } => "delivery",
            Self::Oversize { .. } => "oversize",
            Self::DeliveryCancelled { .. } => "delivery_cancelled",
            Self::Producer(_) => "producer",
            Self::Checkpoint { .. } => "checkpoint",
            Self::OffsetsDocument { .. } => "offsets_document",
            Self::Fenced { .. } => "fenced",
        }
    }
}

/// True when the server says the resume point is no longer in the oplog (286). When
/// `at_open` (the `aggregate` that resumes from a token), 280 also means the token's own event
/// is gone (case C01); later, 280 has other causes (e.g. a required image is missing).
pub fn is_history_lost(error: &MongoError, at_open: bool) -> bool {
    match mongo_code(error) {
        Some(CODE_HISTORY_LOST) => true,
        Some(CODE_CHANGE_STREAM_FATAL) => at_open,
        _ => false,
    }
}

/// The server's error code, if the error came from a server reply.
pub fn mongo_code(error: &MongoError) -> Option<i32> {
    match error.kind.as_ref() {
        MongoErrorKind::Command(c) => Some(c.code),
        MongoErrorKind::Write(mongodb::error::WriteFailure::WriteConcernError(w)) => Some(w.code),
        MongoErrorKind::Write(mongodb::error::WriteFailure::WriteError(w)) => Some(w.code),
        _ => None,
    }
}

/// Classifies a MongoDB driver error by kind, code and label.
pub fn classify_mongo(error: &MongoError) -> ErrorClass {
    if error.contains_label("NonResumableChangeStreamError") || is_history_lost(error, true) {
        return ErrorClass::Fatal;
    }
    if error.contains_label("ResumableChangeStreamError")
        || error.contains_label(mongodb::error::RETRYABLE_WRITE_ERROR)
        || matches!(
            error.kind.as_ref(),
            MongoErrorKind::Io(_)
                | MongoErrorKind::ConnectionPoolCleared { .. }
                | MongoErrorKind::ServerSelection { .. }
                | MongoErrorKind::DnsResolve { .. }
        )
    {
        return ErrorClass::Transient;
    }
    match (error.kind.as_ref(), mongo_code(error)) {
        (
            MongoErrorKind::Authentication { .. }
            | MongoErrorKind::InvalidArgument { .. }
            | MongoErrorKind::InvalidTlsConfig { .. },
            _,
        ) => ErrorClass::Fatal,
        (_, Some(code)) if TRANSIENT_CODES.contains(&code) => ErrorClass::Transient,
        (_, Some(_)) => ErrorClass::Fatal,
        (_, None) => ErrorClass::Transient,
    }
}

/// The librdkafka error codes that no retry can fix: the record or the topic is refused.
/// See librdkafka `INTRODUCTION.md`, "Error handling" and "Idempotent Producer".
pub fn is_permanent_kafka(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        code,
        C::MessageSizeTooLarge
            | C::InvalidMessageSize
            | C::InvalidMessage
            | C::TopicAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::TransactionalIdAuthorizationFailed
            | C::UnknownTopic
            | C::InvalidTopic
            | C::InvalidRecord
            | C::UnsupportedForMessageFormat
            | C::SaslAuthenticationFailed
            | C::Authentication
            | C::InvalidArgument
    )
}

/// Classifies a Kafka delivery error: permanent rejections are fatal, everything else restarts
/// the pipeline (a fatal idempotent-producer error rebuilds the producer on restart).
pub fn classify_kafka(error: &KafkaError) -> ErrorClass {
    match error.rdkafka_error_code() {
        Some(code) if is_permanent_kafka(code) => ErrorClass::Fatal,
        _ => ErrorClass::Transient,
    }
}

/// A one-line description of a driver error: the server's code name, code and message, or the
/// kind of client-side failure, without the driver's debug dump.
pub fn describe_mongo(error: &MongoError) -> String {
    use mongodb::error::WriteFailure;
    match error.kind.as_ref() {
        MongoErrorKind::Command(c) => format!("{} ({}): {}", c.code_name, c.code, c.message),
        MongoErrorKind::Write(WriteFailure::WriteConcernError(w)) => {
            format!("{} ({}): {}", w.code_name, w.code, w.message)
        }
        MongoErrorKind::Write(WriteFailure::WriteError(w)) => {
            format!("write error ({}): {}", w.code, w.message)
        }
        MongoErrorKind::Authentication { message, .. } => {
            format!("authentication failed: {message}")
        }
        MongoErrorKind::ServerSelection { message, .. } => {
            format!("no suitable server reachable: {message}")
        }
        MongoErrorKind::Io(io) => format!("network error: {io}"),
        other => other.to_string(),
    }
}

/// Whether the driver error is an authentication failure (a client-side SCRAM/X.509 failure or
/// the server's `AuthenticationFailed` 18).
pub fn is_auth_failure(error: &MongoError) -> bool {
    matches!(error.kind.as_ref(), MongoErrorKind::Authentication { .. })
        || mongo_code(error) == Some(18)
}

/// Replaces each occurrence of `secret` in `text` by `***`, except where the occurrence is part
/// of a longer word (letters or digits on either side): a short password like `p` must neither
/// garble "provided" nor reveal itself by the gaps it leaves.
///
/// ```
/// use mongo_kafka_bridge::error::redact;
///
/// assert_eq!(redact("mongodb://app:p@db provided", "p"), "mongodb://app:***@db provided");
/// ```
pub fn redact(text: &str, secret: &str) -> String {
    if secret.is_empty() {
        return text.to_owned();
    }
    let is_word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    let mut out = String::with_capacity(text.len());
    let mut done = 0;
    for (at, _) in text.match_indices(secret) {
        if at < done {
            continue;
        }
        let before = text[..at].chars().next_back();
        let after = text[at + secret.len()..].chars().next();
        out.push_str(&text[done..at]);
        out.push_str(if is_word(before) || is_word(after) {
            secret
        } else {
            "***"
        });
        done = at + secret.len();
    }
    let rest = &text[done..];
    out.push_str(rest);
    out
}

/// Renders an error and its whole `source()` chain on one line, for logs.
///
/// The driver's messages carry host names but not credentials; librdkafka's never carry
/// `sasl.password`. Callers pass the secrets they know in `secrets` and each is replaced by `***`
/// as a second line of defence.
pub fn report(error: &(dyn StdError + 'static), secrets: &[&str]) -> String {
    let render = |e: &(dyn StdError + 'static)| {
        let mongo = e
            .downcast_ref::<MongoError>()
            .or_else(|| e.downcast_ref::<Box<MongoError>>().map(AsRef::as_ref));
        match mongo {
            Some(mongo) => (describe_mongo(mongo), true),
            None => (e.to_string(), false),
        }
    };
    let (mut text, mut done) = render(error);
    let mut cause = error.source();
    while let (Some(inner), false) = (cause, done) {
        let (part, last) = render(inner);
        text.push_str(": ");
        text.push_str(&part);
        done = last;
        cause = inner.source();
    }
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        text = redact(&text, secret);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server command error with `code`; the driver offers no public way to attach labels,
    /// so label handling is covered by the fail-point integration tests.
    fn command_error(code: i32, _labels: &[&str]) -> MongoError {
        let raw = bson::doc! { "code": code, "codeName": "X", "errmsg": "boom" };
        let cmd: mongodb::error::CommandError =
            bson::from_document(raw).expect("a well-formed command error document");
        MongoErrorKind::Command(cmd).into()
    }

    #[test]
    fn history_lost_codes_are_fatal() {
        assert_eq!(classify_mongo(&command_error(286, &[])), ErrorClass::Fatal);
        assert_eq!(classify_mongo(&command_error(280, &[])), ErrorClass::Fatal);
        assert!(is_history_lost(&command_error(286, &[]), false));
        assert!(is_history_lost(&command_error(280, &[]), true));
        assert!(!is_history_lost(&command_error(280, &[]), false));
        assert!(!is_history_lost(&command_error(43, &[]), true));
    }

    #[test]
    fn election_and_cursor_errors_are_transient() {
        for code in [10107, 11602, 43, 91, 189] {
            assert_eq!(
                classify_mongo(&command_error(code, &[])),
                ErrorClass::Transient,
                "{code}"
            );
        }
    }

    #[test]
    fn auth_and_bad_pipeline_are_fatal() {
        for code in [13, 18, 40324, 15, 166, 72, 47, 2, 8000] {
            assert_eq!(
                classify_mongo(&command_error(code, &[])),
                ErrorClass::Fatal,
                "{code}"
            );
        }
    }

    #[test]
    fn kafka_permanent_and_retriable() {
        let big = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        assert_eq!(classify_kafka(&big), ErrorClass::Fatal);
        let timeout = KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut);
        assert_eq!(classify_kafka(&timeout), ErrorClass::Transient);
        let seq = KafkaError::MessageProduction(RDKafkaErrorCode::OutOfOrderSequenceNumber);
        assert_eq!(classify_kafka(&seq), ErrorClass::Transient);
    }

    #[test]
    fn report_describes_driver_errors_without_their_debug_dump() {
        let e = BridgeError::Source {
            pipeline: "p".into(),
            source: Box::new(command_error(40324, &[])),
        };
        assert_eq!(
            report(&e, &[]),
            "change stream failed on pipeline \"p\": X (40324): boom"
        );
    }

    #[test]
    fn redaction_replaces_whole_secrets_only() {
        assert_eq!(
            redact("mongodb://u:p@h provided", "p"),
            "mongodb://u:***@h provided"
        );
        assert_eq!(redact("pw=hunter2;", "hunter2"), "pw=***;");
        assert_eq!(redact("xhunter2", "hunter2"), "xhunter2");
        assert_eq!(redact("app:p@db", "p"), "app:***@db");
    }

    #[test]
    fn report_redacts_known_secrets() {
        let e = BridgeError::Config {
            field: "mongodb.uri".into(),
            reason: "password hunter2 rejected".into(),
        };
        let text = report(&e, &["hunter2"]);
        assert_eq!(
            text,
            "invalid configuration: mongodb.uri: password *** rejected"
        );
    }
}
