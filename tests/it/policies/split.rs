//! C10 and C11, large events (`docs/RELIABILITY.md`): an update the server splits into
//! fragments (`$changeStreamSplitLargeEvent`) is published as one record, positioned at its last
//! fragment's token.

use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongodb::change_stream::ChangeStream;

use crate::common::bridge::start_bridge;
use crate::common::collect::{operation_types, records};
use crate::common::config::{config_toml, with_props};
use crate::common::kafka::create_topic_at;
use crate::common::mongo::{events_committed, first_event_after, mongo, offsets_doc, wait_offsets};
use crate::common::servers::kafka_bootstrap;
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(30);
/// The size of each large field: two make an event over 16 MB.
const MB6: usize = 6 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread")]
async fn c10_c11_a_split_update_is_reassembled_into_one_record() {
    // GIVEN a collection with pre- and post-images, a topic and producer allowing 50 MB
    // records, and a pipeline asking for both images as required
    let (db, name) = (unique("c11"), "c11");
    let topic = format!("{db}.docs");
    create_topic_at(
        &kafka_bootstrap(),
        &topic,
        1,
        &[("max.message.bytes", "50000000")],
    )
    .await;
    let client = mongo().await;
    let database = client.database(&db);
    database
        .run_command(doc! { "create": "docs", "changeStreamPreAndPostImages": { "enabled": true } })
        .await
        .unwrap();
    let extra = "full_document = \"required\"\nfull_document_before_change = \"required\"\n";
    let text = with_props(
        &config_toml(name, &db, Some("docs"), extra),
        &[("message.max.bytes", "50000000")],
    );
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    // (our own stream, to see the fragments the server makes)
    let docs = database.collection::<Document>("docs");
    let witness = docs
        .watch()
        .pipeline([doc! { "$changeStreamSplitLargeEvent": {} }])
        .full_document(mongodb::options::FullDocumentType::Required)
        .full_document_before_change(mongodb::options::FullDocumentBeforeChangeType::Required)
        .max_await_time(Duration::from_millis(200))
        .await
        .unwrap()
        .with_type::<Document>();
    // WHEN a ~6 MB document is inserted and another ~6 MB field is set on it
    docs.insert_one(doc! { "_id": 1, "x": "a".repeat(MB6) })
        .await
        .unwrap();
    docs.update_one(doc! { "_id": 1 }, doc! { "$set": { "y": "b".repeat(MB6) } })
        .await
        .unwrap();
    // THEN the server split the update (2 or more fragments: 3 on SecantusDB)
    let fragments = update_fragments(witness).await;
    // AND the bridge delivered exactly one record for it, with every part of the event
    wait_offsets(&client, &db, name, Duration::from_secs(60), |d| {
        events_committed(d) == 2
    })
    .await;
    let records = records(&topic, 2, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    let ops = operation_types(&records);
    assert_eq!(ops, vec!["insert", "update"]);
    let update = &records[1];
    let value = update.json();
    check_every_part(&value);
    // AND its position is the last fragment's token
    let last = fragments.last().unwrap().get_str("_data").unwrap();
    assert_eq!(update.header("mongo.resume_token"), Some(last));
    assert_eq!(value["_id"]["_data"], last);
    // AND resuming from the committed token yields the next event, not a fragment
    docs.insert_one(doc! { "_id": 2 }).await.unwrap();
    let offsets = offsets_doc(&client, &db, name).await.unwrap();
    let next = first_event_after(&client, &db, "docs", &offsets, true).await;
    assert_eq!(next.get_str("operationType").unwrap(), "insert");
    assert_eq!(
        next.get_document("documentKey").unwrap(),
        &doc! { "_id": 2 }
    );
}

/// The resume tokens of the update's fragments, read from `witness` (its own stream with
/// `$changeStreamSplitLargeEvent`) until the last one; at least 2.
async fn update_fragments(mut witness: ChangeStream<Document>) -> Vec<Document> {
    let mut fragments = Vec::new();
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        let Some(event) = witness.next_if_any().await.unwrap() else {
            continue;
        };
        if event.get_str("operationType") == Ok("update") {
            let split = event.get_document("splitEvent").unwrap().clone();
            let (n, of) = (
                split.get_i32("fragment").unwrap(),
                split.get_i32("of").unwrap(),
            );
            fragments.push(event.get_document("_id").unwrap().clone());
            if n == of {
                assert_eq!(fragments.len(), of as usize);
                break;
            }
        }
    }
    drop(witness);
    assert!(
        fragments.len() >= 2,
        "the update was not split: {}",
        fragments.len()
    );
    fragments
}

/// The record has every part of the event: both images and the update's field, whole, and no
/// fragment marker.
fn check_every_part(value: &serde_json::Value) {
    assert_eq!(value["fullDocument"]["x"].as_str().unwrap().len(), MB6);
    assert_eq!(value["fullDocument"]["y"].as_str().unwrap().len(), MB6);
    assert_eq!(
        value["updateDescription"]["updatedFields"]["y"]
            .as_str()
            .unwrap()
            .len(),
        MB6
    );
    assert_eq!(
        value["fullDocumentBeforeChange"]["x"]
            .as_str()
            .unwrap()
            .len(),
        MB6
    );
    assert!(value["fullDocumentBeforeChange"].get("y").is_none());
    assert!(value.get("splitEvent").is_none(), "fragment marker leaked");
}
