//! The topic as a mirror of the collection: a snapshot pipeline's lines, waiting for the copy to
//! finish and for a sentinel to arrive, the compacted view (last record per key), its comparison
//! with the collection, and the README's sweep by the snapshot markers.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use bson::{Bson, Document, RawDocument, doc};
use mongodb::Collection;

use crate::common::collect::{RawRecord, collect_raw_quiet_at};
use crate::common::mongo::wait_offsets;
use crate::common::servers::kafka_bootstrap;

/// The compacted view of `records`: per key, its last record (markers left out). Asserts that
/// every document has one key only (a copied record's key is byte-identical to its events').
pub fn compacted(records: &[RawRecord]) -> HashMap<Vec<u8>, &RawRecord> {
    let mut last: HashMap<Vec<u8>, &RawRecord> = HashMap::new();
    for r in records {
        let op = r.header("mongo.operation_type").unwrap_or_default();
        if op.starts_with("snapshot_") || op == "gap" {
            continue;
        }
        last.insert(r.key.clone().expect("keyed"), r);
    }
    last
}

/// `fullDocument` of a BSON change-event value, when it holds one.
fn full_document(value: &[u8]) -> Option<Document> {
    let event = RawDocument::from_bytes(value).expect("BSON value");
    let doc = event.get_document("fullDocument").ok()?;
    Some(Document::try_from(doc).expect("document"))
}

/// The `_id` in a canonical Extended JSON key.
fn key_id(key: &[u8]) -> Bson {
    let json: serde_json::Value = serde_json::from_slice(key).expect("JSON key");
    match Bson::try_from(json).expect("extended JSON") {
        Bson::Document(d) => d.get("_id").cloned().expect("_id"),
        other => panic!("key is not a document: {other:?}"),
    }
}

/// Asserts that the compacted view equals the collection: every document present with its
/// content, no key for a deleted document but its tombstone, one key per document.
pub async fn assert_mirror(coll: &Collection<Document>, records: &[RawRecord]) {
    use futures::TryStreamExt;
    let truth: Vec<Document> = coll
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let truth: HashMap<String, Document> = truth
        .into_iter()
        .map(|d| (format!("{:?}", d.get("_id").unwrap()), d))
        .collect();
    let view = compacted(records);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut live = 0;
    for (key, record) in &view {
        let id = format!("{:?}", key_id(key));
        *seen.entry(id.clone()).or_default() += 1;
        match &record.value {
            None => assert!(
                !truth.contains_key(&id),
                "{id}: tombstone of a live document"
            ),
            Some(value) => {
                live += 1;
                let doc = full_document(value);
                if truth.get(&id) != doc.as_ref() {
                    let history: Vec<String> = records
                        .iter()
                        .filter(|r| {
                            r.key.as_deref().is_some_and(|k| {
                                !k.starts_with(b"{\"pipeline") && format!("{:?}", key_id(k)) == id
                            })
                        })
                        .map(|r| {
                            format!(
                                "p{} o{} {:?} key={} v={:?}",
                                r.partition,
                                r.offset,
                                r.header("mongo.operation_type"),
                                String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()),
                                r.value
                                    .as_deref()
                                    .and_then(full_document)
                                    .map(|d| d.get("v").cloned())
                            )
                        })
                        .collect();
                    panic!(
                        "{id}: last record is not current: {:?} vs {doc:?}\n{}",
                        truth.get(&id),
                        history.join("\n")
                    );
                }
            }
        }
    }
    if live != truth.len() {
        let keys: std::collections::HashSet<String> =
            view.keys().map(|k| format!("{:?}", key_id(k))).collect();
        let mut missing: HashMap<String, usize> = HashMap::new();
        let mut examples = Vec::new();
        for (id, d) in &truth {
            if !keys.contains(id) {
                *missing
                    .entry(format!("{:?}", d.get("_id").unwrap().element_type()))
                    .or_default() += 1;
                if examples.len() < 5 {
                    examples.push(id.clone());
                }
            }
        }
        panic!(
            "{} live keys for {} documents; missing by _id type: {missing:?}, e.g. {examples:?}",
            live,
            truth.len()
        );
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "documents under two keys: {twice:?}");
}

/// How many documents of the collection have no live record in the compacted view (a count
/// for a report; [`assert_mirror`] checks every document's content).
pub async fn missing_from_mirror(coll: &Collection<Document>, records: &[RawRecord]) -> usize {
    use futures::TryStreamExt;
    let live: HashSet<String> = compacted(records)
        .iter()
        .filter(|(_, r)| r.value.is_some())
        .map(|(k, _)| format!("{:?}", key_id(k)))
        .collect();
    let ids: Vec<Document> = coll
        .find(doc! {})
        .projection(doc! { "_id": 1 })
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    ids.iter()
        .filter(|d| !live.contains(&format!("{:?}", d.get("_id").unwrap())))
        .count()
}

/// The pipeline lines of a snapshot pipeline writing BSON values to `topic`.
pub fn snapshot_lines(topic: &str, extra: &str) -> String {
    format!(
        "topic = \"{topic}\"\nsnapshot = \"initial\"\nfull_document = \"update_lookup\"\n\
         format = \"bson\"\n{extra}"
    )
}

/// Waits until the offsets document records the snapshot as finished; returns it.
pub async fn wait_finished(
    client: &mongodb::Client,
    db: &str,
    name: &str,
    timeout: Duration,
) -> Document {
    wait_offsets(client, db, name, timeout, |d| {
        d.contains_key("lastSnapshot") && !d.contains_key("snapshot")
    })
    .await
}

/// Inserts a sentinel document and reads the topic until its record arrived; every record.
pub async fn settle(coll: &Collection<Document>, topic: &str) -> Vec<RawRecord> {
    settle_at(&kafka_bootstrap(), coll, topic).await
}

/// [`settle`] on the Kafka at `bootstrap`.
pub async fn settle_at(
    bootstrap: &str,
    coll: &Collection<Document>,
    topic: &str,
) -> Vec<RawRecord> {
    let sentinel = bson::oid::ObjectId::new();
    coll.insert_one(doc! { "_id": sentinel, "v": 0_i64, "sentinel": true })
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let records = collect_raw_quiet_at(
            bootstrap,
            topic,
            Duration::from_secs(2),
            Duration::from_secs(60),
        )
        .await;
        let found = records.iter().any(|r| {
            r.value
                .as_deref()
                .and_then(full_document)
                .is_some_and(|d| d.get_object_id("_id").ok() == Some(sentinel))
        });
        if found {
            return records;
        }
        assert!(Instant::now() < deadline, "the sentinel never arrived");
    }
}

/// A consumer following the README's recipe: last record per key, and on a namespace's
/// `snapshot_end` the keys not seen since its `snapshot_start` are dropped.
pub fn swept(records: &[RawRecord]) -> HashMap<Vec<u8>, Option<Vec<u8>>> {
    let mut mirror: HashMap<Vec<u8>, Option<Vec<u8>>> = HashMap::new();
    let mut seen: Option<(String, HashSet<Vec<u8>>)> = None;
    for r in records {
        let key = r.key.clone().unwrap();
        match r.header("mongo.operation_type").as_deref() {
            Some("snapshot_start") => {
                seen = Some((r.header("mongo.snapshot_id").unwrap(), HashSet::new()))
            }
            Some("snapshot_end") => {
                if let Some((id, keys)) = seen.take()
                    && Some(id) == r.header("mongo.snapshot_id")
                {
                    mirror.retain(|k, _| keys.contains(k));
                }
            }
            Some("gap") => {}
            _ => {
                if let Some((_, keys)) = &mut seen {
                    keys.insert(key.clone());
                }
                mirror.insert(key, r.value.clone());
            }
        }
    }
    mirror.retain(|_, v| v.is_some());
    mirror
}

/// Documents the first namespace of a snapshot in progress has copied.
pub fn copied(offsets: &Document) -> i64 {
    offsets
        .get_document("snapshot")
        .ok()
        .and_then(|s| s.get_array("namespaces").ok())
        .and_then(|n| n.first()?.as_document()?.get_i64("copied").ok())
        .unwrap_or(0)
}

/// The `mongo.operation_type` header of each record ("" where it has none).
pub fn operation_types(records: &[RawRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| r.header("mongo.operation_type").unwrap_or_default())
        .collect()
}

/// Asserts that `ops` (one partition's operation types, in order) hold `copies` copied
/// documents, with a `snapshot_start` first and a `snapshot_end` last.
pub fn assert_bracketed(ops: &[String], copies: usize, what: &str) {
    let copied = ops.iter().filter(|o| *o == "snapshot").count();
    assert_eq!(copied, copies, "{what}: {ops:?}");
    assert_eq!(
        ops.first().map(String::as_str),
        Some("snapshot_start"),
        "{what}: {ops:?}"
    );
    assert_eq!(
        ops.last().map(String::as_str),
        Some("snapshot_end"),
        "{what}: {ops:?}"
    );
}
