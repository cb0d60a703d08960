//! Tests of [`Relay`] with a real librdkafka producer whose broker is unreachable: what
//! librdkafka decides locally (a record over `message.max.bytes`, a full queue) is real, and
//! nothing can be delivered.

use std::collections::BTreeMap;
use std::time::Instant;

use bson::{RawDocumentBuf, Timestamp, rawdoc};

use super::*;
use crate::config::{Config, KafkaConfig, PropertyValue};
use crate::encode::record::Record;
use crate::kafka::context::KafkaContext;
use crate::observe::health::PipelineHealth;
use crate::observe::metrics::Metrics;

/// A producer that cannot reach any broker, with `properties`.
fn unreachable_sink(properties: &[(&str, i64)]) -> KafkaSink {
    let properties: BTreeMap<String, PropertyValue> = properties
        .iter()
        .map(|(k, v)| ((*k).to_owned(), PropertyValue::Integer(*v)))
        .collect();
    let kafka = KafkaConfig {
        bootstrap_servers: "127.0.0.1:1".into(),
        topic_prefix: String::new(),
        properties,
        topic_creation: Default::default(),
        transactional_id_prefix: None,
        group_properties: Default::default(),
    };
    KafkaSink::new(&kafka, 120_000, None, None, KafkaContext::default()).expect("producer")
}

pub(super) fn encoder() -> RecordEncoder {
    let text = "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
                [[pipelines]]\nname = \"p\"\ndatabase = \"shop\"\ncollection = \"orders\"\n";
    let config = Config::from_toml(text, std::iter::empty()).expect("valid");
    RecordEncoder::new(&config.pipelines[0], "")
}

/// An insert whose `_id` is `id`.
pub(super) fn insert(id: &str) -> RawDocumentBuf {
    rawdoc! {
        "_id": { "_data": "8200" },
        "operationType": "insert",
        "clusterTime": Timestamp { time: 1_700_000_000, increment: 1 },
        "fullDocument": { "_id": id },
        "ns": { "db": "shop", "coll": "orders" },
        "documentKey": { "_id": id },
    }
}

fn relay(sink: KafkaSink, drain_timeout: Duration) -> (Relay, watch::Receiver<Safe>) {
    let (safe_tx, safe_rx) = watch::channel(Safe::default());
    let limits = Limits {
        max_events: 100,
        max_bytes: 1 << 20,
        queue_bytes: 1 << 30,
        drain_timeout,
    };
    let metrics = Metrics::new().pipeline("p");
    let health = Arc::new(PipelineHealth::default());
    let relay = Relay::new("p", encoder(), sink, limits, metrics, health, safe_tx);
    (relay, safe_rx)
}

/// Runs `relay` on the one event `raw` until it stops by itself; its error.
async fn fails_on(relay: Relay, raw: RawDocumentBuf) -> BridgeError {
    let (tx, rx) = mpsc::channel(4);
    tx.send(SourceItem::Event { raw, permit: None })
        .await
        .expect("relay listens");
    let cancel = CancellationToken::new();
    let outcome = tokio::time::timeout(Duration::from_secs(10), relay.run(rx, cancel)).await;
    outcome
        .expect("the relay ends")
        .expect_err("the event fails")
}

#[tokio::test]
async fn a_stub_too_large_for_kafka_fails_the_pipeline_instead_of_being_stubbed_again() {
    // GIVEN a dead-letter policy and a producer limit (1000 bytes) below the event's key
    let sink = unreachable_sink(&[("message.max.bytes", 1000)]);
    let (relay, safe) = relay(sink, Duration::from_secs(1));
    let relay = relay.with_dead_letter("orders.dlq");
    let id = "k".repeat(3000);
    // WHEN the relay runs
    let error = fails_on(relay, insert(&id)).await;
    // THEN it stops with the stub's refusal, naming the dead-letter topic, and commits nothing
    assert!(
        matches!(&error, BridgeError::DeadLetterRefused { topic, key, .. }
            if topic == "orders.dlq" && key.contains(&id)),
        "{error:?}"
    );
    assert_eq!(error.class(), crate::error::ErrorClass::Fatal);
    assert_eq!(*safe.borrow(), Safe::default());
}

#[tokio::test]
async fn an_oversized_record_without_a_dead_letter_topic_fails_with_its_size() {
    let sink = unreachable_sink(&[("message.max.bytes", 1000)]);
    let (relay, _safe) = relay(sink, Duration::from_secs(1));
    let error = fails_on(relay, insert(&"k".repeat(3000))).await;
    assert!(
        matches!(&error, BridgeError::Oversize { topic, size, .. }
            if topic == "shop.orders" && *size > 6000),
        "{error:?}"
    );
}

#[tokio::test]
async fn the_drain_ends_by_its_deadline_while_an_event_waits_for_room_in_the_queue() {
    // GIVEN a producer queue of one record, already taken by a record outside the window
    let sink = unreachable_sink(&[("queue.buffering.max.messages", 1)]);
    let outsider = Record {
        topic: Arc::from("other"),
        key: b"k".to_vec(),
        value: None,
        headers: Vec::new(),
        partition: None,
    };
    let _held = sink.enqueue(&outsider).expect("the first record fits");
    let (relay, _safe) = relay(sink, Duration::from_millis(300));
    let (tx, rx) = mpsc::channel(4);
    tx.send(SourceItem::Event {
        raw: insert("a"),
        permit: None,
    })
    .await
    .expect("relay listens");
    let cancel = CancellationToken::new();
    let running = tokio::spawn(relay.run(rx, cancel.clone()));
    // WHEN shutdown begins while that event waits for room (the window is empty)
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    cancel.cancel();
    // THEN the drain gives up after shutdown_timeout_ms, not when the queue frees
    let ended = tokio::time::timeout(Duration::from_secs(5), running).await;
    let result = ended
        .expect("the drain respects its deadline")
        .expect("no panic");
    assert!(result.is_ok(), "{result:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_record_larger_than_the_producer_queue_is_refused_as_too_large_not_waited_for() {
    // GIVEN a queue of 2 KiB, smaller than one record (librdkafka would answer QUEUE_FULL forever)
    let sink = unreachable_sink(&[]);
    let (relay, _safe) = relay(sink, Duration::from_secs(1));
    let mut relay = relay;
    relay.limits.queue_bytes = 2048;
    // THEN the relay stops with the oversize error at once
    let error = fails_on(relay, insert(&"k".repeat(3000))).await;
    assert!(matches!(error, BridgeError::Oversize { .. }), "{error:?}");
}

#[tokio::test]
async fn an_unacknowledged_record_ends_the_run_before_librdkafka_times_it_out() {
    // GIVEN at-least-once records that no broker acknowledges, message.timeout.ms 4000
    let sink = unreachable_sink(&[("message.timeout.ms", 4000)]);
    let (relay, safe) = relay(sink, Duration::from_secs(1));
    let started = Instant::now();
    // WHEN the relay runs
    let error = fails_on(relay, insert("a")).await;
    // THEN the run ends with the stall, naming the record's topic, after the deadline (3 s)
    // and before librdkafka's own timeout would fail the record alone
    assert!(
        matches!(&error, BridgeError::DeliveryStalled { topic, timeout_ms: 4000, .. }
            if topic == "shop.orders"),
        "{error:?}"
    );
    assert!(
        error.is_producer_failure(),
        "the producer is purged and rebuilt"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(*safe.borrow(), Safe::default());
}
