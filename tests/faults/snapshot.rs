//! The snapshot under faults: `kill -9` during the copy (it resumes after the committed `_id`),
//! a copy longer than the oplog window (on a server of its own keeping 1 000 entries), a
//! re-sync after a real history loss swept by the markers, and the server frozen (SIGSTOP) in the
//! middle of a copy (`/readyz` names the pipeline; the long form's `snapfreeze` freezes it for
//! 30 s under a writer). Ordinary tests of this binary (see `main.rs`).

use std::collections::HashSet;
use std::time::Duration;

use bson::{Bson, Document, RawDocument, doc};
use mongodb::Collection;
use rand::Rng;

use crate::common::bridge::{Killed, spawn_binary, start_bridge};
use crate::common::collect::RawRecord;
use crate::common::config::{config_file, config_toml};
use crate::common::kafka::create_topic;
use crate::common::mirror::copied;
use crate::common::mirror::{
    assert_mirror, compacted, settle, snapshot_lines, swept, wait_finished,
};
use crate::common::mongo::{
    APP_NAME, fail_point, fail_point_off, fill_oplog, mongo, offsets_doc, wait_offsets,
};
use crate::common::observe::get;
use crate::common::servers::Instance;
use crate::common::snapshot::{seed, write_paced, write_while};
use crate::common::unique;
use crate::suite::turn;

/// Copied documents a kill may repeat: the in-flight events, one batch, the source channel.
const REPEAT_BOUND_PER_KILL: usize = 500 + 200 + 256;

/// A copy that lasts 15 s or more whatever the machine's load: 3 000 documents (`_id`s from
/// `first`) in `coll`, copied 10 at a time by pipeline `name` of the returned configuration,
/// each of the bridge's `find`s made 50 ms slower (a fail point until the caller turns it off).
async fn slowed_copy(
    server: &Instance,
    coll: &Collection<Document>,
    first: i64,
    (name, topic): (&str, &str),
) -> String {
    let docs: Vec<Document> = (0..3000_i64)
        .map(|i| doc! { "_id": first + i, "v": 0_i64 })
        .collect();
    coll.insert_many(docs).await.unwrap();
    let lines = snapshot_lines(topic, "snapshot_batch_size = 10\n");
    let text = server.config(name, coll.namespace().db.as_str(), Some("items"), &lines);
    let slow = doc! {
        "failCommands": ["find"], "blockConnection": true, "blockTimeMS": 50, "appName": APP_NAME,
    };
    fail_point(coll.client(), "alwaysOn", slow).await;
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_kills_during_the_copy_resume_after_the_committed_id_and_the_mirror_holds() {
    let Some(_turn) = turn("snapshot").await else {
        return;
    };
    // GIVEN 20 000 documents of every _id type and a writer
    let client = mongo().await;
    let db = unique("snapkill");
    let topic = unique("snapkill");
    create_topic(&topic, 3).await;
    let coll = client.database(&db).collection::<Document>("items");
    let ids = seed(&coll, 20_000).await;
    let name = unique("snapkill");
    let lines = snapshot_lines(&topic, "snapshot_batch_size = 200\n");
    let text = config_toml(&name, &db, Some("items"), &lines)
        .replace("[bridge]\n", "[bridge]\nmax_in_flight_events = 500\n");
    let file = config_file(&text);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let writer = tokio::spawn(write_while(coll.clone(), ids, stop_rx));
    // WHEN the bridge is killed (SIGKILL) 5 times at random moments of the copy
    let mut kills = 0;
    let mut before = 0;
    while kills < 5 {
        let mut bridge = Killed(spawn_binary(file.path()));
        let step = rand::rng().random_range(500..2500);
        let now = wait_offsets(&client, &db, &name, Duration::from_secs(120), |d| {
            copied(d) >= before + step || d.contains_key("lastSnapshot")
        })
        .await;
        if now.contains_key("lastSnapshot") {
            break;
        }
        // Anywhere between two commits (commit_interval_ms = 200).
        let pause = rand::rng().random_range(0..300);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        bridge.kill();
        kills += 1;
        before = copied(&offsets_doc(&client, &db, &name).await.unwrap());
    }
    let _bridge = Killed(spawn_binary(file.path()));
    let done = wait_finished(&client, &db, &name, Duration::from_secs(300)).await;
    stop_tx.send(true).unwrap();
    writer.await.unwrap();
    let records = settle(&coll, &topic).await;
    // THEN the mirror holds, and the copy was repeated only for what was in flight per kill
    assert_mirror(&coll, &records).await;
    assert!(kills >= 3, "only {kills} kills landed during the copy");
    let copies: Vec<&RawRecord> = records
        .iter()
        .filter(|r| r.header("mongo.operation_type").as_deref() == Some("snapshot"))
        .collect();
    let distinct: HashSet<&Vec<u8>> = copies.iter().filter_map(|r| r.key.as_ref()).collect();
    let repeated = copies.len() - distinct.len();
    eprintln!(
        "{kills} kills: {} copied records, {} documents, {repeated} copied more than once \
         (bound {} per kill)",
        copies.len(),
        distinct.len(),
        REPEAT_BOUND_PER_KILL
    );
    assert!(
        repeated <= kills * REPEAT_BOUND_PER_KILL,
        "{repeated} repeats"
    );
    // AND one snapshot: its id on every record, one start marker per partition
    let last = done.get_document("lastSnapshot").unwrap();
    let id = last.get_str("id").unwrap();
    assert!(
        copies
            .iter()
            .all(|r| r.header("mongo.snapshot_id").as_deref() == Some(id))
    );
    let starts = records
        .iter()
        .filter(|r| r.header("mongo.operation_type").as_deref() == Some("snapshot_start"))
        .count();
    assert_eq!(
        starts, 3,
        "a resumed snapshot publishes no second snapshot_start"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_copy_longer_than_the_oplog_window_never_loses_its_stream() {
    let Some(_turn) = turn("snapshot").await else {
        return;
    };
    let Some(server) = Instance::mongo("snaplong", &["--oplog-max-entries", "1000"]) else {
        return;
    };
    // GIVEN 3 000 documents on a server keeping 1 000 oplog entries, copied 10 at a time
    let client = server.client().await;
    let db = unique("snaplong");
    let topic = unique("snaplong");
    create_topic(&topic, 1).await;
    let coll = client.database(&db).collection::<Document>("items");
    let ids: Vec<Bson> = (0..3000_i64)
        .map(|i| Bson::Int64(6_000_000_000 + i))
        .collect();
    let name = unique("snaplong");
    // (The writer, not slowed, then writes well over the oplog's 1 000 entries during the
    // copy; it did not always before, on a loaded machine.)
    let text = slowed_copy(&server, &coll, 6_000_000_000, (&name, &topic)).await;
    // WHEN more than the oplog holds is written during the copy
    let bridge = start_bridge(&text).await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // Unpaced: more than the oplog holds must be written while the copy runs.
    let writer = tokio::spawn(write_paced(coll.clone(), ids, stop_rx, None));
    wait_finished(&client, &db, &name, Duration::from_secs(600)).await;
    stop_tx.send(true).unwrap();
    let writes = writer.await.unwrap();
    // THEN the stream never lost its history (no error, no restart), and the mirror holds
    let sentinel = settle(&coll, &topic).await;
    let metrics = get(bridge.metrics_addr(), "/metrics").await.1;
    bridge.shutdown();
    bridge.wait().await.expect("no error stopped the pipeline");
    assert!(
        writes > 1000,
        "only {writes} writes during the copy: the copy was too short"
    );
    assert!(
        !metrics
            .lines()
            .any(|l| l.starts_with("mongo_kafka_bridge_errors_total{") && !l.ends_with(" 0")),
        "{metrics}"
    );
    assert_mirror(&coll, &sentinel).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_lost_re_syncs_by_snapshot_and_the_swept_mirror_forgets_what_was_deleted_meanwhile()
{
    let Some(_turn) = turn("snapshot").await else {
        return;
    };
    let Some(server) = Instance::mongo("snaplost", &["--oplog-max-entries", "1000"]) else {
        return;
    };
    // GIVEN a mirror of 50 documents (initial snapshot), then the bridge stopped
    let client = server.client().await;
    let db = unique("snaplost");
    let topic = unique("snaplost");
    create_topic(&topic, 1).await;
    let coll = client.database(&db).collection::<Document>("items");
    let docs: Vec<Document> = (1..=50_i64)
        .map(|i| doc! { "_id": 8_000_000_000 + i, "v": 0_i64 })
        .collect();
    coll.insert_many(docs).await.unwrap();
    let name = unique("snaplost");
    let lines = snapshot_lines(&topic, "on_history_lost = \"snapshot\"\n");
    let text = server.config(&name, &db, Some("items"), &lines);
    let bridge = start_bridge(&text).await;
    wait_finished(&client, &db, &name, Duration::from_secs(60)).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    // WHEN, while it is stopped, documents are deleted, updated and inserted, and the oplog
    // rolls past its position
    let key = |i: i64| doc! { "_id": 8_000_000_000 + i };
    for i in 1..=10 {
        coll.delete_one(key(i)).await.unwrap();
    }
    for i in 11..=20 {
        coll.update_one(key(i), doc! { "$set": { "v": 1_i64 } })
            .await
            .unwrap();
    }
    coll.insert_one(doc! { "_id": 8_000_000_100_i64, "v": 2_i64 })
        .await
        .unwrap();
    fill_oplog(&client, &db, 1500).await;
    let bridge = start_bridge(&text).await;
    let done = wait_offsets(&client, &db, &name, Duration::from_secs(120), |d| {
        d.get_document("lastSnapshot")
            .is_ok_and(|s| s.get_str("reason") == Ok("history_lost"))
    })
    .await;
    let records = settle(&coll, &topic).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    // THEN a gap marker, a second snapshot, and a swept mirror equal to the collection
    assert!(
        records
            .iter()
            .any(|r| r.header("mongo.operation_type").as_deref() == Some("gap"))
    );
    assert_eq!(
        done.get_document("lastSnapshot").unwrap().get_i64("copied"),
        Ok(41)
    );
    let mirror = swept(&records);
    let docs: Vec<Document> = {
        use futures::TryStreamExt;
        coll.find(doc! {})
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap()
    };
    assert_eq!(
        mirror.len(),
        docs.len(),
        "the sweep leaves exactly the live documents"
    );
    for (key, value) in &mirror {
        let event = RawDocument::from_bytes(value.as_deref().unwrap()).unwrap();
        let full: Document = event
            .get_document("fullDocument")
            .unwrap()
            .try_into()
            .unwrap();
        assert!(
            docs.contains(&full),
            "{}: {full:?}",
            String::from_utf8_lossy(key)
        );
    }
    // AND without the sweep the documents deleted during the lost history would linger
    let compacted = compacted(&records);
    let lingering = compacted.values().filter(|r| r.value.is_some()).count();
    assert_eq!(lingering, docs.len() + 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_frozen_during_a_copy_makes_the_pipeline_not_ready_and_the_copy_finishes() {
    let Some(_turn) = turn("snapshot").await else {
        return;
    };
    let Some(server) = Instance::mongo("snapfrozen", &[]) else {
        return;
    };
    // GIVEN a copy of 3 000 documents, 10 at a time, each `find` 50 ms slower until the thaw
    // (15 s or more: the freeze surely lands in the middle)
    let client = server.client().await;
    let (db, topic, name) = (
        unique("snapfrozen"),
        unique("snapfrozen"),
        unique("snapfrozen"),
    );
    create_topic(&topic, 1).await;
    let coll = client.database(&db).collection::<Document>("items");
    let text = slowed_copy(&server, &coll, 7_000_000_000, (&name, &topic)).await;
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, &name, Duration::from_secs(120), |d| {
        copied(d) >= 50
    })
    .await;
    // WHEN the server is frozen (SIGSTOP) in the middle of the copy
    server.services(&["freeze", "mongo"]);
    let said = not_ready_within(bridge.metrics_addr(), &name, Duration::from_secs(30)).await;
    server.services(&["thaw", "mongo"]);
    fail_point_off(&client).await;
    // THEN /readyz said so, naming the pipeline; after the thaw the copy finishes and the
    // mirror holds
    assert!(
        said.0 != 200 && said.1.contains(&format!("pipeline {name}:")),
        "/readyz on a frozen server: {said:?}"
    );
    wait_finished(&client, &db, &name, Duration::from_secs(300)).await;
    let records = settle(&coll, &topic).await;
    let ready = get(bridge.metrics_addr(), "/readyz").await;
    bridge.shutdown();
    bridge
        .wait()
        .await
        .expect("a freeze does not stop the pipeline");
    assert_eq!(ready.0, 200, "{ready:?}");
    assert_mirror(&coll, &records).await;
}

/// `/readyz` once it answers 503 with "pipeline `name`: no answer from MongoDB", polled until
/// `timeout`; its last answer otherwise.
async fn not_ready_within(
    addr: std::net::SocketAddr,
    name: &str,
    timeout: Duration,
) -> (u16, String) {
    let deadline = std::time::Instant::now() + timeout;
    let reason = format!("pipeline {name}: no answer from MongoDB");
    loop {
        let answer = get(addr, "/readyz").await;
        if (answer.0 != 200 && answer.1.contains(&reason)) || std::time::Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
