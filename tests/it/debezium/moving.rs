//! The move from Debezium without a gap (README "Moving from Debezium"): the real Debezium
//! streams a collection under a distributed Connect worker while a writer keeps writing; the
//! connector is stopped; `offsets import debezium` takes its position, from the offsets topic
//! and from the REST API (the same token); the bridge starts in the Debezium form on Debezium's
//! topic. A `read_committed` consumer (librdkafka's default isolation) reading the topic from
//! the start sees every event; the duplicates are counted and bounded by the records Debezium
//! published after the event its offset names. Again after a crash (`kill -9` of the worker, the
//! offsets topic read): the duplicates are then the records of Debezium's last flush interval.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bson::{Bson, Document, doc};
use mongo_kafka_bridge::Bridge;
use mongodb::Collection;

use super::peer::{Debezium, peers};
use super::{WAIT, normalized};
use crate::common::bridge::{bridge_cli, start_bridge};
use crate::common::collect::{RawRecord, collect_raw, collect_raw_quiet};
use crate::common::config::{config_file, config_toml};
use crate::common::mongo::{mongo, offsets_doc, wait_offsets};
use crate::common::unique;

/// A record's identity: its key and `op` (each document is inserted once, updated at most once).
fn identity(r: &RawRecord) -> Option<(String, String)> {
    let value: serde_json::Value = serde_json::from_slice(r.value.as_deref()?).ok()?;
    let key = String::from_utf8(r.key.clone()?).ok()?;
    Some((key, value["op"].as_str()?.to_owned()))
}

/// Every record of `topic` up to the one keyed `last_key`.
pub(super) async fn read_through(topic: &str, last_key: &str) -> Vec<RawRecord> {
    let mut count = 1;
    loop {
        let records = collect_raw(topic, count, WAIT).await;
        if records
            .iter()
            .any(|r| r.key.as_deref() == Some(last_key.as_bytes()))
        {
            return records;
        }
        assert!(
            records.len() >= count,
            "{topic}: no record keyed {last_key} in time"
        );
        count = records.len() + 1;
    }
}

/// Writes until `stop`: inserts `{_id: 1000 + i}`, and updates every third earlier document
/// once. The events written, as (key, op).
async fn writer(
    coll: mongodb::Collection<Document>,
    stop: Arc<AtomicBool>,
) -> Vec<(String, String)> {
    let mut events = Vec::new();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let id = 1000 + i;
        coll.insert_one(doc! { "_id": id, "i": i }).await.unwrap();
        events.push((format!("{{\"id\":\"{id}\"}}"), "c".to_owned()));
        if i % 3 == 2 {
            coll.update_one(doc! { "_id": id - 1 }, doc! { "$set": { "u": true } })
                .await
                .unwrap();
            events.push((format!("{{\"id\":\"{}\"}}", id - 1), "u".to_owned()));
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    events
}

/// Runs `offsets import debezium dbz ARGS` with `config`; its exit code and output.
pub(super) fn import(config: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["offsets", "import", "debezium", "dbz"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = bridge_cli(&all, config);
    (code, format!("{stdout}{stderr}"))
}

/// Debezium (a distributed worker) streaming a collection after its snapshot, a writer writing.
struct Streaming {
    client: mongodb::Client,
    coll: Collection<Document>,
    db: String,
    topic: String,
    /// The pipeline's configuration (the Debezium form on Debezium's topics), and its file.
    text: String,
    config: tempfile::NamedTempFile,
    debezium: Debezium,
    stop: Arc<AtomicBool>,
    writing: tokio::task::JoinHandle<Vec<(String, String)>>,
}

/// Starts it all; `None` (the reason printed) where the real connector cannot run.
async fn streaming() -> Option<Streaming> {
    let python = peers()
        .map_err(|reason| eprintln!("skipped: {reason}"))
        .ok()?;
    let (db, prefix) = (unique("dbzm"), unique("dbzm"));
    let client = mongo().await;
    let coll = client.database(&db).collection::<Document>("c");
    let pre: Vec<Document> = (0..5).map(|i| doc! { "_id": i, "pre": true }).collect();
    coll.insert_many(pre).await.unwrap();
    let (d, x) = (db.clone(), prefix.clone());
    let args = ["--snapshot", "initial", "--mode", "distributed"];
    let debezium =
        tokio::task::spawn_blocking(move || Debezium::start(&python, &d, "c", &x, &args))
            .await
            .unwrap();
    let topic = format!("{prefix}.{db}.c");
    assert_eq!(
        collect_raw(&topic, 5, WAIT).await.len(),
        5,
        "Debezium's snapshot"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let writing = tokio::spawn(writer(coll.clone(), Arc::clone(&stop)));
    assert!(
        collect_raw(&topic, 45, WAIT).await.len() >= 45,
        "Debezium streams"
    );
    let extra =
        format!("value = \"debezium\"\n[pipelines.debezium]\ntopic_prefix = \"{prefix}\"\n");
    let text = config_toml("dbz", &db, Some("c"), &extra);
    let config = config_file(&text);
    Some(Streaming {
        client,
        coll,
        db,
        topic,
        text,
        config,
        debezium,
        stop,
        writing,
    })
}

/// An integer of an offset as stored (JSON numbers become Int32 or Int64).
fn int(v: Option<&Bson>) -> i64 {
    match v {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

/// The imported position's `(sec, ord)`, from the offsets document.
async fn imported_at(s: &Streaming) -> (Document, (i64, i64)) {
    let doc = offsets_doc(&s.client, &s.db, "dbz")
        .await
        .expect("imported");
    let offset = doc
        .get_document("importedFrom")
        .unwrap()
        .get_document("offset")
        .unwrap();
    let at = (int(offset.get("sec")), int(offset.get("ord")));
    (doc, at)
}

/// The bridge started on Debezium's topic (which held `before` records); the writer stopped; a
/// `read_committed` consumer sees every written event, in order per document, and at most
/// `bound` duplicates (Debezium's records after the event `(sec, ord)` its offset names), each
/// the same record. The running bridge and the duplicate count.
async fn bridge_takes_over(s: Streaming, before: usize, (sec, ord): (i64, i64)) -> (Bridge, usize) {
    let bridge = start_bridge(&s.text).await;
    let published = collect_raw(&s.topic, before + 30, WAIT).await.len();
    assert!(
        published >= before + 30,
        "the bridge publishes on the topic"
    );
    s.stop.store(true, Ordering::Relaxed);
    let written = s.writing.await.unwrap();
    s.coll.insert_one(doc! { "_id": "end" }).await.unwrap();
    let records = read_through(&s.topic, "{\"id\":\"\\\"end\\\"\"}").await;
    let mut seen: HashMap<(String, String), Vec<&RawRecord>> = HashMap::new();
    let mut order = Vec::new();
    for r in &records {
        if let Some(id) = identity(r) {
            order.push(id.clone());
            seen.entry(id).or_default().push(r);
        }
    }
    let missing: Vec<&(String, String)> =
        written.iter().filter(|e| !seen.contains_key(*e)).collect();
    assert!(missing.is_empty(), "events lost in the move: {missing:?}");
    for (key, op) in written.iter().filter(|(_, op)| op == "u") {
        let at = |op: &str| order.iter().position(|e| e.0 == *key && e.1 == op);
        assert!(at("c") < at(op), "{key}: its insert first");
    }
    let duplicates: Vec<&Vec<&RawRecord>> = seen.values().filter(|v| v.len() > 1).collect();
    let dbz = &records[..before];
    let named = dbz.iter().rposition(|r| {
        let v: serde_json::Value =
            serde_json::from_slice(r.value.as_deref().unwrap_or(b"null")).unwrap();
        v["source"]["ts_ms"].as_i64().map(|ms| ms / 1000) == Some(sec)
            && v["source"]["ord"].as_i64() == Some(ord)
    });
    let bound = named.map_or(dbz.len(), |i| dbz.len() - 1 - i);
    eprintln!(
        "move: {} events written, {} records read, {} duplicates (bound: {bound} records Debezium \
         published after its offset's event)",
        written.len(),
        records.len(),
        duplicates.len()
    );
    assert!(
        duplicates.len() <= bound,
        "duplicates beyond the records after Debezium's offset"
    );
    for twice in &duplicates {
        let text =
            |r: &RawRecord| normalized(std::str::from_utf8(r.value.as_deref().unwrap()).unwrap());
        assert_eq!(
            text(twice[0]),
            text(twice[1]),
            "a duplicate is the same record"
        );
    }
    (bridge, duplicates.len())
}

#[tokio::test(flavor = "multi_thread")]
async fn moving_from_debezium_loses_no_event() {
    // GIVEN Debezium streaming a collection (after its snapshot) while a writer writes
    let Some(s) = streaming().await else { return };
    // WHEN the connector is stopped and its position imported, from its offsets topic and from
    // the REST API
    let debezium = tokio::task::spawn_blocking(move || {
        s.debezium.stop_connector();
        s
    })
    .await
    .unwrap();
    let s = debezium;
    let offsets = s.debezium.offsets();
    eprintln!("Debezium's offsets (REST): {offsets}");
    // Every record of Debezium's is in the topic once its connector stopped.
    let before = import_from_offsets_topic(&s).await;
    let (from_topic, _) = imported_at(&s).await;
    let rest_file = s.config.path().with_extension("offsets.json");
    std::fs::write(&rest_file, &offsets).unwrap();
    let rest = rest_file.to_str().unwrap().to_owned();
    let (code, out) = import(s.config.path(), &["--offsets", &rest]);
    assert_eq!(code, Some(0), "import from the REST API's JSON: {out}");
    eprintln!("{out}");
    let (imported, at) = imported_at(&s).await;
    assert_eq!(
        imported.get("resumeToken"),
        from_topic.get("resumeToken"),
        "one position"
    );
    assert!(
        imported.get_document("resumeToken").is_ok(),
        "a resume token: {imported}"
    );
    assert_eq!(
        imported.get_i64("epoch"),
        Ok(2),
        "each import raises the epoch"
    );
    assert_eq!(
        imported.get_i64("resetSequence"),
        Ok(2),
        "and the reset sequence"
    );
    s.debezium.stop();
    let (client, db, config) = (s.client.clone(), s.db.clone(), config_file(&s.text));
    // THEN the bridge, started on Debezium's topic, publishes every later event
    let (bridge, _) = bridge_takes_over(s, before, at).await;

    // AND a second import is refused while the bridge holds the pipeline, and fences it with
    // --force
    let (code, out) = import(config.path(), &["--offsets", &rest]);
    assert_eq!(code, Some(1), "refused while the bridge runs: {out}");
    let (code, out) = import(config.path(), &["--offsets", &rest, "--force"]);
    assert_eq!(code, Some(0), "{out}");
    let epoch = imported.get_i64("epoch").unwrap();
    let fenced = wait_offsets(&client, &db, "dbz", WAIT, |d| {
        d.get_i64("resetSequence") == Ok(3) && d.get_i64("epoch").is_ok_and(|e| e > epoch + 1)
    })
    .await;
    eprintln!(
        "after the forced import: epoch {:?}",
        fenced.get_i64("epoch")
    );
    bridge.shutdown();
    let _ = bridge.wait().await;
    let _ = std::fs::remove_file(rest_file);
}

#[tokio::test(flavor = "multi_thread")]
async fn moving_after_debezium_crashed_repeats_only_its_last_flush_interval() {
    // GIVEN Debezium streaming a collection (after its snapshot) while a writer writes
    let Some(s) = streaming().await else { return };
    // AND it committed the offset of a streamed event (Connect commits every flush interval)
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let offsets: serde_json::Value = serde_json::from_str(&s.debezium.offsets()).unwrap();
        if offsets["offsets"][0]["offset"]["sec"]
            .as_i64()
            .is_some_and(|sec| sec > 0)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Debezium committed no streamed offset"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // WHEN its worker is killed, and the position is imported from Connect's offsets topic
    let pid = std::fs::read_to_string(s.debezium.workdir.join("connect.pid")).unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success(), "kill -9 {pid}");
    let before = import_from_offsets_topic(&s).await;
    let (_, at) = imported_at(&s).await;
    // THEN the bridge publishes every later event; the duplicates are Debezium's records after
    // its last committed offset (offset.flush.interval.ms = 1000 in bench/peers/connect.py)
    let (bridge, duplicates) = bridge_takes_over(s, before, at).await;
    eprintln!("after kill -9: {duplicates} duplicates");
    bridge.shutdown();
    let _ = bridge.wait().await;
}

/// The records in Debezium's topic once its worker stopped, after importing its position from
/// Connect's offsets topic (`--connect-offsets-topic`, `--connector`), which must succeed.
async fn import_from_offsets_topic(s: &Streaming) -> usize {
    let before = collect_raw_quiet(&s.topic, Duration::from_secs(5), WAIT)
        .await
        .len();
    let offsets_topic = format!("mkb-peers-{}-offsets", s.debezium.name);
    let args = [
        "--connect-offsets-topic",
        &offsets_topic,
        "--connector",
        &s.debezium.name,
    ];
    let (code, out) = import(s.config.path(), &args);
    assert_eq!(code, Some(0), "import from the offsets topic: {out}");
    before
}
