//! Routing of raw change events as MongoDB sends them: topics by namespace pattern and by
//! field, the default topic, and keys from a field.

use bson::{RawDocument, RawDocumentBuf, rawdoc};

use crate::config::Config;
use crate::encode::RecordEncoder;

fn encoder(pipeline: &str) -> RecordEncoder {
    let text = format!(
        "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
         topic_prefix = \"cdc.\"\n[[pipelines]]\nname = \"p\"\n{pipeline}"
    );
    let config = Config::from_toml(&text, std::iter::empty()).expect("valid config");
    RecordEncoder::new(&config.pipelines[0], &config.kafka.topic_prefix)
}

fn event(op: &str, db: &str, coll: &str, extra: RawDocumentBuf) -> RawDocumentBuf {
    let mut raw = rawdoc! {
        "_id": { "_data": "82AA" },
        "operationType": op,
        "clusterTime": bson::Timestamp { time: 1, increment: 1 },
        "ns": { "db": db, "coll": coll },
    };
    for element in &extra {
        let (key, value) = element.expect("valid");
        raw.append(key, value.to_raw_bson());
    }
    raw
}

fn insert(db: &str, coll: &str, doc: RawDocumentBuf) -> RawDocumentBuf {
    let id = doc
        .get("_id")
        .ok()
        .flatten()
        .expect("a test document has an _id");
    let key = rawdoc! { "_id": id.to_raw_bson() };
    event(
        "insert",
        db,
        coll,
        rawdoc! { "fullDocument": doc, "documentKey": key },
    )
}

fn routed(encoder: &mut RecordEncoder, raw: &RawDocument) -> (String, String) {
    let records = encoder.encode(raw).expect("encodes").records;
    let key = String::from_utf8(records[0].key.clone()).expect("JSON key");
    (records[0].topic.to_string(), key)
}

#[test]
fn namespace_globs_and_regex_captures_name_the_topic_first_match_wins() {
    let mut encoder = encoder(
        "[pipelines.routing]\n\
         [[pipelines.routing.namespaces]]\nglob = \"shop.orders_*\"\ntopic = \"orders.${db}.${coll}\"\n\
         [[pipelines.routing.namespaces]]\nregex = '(\\w+)\\.archive_(\\d{4})'\ntopic = \"archive.${1}-${2}\"\n\
         [[pipelines.routing.namespaces]]\nglob = \"shop.*\"\ntopic = \"shop-rest\"\n",
    );
    let doc = || rawdoc! { "_id": 1 };
    let cases = [
        ("shop", "orders_eu", "orders.shop.orders_eu"),
        ("shop", "archive_2024", "archive.shop-2024"),
        ("crm", "archive_1999", "archive.crm-1999"),
        ("shop", "carts", "shop-rest"),
        ("crm", "archive_x", "cdc.crm.archive_x"),
        ("shop", "orders_eu", "orders.shop.orders_eu"),
    ];
    for (db, coll, topic) in cases {
        assert_eq!(
            routed(&mut encoder, &insert(db, coll, doc())).0,
            topic,
            "{db}.{coll}"
        );
    }
    // A database event matches its database alone.
    let drop_db = rawdoc! {
        "_id": { "_data": "82AC" }, "operationType": "dropDatabase", "ns": { "db": "shop" },
    };
    assert_eq!(routed(&mut encoder, &drop_db).0, "cdc.shop");
}

#[test]
fn a_field_template_routes_each_document_and_the_default_topic_takes_the_rest() {
    let mut encoder = encoder(
        "database = \"shop\"\ncollection = \"orders\"\n[pipelines.routing]\n\
         topic = \"orders.${fullDocument.region}\"\ndefault_topic = \"orders.unrouted\"\n",
    );
    let cases = [
        (rawdoc! { "_id": 1, "region": "eu" }, "orders.eu"),
        (rawdoc! { "_id": 2, "region": 7 }, "orders.7"),
        (rawdoc! { "_id": 3 }, "orders.unrouted"),
        (
            rawdoc! { "_id": 4, "region": bson::RawBson::Null },
            "orders.unrouted",
        ),
        (
            rawdoc! { "_id": 5, "region": "not a topic" },
            "orders.unrouted",
        ),
        (
            rawdoc! { "_id": 6, "region": { "x": 1 } },
            "orders.unrouted",
        ),
        (rawdoc! { "_id": 7, "region": "eu" }, "orders.eu"),
    ];
    for (doc, topic) in cases {
        assert_eq!(
            routed(&mut encoder, &insert("shop", "orders", doc)).0,
            topic
        );
    }
    let delete = event(
        "delete",
        "shop",
        "orders",
        rawdoc! { "documentKey": { "_id": 1 } },
    );
    let records = encoder.encode(&delete).unwrap().records;
    assert_eq!(records.len(), 2, "a delete and its tombstone");
    assert!(records.iter().all(|r| &*r.topic == "orders.unrouted"));
    let invalidate = rawdoc! { "_id": { "_data": "82AB" }, "operationType": "invalidate" };
    assert_eq!(routed(&mut encoder, &invalidate).0, "orders.unrouted");
}

#[test]
fn the_key_field_keys_document_events_and_falls_back_to_the_pre_image_then_document_key() {
    let mut encoder = encoder(
        "database = \"shop\"\ncollection = \"orders\"\ntombstones = false\n\
         [pipelines.routing]\nkey_field = \"fullDocument.customerId\"\n",
    );
    let insert = insert("shop", "orders", rawdoc! { "_id": 1, "customerId": 42 });
    assert_eq!(
        routed(&mut encoder, &insert).1,
        r#"{"customerId":{"$numberInt":"42"}}"#
    );
    let with_image = event(
        "delete",
        "shop",
        "orders",
        rawdoc! { "documentKey": { "_id": 1 }, "fullDocumentBeforeChange": { "_id": 1, "customerId": "c-9" } },
    );
    assert_eq!(
        routed(&mut encoder, &with_image).1,
        r#"{"customerId":"c-9"}"#
    );
    let bare = event(
        "delete",
        "shop",
        "orders",
        rawdoc! { "documentKey": { "_id": 1 } },
    );
    assert_eq!(
        routed(&mut encoder, &bare).1,
        r#"{"_id":{"$numberInt":"1"}}"#
    );
    let drop = event("drop", "shop", "orders", rawdoc! {});
    assert_eq!(
        routed(&mut encoder, &drop).1,
        r#"{"db":"shop","coll":"orders"}"#
    );
}

#[test]
fn fallbacks_are_counted() {
    let registry = prometheus::Registry::new();
    let counter = |name: &str| {
        let c = prometheus::IntCounter::new(name, "t").unwrap();
        registry.register(Box::new(c.clone())).unwrap();
        c
    };
    let (topic, key) = (counter("topic"), counter("key"));
    let mut encoder = encoder(
        "database = \"shop\"\ncollection = \"orders\"\ntombstones = false\n[pipelines.routing]\n\
         topic = \"o.${fullDocument.region}\"\ndefault_topic = \"o.none\"\n\
         key_field = \"fullDocument.customerId\"\n",
    )
    .with_routing_fallbacks(topic.clone(), key.clone());
    routed(
        &mut encoder,
        &insert("shop", "orders", rawdoc! { "_id": 1 }),
    );
    routed(
        &mut encoder,
        &insert(
            "shop",
            "orders",
            rawdoc! { "_id": 2, "region": "eu", "customerId": 1 },
        ),
    );
    assert_eq!((topic.get(), key.get()), (1, 1));
}

#[test]
fn gap_markers_find_the_topics_routing_can_write() {
    let config = "database = \"shop\"\n[pipelines.routing]\n\
         [[pipelines.routing.namespaces]]\nglob = \"shop.orders_*\"\ntopic = \"orders.${coll}\"\n";
    let text = format!(
        "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
         [[pipelines]]\nname = \"p\"\n{config}"
    );
    let p = Config::from_toml(&text, std::iter::empty())
        .unwrap()
        .pipelines
        .remove(0);
    let written = |t: &str| crate::encode::topics::written_by(&p, "", t);
    assert!(written("orders.orders_eu"));
    assert!(
        written("shop.carts"),
        "a namespace no entry matches keeps its usual topic"
    );
    assert!(!written("orders."));
    assert!(!written("crm.customers"));
}
