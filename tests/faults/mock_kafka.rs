//! Kafka faults from librdkafka's in-process mock cluster (`docs/RELIABILITY.md`): C05, a
//! refused tombstone keeps its delete uncommitted; C28, a fatal idempotent-producer error
//! (`OUT_OF_ORDER_SEQUENCE_NUMBER`) rebuilds the producer and loses nothing. Ordinary tests of
//! this binary (see `main.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bson::{Document, doc};
use mongo_kafka_bridge::error::ErrorClass;
use mongo_kafka_bridge::observe::metrics::{DELIVERY_ERRORS, ERRORS, RESTARTS};

use crate::common::bridge::{start_bridge, stops_within};
use crate::common::collect::{by_key, collect_at, first_operations, key_of};
use crate::common::config::{config_toml, with_props};
use crate::common::mongo::{events_committed, first_event_after, mongo, offsets_doc, wait_offsets};
use crate::common::observe::counter;
use crate::common::servers::kafka_bootstrap;
use crate::common::unique;
use crate::suite::turn;

/// Generous: the first start meets servers shared with the `it` tests running beside it (CI
/// saw the first commit take longer than the 30 s this was).
const WAIT: Duration = Duration::from_secs(120);

/// A librdkafka mock cluster with `topic` (`partitions` partitions).
fn mock_cluster(
    topic: &str,
    partitions: i32,
) -> rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext> {
    let mock = rdkafka::mocking::MockCluster::new(1).unwrap();
    mock.create_topic(topic, partitions, 1).unwrap();
    mock
}

#[tokio::test(flavor = "multi_thread")]
async fn c05_a_failed_tombstone_keeps_the_delete_uncommitted() {
    let Some(_turn) = turn("mock_kafka").await else {
        return;
    };
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    // GIVEN a pipeline producing to a mock cluster, one request per record
    let (db, name) = (unique("c05"), "c05");
    let topic = format!("{db}.orders");
    let mock = mock_cluster(&topic, 1);
    let bootstrap = mock.bootstrap_servers();
    let text = with_props(
        &config_toml(name, &db, Some("orders"), "").replace(&kafka_bootstrap(), &bootstrap),
        &[("linger.ms", "0"), ("batch.num.messages", "1")],
    );
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    let orders = client.database(&db).collection::<Document>("orders");
    orders.insert_one(doc! { "_id": 7, "v": 1 }).await.unwrap();
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == 1).await;
    // WHEN the delete's record is accepted and its tombstone refused
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
        ],
    );
    orders.delete_one(doc! { "_id": 7 }).await.unwrap();
    let error = stops_within(bridge, Duration::from_secs(30))
        .await
        .expect_err("a refused tombstone must stop the pipeline");
    assert!(
        ["delivery", "oversize"].contains(&error.kind()),
        "{error:?}"
    );
    assert_eq!(error.class(), ErrorClass::Fatal);
    // THEN the delete is not committed: resuming from the committed token yields it
    let offsets = offsets_doc(&client, &db, name).await.unwrap();
    assert_eq!(events_committed(&offsets), 1);
    let next = first_event_after(&client, &db, "orders", &offsets, false).await;
    assert_eq!(next.get_str("operationType").unwrap(), "delete");
    // WHEN the broker accepts again and the bridge restarts
    mock.clear_request_errors(RDKafkaApiKey::Produce);
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == 2).await;
    let records = collect_at(&bootstrap, &topic, 3, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    // THEN the key has the insert, the delete (once or twice) and finally a tombstone
    let seen: Vec<&str> = records
        .iter()
        .map(|r| match &r.value {
            None => "tombstone",
            Some(_) => r.header("mongo.operation_type").unwrap(),
        })
        .collect();
    assert!(
        seen == ["insert", "delete", "tombstone"]
            || seen == ["insert", "delete", "delete", "tombstone"],
        "{seen:?}"
    );
    assert!(
        records
            .iter()
            .all(|r| r.key.as_deref() == Some(key_of(7).as_str()))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn c28_a_fatal_idempotent_producer_error_rebuilds_the_producer() {
    let Some(_turn) = turn("mock_kafka").await else {
        return;
    };
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    // GIVEN a pipeline producing to a 3-partition topic of a mock cluster
    let (db, name) = (unique("c28"), "c28");
    let topic = format!("{db}.orders");
    let mock = mock_cluster(&topic, 3);
    let bootstrap = mock.bootstrap_servers();
    let text = config_toml(name, &db, Some("orders"), "").replace(&kafka_bootstrap(), &bootstrap);
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    let metrics = bridge.metrics().clone();
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    // WHEN under a write load the broker answers a produce request with
    // OUT_OF_ORDER_SEQUENCE_NUMBER (the producer's fatal state, as after an outage)
    let orders = client.database(&db).collection::<Document>("orders");
    const DOCS: i32 = 150;
    for id in 0..DOCS {
        if id == DOCS / 3 {
            mock.request_errors(
                RDKafkaApiKey::Produce,
                &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER],
            );
        }
        orders.insert_one(doc! { "_id": id, "v": 0 }).await.unwrap();
        orders
            .update_one(doc! { "_id": id }, doc! { "$set": { "v": 1 } })
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // THEN every write is delivered at least once, in order per key
    wait_offsets(&client, &db, name, WAIT, |d| {
        events_committed(d) >= i64::from(2 * DOCS)
    })
    .await;
    let records = collect_at(&bootstrap, &topic, (2 * DOCS) as usize, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    let groups = by_key(&records);
    let expected: BTreeSet<String> = (0..DOCS).map(key_of).collect();
    assert_eq!(groups.keys().cloned().collect::<BTreeSet<_>>(), expected);
    for (key, group) in &groups {
        assert_eq!(first_operations(group), vec!["insert", "update"], "{key}");
    }
    // AND the pipeline restarted (with a new producer) after the producer's fatal error
    let transient = [("stage", "delivery"), ("class", "transient")];
    let per_reason: BTreeMap<&str, f64> = ["delivery", "delivery_cancelled"]
        .into_iter()
        .map(|r| (r, counter(&metrics, RESTARTS, name, &[("reason", r)])))
        .collect();
    eprintln!(
        "c28: {} records for {} writes, restarts {per_reason:?}, transient delivery errors {}",
        records.len(),
        2 * DOCS,
        counter(&metrics, ERRORS, name, &transient)
    );
    let oos = [("error_code", "OutOfOrderSequenceNumber")];
    assert!(counter(&metrics, DELIVERY_ERRORS, name, &oos) >= 1.0);
    assert!(per_reason["delivery"] >= 1.0, "{per_reason:?}");
    assert_eq!(counter(&metrics, ERRORS, name, &[("class", "fatal")]), 0.0);
}
