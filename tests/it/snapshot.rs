//! The initial snapshot against the local servers: the compacted view of the topic (last record
//! per key) equals the collection after a copy with concurrent writes, with every `_id` type.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bson::{Bson, Document, RawDocument, doc};
use mongodb::Collection;
use rand::Rng;

use crate::support::*;

/// One `_id` of every type MongoDB accepts (but array, regex, undefined), `i` making it unique
/// where the type allows.
pub fn id_of(i: usize) -> Bson {
    let n = i as i64;
    match i % 12 {
        0 => Bson::Int64(5_000_000_000 + n),
        1 => Bson::Double(n as f64 + 0.25),
        2 => Bson::String(format!("k{i:06}")),
        3 => Bson::ObjectId(bson::oid::ObjectId::from_bytes({
            let mut b = [0u8; 12];
            b[4..].copy_from_slice(&(n as u64).to_be_bytes());
            b
        })),
        4 => Bson::DateTime(bson::DateTime::from_millis(1_600_000_000_000 + n)),
        5 => Bson::Timestamp(bson::Timestamp {
            time: 1_700_000_000,
            increment: i as u32,
        }),
        6 => Bson::Binary(bson::Binary {
            subtype: bson::spec::BinarySubtype::Generic,
            bytes: (n as u64).to_be_bytes().to_vec(),
        }),
        7 => Bson::Binary(bson::Binary {
            subtype: bson::spec::BinarySubtype::Uuid,
            bytes: {
                let mut b = [0u8; 16];
                b[8..].copy_from_slice(&(n as u64).to_be_bytes());
                b.to_vec()
            },
        }),
        8 => Bson::Document(doc! { "part": n, "tag": "e" }),
        9 => Bson::Decimal128(format!("{n}.5").parse().expect("decimal")),
        10 => Bson::Boolean(i % 24 == 10),
        _ => Bson::Int64(-5_000_000_000 - n),
    }
}

/// The special `_id`s that exist once: null, MinKey, MaxKey (and the two booleans of `id_of`).
fn singletons() -> Vec<Bson> {
    vec![Bson::Null, Bson::MinKey, Bson::MaxKey]
}

/// The `id_of` types (`i % 12`) that a server pages correctly with `$gt` in `sort` order, at
/// the test's scale. MongoDB does for every type (BSON comparison order); a server that does
/// not cannot be copied bracket by bracket, and those types are left out with a line saying
/// so (SecantusDB 0.5: binaries and embedded documents sort in another order than `$gt`
/// compares them, so paging them skips documents).
async fn ordered_types(client: &mongodb::Client, count: usize) -> Vec<usize> {
    let db = client.database(&unique("order_probe"));
    let mut kept = vec![10]; // booleans: two values, nothing to page
    for group in [
        vec![0, 1, 9, 11],
        vec![2],
        vec![3],
        vec![4],
        vec![5],
        vec![6, 7],
        vec![8],
    ] {
        let coll = db.collection::<Document>(&format!("g{}", group[0]));
        let ids: Vec<Bson> = (0..count)
            .filter(|i| group.contains(&(i % 12)))
            .map(id_of)
            .collect();
        let docs: Vec<Document> = ids.iter().map(|id| doc! { "_id": id.clone() }).collect();
        coll.insert_many(docs).await.expect("probe insert");
        let (mut paged, mut last): (usize, Option<Bson>) = (0, None);
        loop {
            let filter = last.map_or_else(
                || doc! { "_id": { "$gte": f64::NEG_INFINITY } },
                |l| doc! { "_id": { "$gt": l } },
            );
            let filter = if group.contains(&0) {
                filter
            } else {
                last_or_type(&filter, group[0])
            };
            // The copy's own query shape (src/snapshot/copy.rs).
            let options = mongodb::options::FindOptions::builder()
                .sort(doc! { "_id": 1 })
                .hint(mongodb::options::Hint::Keys(doc! { "_id": 1 }))
                .limit(500)
                .batch_size(500)
                .read_concern(mongodb::options::ReadConcern::majority())
                .build();
            use futures::TryStreamExt;
            let batch: Vec<Document> = coll
                .find(filter)
                .with_options(options)
                .await
                .unwrap()
                .try_collect()
                .await
                .unwrap();
            paged += batch.len();
            if batch.len() < 500 {
                break;
            }
            last = batch.last().and_then(|d| d.get("_id").cloned());
        }
        if paged == ids.len() {
            kept.extend(group);
        } else {
            eprintln!(
                "_id types {group:?} of id_of left out: this server pages {paged} of {} \
                       with $gt in sort order",
                ids.len()
            );
        }
    }
    db.drop().await.ok();
    kept
}

/// The copy's first query of a bracket names its type; later ones page with `$gt`.
fn last_or_type(filter: &Document, kind: usize) -> Document {
    if filter
        .get_document("_id")
        .is_ok_and(|c| c.contains_key("$gt"))
    {
        return filter.clone();
    }
    let name = match kind {
        2 => vec!["string", "symbol"],
        3 => vec!["objectId"],
        4 => vec!["date"],
        5 => vec!["timestamp"],
        6 => vec!["binData"],
        _ => vec!["object"],
    };
    doc! { "_id": { "$type": name } }
}

/// [`ordered_types`] of the servers under test at scale `count`, probed once per test process
/// (the answer is the server's, and every test seeds the same server): each probe writes
/// `count` documents, which the shared server's oplog and the suite's time would pay again.
async fn probed_types(count: usize) -> Vec<usize> {
    static PROBED: std::sync::LazyLock<tokio::sync::Mutex<HashMap<usize, Vec<usize>>>> =
        std::sync::LazyLock::new(Default::default);
    let mut probed = PROBED.lock().await;
    if let Some(kinds) = probed.get(&count) {
        return kinds.clone();
    }
    let kinds = ordered_types(&mongo().await, count).await;
    probed.insert(count, kinds.clone());
    kinds
}

/// Seeds `count` documents (booleans only twice) plus the singletons, with the `_id` types the
/// server orders consistently; returns their `_id`s.
pub async fn seed(coll: &Collection<Document>, count: usize) -> Vec<Bson> {
    let kinds = probed_types(count).await;
    let mut ids: Vec<Bson> = (0..count)
        .filter(|i| kinds.contains(&(i % 12)))
        .filter(|i| i % 12 != 10 || *i < 24)
        .map(id_of)
        .collect();
    ids.extend(singletons());
    for chunk in ids.chunks(1000) {
        let docs: Vec<Document> = chunk
            .iter()
            .map(|id| doc! { "_id": id.clone(), "v": 0_i64, "pad": "x".repeat(100) })
            .collect();
        coll.insert_many(docs).await.expect("seed");
    }
    ids
}

/// Random writes on `ids` until `stop`: updates, replaces, deletes and inserts of new ids (of
/// the `_id` kinds among `ids`).
/// The null `_id` is copied but not written to: SecantusDB's `update_lookup` finds no document
/// for `{_id: null}` (its update events carry `fullDocument: null`), which MongoDB does find.
pub async fn write_while(
    coll: Collection<Document>,
    ids: Vec<Bson>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> usize {
    write_paced(coll, ids, stop, Some(Duration::from_millis(2))).await
}

/// [`write_while`], pausing `pace` after each write (`None`: as fast as the server takes them):
/// the servers are shared with the other tests running at the same time.
pub async fn write_paced(
    coll: Collection<Document>,
    ids: Vec<Bson>,
    stop: tokio::sync::watch::Receiver<bool>,
    pace: Option<Duration>,
) -> usize {
    let ids: Vec<Bson> = ids.into_iter().filter(|id| *id != Bson::Null).collect();
    // New ids only of the kinds `ids` has: those the server was seen to page correctly
    // (`seed`); SecantusDB skips binaries and embedded documents when paging by `_id`.
    let kind = |id: &Bson| match id {
        Bson::Binary(b) => (id.element_type(), Some(b.subtype)),
        _ => (id.element_type(), None),
    };
    let kinds: Vec<usize> = (0..12)
        .filter(|k| ids.iter().any(|id| kind(id) == kind(&id_of(*k))))
        .collect();
    assert!(!kinds.is_empty(), "no id_of kind among the ids to write");
    let mut writes = 0;
    let mut fresh = 1_000_000;
    while !*stop.borrow() {
        let (which, id) = {
            let mut rng = rand::rng();
            (
                rng.random_range(0..10),
                ids[rng.random_range(0..ids.len())].clone(),
            )
        };
        let filter = doc! { "_id": id.clone() };
        let result = match which {
            0..=4 => coll
                .update_one(filter, doc! { "$inc": { "v": 1_i64 } })
                .await
                .map(|_| ()),
            5 | 6 => coll
                .replace_one(filter, doc! { "v": -1_i64, "replaced": true })
                .await
                .map(|_| ()),
            7 => coll.delete_one(filter).await.map(|_| ()),
            _ => {
                fresh += 1;
                while !kinds.contains(&(fresh % 12)) {
                    fresh += 1;
                }
                coll.insert_one(doc! { "_id": id_of(fresh), "v": 7_i64 })
                    .await
                    .map(|_| ())
            }
        };
        if result.is_ok() {
            writes += 1;
        }
        if let Some(pace) = pace {
            tokio::time::sleep(pace).await;
        }
    }
    writes
}

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
    let sentinel = bson::oid::ObjectId::new();
    coll.insert_one(doc! { "_id": sentinel, "v": 0_i64, "sentinel": true })
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let records =
            collect_raw_quiet(topic, Duration::from_secs(2), Duration::from_secs(60)).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_copy_with_concurrent_writes_leaves_a_compacted_topic_equal_to_the_collection() {
    // GIVEN 20 000 documents with every _id type, and a topic of 3 partitions
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let client = mongo().await;
    let db = unique("snapdb");
    let topic = unique("snap");
    create_topic(&topic, 3).await;
    let coll = client.database(&db).collection::<Document>("items");
    let ids = seed(&coll, 20_000).await;
    // WHEN the bridge snapshots it while a writer updates, replaces, deletes and inserts
    let name = unique("snap");
    let text = config_toml(
        &name,
        &db,
        Some("items"),
        &snapshot_lines(&topic, "snapshot_batch_size = 500\n"),
    );
    let bridge = start_bridge(&text).await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let writer = tokio::spawn(write_while(coll.clone(), ids, stop_rx));
    let done = wait_finished(&client, &db, &name, Duration::from_secs(300)).await;
    stop_tx.send(true).unwrap();
    let writes = writer.await.unwrap();
    let records = settle(&coll, &topic).await;
    bridge.shutdown();
    bridge.wait().await.expect("clean stop");
    // THEN the last record of every key is the document's current state or its tombstone
    assert_mirror(&coll, &records).await;
    assert!(writes > 0, "the writer wrote during the copy");
    let last = done.get_document("lastSnapshot").unwrap();
    assert_eq!(last.get_str("reason"), Ok("initial"));
    // and each partition holds one start and one end marker, around its copied records
    for partition in 0..3 {
        let ops: Vec<String> = records
            .iter()
            .filter(|r| r.partition == partition)
            .map(|r| r.header("mongo.operation_type").unwrap_or_default())
            .collect();
        let start = ops
            .iter()
            .position(|o| o == "snapshot_start")
            .expect("start");
        let end = ops.iter().position(|o| o == "snapshot_end").expect("end");
        assert_eq!(ops.iter().filter(|o| o.starts_with("snapshot_")).count(), 2);
        let copies: Vec<usize> = (0..ops.len()).filter(|i| ops[*i] == "snapshot").collect();
        assert!(
            copies.iter().all(|i| *i > start && *i < end),
            "partition {partition}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_snapshot_command_re_copies_while_the_owner_keeps_streaming() {
    // GIVEN a streaming pipeline without a snapshot, over 300 documents
    let client = mongo().await;
    let db = unique("snapcmd");
    let topic = unique("snapcmd");
    create_topic(&topic, 2).await;
    let coll = client.database(&db).collection::<Document>("items");
    let docs: Vec<Document> = (0..300_i64)
        .map(|i| doc! { "_id": 7_000_000_000 + i, "v": i })
        .collect();
    coll.insert_many(docs).await.unwrap();
    let name = unique("snapcmd");
    let lines =
        format!("topic = \"{topic}\"\nfull_document = \"update_lookup\"\nformat = \"bson\"\n");
    let text = config_toml(&name, &db, Some("items"), &lines);
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, &name, Duration::from_secs(60), |d| {
        d.contains_key("resumeToken")
    })
    .await;
    // WHEN an operator asks for a snapshot while it streams (and a write happens meanwhile)
    let file = config_file(&text);
    let (code, stdout, stderr) = bridge_cli(&["snapshot", &name], file.path());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("snapshot of"), "{stdout}");
    coll.update_one(
        doc! { "_id": 7_000_000_005_i64 },
        doc! { "$set": { "v": -5_i64 } },
    )
    .await
    .unwrap();
    let done = wait_finished(&client, &db, &name, Duration::from_secs(120)).await;
    let records = settle(&coll, &topic).await;
    bridge.shutdown();
    bridge.wait().await.expect("clean stop");
    // THEN every document was copied once, between the markers, and the topic mirrors it
    let last = done.get_document("lastSnapshot").unwrap();
    assert_eq!(last.get_str("reason"), Ok("requested"));
    assert_eq!(last.get_i64("copied"), Ok(300));
    assert!(
        !done.contains_key("snapshotRequest"),
        "the request was answered"
    );
    let copies = records
        .iter()
        .filter(|r| r.header("mongo.operation_type").as_deref() == Some("snapshot"))
        .count();
    assert_eq!(copies, 300);
    let markers = records
        .iter()
        .filter(|r| {
            r.header("mongo.operation_type")
                .is_some_and(|o| o.starts_with("snapshot_"))
        })
        .count();
    assert_eq!(
        markers, 4,
        "a start and an end marker on each of 2 partitions"
    );
    assert_mirror(&coll, &records).await;
    // AND a namespace outside the scope is refused with the reason, exit 2
    let (code, stdout, _) = bridge_cli(&["snapshot", &name, "--namespace", "other.c"], file.path());
    assert_eq!(code, Some(2));
    assert!(stdout.contains("outside the scope"), "{stdout}");
}
