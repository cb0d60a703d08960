//! The Debezium form against the real Debezium MongoDB connector **3.6.3.Final** (the machine's
//! OpenJDK 17, Kafka Connect 4.3.0 standalone, run by `bench/peers/connect.py`): both capture one
//! collection through the same snapshot and the same writes, and their topics are compared
//! (README "The Debezium form"). Debezium writes `<prefix>.<db>.<coll>`; the bridge, with the
//! same `topic_prefix` (so `source.name` and the schema names are the same), its own topic.
//!
//! - Stream records, per key in order: the key bytes, the value bytes with the top-level `ts_ms`
//!   (processing time) set to 0, the tombstones, Debezium's context headers but `runId`.
//! - Snapshot records, as a set keyed by the key: the same, with the read time (`source.ts_*`)
//!   set to 0 and `"last"` read as `"true"`; on each side exactly one `"last"`, on the last
//!   snapshot record that side published (Debezium copies in natural order, the bridge in `_id`
//!   order).
//!
//! Differences that cannot be closed are listed in [`EXCEPTIONS`] and in the README; the test
//! allows exactly those. `moving.rs`: the move from Debezium (`offsets import debezium`);
//! `partitions.rs`: which of Debezium's partitions the import takes; `uncaptured.rs`: events
//! Debezium does not capture.

use std::collections::BTreeMap;
use std::time::Duration;

use bson::{Bson, Document, RawDocumentBuf, doc};
use mongodb::Collection;

use crate::common::bridge::start_bridge;
use crate::common::collect::{RawRecord, collect_raw};
use crate::common::config::config_toml;
use crate::common::kafka::create_topic;
use crate::common::mongo::mongo;
use crate::common::unique;

mod moving;
mod partitions;
mod peer;
mod uncaptured;

use peer::{Debezium, corpus, peers};

/// How long records may take to arrive (a JVM starting on a loaded machine included).
const WAIT: Duration = Duration::from_secs(300);

/// Differences from the real connector that cannot be closed (README "The Debezium form"),
/// each allowed exactly: (what differs, on which records). Empty: none.
const EXCEPTIONS: &[&str] = &[];

/// The documents that exist before both start: one `_id` of each type Debezium keys.
fn pre_existing() -> Vec<Document> {
    let ids = [
        Bson::Int32(1),
        Bson::Int64(5_000_000_000),
        Bson::Double(-0.5),
        Bson::String("alpha".into()),
        Bson::ObjectId(bson::oid::ObjectId::parse_str("65a000000000000000000001").unwrap()),
        Bson::DateTime(bson::DateTime::from_millis(-86_400_000)),
        Bson::DateTime(bson::DateTime::from_millis(1_704_067_200_000)),
        Bson::Binary(bson::Binary {
            subtype: bson::spec::BinarySubtype::Uuid,
            bytes: (0..16).collect(),
        }),
        Bson::Document(doc! { "region": "eu", "n": 1 }),
        Bson::Decimal128("12.50".parse().unwrap()),
        Bson::Int64(9_007_199_254_740_993),
        Bson::Boolean(true),
    ];
    ids.into_iter()
        .enumerate()
        .map(|(i, id)| doc! { "_id": id, "name": format!("s{i}"), "n": i as i32, "arr": [1, 2, 3], "tags": ["a"] })
        .collect()
}

/// The stream's writes; how many records each system should publish for them.
async fn write(client: &mongodb::Client, coll: &Collection<Document>, pre: &[Document]) -> usize {
    let id = |i: usize| pre[i].get("_id").unwrap().clone();
    let ts = bson::DateTime::from_millis(1_704_164_645_000);
    coll.insert_one(
        doc! { "_id": 100, "customer": "alice", "total": 12.5, "items": ["a", "b"], "ts": ts },
    )
    .await
    .unwrap();
    let oid = bson::oid::ObjectId::parse_str("65a000000000000000000002").unwrap();
    coll.insert_one(doc! { "_id": oid, "v": 1 }).await.unwrap();
    coll.insert_one(doc! { "_id": "beta", "v": 42_i64 })
        .await
        .unwrap();
    // Each document is changed once after the snapshot, so that an update's looked-up
    // document is the same whenever each system read it.
    let updates = [
        doc! { "$set": { "n": 42, "status": "paid" } },
        doc! { "$unset": { "name": "" } },
        doc! { "$set": { "arr.1": 20 } },
        doc! { "$push": { "tags": "b" } },
        doc! { "$set": { "x": 1.5, "when": ts }, "$unset": { "n": "" } },
    ];
    for (i, update) in [0, 1, 2, 3, 6].into_iter().zip(updates) {
        coll.update_one(doc! { "_id": id(i) }, update)
            .await
            .unwrap();
    }
    coll.replace_one(doc! { "_id": id(4) }, doc! { "replaced": true, "n": 7_i64 })
        .await
        .unwrap();
    coll.delete_one(doc! { "_id": id(5) }).await.unwrap();
    let mut session = client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    for d in [doc! { "_id": 200, "t": 1 }, doc! { "_id": 201, "t": 2 }] {
        coll.insert_one(d).session(&mut session).await.unwrap();
    }
    let inc = doc! { "$inc": { "n": 1 } };
    coll.update_one(doc! { "_id": id(7) }, inc)
        .session(&mut session)
        .await
        .unwrap();
    coll.delete_one(doc! { "_id": id(8) })
        .session(&mut session)
        .await
        .unwrap();
    session.commit_transaction().await.unwrap();
    let raw = coll.clone_with_type::<RawDocumentBuf>();
    let (mut inserted, mut refused) = (0, 0);
    for d in corpus() {
        match raw.insert_one(d).await {
            Ok(_) => inserted += 1,
            Err(_) => refused += 1,
        }
    }
    eprintln!("BSON corpus: {inserted} documents inserted, {refused} refused by the server");
    coll.insert_one(doc! { "_id": "end" }).await.unwrap();
    // 3 inserts, 6 updates (a replace), a delete and its tombstone, the transaction's 2
    // inserts, update, delete and tombstone, the corpus, the end.
    3 + 6 + 2 + 5 + inserted + 1
}

/// A record's parts as text.
#[derive(Debug, Clone)]
struct Rec {
    key: String,
    value: Option<String>,
    /// Debezium's context headers but `runId`.
    context: Vec<(String, String)>,
}

fn rec(r: &RawRecord) -> Rec {
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).expect("UTF-8");
    Rec {
        key: text(r.key.as_deref().unwrap_or_default()),
        value: r.value.as_deref().map(text),
        context: r
            .headers
            .iter()
            .filter(|(n, _)| n.starts_with("__debezium.context.") && !n.ends_with("runId"))
            .map(|(n, v)| (n.clone(), text(v)))
            .collect(),
    }
}

/// `text` with the number after the first `field` from `from` on set to 0.
fn zero_after(text: &str, from: usize, field: &str) -> String {
    let Some(at) = text[from..].find(field).map(|i| from + i + field.len()) else {
        return text.to_owned();
    };
    let end = at
        + text[at..]
            .find(|c: char| !c.is_ascii_digit() && c != '-')
            .unwrap();
    format!("{}0{}", &text[..at], &text[end..])
}

/// The value with what may differ set to 0: the top-level `ts_ms`, and a snapshot record's read
/// time (`source.ts_*`), its `"last"` read as `"true"`.
fn normalized(value: &str) -> String {
    let at = value.rfind(",\"transaction\":").expect("an envelope");
    let top = value[..at].rfind("\"ts_ms\":").expect("a top-level ts_ms");
    let mut out = zero_after(value, top, "\"ts_ms\":");
    if is_snapshot(value) {
        let source = out.find("\"source\":{").expect("a source");
        for field in ["\"ts_ms\":", "\"ts_us\":", "\"ts_ns\":"] {
            out = zero_after(&out, source, field);
        }
        out = out.replacen("\"snapshot\":\"last\"", "\"snapshot\":\"true\"", 1);
    }
    out
}

fn is_snapshot(value: &str) -> bool {
    value.contains(",\"op\":\"r\",")
}

/// The differences between Debezium's records and the bridge's, one line each.
fn differences(dbz: &[Rec], ours: &[Rec]) -> Vec<String> {
    let mut out = Vec::new();
    for (side, records) in [("debezium", dbz), ("bridge", ours)] {
        let snapshot: Vec<&Rec> = records
            .iter()
            .filter(|r| r.value.as_deref().is_some_and(is_snapshot))
            .collect();
        let lasts: Vec<usize> = (0..snapshot.len())
            .filter(|i| {
                snapshot[*i]
                    .value
                    .as_deref()
                    .unwrap()
                    .contains("\"snapshot\":\"last\"")
            })
            .collect();
        if lasts != [snapshot.len() - 1] {
            out.push(format!(
                "{side}: \"last\" on snapshot records {lasts:?} of {}",
                snapshot.len()
            ));
        }
    }
    let split = |records: &[Rec]| {
        let (mut snapshot, mut stream) = (BTreeMap::new(), BTreeMap::<String, Vec<Rec>>::new());
        for r in records {
            let mut r = r.clone();
            r.value = r.value.as_deref().map(normalized);
            if r.value.as_deref().is_some_and(is_snapshot) {
                snapshot.insert(r.key.clone(), r);
            } else {
                stream.entry(r.key.clone()).or_default().push(r);
            }
        }
        (snapshot, stream)
    };
    let ((dbz_snapshot, dbz_stream), (snapshot, stream)) = (split(dbz), split(ours));
    compare("snapshot", &dbz_snapshot, &snapshot, &mut out, |r| {
        vec![r.clone()]
    });
    compare("stream", &dbz_stream, &stream, &mut out, Vec::clone);
    out
}

/// Per key of either map: Debezium's records against the bridge's.
fn compare<T>(
    what: &str,
    dbz: &BTreeMap<String, T>,
    ours: &BTreeMap<String, T>,
    out: &mut Vec<String>,
    records: impl Fn(&T) -> Vec<Rec>,
) {
    let keys: std::collections::BTreeSet<&String> = dbz.keys().chain(ours.keys()).collect();
    for key in keys {
        let (a, b) = (dbz.get(key).map(&records), ours.get(key).map(&records));
        let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
        if a.len() != b.len() {
            out.push(format!(
                "{what} {key}: debezium {} records, bridge {}",
                a.len(),
                b.len()
            ));
            continue;
        }
        for (i, (a, b)) in a.iter().zip(&b).enumerate() {
            if a.value != b.value || a.context != b.context {
                out.push(format!(
                    "{what} {key} #{i}:\n  debezium {:?} {:?}\n  bridge   {:?} {:?}",
                    a.value, a.context, b.value, b.context
                ));
            }
        }
    }
}

/// Prints Debezium's first record of each `op` (and a tombstone), and the bridge's record of the
/// same key and `op`.
fn show(dbz: &[Rec], ours: &[Rec]) {
    let print = |what: &str, side: &str, r: Option<&Rec>| {
        if let Some(r) = r {
            let value = r.value.as_deref().unwrap_or("null");
            eprintln!("{what} {side}:\n  key   {}\n  value {value}", r.key);
        }
    };
    for op in ["r", "c", "u", "d"] {
        let pattern = format!(",\"op\":\"{op}\",");
        let is = |r: &&Rec| r.value.as_deref().is_some_and(|v| v.contains(&pattern));
        let first = dbz.iter().find(is);
        print(&format!("op {op}"), "debezium", first);
        let same = first.and_then(|f| ours.iter().filter(is).find(|r| r.key == f.key));
        print(&format!("op {op}"), "bridge", same);
    }
    let first = dbz.iter().find(|r| r.value.is_none());
    print("tombstone", "debezium", first);
    let same = first.and_then(|f| ours.iter().find(|r| r.value.is_none() && r.key == f.key));
    print("tombstone", "bridge", same);
}

/// The scenario with the JSON converter's schemas off or on.
async fn same_records_as_debezium(schemas: bool) {
    let python = match peers() {
        Ok(python) => python,
        Err(reason) => return eprintln!("skipped: {reason}"),
    };
    // GIVEN documents that exist before either system starts
    let db = unique("dbzc");
    let prefix = unique("dbz");
    let client = mongo().await;
    let coll = client.database(&db).collection::<Document>("c");
    let pre = pre_existing();
    coll.insert_many(pre.clone()).await.unwrap();
    // AND Debezium and the bridge capturing the collection with a snapshot
    let mut args = vec!["--snapshot", "initial"];
    if schemas {
        args.push("--schemas");
    }
    let (p, d, x) = (python.clone(), db.clone(), prefix.clone());
    let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
    let debezium = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Debezium::start(&p, &d, "c", &x, &args)
    })
    .await
    .unwrap();
    let dbz_topic = format!("{prefix}.{db}.c");
    let topic = format!("{prefix}.bridge");
    create_topic(&topic, 1).await;
    let extra = format!(
        "value = \"debezium\"\nsnapshot = \"initial\"\ntopic = \"{topic}\"\n\
         [pipelines.debezium]\ntopic_prefix = \"{prefix}\"\nschemas = {schemas}\n"
    );
    let bridge = start_bridge(&config_toml("dbz", &db, Some("c"), &extra)).await;
    for t in [&dbz_topic, &topic] {
        let copied = collect_raw(t, pre.len(), WAIT).await;
        assert_eq!(copied.len(), pre.len(), "the snapshot of {t}");
    }
    // WHEN the stream's writes are made
    let expected = pre.len() + write(&client, &coll, &pre).await;
    // THEN both topics hold the same records
    let dbz: Vec<Rec> = collect_raw(&dbz_topic, expected, WAIT)
        .await
        .iter()
        .map(rec)
        .collect();
    let ours: Vec<Rec> = collect_raw(&topic, expected, WAIT)
        .await
        .iter()
        .map(rec)
        .collect();
    bridge.shutdown();
    bridge.wait().await.unwrap();
    drop(debezium);
    show(&dbz, &ours);
    eprintln!(
        "debezium {} records, bridge {} (expected {expected})",
        dbz.len(),
        ours.len()
    );
    let found = differences(&dbz, &ours);
    for d in &found {
        eprintln!("DIFFERENCE {d}");
    }
    assert_eq!(dbz.len(), expected, "Debezium published every record");
    assert_eq!(
        found, EXCEPTIONS,
        "differences beyond the README's exceptions"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_debezium_form_writes_what_debezium_writes() {
    same_records_as_debezium(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_debezium_form_with_schemas_writes_what_debezium_writes() {
    same_records_as_debezium(true).await;
}
