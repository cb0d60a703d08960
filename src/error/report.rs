//! One-line descriptions of errors for logs and `check`, with secrets redacted.
//!
//! Invariant: [`report`] replaces every secret the caller knows by `***`, on top of the
//! drivers' own care (the MongoDB driver's messages carry host names but not credentials;
//! librdkafka's never carry `sasl.password`).

use std::error::Error as StdError;

use mongodb::error::{Error as MongoError, ErrorKind as MongoErrorKind};

use super::cluster::ClusterError;
use super::{BridgeError, ErrorClass};

/// A one-line description of a driver error: the server's code name, code and message, or the
/// kind of client-side failure, without the driver's debug dump.
pub(crate) fn describe_mongo(error: &MongoError) -> String {
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

/// Every [`BridgeError::kind`], so the metrics can show each at zero before it first fires
/// (an alert on `increase(…)` misses a series' first value).
pub const KINDS: [&str; 31] = [
    "config",
    "source",
    "snapshot",
    "snapshot_filter",
    "invalidate",
    "history_lost",
    "replica_set",
    "encode",
    "split",
    "delivery",
    "kafka_authentication",
    "oversize",
    "dead_letter",
    "delivery_cancelled",
    "delivery_stalled",
    "producer",
    "topic_creation",
    "checkpoint",
    "offsets_document",
    "fenced",
    "group",
    "config_changed",
    "cluster_changed",
    "cluster_identity",
    "panic",
    "transaction",
    "progress",
    "transaction_too_long",
    "batch_above_topic_limit",
    "refused_in_transaction",
    "snapshot_check",
];

impl BridgeError {
    /// A short, bounded label for metrics (`reason`, `stage` labels); never a message; one of
    /// [`KINDS`].
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Config { .. } => "config",
            // The server's own `required` failure is a `Source` error: the bridge's is counted
            // as the same kind.
            Self::Source { .. } | Self::MissingPreImage(_) => "source",
            Self::Copy { .. } => "snapshot",
            Self::SnapshotFilterChanged(_) => "snapshot_filter",
            Self::CopyCheck(_) => "snapshot_check",
            Self::StreamClosed { .. } => "invalidate",
            Self::HistoryLost { .. } => "history_lost",
            Self::ReplicaSetMismatch { .. } => "replica_set",
            Self::Encode { .. } => "encode",
            Self::SplitEvent { .. } => "split",
            Self::Delivery { .. } => "delivery",
            Self::KafkaAuthentication { .. } => "kafka_authentication",
            Self::Oversize { .. } => "oversize",
            Self::DeadLetterRefused { .. } => "dead_letter",
            Self::DeliveryCancelled { .. } => "delivery_cancelled",
            Self::DeliveryStalled { .. } => "delivery_stalled",
            Self::Producer(_) => "producer",
            Self::TopicCreation { .. } => "topic_creation",
            Self::Checkpoint { .. } => "checkpoint",
            Self::OffsetsDocument { .. } => "offsets_document",
            Self::Fenced { .. } => "fenced",
            Self::Group { .. } => "group",
            Self::ConfigChanged { .. } => "config_changed",
            Self::Cluster(e) => match **e {
                ClusterError::Changed { .. } => "cluster_changed",
                ClusterError::Unread { .. } => "cluster_identity",
            },
            Self::TaskPanicked { .. } => "panic",
            Self::Transaction { .. } => "transaction",
            Self::Progress { .. } => "progress",
            Self::TransactionTooLong { .. } => "transaction_too_long",
            Self::BatchAboveTopicLimit { .. } => "batch_above_topic_limit",
            Self::RefusedInTransaction { .. } => "refused_in_transaction",
        }
    }

    /// The driver error this error carries, if it is one of MongoDB's.
    fn mongo_source(&self) -> Option<&MongoError> {
        match self {
            Self::Source { source, .. }
            | Self::Checkpoint { source, .. }
            | Self::Copy { source, .. } => Some(source),
            Self::Cluster(e) => e.mongo_source(),
            _ => None,
        }
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
            (_, Some(C::TopicAuthorizationFailed)) => {
                "grant the bridge's principal WRITE, DESCRIBE and DESCRIBE_CONFIGS on the topic \
                 (README, \"Kafka ACLs\")"
            }
            (Self::TaskPanicked { .. }, _) => {
                "this is a bug of the bridge: please report it with the log lines above"
            }
            (Self::ReplicaSetMismatch { .. }, _) => "correct replicaSet in mongodb.uri",
            (Self::DeliveryStalled { .. }, _) => {
                "a broker acknowledges too slowly or not at all: check the brokers and the \
                 network to them; the records are published again from the committed position"
            }
            (Self::MissingPreImage(_), _) => super::images::REMEDY,
            _ if self.mongo_source().is_some_and(|e| {
                super::mongo_code(e) == Some(super::CODE_NO_MATCHING_DOCUMENT)
            }) =>
            {
                super::images::REMEDY
            }
            _ if self.mongo_source().is_some_and(super::is_auth_failure) => {
                "check the user, password and authSource (authMechanism) in mongodb.uri; \
                 `check` tests the login"
            }
            _ if self
                .mongo_source()
                .is_some_and(|e| super::mongo_code(e) == Some(super::CODE_UNAUTHORIZED)) =>
            {
                "grant the bridge's MongoDB user the privileges deploy/config.example.toml \
                 lists; `check` names the missing ones"
            }
            _ => {
                "see the error above; the pipeline restarts from its committed position once \
                  the cause is fixed and the bridge is started again"
            }
        }
    }

    /// What a stopped pipeline's health and offsets keep of this error: `report` (the error
    /// as logged, secrets redacted), its [`remedy`](Self::remedy) and how to run it again, as
    /// sentences.
    pub fn stopped_text(&self, report: &str) -> String {
        format!(
            "{}. Remedy: {}. Then send SIGHUP, or restart the bridge, to run it again",
            report.trim_end_matches('.'),
            self.remedy().trim_end_matches('.')
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::BridgeError;
    use crate::error::tests::command_error;

    #[test]
    fn a_stopped_pipelines_text_is_sentences_with_one_period_each() {
        let error = BridgeError::config("bridge.x", "bad");
        let text = error.stopped_text("the run failed.");
        assert!(
            text.starts_with("the run failed. Remedy: see the error above;"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "started again. Then send SIGHUP, or restart the bridge, to run it again"
            ),
            "{text}"
        );
        assert!(!text.contains(".."), "{text}");
    }

    #[test]
    fn report_describes_driver_errors_without_their_debug_dump() {
        let e = BridgeError::Source {
            pipeline: "p".into(),
            source: Box::new(command_error(40324)),
        };
        assert_eq!(
            report(&e, &[]),
            "change stream failed on pipeline \"p\": X (40324): boom"
        );
    }

    #[test]
    fn a_refused_login_or_privilege_names_its_remedy() {
        let source = |code| BridgeError::Source {
            pipeline: "p".into(),
            source: Box::new(command_error(code)),
        };
        assert!(source(18).remedy().contains("authSource"));
        let checkpoint = BridgeError::Checkpoint {
            pipeline: "p".into(),
            source: Box::new(command_error(13)),
        };
        assert!(checkpoint.remedy().contains("privileges"));
        assert!(source(40324).remedy().starts_with("see the error above"));
        // The server's `required` pre-/post-image failure (NoMatchingDocument) names its fixes.
        let images = source(47).remedy();
        assert!(images.contains("changeStreamPreAndPostImages"), "{images}");
        assert!(images.contains("expireAfterSeconds"), "{images}");
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
