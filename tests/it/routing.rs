//! Routing on the real servers (`[pipelines.routing]`, README "Routing"): topics by namespace
//! glob and regex captures, created by `[kafka.topic_creation]`; topics by a document field
//! with the default topic for what has none; the key from a document field; `check`'s routes.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bson::{Document, doc};

use crate::common::bridge::{bridge_cli, start_opened};
use crate::common::collect::{Received, collect, records};
use crate::common::config::{config_file, config_toml};
use crate::common::kafka::{create_topic, partitions_of};
use crate::common::mongo::mongo;
use crate::common::servers::kafka_bootstrap;
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(60);

/// `[kafka.topic_creation]` with 3 partitions, to end a `config_toml` pipeline's extra lines.
const CREATION: &str = "[kafka.topic_creation]\nenabled = true\npartitions = 3\n";

#[tokio::test(flavor = "multi_thread")]
async fn namespace_globs_and_regex_captures_name_topics_the_bridge_creates() {
    // GIVEN a database pipeline routing orders_* by a glob and archive_YYYY by a regex's
    // captures, the rest to the usual <db>.<coll>, with topic creation on
    let db = unique("route_ns");
    let routing = format!(
        "[pipelines.routing]\n\
         [[pipelines.routing.namespaces]]\nglob = \"{db}.orders_*\"\ntopic = \"${{db}}.o.${{coll}}\"\n\
         [[pipelines.routing.namespaces]]\nregex = '(\\w+)\\.archive_(\\d{{4}})'\n\
         topic = \"${{1}}.archive.y${{2}}\"\n{CREATION}"
    );
    let text = config_toml("routens", &db, None, &routing);
    let bridge = start_opened(&text, &db, "routens").await;
    // WHEN documents are written to four collections
    let client = mongo().await;
    for (coll, id) in [
        ("orders_eu", 1),
        ("orders_us", 2),
        ("archive_2024", 3),
        ("carts", 4),
    ] {
        let c = client.database(&db).collection::<Document>(coll);
        c.insert_one(doc! { "_id": id }).await.unwrap();
    }
    // THEN each went to its routed topic, created with the configured partitions
    let expected = [
        (format!("{db}.o.orders_eu"), 1),
        (format!("{db}.o.orders_us"), 2),
        (format!("{db}.archive.y2024"), 3),
        (format!("{db}.carts"), 4),
    ];
    for (topic, id) in &expected {
        let got = collect(topic, 1, WAIT).await;
        assert_eq!(got.len(), 1, "{topic}: {got:?}");
        assert_eq!(got[0].json()["documentKey"]["_id"], *id, "{topic}");
        assert_eq!(partitions_of(&kafka_bootstrap(), topic), 3, "{topic}");
    }
    bridge.shutdown();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_field_routes_each_document_and_the_default_topic_takes_the_rest() {
    // GIVEN a collection pipeline routing by fullDocument.region, with a default topic
    let db = unique("route_field");
    let routing = format!(
        "full_document = \"update_lookup\"\n[pipelines.routing]\n\
         topic = \"{db}.by.${{fullDocument.region}}\"\ndefault_topic = \"{db}.unrouted\"\n{CREATION}"
    );
    let text = config_toml("routefield", &db, Some("orders"), &routing);
    let bridge = start_opened(&text, &db, "routefield").await;
    // WHEN documents of two regions and one without a region are written, one updated (the
    // lookup finds its region) and one deleted (no full document)
    let coll = mongo().await.database(&db).collection::<Document>("orders");
    coll.insert_one(doc! { "_id": 1, "region": "eu" })
        .await
        .unwrap();
    coll.insert_one(doc! { "_id": 2, "region": "us" })
        .await
        .unwrap();
    coll.insert_one(doc! { "_id": 3 }).await.unwrap();
    coll.update_one(doc! { "_id": 1 }, doc! { "$set": { "n": 1 } })
        .await
        .unwrap();
    coll.delete_one(doc! { "_id": 2 }).await.unwrap();
    // THEN the region topics hold their documents' inserts and updates, and the default topic
    // the document without a region and the delete (with its tombstone)
    let ops = |records: &[Received]| -> Vec<(String, i64)> {
        records
            .iter()
            .map(|r| {
                let op = r.header("mongo.operation_type").unwrap().to_owned();
                let key: serde_json::Value =
                    serde_json::from_str(r.key.as_deref().unwrap()).unwrap();
                let id = key["_id"]["$numberInt"].as_str().unwrap().parse().unwrap();
                (op, id)
            })
            .collect()
    };
    let eu = records(&format!("{db}.by.eu"), 2, WAIT).await;
    assert_eq!(ops(&eu), [("insert".into(), 1), ("update".into(), 1)]);
    let us = records(&format!("{db}.by.us"), 1, WAIT).await;
    assert_eq!(ops(&us), [("insert".into(), 2)]);
    let rest = records(&format!("{db}.unrouted"), 3, WAIT).await;
    let mut got = ops(&rest);
    got.sort();
    assert_eq!(
        got,
        [
            ("delete".into(), 2),
            ("delete".into(), 2),
            ("insert".into(), 3)
        ]
    );
    let deletes: Vec<&Received> = rest
        .iter()
        .filter(|r| r.key.as_deref().is_some_and(|k| k.contains("\"2\"")))
        .collect();
    assert!(
        deletes[0].value.is_some() && deletes[1].value.is_none(),
        "the delete, then its tombstone"
    );
    bridge.shutdown();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_key_field_keys_a_customers_documents_onto_one_partition() {
    // GIVEN a pipeline keyed by fullDocument.customerId on a topic of 4 partitions
    let db = unique("route_key");
    let topic = format!("{db}.orders");
    create_topic(&topic, 4).await;
    let extra = "full_document = \"update_lookup\"\ntombstones = false\n[pipelines.routing]\n\
                 key_field = \"fullDocument.customerId\"\n";
    let text = config_toml("routekey", &db, Some("orders"), extra);
    let bridge = start_opened(&text, &db, "routekey").await;
    // WHEN 24 orders of 3 customers are inserted and updated, and one is deleted
    let coll = mongo().await.database(&db).collection::<Document>("orders");
    for id in 0..24 {
        let customer = format!("c{}", id % 3);
        coll.insert_one(doc! { "_id": id, "customerId": customer })
            .await
            .unwrap();
    }
    for id in 0..24 {
        coll.update_one(doc! { "_id": id }, doc! { "$set": { "paid": true } })
            .await
            .unwrap();
    }
    coll.delete_one(doc! { "_id": 0 }).await.unwrap();
    // THEN every insert and update is keyed by its customer, each customer's on one
    // partition, in write order; the delete (no full document, no pre-image) keeps its
    // documentKey key
    let got = records(&topic, 49, WAIT).await;
    assert_eq!(got.len(), 49, "{got:?}");
    let mut partitions: HashMap<String, HashSet<i32>> = HashMap::new();
    for r in got
        .iter()
        .filter(|r| r.header("mongo.operation_type") != Some("delete"))
    {
        let key = r.key.clone().unwrap();
        let customer = r.json()["fullDocument"]["customerId"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(key, format!("{{\"customerId\":\"{customer}\"}}"));
        partitions.entry(key).or_default().insert(r.partition);
    }
    assert_eq!(partitions.len(), 3, "{partitions:?}");
    assert!(partitions.values().all(|p| p.len() == 1), "{partitions:?}");
    let delete: Vec<&Received> = got
        .iter()
        .filter(|r| r.header("mongo.operation_type") == Some("delete"))
        .collect();
    assert_eq!(delete.len(), 1);
    assert_eq!(
        delete[0].key.as_deref(),
        Some(r#"{"_id":{"$numberInt":"0"}}"#)
    );
    bridge.shutdown();
}

#[test]
fn check_shows_the_routes_and_warns_of_a_mutable_key_field() {
    // GIVEN a routed pipeline keyed by a field outside documentKey, with heartbeats
    let db = unique("route_chk");
    let routing = format!(
        "tombstones = false\nfull_document = \"update_lookup\"\nheartbeat_interval_ms = 5000\n\
         heartbeat_topic = \"{db}.hb\"\n[pipelines.routing]\n\
         topic = \"{db}.by.${{fullDocument.region}}\"\ndefault_topic = \"{db}.unrouted\"\n\
         key_field = \"fullDocument.customerId\"\n\
         [[pipelines.routing.namespaces]]\nglob = \"{db}.orders_*\"\ntopic = \"{db}.o\"\n{CREATION}"
    );
    let file = config_file(&config_toml("routechk", &db, None, &routing));
    // WHEN check runs
    let (code, out, err) = bridge_cli(&["check"], file.path());
    // THEN it lists the routes in order and the key, each literal topic's state and the
    // heartbeat topic's, and warns that the key field can reorder a document's events
    assert_eq!(code, Some(0), "{out}\n{err}");
    let routes = out
        .lines()
        .find(|l| l.contains("pipeline routechk: routes:"))
        .unwrap_or_else(|| panic!("no routes line:\n{out}"));
    assert!(
        routes.contains(&format!("glob '{db}.orders_*' → \"{db}.o\""))
            && routes.contains(&format!(
                "every other namespace → \"{db}.by.${{fullDocument.region}}\""
            ))
            && routes.contains(&format!("→ \"{db}.unrouted\""))
            && routes.contains("key: fullDocument.customerId"),
        "{routes}"
    );
    for topic in [format!("{db}.o"), format!("{db}.unrouted")] {
        assert!(
            out.contains(&format!(
                "routed topic {topic:?} does not exist yet; the bridge creates it"
            )),
            "{out}"
        );
    }
    assert!(
        out.contains(&format!(
            "pipeline routechk: heartbeat topic \"{db}.hb\" (every 5000 ms) does not exist yet; \
             the bridge creates it"
        )),
        "{out}"
    );
    let warning = out
        .lines()
        .find(|l| l.starts_with('⚠') && l.contains("routing.key_field"))
        .unwrap_or_else(|| panic!("no key_field warning:\n{out}"));
    assert!(warning.contains("out of order"), "{warning}");
}
