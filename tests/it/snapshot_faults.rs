//! The snapshot through faults and scopes: `kill -9` during the copy, a copy longer than the
//! oplog window, a re-sync after a real history loss swept by the markers, and a database scope
//! with a filter and parallel copies.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bson::{Bson, Document, RawDocument, doc};
use rand::Rng;

use crate::policies::{APP_NAME, Server, fill_oplog};
use crate::snapshot::{
    assert_mirror, seed, settle, snapshot_lines, wait_finished, write_paced, write_while,
};
use crate::support::*;

/// Copied documents a kill may repeat: the in-flight events, one batch, the source channel.
const REPEAT_BOUND_PER_KILL: usize = 500 + 200 + 256;

fn copied(offsets: &Document) -> i64 {
    offsets
        .get_document("snapshot")
        .ok()
        .and_then(|s| s.get_array("namespaces").ok())
        .and_then(|n| n.first()?.as_document()?.get_i64("copied").ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_kills_during_the_copy_resume_after_the_committed_id_and_the_mirror_holds() {
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
    let Some(server) = Server::mongo("snaplong", &["--oplog-max-entries", "1000"]) else {
        return;
    };
    // GIVEN 3 000 documents on a server keeping 1 000 oplog entries, copied 10 at a time
    let client = server.client().await;
    let db = unique("snaplong");
    let topic = unique("snaplong");
    create_topic(&topic, 1).await;
    let coll = client.database(&db).collection::<Document>("items");
    let docs: Vec<Document> = (0..3000_i64)
        .map(|i| doc! { "_id": 6_000_000_000 + i, "v": 0_i64 })
        .collect();
    coll.insert_many(docs).await.unwrap();
    let ids: Vec<Bson> = (0..3000_i64)
        .map(|i| Bson::Int64(6_000_000_000 + i))
        .collect();
    let name = unique("snaplong");
    let lines = snapshot_lines(&topic, "snapshot_batch_size = 10\n");
    let text = server.config(&name, &db, Some("items"), &lines);
    // Each of the bridge's `find`s (the 300 copy batches) takes 50 ms more: the copy lasts
    // 15 s or more whatever the machine's load (the writer, not slowed, then writes well over
    // the oplog's 1 000 entries; it did not always before, on a loaded machine).
    client
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand", "mode": "alwaysOn",
            "data": { "failCommands": ["find"], "blockConnection": true, "blockTimeMS": 50,
                      "appName": APP_NAME },
        })
        .await
        .unwrap();
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
    let metrics = crate::opsutil::get(bridge.metrics_addr(), "/metrics")
        .await
        .1;
    bridge.shutdown();
    bridge.wait().await.expect("no error stopped the pipeline");
    assert!(
        writes > 1000,
        "only {writes} writes during the copy: the copy was too short"
    );
    assert!(
        !metrics.contains("mongo_kafka_bridge_errors_total{"),
        "{metrics}"
    );
    assert_mirror(&coll, &sentinel).await;
}

/// A consumer following the README's recipe: last record per key, and on a namespace's
/// `snapshot_end` the keys not seen since its `snapshot_start` are dropped.
fn swept(records: &[RawRecord]) -> HashMap<Vec<u8>, Option<Vec<u8>>> {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_lost_re_syncs_by_snapshot_and_the_swept_mirror_forgets_what_was_deleted_meanwhile()
{
    let Some(server) = Server::mongo("snaplost", &["--oplog-max-entries", "1000"]) else {
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
    let compacted = crate::snapshot::compacted(&records);
    let lingering = compacted.values().filter(|r| r.value.is_some()).count();
    assert_eq!(lingering, docs.len() + 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_scope_copies_every_collection_with_the_filter_two_at_a_time() {
    // GIVEN a database of 3 collections of 100 documents, half of them kept by the filter
    let client = mongo().await;
    let db = unique("snapscope");
    for coll in ["a", "b", "c"] {
        create_topic(&format!("{db}.{coll}"), 1).await;
        let docs: Vec<Document> = (0..100_i64)
            .map(|i| doc! { "_id": i + 9_000_000_000, "keep": i % 2 == 0 })
            .collect();
        client
            .database(&db)
            .collection::<Document>(coll)
            .insert_many(docs)
            .await
            .unwrap();
    }
    let name = unique("snapscope");
    let lines = "snapshot = \"initial\"\nfull_document = \"update_lookup\"\nformat = \"bson\"\n\
                 snapshot_parallelism = 2\nsnapshot_batch_size = 10\n\
                 snapshot_filter = '{\"keep\": true}'\n";
    let text = config_toml(&name, &db, None, lines);
    let bridge = start_bridge(&text).await;
    let done = wait_finished(&client, &db, &name, Duration::from_secs(120)).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    // THEN each collection's topic holds its 50 kept documents between its two markers
    assert_eq!(
        done.get_document("lastSnapshot").unwrap().get_i64("copied"),
        Ok(150)
    );
    for coll in ["a", "b", "c"] {
        let records = collect_raw(&format!("{db}.{coll}"), 52, Duration::from_secs(30)).await;
        let ops: Vec<String> = records
            .iter()
            .map(|r| r.header("mongo.operation_type").unwrap_or_default())
            .collect();
        assert_eq!(ops.len(), 52, "{coll}: {ops:?}");
        assert_eq!(ops.first().map(String::as_str), Some("snapshot_start"));
        assert_eq!(ops.last().map(String::as_str), Some("snapshot_end"));
        for r in &records[1..51] {
            let event = RawDocument::from_bytes(r.value.as_deref().unwrap()).unwrap();
            let full = event.get_document("fullDocument").unwrap();
            assert_eq!(full.get_bool("keep"), Ok(true), "{coll}");
            assert_eq!(r.header("mongo.namespace"), Some(format!("{db}.{coll}")));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_collection_renamed_into_the_scope_during_the_copy_is_copied_too() {
    // GIVEN a database scope copying `a` slowly, with `z` planned after it
    let client = mongo().await;
    let db = unique("snapren");
    for (coll, count) in [("a", 2000_i64), ("z", 10)] {
        let docs: Vec<Document> = (0..count)
            .map(|i| doc! { "_id": i + 9_500_000_000 })
            .collect();
        client
            .database(&db)
            .collection::<Document>(coll)
            .insert_many(docs)
            .await
            .unwrap();
    }
    for coll in ["a", "z", "y"] {
        create_topic(&format!("{db}.{coll}"), 1).await;
    }
    let name = unique("snapren");
    let lines = "snapshot = \"initial\"\nfull_document = \"update_lookup\"\nformat = \"bson\"\n\
                 snapshot_parallelism = 1\nsnapshot_batch_size = 10\n";
    let bridge = start_bridge(&config_toml(&name, &db, None, lines)).await;
    wait_offsets(&client, &db, &name, Duration::from_secs(60), |d| {
        copied(d) > 0
    })
    .await;
    // WHEN z is renamed to y while a is copied
    let rename = doc! { "renameCollection": format!("{db}.z"), "to": format!("{db}.y") };
    client.database("admin").run_command(rename).await.unwrap();
    wait_finished(&client, &db, &name, Duration::from_secs(300)).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    // THEN y's 10 documents are copied into its topic, between its markers
    let records = collect_raw(&format!("{db}.y"), 12, Duration::from_secs(30)).await;
    let ops: Vec<String> = records
        .iter()
        .map(|r| r.header("mongo.operation_type").unwrap_or_default())
        .collect();
    assert_eq!(
        ops.iter().filter(|o| *o == "snapshot").count(),
        10,
        "{ops:?}"
    );
    assert_eq!(
        ops.first().map(String::as_str),
        Some("snapshot_start"),
        "{ops:?}"
    );
    assert_eq!(
        ops.last().map(String::as_str),
        Some("snapshot_end"),
        "{ops:?}"
    );
}
