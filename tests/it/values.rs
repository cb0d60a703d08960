//! What arrives in the topic never lies: BSON values are the server's bytes, a changed stream
//! is refused until accepted, and document topics mark a dropped namespace. Documents JSON
//! cannot carry, and JSON read back by an independent parser, are in [`crate::ambiguity`].

use std::collections::HashMap;
use std::time::Duration;

use bson::{Document, RawDocumentBuf, doc};
use futures::StreamExt;
use mongo_kafka_bridge::BridgeError;

use crate::common::bridge::{bridge_cli, start_bridge};
use crate::common::collect::{collect, collect_from, collect_raw};
use crate::common::config::{config_file, config_toml};
use crate::common::corpus::{corpus_documents, shared};
use crate::common::kafka::create_topic;
use crate::common::mongo::{mongo, wait_offsets};
use crate::common::servers::kafka_bootstrap;
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(60);

/// Every line of the sample documents.
fn sample_documents() -> Vec<RawDocumentBuf> {
    let Some(dir) = shared("sample") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let json: serde_json::Value = serde_json::from_str(line).unwrap();
            let bson::Bson::Document(d) = bson::Bson::try_from(json).unwrap() else {
                panic!("not a document");
            };
            out.push(RawDocumentBuf::from_document(&d).unwrap());
        }
    }
    out
}

/// `doc` with `_id: id` first (its own `_id` dropped).
fn with_id(id: i32, doc: &RawDocumentBuf) -> RawDocumentBuf {
    let mut out = RawDocumentBuf::new();
    out.append("_id", id);
    for element in doc {
        let (key, value) = element.unwrap();
        if key != "_id" {
            out.append_ref(key, value);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn bson_values_and_keys_are_the_servers_bytes_for_every_sample_and_corpus_document() {
    // GIVEN a pipeline publishing BSON values and keys, and a change stream of the test's own
    let db = unique("bson");
    let topic = format!("{db}.docs");
    create_topic(&topic, 3).await;
    let text = config_toml(
        "bson",
        &db,
        Some("docs"),
        "format = \"bson\"\nkey_format = \"bson\"\n",
    );
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, "bson", WAIT, |d| {
        d.contains_key("resumeToken")
    })
    .await;
    let coll = client.database(&db).collection::<RawDocumentBuf>("docs");
    let mut ours = coll.watch().await.unwrap().with_type::<RawDocumentBuf>();
    // WHEN every corpus and sample document the server accepts is inserted
    let mut inserted = 0;
    let mut refused = 0;
    let documents: Vec<RawDocumentBuf> = corpus_documents()
        .into_iter()
        .chain(sample_documents())
        .collect();
    for (i, doc) in documents.iter().enumerate() {
        match coll.insert_one(with_id(i as i32, doc)).await {
            Ok(_) => inserted += 1,
            Err(_) => refused += 1,
        }
    }
    eprintln!("bson: {inserted} documents inserted, {refused} refused by the server");
    if inserted == 0 {
        coll.insert_one(with_id(0, &bson::rawdoc! { "x": 1 }))
            .await
            .unwrap();
        inserted = 1;
    }
    let mut expected: HashMap<String, RawDocumentBuf> = HashMap::new();
    while expected.len() < inserted {
        let event = tokio::time::timeout(WAIT, ours.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let token = event
            .get_document("_id")
            .unwrap()
            .get_str("_data")
            .unwrap()
            .to_owned();
        expected.insert(token, event);
    }
    // THEN each record's value is byte for byte the event the server sent, its key the BSON of
    // its documentKey, and it says so in mongo.format
    let records = collect_raw(&topic, inserted, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    assert_eq!(records.len(), inserted);
    for record in &records {
        let token = record.header("mongo.resume_token").unwrap();
        let event = &expected[&token];
        assert_eq!(record.value.as_deref(), Some(event.as_bytes()), "{token}");
        let key = event.get_document("documentKey").unwrap();
        assert_eq!(record.key.as_deref(), Some(key.as_bytes()));
        assert_eq!(record.header("mongo.format").as_deref(), Some("bson"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_filter_is_refused_until_accepted_then_resumes_without_loss() {
    // GIVEN a pipeline of inserts of kind "a" that committed a position, then stopped
    let db = unique("fp");
    let topic = format!("{db}.t");
    create_topic(&topic, 1).await;
    let stages = |kinds: &str| {
        format!(
            "pipeline = '[{{\"$match\": {{\"fullDocument.kind\": {{\"$in\": [{kinds}]}}}}}}]'\n"
        )
    };
    let old = config_toml("fp", &db, Some("t"), &stages(r#""a""#));
    let new = config_toml("fp", &db, Some("t"), &stages(r#""a", "b""#));
    let client = mongo().await;
    let coll = client.database(&db).collection::<Document>("t");
    let bridge = start_bridge(&old).await;
    wait_offsets(&client, &db, "fp", WAIT, |d| d.contains_key("resumeToken")).await;
    coll.insert_one(doc! { "_id": 1, "kind": "a" })
        .await
        .unwrap();
    collect(&topic, 1, WAIT).await;
    wait_offsets(&client, &db, "fp", WAIT, |d| {
        d.get_i64("eventsCommitted") == Ok(1)
    })
    .await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    // AND while it is down, documents of both kinds are written
    coll.insert_one(doc! { "_id": 2, "kind": "b" })
        .await
        .unwrap();
    coll.insert_one(doc! { "_id": 3, "kind": "a" })
        .await
        .unwrap();
    // WHEN it starts with the wider filter THEN it is refused (the only pipeline: exit 2)
    let bridge = start_bridge(&new).await;
    let metrics = bridge.metrics().clone();
    let refused = tokio::time::timeout(WAIT, bridge.wait()).await.unwrap();
    assert!(
        matches!(&refused, Err(BridgeError::Config { field, .. }) if field == "pipelines"),
        "{refused:?}"
    );
    assert!(
        metrics
            .render()
            .contains(r#"mongo_kafka_bridge_pipeline_refused{pipeline="fp"} 1"#)
    );
    let file = config_file(&new);
    let (code, stdout, _) = bridge_cli(&["check"], file.path());
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("offsets accept-config fp"), "{stdout}");
    // WHEN the new configuration is accepted THEN it resumes from the stored position: both
    // documents written meanwhile arrive, the committed one is not published again
    let (code, stdout, stderr) = bridge_cli(&["offsets", "accept-config", "fp"], file.path());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let bridge = start_bridge(&new).await;
    let records = collect_from(&kafka_bootstrap(), &topic, 3, Duration::from_secs(2), WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    let ids: Vec<i64> = records
        .iter()
        .map(|r| r.json()["fullDocument"]["_id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_document_topic_marks_a_dropped_collection() {
    // GIVEN a document-only pipeline
    let db = unique("mark");
    let topic = format!("{db}.t");
    create_topic(&topic, 1).await;
    let extra = "value = \"document\"\nfull_document = \"update_lookup\"\n";
    let client = mongo().await;
    let bridge = start_bridge(&config_toml("mark", &db, Some("t"), extra)).await;
    wait_offsets(&client, &db, "mark", WAIT, |d| {
        d.contains_key("resumeToken")
    })
    .await;
    let coll = client.database(&db).collection::<Document>("t");
    coll.insert_one(doc! { "_id": 1 }).await.unwrap();
    // WHEN the collection is dropped
    coll.drop().await.unwrap();
    // THEN the drop is a record with a value (not a tombstone), keyed by the namespace
    let records = collect(&topic, 3, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    let drop = records
        .iter()
        .find(|r| r.header("mongo.operation_type") == Some("drop"))
        .unwrap_or_else(|| panic!("no drop record: {records:#?}"));
    assert_eq!(
        drop.key.as_deref(),
        Some(format!(r#"{{"db":"{db}","coll":"t"}}"#).as_str())
    );
    assert_eq!(drop.json()["operationType"], "drop");
    assert_eq!(records[0].json(), serde_json::json!({"_id": 1}));
}
