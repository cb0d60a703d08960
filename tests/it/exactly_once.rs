//! `delivery = "exactly_once"` on healthy servers: `check`'s transaction and progress topic
//! lines, two deployments sharing Kafka and an offsets database name, and a record the broker
//! refuses inside a transaction stubbed on the retry; ten pipelines' start-up beside an open
//! transaction (`startup.rs`).
//!
//! Exactly-once under faults (a stop between Kafka's commit and the offsets write, kill -9 under
//! load, a MongoDB transaction killed halfway, broker freezes, two instances) is in the fault
//! binary (`tests/faults/exactly_once.rs` and its folder).
//!
//! noida-db quirk (../shared/INFRA.md): a `read_committed` consumer that read past an aborted
//! transaction skips later committed records of the same producer, while a fresh read from
//! offset 0 is correct; every check here reads with a new consumer from the beginning
//! (`collect_from`), with librdkafka's default `isolation.level = read_committed`.

use std::time::{Duration, Instant};

use bson::doc;

use crate::common::bridge::{bridge_cli, start_bridge};
use crate::common::collect::{collect_from, per_id};
use crate::common::config::{config_file, config_toml, eos_config};
use crate::common::kafka::{create_topic, create_topic_at, set_topic_config};
use crate::common::mongo::{mongo, wait_offsets};
use crate::common::servers::kafka_bootstrap;
use crate::common::unique;

mod startup;

const WAIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread")]
async fn check_verifies_transactions_and_the_progress_topic() {
    // GIVEN an exactly-once pipeline on a deployment whose progress topic does not exist yet
    let db = unique("eoscheck");
    let file = config_file(&eos_config(&db, "mkb-eoscheck", None));
    // WHEN `check` runs
    let (code, out, err) = bridge_cli(&["check"], file.path());
    // THEN it ran init_transactions for the check id and found the topic creatable
    assert_eq!(code, Some(0), "{out}\n{err}");
    let offsets = format!("{db}_offsets");
    let id = format!("mongo-kafka-bridge.{offsets}.check");
    assert!(
        out.contains(&format!(
            "✔ Kafka transactions supported (init_transactions for \"{id}\", check's one write)"
        )),
        "{out}"
    );
    let topics = format!("__mongo_kafka_bridge.{offsets}.progress.<streamUid>");
    assert!(
        out.contains(&format!(
            "✔ progress topics \"{topics}\" (one per exactly-once pipeline) can be created \
             (compacted, 1 partition)"
        )),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_deployments_sharing_kafka_and_an_offsets_database_name_never_meet() {
    // GIVEN two deployments on one Kafka cluster with the same offsets database name, the same
    // pipeline name and topic prefix, each with its own offsets (here: its own offsets
    // collection; in production, usually its own MongoDB cluster), both exactly-once
    let base = unique("eostwo");
    let offsets_db = format!("{base}_offsets");
    let deployment = |db: &str, offsets_collection: &str| {
        let text = config_toml("p", db, Some("t"), "delivery = \"exactly_once\"\n");
        text.replacen(
            &format!("offsets_database = \"{db}_offsets\""),
            &format!(
                "offsets_database = \"{offsets_db}\"\noffsets_collection = \"{offsets_collection}\""
            ),
            1,
        )
    };
    let (db_a, db_b) = (format!("{base}a"), format!("{base}b"));
    for db in [&db_a, &db_b] {
        create_topic(&format!("{db}.t"), 1).await;
    }
    let a = start_bridge(&deployment(&db_a, "offsets_a")).await;
    let b = start_bridge(&deployment(&db_b, "offsets_b")).await;
    let client = mongo().await;
    let offsets = client.database(&offsets_db);
    for name in ["offsets_a", "offsets_b"] {
        let coll = offsets.collection::<bson::Document>(name);
        wait_doc(&coll, |d| d.contains_key("resumeToken")).await;
    }
    // WHEN both publish 20 events of their own, interleaved
    for id in 0..20_i64 {
        for db in [&db_a, &db_b] {
            let coll = client.database(db).collection::<bson::Document>("t");
            coll.insert_one(doc! { "_id": id }).await.unwrap();
        }
    }
    // THEN each topic holds its 20 events exactly once for a read_committed consumer
    let expected: std::collections::HashMap<i64, usize> = (0..20).map(|i| (i, 1)).collect();
    for db in [&db_a, &db_b] {
        let topic = format!("{db}.t");
        let records =
            collect_from(&kafka_bootstrap(), &topic, 20, Duration::from_secs(2), WAIT).await;
        assert_eq!(per_id(&records), expected, "{topic}");
    }
    // AND each committed its own 20 events under its own streamUid, never fenced or restarted
    // by the other (the same transactional.id would fence back and forth; the same progress
    // key would bring one's offsets forward to the other's position)
    let mut uids = Vec::new();
    for name in ["offsets_a", "offsets_b"] {
        let coll = offsets.collection::<bson::Document>(name);
        let doc = wait_doc(&coll, |d| d.get_i64("eventsCommitted") == Ok(20)).await;
        assert_eq!(doc.get_i64("epoch"), Ok(1), "{name}: {doc}");
        uids.push(doc.get_str("streamUid").unwrap().to_owned());
    }
    assert_ne!(uids[0], uids[1]);
    for bridge in [&a, &b] {
        let (_, metrics) = crate::common::observe::get(bridge.metrics_addr(), "/metrics").await;
        let restarts: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("mongo_kafka_bridge_pipeline_restarts_total"))
            .filter(|l| !l.ends_with(" 0"))
            .collect();
        assert!(restarts.is_empty(), "{restarts:?}");
    }
    for bridge in [a, b] {
        bridge.shutdown();
        bridge.wait().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_the_broker_refuses_inside_a_transaction_is_stubbed_on_the_retry() {
    // GIVEN an exactly-once pipeline with a dead-letter topic that learned its topic's limit
    // (1 000 000) from a first record
    let db = unique("eosrefused");
    let (topic, dlq) = (format!("{db}.t"), format!("{db}.dlq"));
    let kafka = kafka_bootstrap();
    create_topic_at(&kafka, &topic, 1, &[("max.message.bytes", "1000000")]).await;
    create_topic(&dlq, 1).await;
    let extra = format!(
        "delivery = \"exactly_once\"\non_oversize = \"dead_letter\"\ndead_letter_topic = \"{dlq}\"\n"
    );
    let bridge = start_bridge(&config_toml("p", &db, Some("t"), &extra)).await;
    let client = mongo().await;
    let coll = client.database(&db).collection::<bson::Document>("t");
    wait_offsets(&client, &db, "p", WAIT, |d| d.contains_key("resumeToken")).await;
    coll.insert_one(doc! { "_id": 0 }).await.unwrap();
    wait_offsets(&client, &db, "p", WAIT, |d| {
        d.get_i64("eventsCommitted") == Ok(1)
    })
    .await;
    // WHEN the topic's limit drops to 20 000 behind its back and a 50 KB document arrives
    set_topic_config(&kafka, &topic, "max.message.bytes", "20000").await;
    coll.insert_one(doc! { "_id": 1, "blob": "x".repeat(50_000) })
        .await
        .unwrap();
    coll.insert_one(doc! { "_id": 2 }).await.unwrap();
    // THEN the refused transaction is aborted, and the retry stubs the record at enqueue: the
    // topic has 0 and 2 once, the dead-letter topic one stub, for read_committed consumers
    let records = collect_from(&kafka, &topic, 2, Duration::from_secs(3), WAIT).await;
    let expected: std::collections::HashMap<i64, usize> = [(0, 1), (2, 1)].into();
    assert_eq!(per_id(&records), expected);
    let stubs = collect_from(&kafka, &dlq, 1, Duration::from_secs(2), WAIT).await;
    assert_eq!(stubs.len(), 1);
    assert_eq!(
        stubs[0].key.as_deref(),
        Some(r#"{"_id":{"$numberInt":"1"}}"#)
    );
    // AND it took one restart for the refusal, one to batch within the new limit
    let metrics = bridge.metrics().render();
    let restarts = |reason: &str| {
        metrics.lines().any(|l| {
            l.starts_with("mongo_kafka_bridge_pipeline_restarts_total")
                && l.contains(&format!("reason=\"{reason}\""))
                && l.ends_with(" 1")
        })
    };
    assert!(restarts("refused_in_transaction"), "{metrics}");
    assert!(restarts("batch_above_topic_limit"), "{metrics}");
    bridge.shutdown();
    bridge.wait().await.unwrap();
}

/// The document `p` of `coll` once `ready` holds (within [`WAIT`]).
async fn wait_doc(
    coll: &mongodb::Collection<bson::Document>,
    ready: impl Fn(&bson::Document) -> bool,
) -> bson::Document {
    let deadline = Instant::now() + WAIT;
    loop {
        let doc = coll.find_one(doc! { "_id": "p" }).await.unwrap();
        match doc {
            Some(doc) if ready(&doc) => return doc,
            other => assert!(Instant::now() < deadline, "{other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
