//! C12, oversized records (`docs/RELIABILITY.md`): a record over the producer's or the topic's
//! limit fails the pipeline by default or goes to the dead-letter topic as a stub; records that
//! fit one by one are never refused as a batch, also when the topic's limit is lowered while the
//! pipeline runs.

use std::collections::BTreeSet;
use std::time::Duration;

use bson::{Document, doc};
use mongo_kafka_bridge::BridgeError;
use mongo_kafka_bridge::error::ErrorClass;
use mongo_kafka_bridge::observe::metrics::{DELIVERY_ERRORS, RESTARTS};
use rdkafka::types::RDKafkaErrorCode;

use crate::common::bridge::{start_bridge, stops_within};
use crate::common::collect::{Received, key_of, records};
use crate::common::config::{config_toml, with_props};
use crate::common::kafka::{create_topic, create_topic_at, set_topic_config};
use crate::common::mongo::{events_committed, first_event_after, mongo, offsets_doc, wait_offsets};
use crate::common::observe::{counter, restarts};
use crate::common::servers::kafka_bootstrap;
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(30);

/// Where the 1 MB limit bites: librdkafka's `message.max.bytes` at enqueue, or the topic's
/// `max.message.bytes` at the broker.
#[derive(Debug, Clone, Copy)]
enum Limit {
    Producer,
    Topic,
}

/// Config text and main topic for one C12 variant.
async fn oversize_setup(db: &str, name: &str, limit: Limit, extra: &str) -> (String, String) {
    let topic = format!("{db}.orders");
    create_topic_at(
        &kafka_bootstrap(),
        &topic,
        1,
        &[("max.message.bytes", "1048576")],
    )
    .await;
    let mut text = config_toml(name, db, Some("orders"), extra);
    if let Limit::Topic = limit {
        text = with_props(&text, &[("message.max.bytes", "50000000")]);
    }
    (text, topic)
}

const BLOB: usize = 2 * 1024 * 1024;

async fn oversize_fails(limit: Limit) {
    // GIVEN a pipeline with the default on_oversize = "fail", one small event committed
    let (db, name) = (unique("c12f"), "c12f");
    let (text, topic) = oversize_setup(&db, name, limit, "").await;
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    let metrics = bridge.metrics().clone();
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    let orders = client.database(&db).collection::<Document>("orders");
    orders.insert_one(doc! { "_id": 0 }).await.unwrap();
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == 1).await;
    // WHEN a ~2 MB document is inserted
    orders
        .insert_one(doc! { "_id": 1, "blob": "x".repeat(BLOB) })
        .await
        .unwrap();
    // THEN the bridge stops with a fatal size refusal (MessageSizeTooLarge) for the topic
    let error = stops_within(bridge, Duration::from_secs(30))
        .await
        .expect_err("an oversized record must stop the bridge");
    match &error {
        BridgeError::Delivery {
            topic: t, source, ..
        } => {
            assert_eq!(t, &topic);
            assert_eq!(
                source.rdkafka_error_code(),
                Some(RDKafkaErrorCode::MessageSizeTooLarge),
                "{limit:?}"
            );
        }
        // (the dedicated variant naming the record, where the build has it)
        other if other.kind() == "oversize" => {
            let text = other.to_string();
            assert!(text.contains(&topic), "{text}");
            assert!(text.contains(&key_of(1)), "{text}");
        }
        other => panic!("{limit:?}: expected a size refusal, got {other:?}"),
    }
    assert_eq!(error.class(), ErrorClass::Fatal);
    assert_eq!(restarts(&metrics, name), 0.0);
    // AND the committed position is before it: resuming yields the big insert
    let offsets = offsets_doc(&client, &db, name).await.unwrap();
    assert_eq!(events_committed(&offsets), 1);
    let next = first_event_after(&client, &db, "orders", &offsets, false).await;
    assert_eq!(
        next.get_document("documentKey").unwrap(),
        &doc! { "_id": 1 }
    );
    let records = records(&topic, 1, WAIT).await;
    let keys: Vec<_> = records.iter().map(|r| r.key.clone().unwrap()).collect();
    assert_eq!(keys, vec![key_of(0)], "{limit:?}");
}

async fn oversize_goes_to_the_dead_letter_topic(limit: Limit) {
    // GIVEN a pipeline with on_oversize = "dead_letter"
    let (db, name) = (unique("c12d"), "c12d");
    let dlq = format!("{db}.dlq");
    create_topic(&dlq, 1).await;
    let extra = format!("on_oversize = \"dead_letter\"\ndead_letter_topic = \"{dlq}\"\n");
    let (text, topic) = oversize_setup(&db, name, limit, &extra).await;
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    // WHEN a small, a ~2 MB and another small document are inserted
    let orders = client.database(&db).collection::<Document>("orders");
    orders.insert_one(doc! { "_id": 0 }).await.unwrap();
    orders
        .insert_one(doc! { "_id": 1, "blob": "x".repeat(BLOB) })
        .await
        .unwrap();
    orders.insert_one(doc! { "_id": 2 }).await.unwrap();
    // THEN all three events are committed
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == 3).await;
    let main = records(&topic, 2, WAIT).await;
    let stubs = records(&dlq, 1, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    // AND the main topic has the two small events, the dead-letter topic one stub
    let keys: Vec<_> = main.iter().map(|r| r.key.clone().unwrap()).collect();
    assert_eq!(keys, vec![key_of(0), key_of(2)], "{limit:?}");
    assert_eq!(stubs.len(), 1, "{limit:?}: {stubs:#?}");
    let stub = &stubs[0];
    assert_eq!(stub.key.as_deref(), Some(key_of(1).as_str()));
    let names = |r: &Received| {
        r.headers
            .iter()
            .map(|(n, _)| n.clone())
            .collect::<BTreeSet<_>>()
    };
    let mut expected_names = names(&main[0]);
    expected_names.insert("mongo.error".to_owned());
    assert_eq!(names(stub), expected_names, "{limit:?}");
    assert_eq!(stub.header("mongo.operation_type"), Some("insert"));
    assert!(!stub.header("mongo.error").unwrap().is_empty());
    let value = stub.json();
    assert_eq!(
        value["documentKey"],
        serde_json::json!({"_id": {"$numberInt": "1"}})
    );
    assert_eq!(
        value["clusterTime"].as_str(),
        stub.header("mongo.cluster_time")
    );
    assert_eq!(value["topic"], topic);
    assert!(value["size"].as_u64().unwrap() > BLOB as u64, "{value}");
    assert!(
        value["reason"].as_str().unwrap().contains("too large"),
        "{value}"
    );
    assert!(
        stub.value.as_ref().unwrap().len() < 2000,
        "the stub carries no payload"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn c12_oversized_record_fails_the_pipeline_by_default() {
    oversize_fails(Limit::Producer).await;
    oversize_fails(Limit::Topic).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn c12_oversized_record_goes_to_the_dead_letter_topic() {
    oversize_goes_to_the_dead_letter_topic(Limit::Producer).await;
    oversize_goes_to_the_dead_letter_topic(Limit::Topic).await;
}

/// A topic whose `max.message.bytes` (50 000) is below the producer's batch bound (librdkafka's
/// 1 000 000): records that fit one by one would be refused batched together.
#[tokio::test(flavor = "multi_thread")]
async fn records_that_fit_a_small_topic_are_delivered_not_refused_as_a_batch() {
    // GIVEN a topic accepting record batches of at most 50 000 bytes, and a running pipeline
    let (db, name) = (unique("batchcap"), "batchcap");
    let topic = format!("{db}.orders");
    create_topic_at(
        &kafka_bootstrap(),
        &topic,
        1,
        &[("max.message.bytes", "50000")],
    )
    .await;
    let client = mongo().await;
    let bridge = start_bridge(&config_toml(name, &db, Some("orders"), "")).await;
    let metrics = bridge.metrics().clone();
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    // WHEN 30 documents of ~20 KB each arrive at once (600 KB: many records per batch)
    let orders = client.database(&db).collection::<Document>("orders");
    let docs: Vec<Document> = (0..30)
        .map(|id| doc! { "_id": id, "blob": "x".repeat(20_000) })
        .collect();
    orders.insert_many(docs).await.unwrap();
    // THEN every record arrives exactly once, none refused, the bridge still running
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == 30).await;
    let received = records(&topic, 30, WAIT).await;
    let mut keys: Vec<String> = received.iter().filter_map(|r| r.key.clone()).collect();
    keys.sort();
    let mut expected: Vec<String> = (0..30).map(key_of).collect();
    expected.sort();
    assert_eq!(keys, expected);
    assert_eq!(counter(&metrics, DELIVERY_ERRORS, name, &[]), 0.0);
    // AND the producer was rebuilt once, batching at most the topic's limit
    let rebuilt = counter(
        &metrics,
        RESTARTS,
        name,
        &[("reason", "batch_above_topic_limit")],
    );
    assert_eq!((rebuilt, restarts(&metrics, name)), (1.0, 1.0));
    bridge.shutdown();
    bridge.wait().await.unwrap();
}

/// The topic's `max.message.bytes` lowered while the pipeline runs: the broker refuses whole
/// batches of records that each fit; only the record that does not fit is dead-lettered.
#[tokio::test(flavor = "multi_thread")]
async fn a_limit_lowered_while_running_dead_letters_only_what_does_not_fit() {
    // GIVEN a running at-least-once pipeline with a dead-letter topic, its topic at 1 000 000
    let (db, name) = (unique("lowered"), "lowered");
    let (topic, dlq) = (format!("{db}.orders"), format!("{db}.dlq"));
    let kafka = kafka_bootstrap();
    create_topic_at(&kafka, &topic, 1, &[("max.message.bytes", "1000000")]).await;
    create_topic(&dlq, 1).await;
    let extra = format!("on_oversize = \"dead_letter\"\ndead_letter_topic = \"{dlq}\"\n");
    let client = mongo().await;
    let bridge = start_bridge(&config_toml(name, &db, Some("orders"), &extra)).await;
    let metrics = bridge.metrics().clone();
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    let orders = client.database(&db).collection::<Document>("orders");
    orders.insert_one(doc! { "_id": 0 }).await.unwrap();
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == 1).await;
    // WHEN the limit drops to 50 000 and 100 documents of ~1 KB and one of 60 KB arrive at once
    set_topic_config(&kafka, &topic, "max.message.bytes", "50000").await;
    let mut docs: Vec<Document> = (1..=100)
        .map(|id| doc! { "_id": id, "blob": "x".repeat(1_000) })
        .collect();
    docs.push(doc! { "_id": 101, "blob": "y".repeat(60_000) });
    orders.insert_many(docs).await.unwrap();
    // THEN every small document is in the topic, and only the large one is dead-lettered
    let stubs = records(&dlq, 1, WAIT).await;
    let mut stub_keys: Vec<Option<String>> = stubs.iter().map(|r| r.key.clone()).collect();
    stub_keys.dedup(); // at-least-once: a stub may be published again after the restart
    assert_eq!(stub_keys, vec![Some(key_of(101))]);
    let received = records(&topic, 101, WAIT).await;
    let mut ids: Vec<String> = received.iter().filter_map(|r| r.key.clone()).collect();
    ids.sort();
    ids.dedup();
    let mut expected: Vec<String> = (0..=100).map(key_of).collect();
    expected.sort();
    assert_eq!(ids, expected);
    let rebuilt = counter(
        &metrics,
        RESTARTS,
        name,
        &[("reason", "batch_above_topic_limit")],
    );
    assert!(rebuilt >= 1.0, "{rebuilt}");
    bridge.shutdown();
    bridge.wait().await.unwrap();
}
