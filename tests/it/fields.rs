//! Field rules on the real servers (`[pipelines.fields]`, README "Field rules"): what a rule
//! removes or replaces is in no record, no header, no dead-letter record and no log line, from
//! the copy and the stream alike; the keyed hash is the HMAC-SHA-256 of the value and the same
//! after a restart; an update of removed fields only keeps its record by default and gets none
//! with `empty_updates = "skip"`; `check` lists the rules without the key.

use std::time::Duration;

use bson::{Document, doc};

use crate::common::bridge::{BridgeProc, bridge_cli, start_opened};
use crate::common::collect::{Received, records};
use crate::common::config::{config_file, config_toml};
use crate::common::kafka::create_topic;
use crate::common::mongo::{mongo, wait_offsets};
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(60);
const KEY_VAR: &str = "MKB_IT_FIELD_HASH_KEY";
const KEY: &str = "it-field-rules-key-0123456789abcdef";
/// HMAC-SHA-256 of "alice@example.com" under `KEY`, computed apart from the bridge:
/// `python3 -c 'import hmac,hashlib;print(hmac.new(KEY,b"alice@example.com",hashlib.sha256).hexdigest())'`
const ALICE_HASH: &str = "847a9247f68d1c0c0d3a458480e8ad04f4a918666fe6f45975106cd8524a807a";
/// The values no byte of output may hold.
const SECRETS: [&str; 4] = [
    "SSN-555-0100",
    "cvv-0999",
    "alice@example.com",
    "TAIL-OF-BIO",
];

fn rules(dlq: &str) -> String {
    format!(
        "snapshot = \"initial\"\nfull_document = \"update_lookup\"\n\
         on_ambiguous = \"dead_letter\"\ndead_letter_topic = \"{dlq}\"\n\
         [pipelines.fields]\nexclude = [\"card.cvv\"]\nmask = [\"ssn\"]\nhash = [\"email\"]\n\
         hash_key_env = \"{KEY_VAR}\"\ntruncate = {{ \"bio\" = 5 }}\n\
         rename = {{ \"addr.zip\" = \"postcode\" }}\n"
    )
}

fn person(id: i32) -> Document {
    doc! { "_id": id, "name": format!("p{id}"), "ssn": "SSN-555-0100", "email": "alice@example.com",
    "card": { "no": "4111", "cvv": "cvv-0999" }, "bio": "shortTAIL-OF-BIO",
    "addr": { "zip": "75001", "city": "Paris" } }
}

/// Every byte of `recs` (keys, values, header names and values) as text.
fn all_text(recs: &[Received]) -> String {
    let mut out = String::new();
    for r in recs {
        out.push_str(r.key.as_deref().unwrap_or(""));
        out.push_str(r.value.as_deref().unwrap_or(""));
        for (name, value) in &r.headers {
            out.push_str(name);
            out.push_str(value);
        }
    }
    out
}

/// Every record of `topic` once one matches `done` (waits up to `WAIT`).
async fn until(topic: &str, done: impl Fn(&Received) -> bool) -> Vec<Received> {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let recs = records(topic, 1, Duration::from_secs(5)).await;
        if recs.iter().any(&done) {
            return recs;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no awaited record on {topic} within {WAIT:?}: {recs:?}"
        );
    }
}

/// The value of the first record about `_id` `id` on `topic` (waits up to `WAIT`).
async fn value_of(topic: &str, id: i32) -> serde_json::Value {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let found = records(topic, 1, Duration::from_secs(5))
            .await
            .iter()
            .filter_map(|r| r.value.as_deref())
            .map(|v| serde_json::from_str::<serde_json::Value>(v).unwrap())
            .find(|v| v["documentKey"]["_id"] == id);
        match found {
            Some(v) => return v,
            None if std::time::Instant::now() < deadline => {}
            None => panic!("no record of {id} on {topic} within {WAIT:?}"),
        }
    }
}

fn assert_clean(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} holds {secret:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn removed_and_replaced_values_reach_no_record_header_dead_letter_or_log() {
    // GIVEN a collection with one document before the bridge starts (copied), and rules that
    // exclude, mask, hash (key from the environment), truncate and rename
    let db = unique("fields");
    let (topic, dlq) = (format!("{db}.people"), format!("{db}.dlq"));
    create_topic(&topic, 3).await;
    create_topic(&dlq, 1).await;
    let client = mongo().await;
    let coll = client.database(&db).collection::<Document>("people");
    coll.insert_one(person(1)).await.unwrap();
    let text = config_toml("fields", &db, Some("people"), &rules(&dlq));
    let file = config_file(&text);
    let dir = tempfile::tempdir().unwrap();
    let env = [(KEY_VAR, KEY), ("RUST_LOG", "debug")];
    let mut first = BridgeProc::spawn_with(file.path(), dir.path().join("first.log"), &env);
    let opened = |d: &Document| d.contains_key("resumeToken");
    wait_offsets(&client, &db, "fields", WAIT, opened).await;
    // WHEN a document is inserted, updated in a kept and in an excluded field, an ambiguous
    // one goes to the dead-letter topic, and one is deleted
    coll.insert_one(person(2)).await.unwrap();
    let set = |d: Document| doc! { "$set": d };
    coll.update_one(
        doc! { "_id": 2 },
        set(doc! { "ssn": "SSN-555-0100-B", "name": "q" }),
    )
    .await
    .unwrap();
    coll.update_one(doc! { "_id": 2 }, set(doc! { "card.cvv": "cvv-0999-B" }))
        .await
        .unwrap();
    let mut ambiguous = person(3);
    ambiguous.insert("f", doc! { "$date": "2020-01-01T00:00:00Z" });
    coll.insert_one(ambiguous).await.unwrap();
    coll.delete_one(doc! { "_id": 1 }).await.unwrap();
    // THEN: copy 1, insert 2, two updates, the delete and its tombstone on the topic
    let recs = until(&topic, |r| {
        r.header("mongo.operation_type") == Some("delete")
    })
    .await;
    let dead = records(&dlq, 1, WAIT).await;
    assert_clean("the topic", &all_text(&recs));
    assert_clean("the dead-letter topic", &all_text(&dead));
    let values: Vec<serde_json::Value> = recs
        .iter()
        .filter_map(|r| r.value.as_deref())
        .map(|v| serde_json::from_str(v).unwrap())
        .collect();
    let insert = values
        .iter()
        .find(|v| v["operationType"] == "insert" && v["documentKey"]["_id"] == 2)
        .expect("the insert of 2");
    let doc = &insert["fullDocument"];
    assert_eq!(doc["ssn"], "****");
    assert_eq!(doc["email"], ALICE_HASH);
    assert_eq!(doc["bio"], "short");
    assert_eq!(doc["card"], serde_json::json!({ "no": "4111" }));
    assert_eq!(
        doc["addr"],
        serde_json::json!({ "postcode": "75001", "city": "Paris" })
    );
    // AND the update of the excluded field alone keeps its record, with nothing changed in it
    let emptied = values
        .iter()
        .filter(|v| v["operationType"] == "update")
        .map(|v| v["updateDescription"]["updatedFields"].clone())
        .collect::<Vec<_>>();
    assert_eq!(
        emptied,
        [
            serde_json::json!({ "ssn": "****", "name": "q" }),
            serde_json::json!({})
        ]
    );
    // AND the same value hashes alike after a restart
    first.stop(Duration::from_secs(30));
    let mut second = BridgeProc::spawn_with(file.path(), dir.path().join("second.log"), &env);
    coll.insert_one(person(4)).await.unwrap();
    let four = value_of(&topic, 4).await;
    assert_eq!(four["fullDocument"]["email"], ALICE_HASH);
    second.stop(Duration::from_secs(30));
    // AND no log line of either run (at debug level) holds a value, nor the key
    for proc in [&first, &second] {
        let log = proc.log_text();
        assert!(log.contains("pipeline"), "a log was written: {log}");
        assert_clean("the log", &log);
        assert!(!log.contains(KEY), "the log holds the hash key");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_of_removed_fields_only_is_skipped_on_request_and_check_lists_the_rules() {
    // GIVEN rules excluding `secret`, with empty_updates = "skip"
    let db = unique("fields_skip");
    let topic = format!("{db}.c");
    create_topic(&topic, 1).await;
    let extra = "[pipelines.fields]\nexclude = [\"secret\"]\nhash = [\"email\"]\n\
                 hash_key = \"inline-key-for-the-test-0123\"\nempty_updates = \"skip\"\n";
    let text = config_toml("fskip", &db, Some("c"), extra);
    let bridge = start_opened(&text, &db, "fskip").await;
    let coll = mongo().await.database(&db).collection::<Document>("c");
    // WHEN a document is inserted, updated in `secret` only, then in `n`
    coll.insert_one(doc! { "_id": 1, "secret": "s0", "n": 0 })
        .await
        .unwrap();
    coll.update_one(doc! { "_id": 1 }, doc! { "$set": { "secret": "s1" } })
        .await
        .unwrap();
    coll.update_one(doc! { "_id": 1 }, doc! { "$set": { "n": 1 } })
        .await
        .unwrap();
    // THEN the topic has the insert and the second update only
    let recs = records(&topic, 2, WAIT).await;
    let ops: Vec<String> = recs
        .iter()
        .map(|r| r.header("mongo.operation_type").unwrap_or("").to_owned())
        .collect();
    assert_eq!(ops, ["insert", "update"], "{recs:?}");
    assert!(recs[1].value.as_deref().unwrap().contains("\"n\":1"));
    bridge.shutdown();
    // AND check lists the rules, never the key
    let file = config_file(&text);
    let (_, stdout, stderr) = bridge_cli(&["check"], file.path());
    assert!(
        stdout.contains("field rules: exclude secret; hash email; hash key from hash_key"),
        "{stdout}{stderr}"
    );
    assert!(!stdout.contains("inline-key-for-the-test") && !stderr.contains("inline-key"));
}
