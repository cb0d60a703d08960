//! A copy never finishes short without saying so (README "Initial snapshot", issue 23): `_id`s
//! read out of MongoDB's order stop the copy naming both, a count that disagrees with
//! `countDocuments` beyond the changes seen stops it (or warns), and collections of mixed `_id`
//! types that the server pages consistently are copied whole in batches of 1, 2 and the default.
//!
//! The embedded-document cases expect MongoDB's behaviour on a server whose `_id` index follows
//! MongoDB's comparison order (every document copied), and the failure on one that does not
//! (SecantusDB orders embedded-document `_id`s by their bytes, INFRA.md): the test asks the
//! server which one it is.

use std::time::Duration;

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongo_kafka_bridge::error::report;
use mongo_kafka_bridge::observe::metrics::SNAPSHOT_COUNT_MISMATCH;

use crate::common::bridge::{start_bridge, stops_within};
use crate::common::config::config_toml;
use crate::common::kafka::create_topic;
use crate::common::mirror::{snapshot_lines, wait_finished};
use crate::common::mongo::mongo;
use crate::common::observe::counter;
use crate::common::snapshot::seed;
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(300);
const EMBEDDED: i32 = 750;

/// Inserts `EMBEDDED` documents with `_id: {k, t: "subdoc"}` into `coll`; returns the first
/// two `_id`s (relaxed Extended JSON) that the server's `_id` order puts out of MongoDB's order
/// (k not increasing), `None` when its order is MongoDB's.
async fn embedded_ids(coll: &mongodb::Collection<Document>) -> Option<(String, String)> {
    let docs = (0..EMBEDDED).map(|k| doc! { "_id": { "k": k, "t": "subdoc" } });
    coll.insert_many(docs).await.unwrap();
    // The copy's own query shape (sorted and hinted on `_id`, `src/snapshot/copy.rs`): without
    // the hint SecantusDB sorts them field by field, with it in its index's byte order.
    let sorted: Vec<Document> = coll
        .find(doc! {})
        .sort(doc! { "_id": 1 })
        .hint(mongodb::options::Hint::Keys(doc! { "_id": 1 }))
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(sorted.len(), EMBEDDED as usize);
    let id = |d: &Document| d.get_document("_id").unwrap().clone();
    let k = |d: &Document| id(d).get_i32("k").unwrap();
    let json = |d: &Document| Bson::from(id(d)).into_relaxed_extjson().to_string();
    sorted
        .windows(2)
        .find(|w| k(&w[0]) >= k(&w[1]))
        .map(|w| (json(&w[0]), json(&w[1])))
}

/// Copies a collection of embedded-document `_id`s with `extra` pipeline lines: on a server
/// that orders them as MongoDB does, every document is copied (`None`); on one that does not,
/// the bridge must stop with a fatal error: its text, and the server's first disorder.
async fn copy_embedded(prefix: &str, extra: &str) -> Option<(String, (String, String))> {
    let client = mongo().await;
    let db = unique(prefix);
    let topic = unique(prefix);
    create_topic(&topic, 1).await;
    let coll = client.database(&db).collection::<Document>("items");
    let disorder = embedded_ids(&coll).await;
    let name = unique(prefix);
    let text = config_toml(&name, &db, Some("items"), &snapshot_lines(&topic, extra));
    let bridge = start_bridge(&text).await;
    let Some(pair) = disorder else {
        eprintln!("this server orders embedded-document _ids as MongoDB does: copied whole");
        let done = wait_finished(&client, &db, &name, WAIT).await;
        let copied = done.get_document("lastSnapshot").unwrap().get_i64("copied");
        assert_eq!(copied, Ok(i64::from(EMBEDDED)));
        bridge.shutdown();
        bridge.wait().await.expect("clean stop");
        return None;
    };
    let error = stops_within(bridge, WAIT)
        .await
        .expect_err("a copy that skips documents must stop the bridge");
    assert_eq!(error.kind(), "snapshot_check", "{error:?}");
    let text = report(&error, &[]);
    assert!(text.contains(&format!("the copy of {db}.items")), "{text}");
    assert!(text.contains(&format!("pipeline \"{name}\"")), "{text}");
    // The snapshot is not recorded as finished.
    let offsets = client.database(&format!("{db}_offsets"));
    let stored = offsets.collection::<Document>("offsets");
    let stored = stored.find_one(doc! { "_id": &name }).await.unwrap();
    assert!(
        stored.is_none_or(|d| !d.contains_key("lastSnapshot")),
        "the snapshot must not be recorded as finished"
    );
    Some((text, pair))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ids_out_of_mongodbs_order_stop_the_copy_naming_both() {
    // GIVEN 750 embedded-document _ids, WHEN copied in batches of the default size
    // THEN a server that orders them by bytes makes the copy stop, naming the two _ids
    if let Some((text, (previous, next))) = copy_embedded("ordd", "").await {
        let named = format!("read _id {next} right after _id {previous}");
        assert!(text.contains(&named), "{text}");
        assert!(text.contains("$gt"), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ids_out_of_order_across_batches_of_two_stop_the_copy() {
    // With batches of 2, the disorder shows inside a batch or from the last `_id` of a batch to
    // the first of the next: either way the copy stops, naming the two.
    if let Some((text, _)) = copy_embedded("ord2", "snapshot_batch_size = 2\n").await {
        assert!(text.contains("right after _id {\"k\":"), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_copy_cut_short_in_increasing_order_fails_its_count() {
    // GIVEN batches of 1: each $gt can jump past documents while the _ids read still increase
    // (SecantusDB: k = 0, 256, 512, 513, …), so only the count can see the loss
    if let Some((text, _)) = copy_embedded("ord1", "snapshot_batch_size = 1\n").await {
        let counted = format!("countDocuments(snapshot_filter) found {EMBEDDED}");
        let order = text.contains("right after _id");
        assert!(text.contains(&counted) || order, "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_count_mismatch_only_warns_and_counts_with_warn() {
    // GIVEN snapshot_count_check = "warn" and a copy cut short (batches of 1)
    let client = mongo().await;
    let db = unique("ordw");
    let topic = unique("ordw");
    create_topic(&topic, 1).await;
    let coll = client.database(&db).collection::<Document>("items");
    if embedded_ids(&coll).await.is_none() {
        eprintln!("this server orders embedded-document _ids as MongoDB does: no mismatch");
        return;
    }
    let name = unique("ordw");
    let extra = "snapshot_batch_size = 1\nsnapshot_count_check = \"warn\"\n";
    let text = config_toml(&name, &db, Some("items"), &snapshot_lines(&topic, extra));
    let bridge = start_bridge(&text).await;
    // WHEN it finishes THEN it is recorded as finished, short, and the mismatch is counted
    let done = wait_finished(&client, &db, &name, WAIT).await;
    let last = done.get_document("lastSnapshot").unwrap();
    let copied = last.get_i64("copied").unwrap();
    assert!(copied < i64::from(EMBEDDED), "{copied}");
    let namespace = format!("{db}.items");
    let labels = [("namespace", namespace.as_str())];
    let mismatches = counter(bridge.metrics(), SNAPSHOT_COUNT_MISMATCH, &name, &labels);
    assert_eq!(mismatches, 1.0);
    bridge.shutdown();
    bridge.wait().await.expect("clean stop");
}

/// Copies 120 documents of mixed `_id` types (those the server pages consistently, `seed`) in
/// batches of `batch` (`None`: the default) and checks that every one was copied.
async fn copy_mixed(prefix: &str, batch: Option<u32>) {
    let client = mongo().await;
    let db = unique(prefix);
    let topic = unique(prefix);
    create_topic(&topic, 1).await;
    let coll = client.database(&db).collection::<Document>("items");
    seed(&coll, 120).await;
    // Embedded-document `_id`s have their own tests above: SecantusDB pages them short in
    // small batches (the count check stops such a copy: 105 of 115 read in batches of 1).
    coll.delete_many(doc! { "_id": { "$type": "object" } })
        .await
        .unwrap();
    let expected = coll.count_documents(doc! {}).await.unwrap();
    let name = unique(prefix);
    let extra = batch.map_or_else(String::new, |b| format!("snapshot_batch_size = {b}\n"));
    let text = config_toml(&name, &db, Some("items"), &snapshot_lines(&topic, &extra));
    let bridge = start_bridge(&text).await;
    let done = wait_finished(&client, &db, &name, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.expect("clean stop");
    let copied = done.get_document("lastSnapshot").unwrap().get_i64("copied");
    assert_eq!(copied, Ok(expected as i64), "batch {batch:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "SecantusDB pages one more _id type short in batches of 1 and 2 (the count check stops the copy: 95 of 105 read); run with --ignored against MongoDB"]
async fn mixed_id_types_are_copied_whole_in_batches_of_one() {
    copy_mixed("mix1", Some(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "SecantusDB pages one more _id type short in batches of 1 and 2 (the count check stops the copy: 95 of 105 read); run with --ignored against MongoDB"]
async fn mixed_id_types_are_copied_whole_in_batches_of_two() {
    copy_mixed("mix2", Some(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mixed_id_types_are_copied_whole_in_batches_of_the_default_size() {
    copy_mixed("mixd", None).await;
}
