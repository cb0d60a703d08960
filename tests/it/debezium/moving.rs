//! The move from Debezium without a gap (README "Moving from Debezium"): the real Debezium
//! streams a collection under a distributed Connect worker while a writer keeps writing; the
//! connector is stopped; `offsets import debezium` takes its position, from the offsets topic
//! and from the REST API (the same token); the bridge starts in the Debezium form on Debezium's
//! topic. A `read_committed` consumer (librdkafka's default isolation) reading the topic from
//! the start sees every event; the duplicates are counted and bounded by the records Debezium
//! published after the event its offset names.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bson::{Document, doc};

use super::peer::{Debezium, peers};
use super::{WAIT, normalized};
use crate::support::*;

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
fn import(config: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["offsets", "import", "debezium", "dbz"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = bridge_cli(&all, config);
    (code, format!("{stdout}{stderr}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn moving_from_debezium_loses_no_event() {
    let python = match peers() {
        Ok(python) => python,
        Err(reason) => return eprintln!("skipped: {reason}"),
    };
    // GIVEN Debezium streaming a collection (after its snapshot) while a writer writes
    let (db, prefix) = (unique("dbzm"), unique("dbzm"));
    let client = mongo().await;
    let coll = client.database(&db).collection::<Document>("c");
    let pre: Vec<Document> = (0..5).map(|i| doc! { "_id": i, "pre": true }).collect();
    coll.insert_many(pre).await.unwrap();
    let (p, d, x) = (python.clone(), db.clone(), prefix.clone());
    let debezium = tokio::task::spawn_blocking(move || {
        Debezium::start(
            &p,
            &d,
            "c",
            &x,
            &["--snapshot", "initial", "--mode", "distributed"],
        )
    })
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

    // WHEN the connector is stopped and its position imported
    let debezium = tokio::task::spawn_blocking(move || {
        debezium.stop_connector();
        debezium
    })
    .await
    .unwrap();
    let offsets = debezium.offsets();
    eprintln!("Debezium's offsets (REST): {offsets}");
    // Every record of Debezium's is in the topic once its connector stopped.
    let before_move = collect_raw_quiet(&topic, Duration::from_secs(5), WAIT)
        .await
        .len();
    let text = config_toml(
        "dbz",
        &db,
        Some("c"),
        &format!("value = \"debezium\"\n[pipelines.debezium]\ntopic_prefix = \"{prefix}\"\n"),
    );
    let config = config_file(&text);
    let offsets_topic = format!("mkb-peers-{}-offsets", debezium.name);
    let args = [
        "--connect-offsets-topic",
        &offsets_topic,
        "--connector",
        &debezium.name,
    ];
    let (code, out) = import(config.path(), &args);
    assert_eq!(code, Some(0), "import from the offsets topic: {out}");
    let from_topic = offsets_doc(&client, &db, "dbz").await.expect("imported");
    let rest_file = config.path().with_extension("offsets.json");
    std::fs::write(&rest_file, &offsets).unwrap();
    let (code, out) = import(config.path(), &["--offsets", rest_file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "import from the REST API's JSON: {out}");
    eprintln!("{out}");
    let imported = offsets_doc(&client, &db, "dbz").await.expect("imported");
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
    drop(debezium);
    // AND the bridge starts in the Debezium form on Debezium's topic
    let bridge = start_bridge(&text).await;
    let published = collect_raw(&topic, before_move + 30, WAIT).await.len();
    assert!(
        published >= before_move + 30,
        "the bridge publishes on the topic"
    );
    stop.store(true, Ordering::Relaxed);
    let written = writing.await.unwrap();
    coll.insert_one(doc! { "_id": "end" }).await.unwrap();

    // THEN a read_committed consumer sees every event, some twice at most
    let records = read_through(&topic, "{\"id\":\"\\\"end\\\"\"}").await;
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
    // The bound: Debezium's records after the event its offset names (sec, ord).
    let offset: serde_json::Value = serde_json::from_str(&offsets).unwrap();
    let offset = &offset["offsets"][0]["offset"];
    let (sec, ord) = (
        offset["sec"].as_i64().unwrap(),
        offset["ord"].as_i64().unwrap(),
    );
    let dbz = &records[..before_move];
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
    for twice in duplicates {
        let text =
            |r: &RawRecord| normalized(std::str::from_utf8(r.value.as_deref().unwrap()).unwrap());
        assert_eq!(
            text(twice[0]),
            text(twice[1]),
            "a duplicate is the same record"
        );
    }

    // AND a second import is refused while the bridge holds the pipeline, and fences it with --force
    let (code, out) = import(config.path(), &["--offsets", rest_file.to_str().unwrap()]);
    assert_eq!(code, Some(1), "refused while the bridge runs: {out}");
    let (code, out) = import(
        config.path(),
        &["--offsets", rest_file.to_str().unwrap(), "--force"],
    );
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
