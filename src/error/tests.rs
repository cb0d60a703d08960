//! Unit tests of the error type's classification, labels and remedies.

use super::*;

/// A server command error with `code` (the driver offers no public way to attach labels, so
/// label handling is covered by the fail-point integration tests).
pub(crate) fn command_error(code: i32) -> MongoError {
    let raw = bson::doc! { "code": code, "codeName": "X", "errmsg": "boom" };
    let cmd: mongodb::error::CommandError =
        bson::from_document(raw).expect("a well-formed command error document");
    mongodb::error::ErrorKind::Command(cmd).into()
}

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
        (
            BridgeError::TransactionTooLong {
                pipeline: "p".into(),
                lsid: "{}".into(),
                txn_number: 1,
                events: 2,
                elapsed_ms: 3,
                limit_ms: 4,
            },
            ErrorClass::Fatal,
            "transaction_too_long",
        ),
        (
            BridgeError::Progress {
                pipeline: "p".into(),
                reason: "no broker".into(),
            },
            ErrorClass::Transient,
            "progress",
        ),
        (
            BridgeError::Cluster(Box::new(cluster::ClusterError::Changed {
                pipeline: "p".into(),
                stored: "a".into(),
                found: "b".into(),
            })),
            ErrorClass::Fatal,
            "cluster_changed",
        ),
        (
            BridgeError::Cluster(Box::new(cluster::ClusterError::Unread {
                pipeline: "p".into(),
                what: "no answer within 45 s".into(),
                source: None,
            })),
            ErrorClass::Transient,
            "cluster_identity",
        ),
    ];
    for (error, class, kind) in cases {
        assert_eq!(error.class(), class, "{error}");
        assert_eq!(error.kind(), kind, "{error}");
    }
}

#[test]
fn a_cluster_refusal_names_both_clusters_and_both_ways_forward() {
    let error = BridgeError::Cluster(Box::new(cluster::ClusterError::Changed {
        pipeline: "orders".into(),
        stored: "replica set \"rs0\" (replicaSetId 65f0a1)".into(),
        found: "replica set \"rs0\" (replicaSetId 65f0b2)".into(),
    }));
    let text = report(&error, &[]);
    for part in [
        "records replica set \"rs0\" (replicaSetId 65f0a1)",
        "reaches replica set \"rs0\" (replicaSetId 65f0b2)",
        "offsets reset orders --to-now",
        "offsets accept-cluster orders",
    ] {
        assert!(text.contains(part), "{part} missing: {text}");
    }
}

#[test]
fn a_fenced_transactional_producer_is_transient_until_the_epoch_says_otherwise() {
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode as C;
    for code in [C::ProducerFenced, C::InvalidProducerEpoch, C::Fenced] {
        let error = BridgeError::Delivery {
            pipeline: "p".into(),
            topic: "t".into(),
            source: Box::new(KafkaError::MessageProduction(code)),
        };
        assert!(error.is_producer_fenced(), "{code:?}");
        assert_eq!(error.class(), ErrorClass::Transient, "{code:?}");
    }
    let other = BridgeError::Transaction {
        pipeline: "p".into(),
        operation: "commit",
        source: Box::new(KafkaError::MessageProduction(C::OperationTimedOut)),
    };
    assert!(!other.is_producer_fenced());
    assert!(other.is_producer_failure(), "the producer is rebuilt");
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

#[test]
fn kinds_lists_every_kind() {
    // Every label `kind()` returns (read from its source, so a new arm cannot be missed).
    let source = include_str!("report.rs");
    let body = source
        .split("pub fn kind(&self)")
        .nth(1)
        .and_then(|rest| rest.split("pub fn remedy").next())
        .expect("kind() in report.rs");
    let labels: Vec<&str> = body
        .split("=> \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert_eq!(labels.len(), super::KINDS.len(), "{labels:?}");
    for label in labels {
        assert!(super::KINDS.contains(&label), "{label} is not in KINDS");
    }
}
