//! `delivery = "exactly_once"`: `check`'s transaction and progress topic lines (shared
//! servers), and a stop between Kafka's commit and the offsets write that repeats nothing (on
//! its own servers: a fail point is server-wide, so it must not meet other tests' bridges).
//!
//! The crash and freeze scenarios (kill -9 under load, a MongoDB transaction killed halfway,
//! broker freezes, two instances) are in the fault suite (`tests/faults/exactly_once.rs`).
//!
//! noida-db quirk (../shared/INFRA.md): a `read_committed` consumer that read past an aborted
//! transaction skips later committed records of the same producer, while a fresh read from
//! offset 0 is correct; every check here reads with a new consumer from the beginning
//! (`collect_from`), with librdkafka's default `isolation.level = read_committed`.

use std::time::{Duration, Instant};

use bson::doc;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(120);

/// A config of one exactly-once pipeline on `db`.t against `servers` (MongoDB URI, Kafka
/// bootstrap; the shared ones when `None`), whose MongoDB client names itself `app` (so a fail
/// point can target this bridge alone).
fn eos_config(db: &str, app: &str, servers: Option<(&str, &str)>) -> String {
    let text = config_toml("p", db, Some("t"), "delivery = \"exactly_once\"\n");
    let (uri, kafka) = (mongo_uri(), kafka_bootstrap());
    let (to_uri, to_kafka) = servers.unwrap_or((&uri, &kafka));
    let sep = if to_uri.contains('?') { '&' } else { '?' };
    text.replacen(&uri, &format!("{to_uri}{sep}appName={app}"), 1)
        .replacen(&format!("\"{kafka}\""), &format!("\"{to_kafka}\""), 1)
}

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
    let topic = format!("__mongo_kafka_bridge.{offsets}.progress");
    assert!(
        out.contains(&format!(
            "✔ progress topic \"{topic}\" can be created (compacted, 1 partition)"
        )),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stop_between_the_kafka_commit_and_the_offsets_write_repeats_nothing() {
    let Some(servers) = crate::opsutil::Instance::up("eos-gap", &[]) else {
        return;
    };
    let kafka = servers.kafka.clone();
    // GIVEN a running exactly-once pipeline that committed its first position and 3 events
    let db = unique("eosgap");
    let app = format!("mkb-{db}");
    let file = config_file(&eos_config(&db, &app, Some((&servers.mongo_uri, &kafka))));
    let client = mongodb::Client::with_uri_str(&servers.mongo_uri)
        .await
        .unwrap();
    let coll = client.database(&db).collection::<bson::Document>("t");
    let topic = format!("{db}.t");
    create_topic_at(&kafka, &topic, 1, &[]).await;
    let mut bridge = Killed(spawn_binary(file.path()));
    wait_offsets(&client, &db, "p", WAIT, |d| d.contains_key("resumeToken")).await;
    for id in 0..3_i64 {
        coll.insert_one(doc! { "_id": id }).await.unwrap();
    }
    wait_offsets(&client, &db, "p", WAIT, |d| {
        d.get_i64("eventsCommitted") == Ok(3)
    })
    .await;
    // WHEN every offsets write of this bridge fails while it commits 5 more events to Kafka
    fail_updates(&client, &app, true).await;
    for id in 3..8_i64 {
        coll.insert_one(doc! { "_id": id }).await.unwrap();
    }
    let log = file.path().with_extension("log");
    let deadline = Instant::now() + WAIT;
    let records = loop {
        let records = collect_from(&kafka, &topic, 8, Duration::ZERO, WAIT).await;
        let ahead = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("the progress topic is ahead of the offsets document");
        if records.len() >= 8 && ahead {
            break records;
        }
        assert!(
            Instant::now() < deadline,
            "no Kafka commit without its offsets write"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // (the offsets document still stands before those events: Kafka is ahead)
    let doc = offsets_doc(&client, &db, "p").await.unwrap();
    assert_eq!(doc.get_i64("eventsCommitted"), Ok(3));
    // AND the writes succeed again, and 2 events follow
    fail_updates(&client, &app, false).await;
    for id in 8..10_i64 {
        coll.insert_one(doc! { "_id": id }).await.unwrap();
    }
    // THEN the document is brought forward and a read_committed consumer reads every event once
    let records = {
        let _ = records;
        let deadline = Instant::now() + WAIT;
        loop {
            let records = collect_from(&kafka, &topic, 10, Duration::from_secs(2), WAIT).await;
            if records.len() >= 10 || Instant::now() > deadline {
                break records;
            }
        }
    };
    let counts = per_id(&records);
    let expected: std::collections::HashMap<i64, usize> = (0..10).map(|i| (i, 1)).collect();
    assert_eq!(counts, expected, "every event exactly once");
    assert_eq!(records.len(), 10);
    let doc = wait_offsets(&client, &db, "p", WAIT, |d| {
        d.get_str("delivery") == Ok("exactly_once") && d.contains_key("progressOffset")
    })
    .await;
    assert!(doc.get_i64("commitSequence").unwrap() > 3, "{doc}");
    bridge.kill();
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
        let (_, metrics) = crate::opsutil::get(bridge.metrics_addr(), "/metrics").await;
        let restarts: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("mongo_kafka_bridge_pipeline_restarts_total"))
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

/// Sets topic config `key` = `value` on `bootstrap` (IncrementalAlterConfigs).
pub async fn set_topic_config(bootstrap: &str, topic: &str, key: &str, value: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let alter = AlterConfig::new(ResourceSpecifier::Topic(topic)).set(key, value);
    let results = admin
        .alter_configs([&alter], &AdminOptions::new())
        .await
        .unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
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

/// Makes every `update` of the bridge whose MongoDB client is named `app` fail, or stops doing
/// so. The error is MaxTimeMSExpired (50): transient (retried), and not a "not writable
/// primary" state change. That one (10107, used before) makes the driver mark the server
/// unknown and select it anew, 10 s per failure here (measured: 10-40 s per restart), which ran
/// this test past its deadline under the suite's load.
async fn fail_updates(client: &mongodb::Client, app: &str, on: bool) {
    let command = if on {
        doc! {
            "configureFailPoint": "failCommand", "mode": "alwaysOn",
            "data": { "failCommands": ["update"], "errorCode": 50, "appName": app },
        }
    } else {
        doc! { "configureFailPoint": "failCommand", "mode": "off" }
    };
    client.database("admin").run_command(command).await.unwrap();
}
