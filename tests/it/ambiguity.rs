//! Documents JSON cannot carry: a `$`-keyed field that reads as an Extended JSON type wrapper
//! goes to the pipeline's `on_ambiguous` policy (`fail`, `bson`, `dead_letter`), while a plain
//! `$`-keyed document is published as JSON and reads back exactly with an independent parser
//! (Python's `bson.json_util`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bson::{Document, RawDocumentBuf, doc};
use futures::StreamExt;
use mongo_kafka_bridge::BridgeError;

use crate::common::bridge::start_bridge;
use crate::common::collect::{collect, collect_from, collect_raw};
use crate::common::config::config_toml;
use crate::common::kafka::create_topic;
use crate::common::mongo::{mongo, wait_offsets};
use crate::common::servers::kafka_bootstrap;
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(60);

/// The project's Python (with pymongo's `bson`), or `None` with a printed reason.
fn python() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join(".cache/venv/bin/python");
    if python.is_file() {
        Some(python)
    } else {
        eprintln!(
            "skipped part: {} is absent (scripts/services installs it)",
            python.display()
        );
        None
    }
}

/// What Python's `bson.json_util` reads from the canonical Extended JSON `json`, encoded
/// back to BSON.
fn json_util_bson(python: &Path, json: &str) -> Vec<u8> {
    let script = "import sys, bson\nfrom bson import json_util\n\
                  doc = json_util.loads(sys.stdin.read())\nsys.stdout.write(bson.encode(doc).hex())";
    let mut child = Command::new(python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "json_util failed on {json}");
    let hex = String::from_utf8(out.stdout).unwrap();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// Inserts the plain `$`-keyed document (0) then the ambiguous one (1) through a bridge with
/// `extra` settings; the bridge, its topic and the server's change events by `_id`.
async fn dollar_keys(
    policy: &str,
    extra: &str,
) -> (mongo_kafka_bridge::Bridge, String, Vec<RawDocumentBuf>) {
    let db = unique(&format!("amb{policy}"));
    let topic = format!("{db}.docs");
    create_topic(&topic, 1).await;
    let text = config_toml(
        "amb",
        &db,
        Some("docs"),
        &format!("json = \"canonical\"\n{extra}"),
    );
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, "amb", WAIT, |d| d.contains_key("resumeToken")).await;
    let coll = client.database(&db).collection::<Document>("docs");
    let mut ours = coll.watch().await.unwrap().with_type::<RawDocumentBuf>();
    coll.insert_one(
        doc! { "_id": 0, "$price": 3, "a.b": "dotted", "r": { "$ref": "c", "$id": 1 } },
    )
    .await
    .unwrap();
    coll.insert_one(doc! { "_id": 1, "f": { "$date": "2020-01-01T00:00:00Z" } })
        .await
        .unwrap();
    let mut events = Vec::new();
    for _ in 0..2 {
        events.push(
            tokio::time::timeout(WAIT, ours.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap(),
        );
    }
    (bridge, topic, events)
}

#[tokio::test(flavor = "multi_thread")]
async fn dollar_keys_are_plain_json_or_go_to_each_ambiguity_policy() {
    // fail: the plain document is published and reads back exactly; the ambiguous one stops
    // the pipeline naming the document, the field and the fix
    let (bridge, topic, events) = dollar_keys("fail", "").await;
    let result = tokio::time::timeout(WAIT, bridge.wait()).await.unwrap();
    let records = collect(&topic, 1, WAIT).await;
    assert_eq!(records.len(), 1);
    if let Some(python) = python() {
        let read_back = json_util_bson(&python, records[0].value.as_deref().unwrap());
        assert_eq!(read_back, events[0].as_bytes().to_vec());
    }
    match &result {
        Err(error @ BridgeError::Encode { .. }) => {
            let text = mongo_kafka_bridge::error::report(error, &[]);
            assert!(text.contains(r#"{"_id":{"$numberInt":"1"}}"#), "{text}");
            assert!(text.contains("fullDocument.f.$date"), "{text}");
            assert!(text.contains("on_ambiguous = \"bson\""), "{text}");
        }
        other => panic!("expected the encode error, got {other:?}"),
    }
    // bson: the ambiguous event is the server's bytes, marked so
    let (bridge, topic, events) = dollar_keys("bson", "on_ambiguous = \"bson\"\n").await;
    let records = collect_raw(&topic, 2, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(
        records[0].header("mongo.format").as_deref(),
        Some("json-canonical")
    );
    assert_eq!(records[1].header("mongo.format").as_deref(), Some("bson"));
    assert_eq!(records[1].value.as_deref(), Some(events[1].as_bytes()));
    // dead_letter: a stub with the reason on the dead-letter topic instead
    let extra = "on_ambiguous = \"dead_letter\"\n";
    let dlq = unique("dlq");
    create_topic(&dlq, 1).await;
    let (bridge, topic, _) =
        dollar_keys("dlq", &format!("{extra}dead_letter_topic = \"{dlq}\"\n")).await;
    let stubs = collect(&dlq, 1, WAIT).await;
    let data = collect_from(&kafka_bootstrap(), &topic, 1, Duration::from_secs(2), WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    assert_eq!(
        data.len(),
        1,
        "only the plain document reaches the data topic"
    );
    assert_eq!(stubs.len(), 1);
    let stub = stubs[0].json();
    assert_eq!(
        stub["documentKey"],
        serde_json::json!({"_id": {"$numberInt": "1"}})
    );
    assert!(
        stub["reason"].as_str().unwrap().contains("type-wrapper"),
        "{stub}"
    );
}
