//! Events Debezium does not capture, in the Debezium form (README "The Debezium form"): a
//! collection dropped (its `drop` and the stream's `invalidate`) and re-created gets no record,
//! the stream reopens, and the topic holds only Debezium's records, which a consumer written for
//! Debezium reads.

use bson::{Document, doc};

use super::WAIT;
use super::moving::read_through;
use crate::common::bridge::start_bridge;
use crate::common::config::config_toml;
use crate::common::kafka::create_topic;
use crate::common::mongo::{mongo, wait_offsets};
use crate::common::unique;

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_collection_writes_no_record_and_the_stream_goes_on() {
    // GIVEN a pipeline in the Debezium form on a collection
    let (db, prefix) = (unique("dbzu"), unique("dbzu"));
    let topic = format!("{prefix}.{db}.c");
    create_topic(&topic, 1).await;
    let client = mongo().await;
    let extra =
        format!("value = \"debezium\"\n[pipelines.debezium]\ntopic_prefix = \"{prefix}\"\n");
    let bridge = start_bridge(&config_toml("dbzu", &db, Some("c"), &extra)).await;
    wait_offsets(&client, &db, "dbzu", WAIT, |d| {
        d.contains_key("resumeToken")
    })
    .await;
    let coll = client.database(&db).collection::<Document>("c");
    coll.insert_one(doc! { "_id": 1 }).await.unwrap();
    // WHEN the collection is dropped, then written again
    coll.drop().await.unwrap();
    coll.insert_one(doc! { "_id": 2 }).await.unwrap();
    // THEN the topic holds the two inserts, as Debezium's records, and nothing else
    let records = read_through(&topic, "{\"id\":\"2\"}").await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    let keys: Vec<&[u8]> = records.iter().map(|r| r.key.as_deref().unwrap()).collect();
    assert_eq!(keys, [b"{\"id\":\"1\"}".as_slice(), b"{\"id\":\"2\"}"]);
    for r in &records {
        let value: serde_json::Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
        assert_eq!(value["op"], "c");
        assert_eq!(value["source"]["connector"], "mongodb");
        assert_eq!(r.header("mongo.format").as_deref(), Some("debezium-json"));
    }
}
