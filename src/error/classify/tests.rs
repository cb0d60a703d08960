//! Tests of the classification: codes, labels and kinds to an error class.

use std::sync::Arc;

use super::*;
use crate::error::tests::command_error;

#[test]
fn history_lost_codes_are_fatal() {
    assert_eq!(classify_mongo(&command_error(286)), ErrorClass::Fatal);
    assert_eq!(classify_mongo(&command_error(280)), ErrorClass::Fatal);
    assert!(is_history_lost(&command_error(286), false));
    assert!(is_history_lost(&command_error(280), true));
    assert!(!is_history_lost(&command_error(280), false));
    assert!(!is_history_lost(&command_error(43), true));
}

#[test]
fn election_and_cursor_errors_are_transient() {
    for code in [10107, 11602, 43, 91, 189] {
        assert_eq!(
            classify_mongo(&command_error(code)),
            ErrorClass::Transient,
            "{code}"
        );
    }
}

#[test]
fn auth_and_bad_pipeline_are_fatal() {
    for code in [13, 18, 40324, 15, 166, 72, 47, 2, 8000] {
        assert_eq!(
            classify_mongo(&command_error(code)),
            ErrorClass::Fatal,
            "{code}"
        );
    }
}

#[test]
fn a_duplicate_key_is_retried_a_bounded_number_of_times() {
    assert_eq!(
        classify_mongo(&command_error(CODE_DUPLICATE_KEY)),
        ErrorClass::Persistent
    );
}

#[test]
fn every_kind_has_a_class() {
    let table = [
        (MongoKind::Outage, None, ErrorClass::Transient),
        (MongoKind::Configuration, None, ErrorClass::Fatal),
        (MongoKind::Other, None, ErrorClass::Persistent),
        (MongoKind::Server, Some(91), ErrorClass::Transient),
        (MongoKind::Server, Some(11000), ErrorClass::Persistent),
        (MongoKind::Server, Some(13), ErrorClass::Fatal),
        (MongoKind::Server, None, ErrorClass::Fatal),
    ];
    for (kind, code, class) in table {
        assert_eq!(class_of(kind, code), class, "{kind:?} {code:?}");
    }
}

#[test]
fn the_driver_kinds_that_can_be_built_map_as_documented() {
    let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
    let table: [(MongoError, MongoKind); 6] = [
        (MongoErrorKind::Io(Arc::new(io)).into(), MongoKind::Outage),
        (command_error(43), MongoKind::Server),
        (
            MongoErrorKind::SessionsNotSupported.into(),
            MongoKind::Configuration,
        ),
        (
            MongoErrorKind::MissingResumeToken.into(),
            MongoKind::Configuration,
        ),
        (MongoErrorKind::Shutdown.into(), MongoKind::Other),
        (MongoError::custom("a plugin's error"), MongoKind::Other),
    ];
    for (error, kind) in table {
        assert_eq!(kind_of(&error.kind), kind, "{error}");
    }
    assert_eq!(
        classify_mongo(&MongoErrorKind::Shutdown.into()),
        ErrorClass::Persistent
    );
}

#[test]
fn kafka_permanent_persistent_and_retriable() {
    let code = |c| KafkaError::MessageProduction(c);
    let table = [
        (RDKafkaErrorCode::MessageSizeTooLarge, ErrorClass::Fatal),
        (
            RDKafkaErrorCode::TopicAuthorizationFailed,
            ErrorClass::Fatal,
        ),
        (
            RDKafkaErrorCode::UnknownTopicOrPartition,
            ErrorClass::Persistent,
        ),
        (RDKafkaErrorCode::UnknownTopic, ErrorClass::Persistent),
        (RDKafkaErrorCode::MessageTimedOut, ErrorClass::Transient),
        (
            RDKafkaErrorCode::OutOfOrderSequenceNumber,
            ErrorClass::Transient,
        ),
        (RDKafkaErrorCode::AllBrokersDown, ErrorClass::Transient),
    ];
    for (c, class) in table {
        assert_eq!(classify_kafka(&code(c)), class, "{c:?}");
    }
    assert!(is_oversize(&code(RDKafkaErrorCode::MessageSizeTooLarge)));
    assert!(!is_oversize(&code(RDKafkaErrorCode::MessageTimedOut)));
}
