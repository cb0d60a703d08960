//! The snapshot against the shared servers: the compacted view of the topic (last record per
//! key) equals the collection after a copy with concurrent writes, with every `_id` type; the
//! `snapshot` command re-copies while the owner streams; a database scope copies every
//! collection with its filter, and a collection renamed into the scope during the copy.
//!
//! The snapshot under faults (kills during the copy, a copy longer than the oplog window, a
//! re-sync after a history loss) is in the fault binary (`tests/faults/snapshot.rs`). The
//! checks that a copy never finishes short are in `snapshot/checks.rs`; requests that meet in
//! `snapshot/requests.rs`.

mod checks;
mod requests;
mod unusual;

use std::time::Duration;

use bson::{Document, RawDocument, doc};
use mongodb::Client;

use crate::common::bridge::{bridge_cli, start_bridge};
use crate::common::collect::collect_raw;
use crate::common::config::{config_file, config_toml};
use crate::common::kafka::create_topic;
use crate::common::mirror::{
    assert_bracketed, assert_mirror, copied, operation_types, settle, snapshot_lines, wait_finished,
};
use crate::common::mongo::{mongo, wait_offsets};
use crate::common::snapshot::{seed, write_while};
use crate::common::unique;

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
    wait_finished(&client, &db, &name, Duration::from_secs(120)).await;
    // (the request is removed by the write after the finished snapshot's commit)
    let done = wait_offsets(&client, &db, &name, Duration::from_secs(60), |d| {
        !d.contains_key("snapshotRequest")
    })
    .await;
    let records = settle(&coll, &topic).await;
    bridge.shutdown();
    bridge.wait().await.expect("clean stop");
    // THEN every document was copied once, between the markers, and the topic mirrors it
    let last = done.get_document("lastSnapshot").unwrap();
    assert_eq!(last.get_str("reason"), Ok("requested"));
    assert_eq!(last.get_i64("copied"), Ok(300));
    assert!(last.contains_key("requestedAt"), "{last:?}");
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

/// Inserts `docs` into `db.coll`.
async fn insert(client: &Client, db: &str, coll: &str, docs: impl IntoIterator<Item = Document>) {
    let coll = client.database(db).collection::<Document>(coll);
    coll.insert_many(docs).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_scope_copies_every_collection_with_the_filter_two_at_a_time() {
    // GIVEN a database of 3 collections of 100 documents, half of them kept by the filter
    let client = mongo().await;
    let db = unique("snapscope");
    for coll in ["a", "b", "c"] {
        create_topic(&format!("{db}.{coll}"), 1).await;
        let docs = (0..100_i64).map(|i| doc! { "_id": i + 9_000_000_000, "keep": i % 2 == 0 });
        insert(&client, &db, coll, docs).await;
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
        let docs = (0..count).map(|i| doc! { "_id": i + 9_500_000_000 });
        insert(&client, &db, coll, docs).await;
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
    assert_bracketed(&operation_types(&records), 10, "y");
}
