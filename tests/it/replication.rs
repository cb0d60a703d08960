//! End to end through real servers: record format per operation type, per-document order across
//! partitions, and the real sample documents read back byte for byte.

use std::time::Duration;

use bson::doc;
use mongo_kafka_bridge::observe::metrics::POOL_ENCODED;

use crate::common::bridge::{bridge_on, start_opened};
use crate::common::collect::{by_key, collect, operation_types};
use crate::common::config::config_toml;
use crate::common::kafka::create_topic;
use crate::common::mongo::mongo;
use crate::common::observe::counter;
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread")]
async fn every_crud_operation_gives_the_documented_records() {
    // GIVEN a bridge on db.orders, canonical JSON, whole change events, tombstones on
    let db = unique("crud");
    let topic = format!("{db}.orders");
    create_topic(&topic, 3).await;
    let bridge = bridge_on(
        "crud",
        &db,
        "orders",
        "json = \"canonical\"\nfull_document = \"update_lookup\"\n",
    )
    .await;
    let coll = mongo()
        .await
        .database(&db)
        .collection::<bson::Document>("orders");
    // WHEN one document is inserted, updated, replaced and deleted
    coll.insert_one(doc! { "_id": 1, "s": "a" }).await.unwrap();
    coll.update_one(doc! { "_id": 1 }, doc! { "$set": { "s": "b" } })
        .await
        .unwrap();
    // `updateLookup` reads the document when the bridge reads the update event, not as it was at
    // the update (https://www.mongodb.com/docs/manual/changeStreams/#lookup-full-document-for-update-operations):
    // wait for the update's record before the replace, so its post-image is exactly "b".
    assert_eq!(collect(&topic, 2, WAIT).await.len(), 2);
    coll.replace_one(doc! { "_id": 1 }, doc! { "s": "c" })
        .await
        .unwrap();
    coll.delete_one(doc! { "_id": 1 }).await.unwrap();
    // THEN five records arrive in order on one partition with the same key
    let records = collect(&topic, 5, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    assert_eq!(records.len(), 5, "{records:#?}");
    let key = r#"{"_id":{"$numberInt":"1"}}"#;
    assert!(
        records
            .iter()
            .all(|r| r.key.as_deref() == Some(key) && r.partition == records[0].partition)
    );
    let ops = operation_types(&records);
    assert_eq!(ops, ["insert", "update", "replace", "delete", "delete"]);
    assert_eq!(records[4].value, None, "the tombstone has a null value");
    let insert = records[0].json();
    assert_eq!(
        insert["fullDocument"].to_string(),
        r#"{"_id":{"$numberInt":"1"},"s":"a"}"#
    );
    assert_eq!(insert["documentKey"].to_string(), key);
    assert_eq!(
        insert["ns"].to_string(),
        format!(r#"{{"db":"{db}","coll":"orders"}}"#)
    );
    assert_eq!(records[1].json()["fullDocument"]["s"], "b");
    assert_eq!(
        records[1].json()["updateDescription"]["updatedFields"].to_string(),
        r#"{"s":"b"}"#
    );
    assert_eq!(
        records[2].json()["fullDocument"].to_string(),
        r#"{"_id":{"$numberInt":"1"},"s":"c"}"#
    );
    for r in &records[..4] {
        let v = r.json();
        assert_eq!(
            r.header("mongo.namespace"),
            Some(format!("{db}.orders").as_str())
        );
        assert_eq!(r.header("mongo.pipeline"), Some("crud"));
        assert_eq!(r.header("mongo.resume_token"), v["_id"]["_data"].as_str());
        let ts = &v["clusterTime"]["$timestamp"];
        assert_eq!(
            r.header("mongo.cluster_time"),
            Some(format!("{}.{}", ts["t"], ts["i"]).as_str())
        );
        assert!(r.header("mongo.txn_number").is_none());
    }
    assert_eq!(
        records[3].headers, records[4].headers,
        "the tombstone repeats the delete's headers"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn drop_and_invalidate_are_published_and_a_recreated_collection_is_picked_up() {
    // GIVEN a bridge on db.orders writing to one topic
    let db = unique("drop");
    let topic = format!("{db}-cdc");
    create_topic(&topic, 1).await;
    let extra = format!("topic = \"{topic}\"\njson = \"canonical\"\n");
    let bridge = bridge_on("drop", &db, "orders", &extra).await;
    let coll = mongo()
        .await
        .database(&db)
        .collection::<bson::Document>("orders");
    // WHEN a document is inserted, the collection dropped, and a document inserted again
    coll.insert_one(doc! { "_id": 1 }).await.unwrap();
    coll.drop().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    coll.insert_one(doc! { "_id": 2 }).await.unwrap();
    // THEN insert, drop, invalidate and the second insert arrive; drop/invalidate keyed by ns
    let records = collect(&topic, 4, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    let ops = operation_types(&records);
    assert_eq!(
        ops,
        ["insert", "drop", "invalidate", "insert"],
        "{records:#?}"
    );
    let ns_key = format!(r#"{{"db":"{db}","coll":"orders"}}"#);
    assert_eq!(records[1].key.as_deref(), Some(ns_key.as_str()));
    assert_eq!(
        records[3].key.as_deref(),
        Some(r#"{"_id":{"$numberInt":"2"}}"#)
    );
    let invalidate_key = records[2].key.as_deref().unwrap();
    assert!(
        invalidate_key == ns_key || invalidate_key == r#"{"pipeline":"drop"}"#,
        "{invalidate_key}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn per_document_order_holds_across_three_partitions() {
    per_document_order("order", 150, 12, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn per_document_order_holds_when_large_events_are_encoded_on_the_pool() {
    // With `encode_threads = 2`, every other round's events are over `encode_offload_min_bytes`
    // (8 KiB): they are encoded on the encode pool while the small ones between them are
    // encoded by the relay.
    per_document_order("pool", 40, 10, 12_000).await;
}

/// `keys` documents on a 3-partition topic, each updated `rounds` times interleaved across
/// documents; with `blob` > 0, every odd round also sets a string of `blob` bytes, and the
/// bridge runs an encode pool (`encode_threads = 2`).
async fn per_document_order(name: &str, keys: i64, rounds: i64, blob: usize) {
    // GIVEN a 3-partition topic and `keys` documents
    let db = unique(name);
    let topic = format!("{db}.items");
    create_topic(&topic, 3).await;
    let mut text = config_toml(name, &db, Some("items"), "");
    if blob > 0 {
        text = text.replace("[bridge]\n", "[bridge]\nencode_threads = 2\n");
        assert!(text.contains("encode_threads = 2"), "{text}");
    }
    let bridge = start_opened(&text, &db, name).await;
    let coll = mongo()
        .await
        .database(&db)
        .collection::<bson::Document>("items");
    coll.insert_many((0..keys).map(|k| doc! { "_id": k, "v": 0 }))
        .await
        .unwrap();
    // WHEN every document is updated `rounds` times, interleaved across documents
    for round in 1..=rounds {
        let mut set = doc! { "v": round };
        if blob > 0 && round % 2 == 1 {
            set.insert("blob", "x".repeat(blob));
        }
        for k in 0..keys {
            coll.update_one(doc! { "_id": k }, doc! { "$set": set.clone() })
                .await
                .unwrap();
        }
    }
    // THEN each key's records sit on one partition with v = 0, 1, …, rounds in order
    let total = (keys * (rounds + 1)) as usize;
    let records = collect(&topic, total, Duration::from_secs(120)).await;
    let pooled = counter(bridge.metrics(), POOL_ENCODED, name, &[]);
    bridge.shutdown();
    bridge.wait().await.unwrap();
    assert_eq!(records.len(), total);
    if blob > 0 {
        // the large rounds' updates went through the pool (one encoder may be busy when
        // another large event arrives: the relay then encodes that one itself)
        assert!(pooled >= 1.0, "no event was encoded on the pool");
    } else {
        assert_eq!(pooled, 0.0, "no pool configured");
    }
    let groups = by_key(&records);
    assert_eq!(groups.len(), keys as usize);
    let partitions: std::collections::HashSet<i32> = records.iter().map(|r| r.partition).collect();
    assert_eq!(partitions.len(), 3, "keys spread over every partition");
    for (key, group) in groups {
        assert!(
            group.iter().all(|r| r.partition == group[0].partition),
            "{key}"
        );
        let seen: Vec<i64> = group
            .iter()
            .map(|r| {
                let v = r.json();
                let v = if v["operationType"] == "insert" {
                    &v["fullDocument"]["v"]
                } else {
                    &v["updateDescription"]["updatedFields"]["v"]
                };
                v.as_i64().unwrap()
            })
            .collect();
        assert_eq!(seen, (0..=rounds).collect::<Vec<_>>(), "{key}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sample_documents_read_back_byte_for_byte_in_canonical_mode() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/sample");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!(
            "skipped: {} is absent (only CI and developers have it)",
            dir.display()
        );
        return;
    };
    let mut lines = Vec::new();
    for entry in entries {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        lines.extend(
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_owned),
        );
    }
    // GIVEN a bridge publishing fullDocument only, canonical
    let db = unique("sample");
    let topic = format!("{db}.docs");
    create_topic(&topic, 3).await;
    let bridge = bridge_on(
        "sample",
        &db,
        "docs",
        "json = \"canonical\"\nvalue = \"document\"\nfull_document = \"update_lookup\"\n",
    )
    .await;
    // WHEN every sample line is inserted
    let docs: Vec<bson::Document> = lines
        .iter()
        .map(|l| {
            match bson::Bson::try_from(serde_json::from_str::<serde_json::Value>(l).unwrap())
                .unwrap()
            {
                bson::Bson::Document(d) => d,
                other => panic!("not a document: {other:?}"),
            }
        })
        .collect();
    let coll = mongo()
        .await
        .database(&db)
        .collection::<bson::Document>("docs");
    for chunk in docs.chunks(500) {
        coll.insert_many(chunk.to_vec()).await.unwrap();
    }
    // THEN each record's value is exactly the input line
    let records = collect(&topic, lines.len(), Duration::from_secs(120)).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    assert_eq!(records.len(), lines.len());
    let mut expected: Vec<&str> = lines.iter().map(String::as_str).collect();
    let mut got: Vec<&str> = records
        .iter()
        .map(|r| r.value.as_deref().unwrap())
        .collect();
    expected.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn events_of_a_transaction_carry_txn_number_and_lsid_headers() {
    // GIVEN a bridge on db.orders
    let db = unique("txn");
    let topic = format!("{db}.orders");
    create_topic(&topic, 1).await;
    let bridge = bridge_on("txn", &db, "orders", "").await;
    let client = mongo().await;
    let coll = client.database(&db).collection::<bson::Document>("orders");
    coll.insert_one(doc! { "_id": 0 }).await.unwrap();
    // WHEN two documents are inserted in one transaction
    let mut session = client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    coll.insert_one(doc! { "_id": 1 })
        .session(&mut session)
        .await
        .unwrap();
    coll.insert_one(doc! { "_id": 2 })
        .session(&mut session)
        .await
        .unwrap();
    session.commit_transaction().await.unwrap();
    // THEN both records carry the same txn number and lsid, and the plain insert neither
    let records = collect(&topic, 3, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    assert_eq!(records.len(), 3);
    assert_eq!(records[0].header("mongo.txn_number"), None);
    assert_eq!(records[0].header("mongo.lsid"), None);
    let value = records[1].json();
    let txn = value["txnNumber"].as_i64().unwrap().to_string();
    assert_eq!(records[1].header("mongo.txn_number"), Some(txn.as_str()));
    assert_eq!(records[2].header("mongo.txn_number"), Some(txn.as_str()));
    let lsid = records[1].header("mongo.lsid").unwrap();
    assert!(lsid.starts_with(r#"{"id":{"$binary":{"base64":"#), "{lsid}");
    assert_eq!(records[2].header("mongo.lsid"), Some(lsid));
}
