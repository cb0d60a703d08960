//! Copies of documents MongoDB stores but seldom sees (issue "Proof at length"): `_id`s of the
//! deprecated DBPointer type, and strings that are not valid UTF-8 (the BSON spec requires
//! UTF-8; such data comes from old or careless writers, where the server kept it). Each document is copied whole, or the copy stops and says which one:
//! never a silent skip. The documents are written as raw BSON (the `bson` crate builds neither
//! value); a server that refuses them (SecantusDB 0.5 refuses both at insert) is reported and the
//! test has nothing to check there: it is for MongoDB, through `MONGODB_URI`.

use std::time::Duration;

use bson::{Document, RawDocumentBuf};
use mongodb::error::ErrorKind;

use mongo_kafka_bridge::error::report;

use crate::common::bridge::{start_bridge, stops_within};
use crate::common::collect::records;
use crate::common::config::config_toml;
use crate::common::kafka::create_topic;
use crate::common::mirror::wait_finished;
use crate::common::mongo::mongo;
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(300);

/// A BSON document from its elements' bytes (each: type, key, NUL, value).
fn raw(elements: &[Vec<u8>]) -> RawDocumentBuf {
    let body: Vec<u8> = elements.concat();
    let mut bytes = ((body.len() + 5) as i32).to_le_bytes().to_vec();
    bytes.extend(body);
    bytes.push(0);
    RawDocumentBuf::from_bytes(bytes).expect("length prefix and terminator")
}

/// One element: `kind`, `key`, then `value`'s bytes.
fn element(kind: u8, key: &str, value: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend(key.as_bytes());
    out.push(0);
    out.extend(value);
    out
}

/// A BSON string value of `bytes` (not checked for UTF-8).
fn string(bytes: &[u8]) -> Vec<u8> {
    let mut out = ((bytes.len() + 1) as i32).to_le_bytes().to_vec();
    out.extend(bytes);
    out.push(0);
    out
}

/// `{_id: DBPointer("db.things", <oid ending in i>), v: i}`.
fn with_db_pointer(i: u8) -> RawDocumentBuf {
    let mut pointer = string(b"db.things");
    pointer.extend([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, i]);
    raw(&[
        element(0x0C, "_id", &pointer),
        element(0x10, "v", &[i, 0, 0, 0]),
    ])
}

/// `{_id: i, name: "ab<0xFF>cd"}`: a string whose bytes are not UTF-8.
fn with_invalid_utf8(i: u8) -> RawDocumentBuf {
    let id = element(0x10, "_id", &[i, 0, 0, 0]);
    raw(&[id, element(0x02, "name", &string(b"ab\xffcd"))])
}

/// Inserts `docs` into a new collection; its database name, or `None` (with the reason
/// printed) when the server refuses them.
async fn insert(prefix: &str, docs: Vec<RawDocumentBuf>) -> Option<String> {
    let db = unique(prefix);
    let coll = mongo()
        .await
        .database(&db)
        .collection::<RawDocumentBuf>("items");
    match coll.insert_many(docs).await {
        Ok(_) => Some(db),
        // The server answered and refused them (SecantusDB refuses both kinds): say so.
        Err(e) if matches!(*e.kind, ErrorKind::Command(_) | ErrorKind::InsertMany(_)) => {
            eprintln!("SKIP: this server refuses the documents ({e}): nothing to copy");
            None
        }
        Err(e) => panic!("inserting the documents failed: {e}"),
    }
}

/// The pipeline lines of a JSON copy to `topic`, plus `extra`.
fn json_copy(topic: &str, extra: &str) -> String {
    format!(
        "topic = \"{topic}\"\nsnapshot = \"initial\"\nfull_document = \"update_lookup\"\n{extra}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn db_pointer_ids_are_copied_whole_with_canonical_keys() {
    // GIVEN five documents whose `_id` is a DBPointer
    let Some(db) = insert("dbptr", (1..=5).map(with_db_pointer).collect()).await else {
        return;
    };
    let topic = unique("dbptr");
    create_topic(&topic, 1).await;
    // WHEN a copy runs
    let name = unique("dbptr");
    let text = config_toml(&name, &db, Some("items"), &json_copy(&topic, ""));
    let bridge = start_bridge(&text).await;
    let done = wait_finished(&mongo().await, &db, &name, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.expect("clean stop");
    // THEN every document is copied, keyed by its `_id` in canonical Extended JSON
    let copied = done.get_document("lastSnapshot").unwrap().get_i64("copied");
    assert_eq!(copied, Ok(5), "{done:?}");
    let got = records(&topic, 5, WAIT).await;
    assert_eq!(got.len(), 5);
    for record in &got {
        let key = record.key.as_deref().unwrap_or_default();
        assert!(key.contains("\"$dbPointer\""), "{key}");
        assert!(key.contains("\"$ref\":\"db.things\""), "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invalid_utf8_stops_the_copy_naming_the_field_or_is_replaced_when_asked() {
    // GIVEN three documents with a string that is not UTF-8
    let Some(db) = insert("utf8", (1..=3).map(with_invalid_utf8).collect()).await else {
        return;
    };

    // WHEN a JSON copy runs with the defaults THEN it stops, naming the field, and is not
    // recorded as finished
    let topic = unique("utf8");
    create_topic(&topic, 1).await;
    let name = unique("utf8");
    let text = config_toml(&name, &db, Some("items"), &json_copy(&topic, ""));
    let bridge = start_bridge(&text).await;
    let error = stops_within(bridge, WAIT)
        .await
        .expect_err("a document that cannot be written stops the copy");
    let text = report(&error, &[]);
    assert!(text.contains("name"), "the field is named: {text}");
    let offsets = mongo().await.database(&format!("{db}_offsets"));
    let doc = offsets
        .collection::<Document>("offsets")
        .find_one(bson::doc! { "_id": &name })
        .await
        .unwrap();
    assert!(
        doc.as_ref().is_none_or(|d| !d.contains_key("lastSnapshot")),
        "{doc:?}"
    );

    // WHEN it runs with replace_invalid_utf8 THEN all three are copied, the bytes replaced by
    // U+FFFD
    let topic = unique("utf8r");
    create_topic(&topic, 1).await;
    let name = unique("utf8r");
    let lines = json_copy(&topic, "replace_invalid_utf8 = true\n");
    let bridge = start_bridge(&config_toml(&name, &db, Some("items"), &lines)).await;
    let done = wait_finished(&mongo().await, &db, &name, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.expect("clean stop");
    let copied = done.get_document("lastSnapshot").unwrap().get_i64("copied");
    assert_eq!(copied, Ok(3), "{done:?}");
    for record in records(&topic, 3, WAIT).await {
        let value = record.value.unwrap_or_default();
        assert!(value.contains("ab\u{FFFD}cd"), "{value}");
    }
}
