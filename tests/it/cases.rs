//! Cases from users' reports (`../shared/cases/CASES.md`) that concern the core bridge.

use std::time::Duration;

use bson::{Bson, doc, oid::ObjectId};

use crate::common::bridge::{bridge_on, start_bridge};
use crate::common::collect::{by_key, collect};
use crate::common::config::config_toml;
use crate::common::kafka::create_topic;
use crate::common::mongo::{mongo, offsets_doc, wait_offsets};
use crate::common::servers::kafka_bootstrap;
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread")]
async fn c02_a_filtered_stream_keeps_its_committed_token_fresh() {
    // GIVEN a bridge on db.orders that publishes deletes only, with its first token committed
    let db = unique("c02");
    let topic = format!("{db}.orders");
    create_topic(&topic, 1).await;
    let extra = "pipeline = '[{\"$match\": {\"operationType\": \"delete\"}}]'\n";
    let bridge = bridge_on("c02", &db, "orders", extra).await;
    let client = mongo().await;
    let t1 = offsets_doc(&client, &db, "c02").await.unwrap();
    // WHEN only filtered-out inserts and writes to an unwatched collection happen
    let database = client.database(&db);
    for i in 0..200 {
        database
            .collection::<bson::Document>("orders")
            .insert_one(doc! { "_id": i })
            .await
            .unwrap();
        database
            .collection::<bson::Document>("audit")
            .insert_one(doc! { "i": i })
            .await
            .unwrap();
    }
    // THEN within 3 s the committed token moved past T1, and nothing was published
    let moved = wait_offsets(&client, &db, "c02", Duration::from_secs(3), |d| {
        d.get("resumeToken") != t1.get("resumeToken")
    })
    .await;
    assert_eq!(moved.get_i64("eventsCommitted").unwrap(), 0);
    let records = collect(&topic, 1, Duration::from_secs(2)).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    assert!(records.is_empty(), "{records:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn c03_nothing_is_committed_past_undelivered_events() {
    // GIVEN a bridge whose Kafka cannot be reached, so nothing is ever delivered
    let db = unique("c03");
    let topic = format!("{db}.orders");
    let dead =
        config_toml("c03", &db, Some("orders"), "").replace(&kafka_bootstrap(), "127.0.0.1:1");
    let bridge = start_bridge(&dead).await;
    let client = mongo().await;
    wait_offsets(&client, &db, "c03", WAIT, |d| d.contains_key("resumeToken")).await;
    // WHEN 500 inserts are read and later writes elsewhere advance the post-batch token
    let coll = client.database(&db).collection::<bson::Document>("orders");
    coll.insert_many((1..=500).map(|i| doc! { "_id": i }))
        .await
        .unwrap();
    for i in 0..20 {
        client
            .database(&db)
            .collection::<bson::Document>("other")
            .insert_one(doc! { "i": i })
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // THEN the committed token is still before the first insert: resuming from it yields it
    let during = offsets_doc(&client, &db, "c03").await.unwrap();
    assert_eq!(during.get_i64("eventsCommitted").unwrap(), 0);
    let token: mongodb::change_stream::event::ResumeToken = bson::from_bson(Bson::Document(
        doc! { "t": during.get_document("resumeToken").unwrap() },
    ))
    .map(|w: TokenHolder| w.t)
    .unwrap();
    let mut stream = coll.watch().start_after(token).await.unwrap();
    let first = futures::StreamExt::next(&mut stream)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.document_key, Some(doc! { "_id": 1 }));
    drop(stream);
    drop(bridge); // abandon it like a crash: nothing more is committed by it
    // WHEN a bridge with a reachable Kafka takes over
    create_topic(&topic, 2).await;
    let good = start_bridge(&config_toml("c03", &db, Some("orders"), "")).await;
    // THEN all 500 keys arrive, in increasing _id order within each partition
    let records = collect(&topic, 500, Duration::from_secs(60)).await;
    good.shutdown();
    let _ = good.wait().await;
    assert_eq!(records.len(), 500);
    for p in 0..2 {
        let ids: Vec<i64> = records
            .iter()
            .filter(|r| r.partition == p)
            .map(|r| r.json()["documentKey"]["_id"].as_i64().unwrap())
            .collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "partition {p} out of order"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn c14_deletes_keep_the_document_key_and_are_followed_by_a_tombstone() {
    for (value, expected) in [("change_event", 4usize), ("document", 3)] {
        // GIVEN a bridge in `value` mode with tombstones on
        let db = unique("c14");
        let topic = format!("{db}.customers");
        create_topic(&topic, 3).await;
        let extra = format!("value = \"{value}\"\nfull_document = \"update_lookup\"\n");
        let bridge = bridge_on("c14", &db, "customers", &extra).await;
        let coll = mongo()
            .await
            .database(&db)
            .collection::<bson::Document>("customers");
        let id = ObjectId::parse_str("65a1b2c3d4e5f60718293a4b").unwrap();
        // WHEN a customer is inserted, updated and deleted
        coll.insert_one(doc! { "_id": id, "email": "a@example.test" })
            .await
            .unwrap();
        coll.update_one(
            doc! { "_id": id },
            doc! { "$set": { "email": "b@example.test" } },
        )
        .await
        .unwrap();
        // `updateLookup` reads the document when the bridge reads the update event: wait for the
        // update's record before the delete, or its post-image may already be gone (null).
        assert_eq!(collect(&topic, 2, WAIT).await.len(), 2);
        coll.delete_one(doc! { "_id": id }).await.unwrap();
        // THEN every record has the document's key, on one partition, and the last is null
        let records = collect(&topic, expected, WAIT).await;
        bridge.shutdown();
        bridge.wait().await.unwrap();
        assert_eq!(records.len(), expected, "{value}: {records:#?}");
        let key = r#"{"_id":{"$oid":"65a1b2c3d4e5f60718293a4b"}}"#;
        assert!(
            records
                .iter()
                .all(|r| r.key.as_deref() == Some(key) && r.partition == records[0].partition)
        );
        assert_eq!(records.last().unwrap().value, None);
        if value == "change_event" {
            let delete = records[2].json();
            assert_eq!(delete["operationType"], "delete");
            assert_eq!(
                delete["documentKey"].to_string(),
                r#"{"_id":{"$oid":"65a1b2c3d4e5f60718293a4b"}}"#
            );
        } else {
            assert_eq!(records[1].json()["email"], "b@example.test");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn c18_decimals_and_integers_survive_exactly_in_both_json_modes() {
    for json in ["canonical", "relaxed"] {
        let db = unique("c18");
        let topic = format!("{db}.orders");
        create_topic(&topic, 1).await;
        let bridge = bridge_on("c18", &db, "orders", &format!("json = \"{json}\"\n")).await;
        let coll = mongo()
            .await
            .database(&db)
            .collection::<bson::Document>("orders");
        let dec = |s: &str| Bson::Decimal128(s.parse().unwrap());
        coll.insert_one(doc! {
            "_id": 104, "price": dec("75.25"), "big": dec("12345678901234567890.123456789"),
            "negz": dec("-0"), "dnan": dec("NaN"), "q": 3_i32, "n": 9007199254740993_i64, "d": 1.5,
        })
        .await
        .unwrap();
        let records = collect(&topic, 1, WAIT).await;
        bridge.shutdown();
        bridge.wait().await.unwrap();
        let value = records[0].value.clone().unwrap();
        assert_eq!(
            records[0].key.as_deref(),
            Some(r#"{"_id":{"$numberInt":"104"}}"#)
        );
        for part in [
            r#""price":{"$numberDecimal":"75.25"}"#,
            r#""big":{"$numberDecimal":"12345678901234567890.123456789"}"#,
            r#""negz":{"$numberDecimal":"-0"}"#,
            r#""dnan":{"$numberDecimal":"NaN"}"#,
        ] {
            assert!(value.contains(part), "{json}: {part} not in {value}");
        }
        let exact = if json == "canonical" {
            [
                r#""q":{"$numberInt":"3"}"#,
                r#""n":{"$numberLong":"9007199254740993"}"#,
                r#""d":{"$numberDouble":"1.5"}"#,
            ]
        } else {
            [r#""q":3"#, r#""n":9007199254740993"#, r#""d":1.5"#]
        };
        for part in exact {
            assert!(value.contains(part), "{json}: {part} not in {value}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn c20_keys_preserve_type_and_field_order_of_every_id_kind() {
    // GIVEN a bridge and eight documents with different _id kinds
    let db = unique("c20");
    let topic = format!("{db}.c");
    create_topic(&topic, 3).await;
    let bridge = bridge_on("c20", &db, "c", "").await;
    let coll = mongo()
        .await
        .database(&db)
        .collection::<bson::Document>("c");
    let date = bson::DateTime::from_millis(1704164645000);
    coll.insert_many([
        doc! { "_id": "abc" },
        doc! { "_id": 1004 },
        doc! { "_id": { "company": "ACME", "dept": "Purchasing" } },
        doc! { "_id": { "dept": "Purchasing", "company": "ACME" } },
        doc! { "_id": ObjectId::parse_str("547d9b40e62048750f25ef77").unwrap() },
        doc! { "_id": 2.5 },
        doc! { "_id": date },
        doc! { "_id": Bson::Null },
    ])
    .await
    .unwrap();
    // WHEN all of them are updated
    coll.update_many(doc! {}, doc! { "$set": { "touched": true } })
        .await
        .unwrap();
    // THEN inserts and updates of each document have the same exact key
    let records = collect(&topic, 16, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    let expected = [
        r#"{"_id":"abc"}"#,
        r#"{"_id":{"$numberInt":"1004"}}"#,
        r#"{"_id":{"company":"ACME","dept":"Purchasing"}}"#,
        r#"{"_id":{"dept":"Purchasing","company":"ACME"}}"#,
        r#"{"_id":{"$oid":"547d9b40e62048750f25ef77"}}"#,
        r#"{"_id":{"$numberDouble":"2.5"}}"#,
        r#"{"_id":{"$date":{"$numberLong":"1704164645000"}}}"#,
        r#"{"_id":null}"#,
    ];
    let groups = by_key(&records);
    assert_eq!(groups.len(), 8, "{:?}", groups.keys());
    for key in expected {
        let group = &groups[key];
        let ops: Vec<_> = group
            .iter()
            .map(|r| r.header("mongo.operation_type").unwrap())
            .collect();
        assert_eq!(ops, ["insert", "update"], "{key}");
    }
}

#[derive(serde::Deserialize)]
struct TokenHolder {
    t: mongodb::change_stream::event::ResumeToken,
}
