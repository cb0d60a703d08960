//! Golden tests of [`RecordEncoder::encode`]: raw change events built as MongoDB sends them
//! (<https://www.mongodb.com/docs/manual/reference/change-events/>, field order included), and
//! the exact records they must give in every `json` × `value` mode.

use super::*;

use bson::oid::ObjectId;
use bson::spec::BinarySubtype;
use bson::{Binary, DateTime, Decimal128, RawBson, RawDocumentBuf, Timestamp, rawdoc};

use crate::config::Config;

/// The `_data` of the resume token of every event below.
const TOKEN: &str =
    "8265941F25000000012B022C0100296E5A1004A5093ABB38FE4B9EA67F01BB1A96D812463C5F6964002B020004";
/// `clusterTime` 1704164645.1 = 2024-01-02T03:04:05Z, increment 1.
const CLUSTER_TIME: Timestamp = Timestamp {
    time: 1_704_164_645,
    increment: 1,
};
/// `wallTime` 2024-01-02T03:04:05.123Z.
const WALL_TIME_MS: i64 = 1_704_164_645_123;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The configuration every test starts from: topic prefix `cdc.`, pipeline `orders-feed` on
/// `shop.orders` with `full_document = "update_lookup"` (which `value = "document"` requires;
/// the encoder does not read it), plus `pipeline_extra` lines for that pipeline.
fn encoder(pipeline_extra: &str) -> RecordEncoder {
    encoder_for(
        "topic_prefix = \"cdc.\"",
        &format!(
            "name = \"orders-feed\"\ndatabase = \"shop\"\ncollection = \"orders\"\n\
             full_document = \"update_lookup\"\n{pipeline_extra}"
        ),
    )
}

/// An encoder for a pipeline whose `[kafka]` extra lines and `[[pipelines]]` body are given.
fn encoder_for(kafka_extra: &str, pipeline: &str) -> RecordEncoder {
    let text = format!(
        "[mongodb]\nuri = \"mongodb://127.0.0.1:27017/\"\n\n\
         [kafka]\nbootstrap_servers = \"127.0.0.1:9092\"\n{kafka_extra}\n\n\
         [[pipelines]]\n{pipeline}\n"
    );
    let config = Config::from_toml(&text, std::iter::empty()).expect("valid config");
    RecordEncoder::new(&config.pipelines[0], &config.kafka.topic_prefix)
}

/// A record with UTF-8 text instead of bytes, so failures read well.
#[derive(Debug, Clone, PartialEq)]
struct Shown {
    topic: String,
    key: String,
    value: Option<String>,
    headers: Vec<(&'static str, String)>,
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("records are UTF-8")
}

fn shown(records: &[Record]) -> Vec<Shown> {
    records
        .iter()
        .map(|r| Shown {
            topic: r.topic.to_string(),
            key: text(&r.key),
            value: r.value.as_deref().map(text),
            headers: r.headers.iter().map(|(n, v)| (*n, text(v))).collect(),
        })
        .collect()
}

/// The headers of an event of `operation` on `namespace` (None: no `ns`), without a transaction.
fn headers(operation: &str, namespace: Option<&str>) -> Vec<(&'static str, String)> {
    let mut out = vec![("mongo.operation_type", operation.to_owned())];
    if let Some(ns) = namespace {
        out.push(("mongo.namespace", ns.to_owned()));
    }
    out.extend([
        ("mongo.resume_token", TOKEN.to_owned()),
        ("mongo.cluster_time", "1704164645.1".to_owned()),
        ("mongo.wall_time", "2024-01-02T03:04:05.123Z".to_owned()),
        ("mongo.pipeline", "orders-feed".to_owned()),
        ("mongo.format", "json-relaxed".to_owned()),
    ]);
    out
}

/// `headers` with `mongo.format` set for a JSON value in `json` mode.
fn headers_in(
    mut headers: Vec<(&'static str, String)>,
    json: JsonMode,
) -> Vec<(&'static str, String)> {
    let format = match json {
        JsonMode::Relaxed => "json-relaxed",
        JsonMode::Canonical => "json-canonical",
    };
    for (name, value) in &mut headers {
        if *name == "mongo.format" {
            *value = format.to_owned();
        }
    }
    headers
}

/// The envelope every event starts with, as Extended JSON in `json` mode, without the closing
/// brace: `_id`, `operationType`, `clusterTime`, `wallTime`.
fn head(operation: &str, json: JsonMode) -> String {
    let wall = match json {
        JsonMode::Relaxed => r#"{"$date":"2024-01-02T03:04:05.123Z"}"#,
        JsonMode::Canonical => r#"{"$date":{"$numberLong":"1704164645123"}}"#,
    };
    format!(
        r#"{{"_id":{{"_data":"{TOKEN}"}},"operationType":"{operation}","clusterTime":{{"$timestamp":{{"t":1704164645,"i":1}}}},"wallTime":{wall}"#
    )
}

/// The envelope of an event as MongoDB sends it: `_id`, `operationType`, `clusterTime`,
/// `wallTime`, then `rest` in order.
fn event(operation: &str, rest: RawDocumentBuf) -> RawDocumentBuf {
    let mut doc = rawdoc! {
        "_id": { "_data": TOKEN },
        "operationType": operation,
        "clusterTime": CLUSTER_TIME,
        "wallTime": DateTime::from_millis(WALL_TIME_MS),
    };
    for element in &rest {
        let (key, value) = element.expect("well-formed");
        doc.append_ref(key, value);
    }
    doc
}

fn is_document_event(operation: &str) -> bool {
    matches!(operation, "insert" | "update" | "replace" | "delete")
}

/// What one event must encode to, in every mode.
struct Golden {
    event: RawDocumentBuf,
    operation: &'static str,
    topic: &'static str,
    key: &'static str,
    headers: Vec<(&'static str, String)>,
    /// The whole event after [`head`] (closing brace included): `(relaxed, canonical)`.
    change_event_tail: (&'static str, &'static str),
    /// `fullDocument`: `(relaxed, canonical)`, or None for a null value (for an event without
    /// a document, the whole event instead).
    document: Option<(&'static str, &'static str)>,
}

/// Encodes `g.event` with each `json` and `value` mode (tombstones on) and checks every record.
#[track_caller]
fn assert_golden(g: &Golden) {
    for json in [JsonMode::Relaxed, JsonMode::Canonical] {
        for value in [ValueMode::ChangeEvent, ValueMode::Document] {
            // GIVEN the pipeline in this mode
            let json_name = match json {
                JsonMode::Relaxed => "relaxed",
                JsonMode::Canonical => "canonical",
            };
            let value_name = match value {
                ValueMode::ChangeEvent => "change_event",
                ValueMode::Document => "document",
            };
            let mut encoder = encoder(&format!("json = \"{json_name}\"\nvalue = \"{value_name}\""));

            // WHEN the event is encoded
            let encoded = encoder.encode(&g.event).expect("encodes");

            // THEN the records are exactly the golden ones
            let expected_value = match value {
                ValueMode::ChangeEvent => {
                    let tail = match json {
                        JsonMode::Relaxed => g.change_event_tail.0,
                        JsonMode::Canonical => g.change_event_tail.1,
                    };
                    Some(format!("{}{tail}", head(g.operation, json)))
                }
                ValueMode::Document => match g.document {
                    Some((relaxed, canonical)) => Some(match json {
                        JsonMode::Relaxed => relaxed.to_owned(),
                        JsonMode::Canonical => canonical.to_owned(),
                    }),
                    // An event without a document marks its namespace: the whole event.
                    None if !is_document_event(g.operation) => {
                        let tail = match json {
                            JsonMode::Relaxed => g.change_event_tail.0,
                            JsonMode::Canonical => g.change_event_tail.1,
                        };
                        Some(format!("{}{tail}", head(g.operation, json)))
                    }
                    None => None,
                },
            };
            let record = Shown {
                topic: g.topic.to_owned(),
                key: g.key.to_owned(),
                value: expected_value,
                headers: headers_in(g.headers.clone(), json),
            };
            let mut expected = vec![record.clone()];
            if g.operation == "delete" && value == ValueMode::ChangeEvent {
                expected.push(Shown {
                    value: None,
                    ..record
                });
            }
            assert_eq!(
                shown(&encoded.records),
                expected,
                "{} with json={json_name} value={value_name}",
                g.operation
            );
            assert_eq!(encoded.token, rawdoc! { "_data": TOKEN });
            assert_eq!(encoded.operation_type, g.operation);
            assert_eq!(encoded.cluster_time, Some(CLUSTER_TIME));
            assert_eq!(encoded.wall_time_ms, Some(WALL_TIME_MS));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Every operation type, every mode
// ---------------------------------------------------------------------------------------------

#[test]
fn insert() {
    assert_golden(&Golden {
        event: event(
            "insert",
            rawdoc! {
                "fullDocument": {
                    "_id": 1, "sku": "A-1", "qty": 2,
                    "price": "9.99".parse::<Decimal128>().expect("decimal"),
                },
                "ns": { "db": "shop", "coll": "orders" },
                "documentKey": { "_id": 1 },
            },
        ),
        operation: "insert",
        topic: "cdc.shop.orders",
        key: r#"{"_id":{"$numberInt":"1"}}"#,
        headers: headers("insert", Some("shop.orders")),
        change_event_tail: (
            r#","fullDocument":{"_id":1,"sku":"A-1","qty":2,"price":{"$numberDecimal":"9.99"}},"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":1}}"#,
            r#","fullDocument":{"_id":{"$numberInt":"1"},"sku":"A-1","qty":{"$numberInt":"2"},"price":{"$numberDecimal":"9.99"}},"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":{"$numberInt":"1"}}}"#,
        ),
        document: Some((
            r#"{"_id":1,"sku":"A-1","qty":2,"price":{"$numberDecimal":"9.99"}}"#,
            r#"{"_id":{"$numberInt":"1"},"sku":"A-1","qty":{"$numberInt":"2"},"price":{"$numberDecimal":"9.99"}}"#,
        )),
    });
}

#[test]
fn update_with_looked_up_document() {
    assert_golden(&Golden {
        event: event(
            "update",
            rawdoc! {
                "fullDocument": { "_id": 1, "sku": "A-1", "qty": 3 },
                "ns": { "db": "shop", "coll": "orders" },
                "documentKey": { "_id": 1 },
                "updateDescription": {
                    "updatedFields": { "qty": 3 },
                    "removedFields": ["note"],
                    "truncatedArrays": [],
                },
            },
        ),
        operation: "update",
        topic: "cdc.shop.orders",
        key: r#"{"_id":{"$numberInt":"1"}}"#,
        headers: headers("update", Some("shop.orders")),
        change_event_tail: (
            r#","fullDocument":{"_id":1,"sku":"A-1","qty":3},"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":1},"updateDescription":{"updatedFields":{"qty":3},"removedFields":["note"],"truncatedArrays":[]}}"#,
            r#","fullDocument":{"_id":{"$numberInt":"1"},"sku":"A-1","qty":{"$numberInt":"3"}},"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":{"$numberInt":"1"}},"updateDescription":{"updatedFields":{"qty":{"$numberInt":"3"}},"removedFields":["note"],"truncatedArrays":[]}}"#,
        ),
        document: Some((
            r#"{"_id":1,"sku":"A-1","qty":3}"#,
            r#"{"_id":{"$numberInt":"1"},"sku":"A-1","qty":{"$numberInt":"3"}}"#,
        )),
    });
}

#[test]
fn update_whose_lookup_found_nothing_has_a_null_document() {
    // updateLookup on a document deleted since: the server sends `fullDocument: null`.
    assert_golden(&Golden {
        event: event(
            "update",
            rawdoc! {
                "fullDocument": RawBson::Null,
                "ns": { "db": "shop", "coll": "orders" },
                "documentKey": { "_id": 1 },
                "updateDescription": {
                    "updatedFields": { "qty": 3 },
                    "removedFields": [],
                    "truncatedArrays": [],
                },
            },
        ),
        operation: "update",
        topic: "cdc.shop.orders",
        key: r#"{"_id":{"$numberInt":"1"}}"#,
        headers: headers("update", Some("shop.orders")),
        change_event_tail: (
            r#","fullDocument":null,"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":1},"updateDescription":{"updatedFields":{"qty":3},"removedFields":[],"truncatedArrays":[]}}"#,
            r#","fullDocument":null,"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":{"$numberInt":"1"}},"updateDescription":{"updatedFields":{"qty":{"$numberInt":"3"}},"removedFields":[],"truncatedArrays":[]}}"#,
        ),
        document: None,
    });
}

#[test]
fn replace() {
    assert_golden(&Golden {
        event: event(
            "replace",
            rawdoc! {
                "fullDocument": { "_id": 1, "sku": "A-2", "qty": 5_i64 },
                "ns": { "db": "shop", "coll": "orders" },
                "documentKey": { "_id": 1 },
            },
        ),
        operation: "replace",
        topic: "cdc.shop.orders",
        key: r#"{"_id":{"$numberInt":"1"}}"#,
        headers: headers("replace", Some("shop.orders")),
        change_event_tail: (
            r#","fullDocument":{"_id":1,"sku":"A-2","qty":5},"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":1}}"#,
            r#","fullDocument":{"_id":{"$numberInt":"1"},"sku":"A-2","qty":{"$numberLong":"5"}},"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":{"$numberInt":"1"}}}"#,
        ),
        document: Some((
            r#"{"_id":1,"sku":"A-2","qty":5}"#,
            r#"{"_id":{"$numberInt":"1"},"sku":"A-2","qty":{"$numberLong":"5"}}"#,
        )),
    });
}

#[test]
fn delete_gives_the_event_then_a_tombstone_or_a_tombstone_alone() {
    // Change-event mode: the delete, then a tombstone (same key, same headers, null value);
    // document mode: one null-value record (see `assert_golden`).
    assert_golden(&Golden {
        event: event(
            "delete",
            rawdoc! {
                "ns": { "db": "shop", "coll": "orders" },
                "documentKey": { "_id": ObjectId::parse_str("65a1b2c3d4e5f60718293a4b").expect("oid") },
            },
        ),
        operation: "delete",
        topic: "cdc.shop.orders",
        key: r#"{"_id":{"$oid":"65a1b2c3d4e5f60718293a4b"}}"#,
        headers: headers("delete", Some("shop.orders")),
        change_event_tail: (
            r#","ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":{"$oid":"65a1b2c3d4e5f60718293a4b"}}}"#,
            r#","ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":{"$oid":"65a1b2c3d4e5f60718293a4b"}}}"#,
        ),
        document: None,
    });
}

#[test]
fn drop_is_keyed_by_its_namespace() {
    assert_golden(&Golden {
        event: event("drop", rawdoc! { "ns": { "db": "shop", "coll": "orders" } }),
        operation: "drop",
        topic: "cdc.shop.orders",
        key: r#"{"db":"shop","coll":"orders"}"#,
        headers: headers("drop", Some("shop.orders")),
        change_event_tail: (
            r#","ns":{"db":"shop","coll":"orders"}}"#,
            r#","ns":{"db":"shop","coll":"orders"}}"#,
        ),
        document: None,
    });
}

#[test]
fn rename_is_keyed_and_routed_by_its_source_namespace() {
    assert_golden(&Golden {
        event: event(
            "rename",
            rawdoc! {
                "ns": { "db": "shop", "coll": "orders" },
                "to": { "db": "shop", "coll": "orders_2023" },
            },
        ),
        operation: "rename",
        topic: "cdc.shop.orders",
        key: r#"{"db":"shop","coll":"orders"}"#,
        headers: headers("rename", Some("shop.orders")),
        change_event_tail: (
            r#","ns":{"db":"shop","coll":"orders"},"to":{"db":"shop","coll":"orders_2023"}}"#,
            r#","ns":{"db":"shop","coll":"orders"},"to":{"db":"shop","coll":"orders_2023"}}"#,
        ),
        document: None,
    });
}

#[test]
fn drop_database_is_keyed_and_routed_by_its_database() {
    assert_golden(&Golden {
        event: event("dropDatabase", rawdoc! { "ns": { "db": "shop" } }),
        operation: "dropDatabase",
        topic: "cdc.shop",
        key: r#"{"db":"shop"}"#,
        headers: headers("dropDatabase", Some("shop")),
        change_event_tail: (r#","ns":{"db":"shop"}}"#, r#","ns":{"db":"shop"}}"#),
        document: None,
    });
}

#[test]
fn invalidate_is_keyed_by_the_pipeline_and_routed_to_its_namespace_topic() {
    assert_golden(&Golden {
        event: event("invalidate", rawdoc! {}),
        operation: "invalidate",
        topic: "cdc.shop.orders",
        key: r#"{"pipeline":"orders-feed"}"#,
        headers: headers("invalidate", None),
        change_event_tail: ("}", "}"),
        document: None,
    });
}

#[test]
fn unknown_future_operation_type_is_passed_through_keyed_by_namespace() {
    // An expanded event (showExpandedEvents) the encoder has no special case for.
    assert_golden(&Golden {
        event: event(
            "shardCollection",
            rawdoc! {
                "ns": { "db": "shop", "coll": "orders" },
                "operationDescription": {
                    "shardKey": { "tenant": 1 },
                    "unique": false,
                    "numInitialChunks": 2_i64,
                },
            },
        ),
        operation: "shardCollection",
        topic: "cdc.shop.orders",
        key: r#"{"db":"shop","coll":"orders"}"#,
        headers: headers("shardCollection", Some("shop.orders")),
        change_event_tail: (
            r#","ns":{"db":"shop","coll":"orders"},"operationDescription":{"shardKey":{"tenant":1},"unique":false,"numInitialChunks":2}}"#,
            r#","ns":{"db":"shop","coll":"orders"},"operationDescription":{"shardKey":{"tenant":{"$numberInt":"1"}},"unique":false,"numInitialChunks":{"$numberLong":"2"}}}"#,
        ),
        document: None,
    });
}

// ---------------------------------------------------------------------------------------------
// Tombstones
// ---------------------------------------------------------------------------------------------

fn delete_event() -> RawDocumentBuf {
    event(
        "delete",
        rawdoc! {
            "ns": { "db": "shop", "coll": "orders" },
            "documentKey": { "_id": "abc" },
        },
    )
}

#[test]
fn delete_with_tombstones_gives_two_records_in_order() {
    // GIVEN the default tombstones = true, change-event values, relaxed JSON
    let mut encoder = encoder("");

    // WHEN a delete is encoded
    let records = encoder.encode(&delete_event()).expect("encodes").records;

    // THEN the delete comes first, then a null value with the same topic, key and headers
    let delete = Shown {
        topic: "cdc.shop.orders".to_owned(),
        key: r#"{"_id":"abc"}"#.to_owned(),
        value: Some(format!(
            r#"{},"ns":{{"db":"shop","coll":"orders"}},"documentKey":{{"_id":"abc"}}}}"#,
            head("delete", JsonMode::Relaxed)
        )),
        headers: headers("delete", Some("shop.orders")),
    };
    let tombstone = Shown {
        value: None,
        ..delete.clone()
    };
    assert_eq!(shown(&records), vec![delete, tombstone]);
}

#[test]
fn delete_without_tombstones_gives_one_record() {
    for value in ["change_event", "document"] {
        // GIVEN tombstones = false
        let mut encoder = encoder(&format!("tombstones = false\nvalue = \"{value}\""));

        // WHEN a delete is encoded
        let records = encoder.encode(&delete_event()).expect("encodes").records;

        // THEN there is one record: the event, or in document mode a null value
        let expected_value = match value {
            "change_event" => Some(format!(
                r#"{},"ns":{{"db":"shop","coll":"orders"}},"documentKey":{{"_id":"abc"}}}}"#,
                head("delete", JsonMode::Relaxed)
            )),
            _ => None,
        };
        assert_eq!(
            shown(&records),
            vec![Shown {
                topic: "cdc.shop.orders".to_owned(),
                key: r#"{"_id":"abc"}"#.to_owned(),
                value: expected_value,
                headers: headers("delete", Some("shop.orders")),
            }],
            "value = {value}"
        );
    }
}

#[test]
fn only_deletes_get_tombstones() {
    let mut encoder = encoder("");
    for operation in ["insert", "update", "replace"] {
        let raw = event(
            operation,
            rawdoc! {
                "fullDocument": { "_id": 1 },
                "ns": { "db": "shop", "coll": "orders" },
                "documentKey": { "_id": 1 },
            },
        );
        let records = encoder.encode(&raw).expect("encodes").records;
        assert_eq!(records.len(), 1, "{operation}");
        assert!(records[0].value.is_some(), "{operation}");
    }
}

// ---------------------------------------------------------------------------------------------
// Headers
// ---------------------------------------------------------------------------------------------

#[test]
fn transaction_events_carry_txn_number_and_lsid() {
    // GIVEN an insert in a transaction: lsid {id: UUID, uid: SHA-256} and txnNumber follow
    // documentKey
    let raw = event(
        "insert",
        rawdoc! {
            "fullDocument": { "_id": 7 },
            "ns": { "db": "shop", "coll": "orders" },
            "documentKey": { "_id": 7 },
            "lsid": {
                "id": Binary { subtype: BinarySubtype::Uuid, bytes: (0..16).collect() },
                "uid": Binary { subtype: BinarySubtype::Generic, bytes: vec![0; 32] },
            },
            "txnNumber": 7_i64,
        },
    );

    // WHEN it is encoded in document mode
    let records = encoder("value = \"document\"")
        .encode(&raw)
        .expect("encodes")
        .records;

    // THEN txn_number and lsid (canonical) come after wall_time, before pipeline
    let lsid = format!(
        r#"{{"id":{{"$binary":{{"base64":"AAECAwQFBgcICQoLDA0ODw==","subType":"04"}}}},"uid":{{"$binary":{{"base64":"{}=","subType":"00"}}}}}}"#,
        "A".repeat(43)
    );
    assert_eq!(
        shown(&records),
        vec![Shown {
            topic: "cdc.shop.orders".to_owned(),
            key: r#"{"_id":{"$numberInt":"7"}}"#.to_owned(),
            value: Some(r#"{"_id":7}"#.to_owned()),
            headers: vec![
                ("mongo.operation_type", "insert".to_owned()),
                ("mongo.namespace", "shop.orders".to_owned()),
                ("mongo.resume_token", TOKEN.to_owned()),
                ("mongo.cluster_time", "1704164645.1".to_owned()),
                ("mongo.wall_time", "2024-01-02T03:04:05.123Z".to_owned()),
                ("mongo.txn_number", "7".to_owned()),
                ("mongo.lsid", lsid),
                ("mongo.pipeline", "orders-feed".to_owned()),
                ("mongo.format", "json-relaxed".to_owned()),
            ],
        }]
    );
}

#[test]
fn wall_time_has_millis_and_z_even_on_a_whole_second() {
    let mut raw = rawdoc! {
        "_id": { "_data": TOKEN },
        "operationType": "drop",
        "clusterTime": Timestamp { time: 1_704_164_645, increment: 42 },
        "wallTime": DateTime::from_millis(1_704_164_645_000),
    };
    raw.append("ns", rawdoc! { "db": "shop", "coll": "orders" });
    let encoded = encoder("").encode(&raw).expect("encodes");
    let headers = &shown(&encoded.records)[0].headers;
    assert_eq!(
        headers[3],
        ("mongo.cluster_time", "1704164645.42".to_owned())
    );
    assert_eq!(
        headers[4],
        ("mongo.wall_time", "2024-01-02T03:04:05.000Z".to_owned())
    );
}

#[test]
fn wall_time_before_1970_is_spelled_with_its_sign() {
    let mut raw = rawdoc! {
        "_id": { "_data": TOKEN },
        "operationType": "drop",
        "clusterTime": Timestamp { time: 1_704_164_645, increment: 42 },
        "wallTime": DateTime::from_millis(-62_198_755_200_000),
    };
    raw.append("ns", rawdoc! { "db": "shop", "coll": "orders" });
    let encoded = encoder("").encode(&raw).expect("encodes");
    let headers = &shown(&encoded.records)[0].headers;
    assert_eq!(
        headers[4],
        ("mongo.wall_time", "-0001-01-01T00:00:00.000Z".to_owned())
    );
}

#[test]
fn events_without_wall_time_have_no_wall_time_header() {
    // GIVEN an event from a server before 6.0 (no wallTime)
    let raw = rawdoc! {
        "_id": { "_data": TOKEN },
        "operationType": "delete",
        "clusterTime": CLUSTER_TIME,
        "ns": { "db": "shop", "coll": "orders" },
        "documentKey": { "_id": 1 },
    };

    // WHEN it is encoded
    let encoded = encoder("tombstones = false").encode(&raw).expect("encodes");

    // THEN the header is left out and no wall time is reported
    let names: Vec<&str> = encoded.records[0].headers.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "mongo.operation_type",
            "mongo.namespace",
            "mongo.resume_token",
            "mongo.cluster_time",
            "mongo.pipeline",
            "mongo.format",
        ]
    );
    assert_eq!(encoded.wall_time_ms, None);
}

#[test]
fn a_token_without_data_is_written_whole_as_canonical_json() {
    // Resume tokens are opaque: a shape other than {_data: string} (MongoDB 3.6 sent BinData)
    // is still carried.
    let token = rawdoc! {
        "_data": Binary { subtype: BinarySubtype::Generic, bytes: vec![0x82, 0x65] },
        "_typeBits": Binary { subtype: BinarySubtype::Generic, bytes: vec![0x01] },
    };
    let raw = rawdoc! { "_id": token.clone(), "operationType": "invalidate" };
    let encoded = encoder("").encode(&raw).expect("encodes");
    assert_eq!(
        shown(&encoded.records)[0].headers,
        vec![
            ("mongo.operation_type", "invalidate".to_owned()),
            (
                "mongo.resume_token",
                r#"{"_data":{"$binary":{"base64":"gmU=","subType":"00"}},"_typeBits":{"$binary":{"base64":"AQ==","subType":"00"}}}"#
                    .to_owned()
            ),
            ("mongo.pipeline", "orders-feed".to_owned()),
            ("mongo.format", "json-relaxed".to_owned()),
        ]
    );
    assert_eq!(encoded.token, token);
    assert_eq!(encoded.cluster_time, None);
}

// ---------------------------------------------------------------------------------------------
// Topics
// ---------------------------------------------------------------------------------------------

fn insert_into(db: &str, coll: &str) -> RawDocumentBuf {
    event(
        "insert",
        rawdoc! {
            "fullDocument": { "_id": 1 },
            "ns": { "db": db, "coll": coll },
            "documentKey": { "_id": 1 },
        },
    )
}

fn topic_of(encoder: &mut RecordEncoder, raw: &RawDocument) -> String {
    let records = encoder.encode(raw).expect("encodes").records;
    records[0].topic.to_string()
}

#[test]
fn a_pipeline_topic_takes_every_event() {
    let mut encoder = encoder("topic = \"all-changes\"");
    for raw in [
        insert_into("shop", "orders"),
        insert_into("crm", "customers"),
        event("dropDatabase", rawdoc! { "ns": { "db": "shop" } }),
        event("invalidate", rawdoc! {}),
    ] {
        assert_eq!(topic_of(&mut encoder, &raw), "all-changes");
    }
}

#[test]
fn a_deployment_wide_pipeline_routes_by_each_event_namespace() {
    // GIVEN a pipeline on the whole deployment
    let mut encoder = encoder_for("topic_prefix = \"cdc.\"", "name = \"everything\"");

    // WHEN events of several namespaces are encoded, switching back and forth
    let topics: Vec<String> = [
        insert_into("shop", "orders"),
        insert_into("crm", "customers"),
        insert_into("shop", "orders"),
        insert_into("shop", "orders_2023"),
        event("dropDatabase", rawdoc! { "ns": { "db": "shop" } }),
        insert_into("shop", "orders"),
        event("invalidate", rawdoc! {}),
    ]
    .iter()
    .map(|raw| topic_of(&mut encoder, raw))
    .collect();

    // THEN each goes to <prefix><db>.<coll>, <prefix><db>, or <prefix><pipeline name>
    assert_eq!(
        topics,
        [
            "cdc.shop.orders",
            "cdc.crm.customers",
            "cdc.shop.orders",
            "cdc.shop.orders_2023",
            "cdc.shop",
            "cdc.shop.orders",
            "cdc.everything",
        ]
    );
}

#[test]
fn a_database_pipeline_routes_an_invalidate_to_the_database_topic() {
    let mut encoder = encoder_for("", "name = \"shop-feed\"\ndatabase = \"shop\"");
    assert_eq!(
        topic_of(&mut encoder, &insert_into("shop", "orders")),
        "shop.orders"
    );
    let invalidate = event("invalidate", rawdoc! {});
    assert_eq!(topic_of(&mut encoder, &invalidate), "shop");
    let records = encoder.encode(&invalidate).expect("encodes").records;
    assert_eq!(text(&records[0].key), r#"{"pipeline":"shop-feed"}"#);
}

// ---------------------------------------------------------------------------------------------
// Keys (C14, C20, C21)
// ---------------------------------------------------------------------------------------------

/// The key of an insert and of an update of the document whose `documentKey` is `{_id: id}`.
fn insert_and_update_keys(id: RawBson) -> (String, String) {
    let mut encoder = encoder("json = \"canonical\"");
    let insert = event(
        "insert",
        rawdoc! {
            "fullDocument": { "_id": id.clone() },
            "ns": { "db": "k", "coll": "c" },
            "documentKey": { "_id": id.clone() },
        },
    );
    let update = event(
        "update",
        rawdoc! {
            "ns": { "db": "k", "coll": "c" },
            "documentKey": { "_id": id },
            "updateDescription": {
                "updatedFields": { "touched": true },
                "removedFields": [],
                "truncatedArrays": [],
            },
        },
    );
    let mut key =
        |raw: &RawDocumentBuf| text(&encoder.encode(raw).expect("encodes").records[0].key);
    (key(&insert), key(&update))
}

#[test]
fn c20_keys_preserve_the_type_and_field_order_of_id() {
    let cases: Vec<(RawBson, &str)> = vec![
        (RawBson::String("abc".into()), r#"{"_id":"abc"}"#),
        (RawBson::Int32(1004), r#"{"_id":{"$numberInt":"1004"}}"#),
        (
            RawBson::Document(rawdoc! { "company": "ACME", "dept": "Purchasing" }),
            r#"{"_id":{"company":"ACME","dept":"Purchasing"}}"#,
        ),
        (
            RawBson::Document(rawdoc! { "dept": "Purchasing", "company": "ACME" }),
            r#"{"_id":{"dept":"Purchasing","company":"ACME"}}"#,
        ),
        (
            RawBson::ObjectId(ObjectId::parse_str("547d9b40e62048750f25ef77").expect("oid")),
            r#"{"_id":{"$oid":"547d9b40e62048750f25ef77"}}"#,
        ),
        (RawBson::Double(2.5), r#"{"_id":{"$numberDouble":"2.5"}}"#),
        (
            RawBson::DateTime(DateTime::from_millis(1_704_164_645_000)),
            r#"{"_id":{"$date":{"$numberLong":"1704164645000"}}}"#,
        ),
        (RawBson::Null, r#"{"_id":null}"#),
        // Same numeric value as 1004, another type: another key (documented caveat).
        (RawBson::Int64(1004), r#"{"_id":{"$numberLong":"1004"}}"#),
        (
            RawBson::Double(1004.0),
            r#"{"_id":{"$numberDouble":"1004.0"}}"#,
        ),
    ];
    for (id, expected) in cases {
        let (insert, update) = insert_and_update_keys(id);
        assert_eq!(insert, expected);
        assert_eq!(update, expected);
    }
}

#[test]
fn keys_are_canonical_in_relaxed_mode_too() {
    // GIVEN relaxed values
    let mut encoder = encoder("json = \"relaxed\"");
    let raw = event(
        "insert",
        rawdoc! {
            "fullDocument": { "_id": 1004, "at": DateTime::from_millis(1_704_164_645_000) },
            "ns": { "db": "shop", "coll": "orders" },
            "documentKey": { "_id": 1004 },
        },
    );

    // WHEN encoded in change-event mode
    let records = encoder.encode(&raw).expect("encodes").records;

    // THEN the key keeps its type wrapper
    assert_eq!(text(&records[0].key), r#"{"_id":{"$numberInt":"1004"}}"#);
    // AND in document mode the value is relaxed
    let records = self::encoder("value = \"document\"")
        .encode(&raw)
        .expect("encodes")
        .records;
    assert_eq!(text(&records[0].key), r#"{"_id":{"$numberInt":"1004"}}"#);
    assert_eq!(
        records[0].value.as_deref().map(text).as_deref(),
        Some(r#"{"_id":1004,"at":{"$date":"2024-01-02T03:04:05Z"}}"#)
    );
}

#[test]
fn c21_shard_key_document_key_is_kept_whole_in_server_order() {
    let mut encoder = encoder("json = \"canonical\"");
    for (full_document, document_key, expected) in [
        (
            rawdoc! { "_id": 1, "tenant": "acme", "v": 1 },
            rawdoc! { "tenant": "acme", "_id": 1 },
            r#"{"tenant":"acme","_id":{"$numberInt":"1"}}"#,
        ),
        (
            rawdoc! { "_id": 1, "tenant": "zeta", "v": 2 },
            rawdoc! { "tenant": "zeta", "_id": 1 },
            r#"{"tenant":"zeta","_id":{"$numberInt":"1"}}"#,
        ),
        (
            rawdoc! { "_id": 2, "v": 3 },
            rawdoc! { "tenant": RawBson::Null, "_id": 2 },
            r#"{"tenant":null,"_id":{"$numberInt":"2"}}"#,
        ),
    ] {
        // GIVEN a documentKey with the shard key before _id (fullDocument in another order)
        let insert = event(
            "insert",
            rawdoc! {
                "fullDocument": full_document,
                "ns": { "db": "t", "coll": "orders" },
                "documentKey": document_key.clone(),
            },
        );
        let update = event(
            "update",
            rawdoc! {
                "ns": { "db": "t", "coll": "orders" },
                "documentKey": document_key,
                "updateDescription": {
                    "updatedFields": { "v": 13 },
                    "removedFields": [],
                    "truncatedArrays": [],
                },
            },
        );
        // WHEN both are encoded
        let insert_key = text(&encoder.encode(&insert).expect("encodes").records[0].key);
        let update_key = text(&encoder.encode(&update).expect("encodes").records[0].key);
        // THEN both keys are the documentKey, byte for byte
        assert_eq!(insert_key, expected);
        assert_eq!(update_key, expected);
    }
}

#[test]
fn a_key_is_never_taken_from_the_token_or_the_full_document() {
    // GIVEN an update whose fullDocument has another _id than its documentKey (a $set of _id
    // is impossible, but the encoder must not care)
    let raw = event(
        "update",
        rawdoc! {
            "fullDocument": { "_id": "from-full-document" },
            "ns": { "db": "shop", "coll": "orders" },
            "documentKey": { "_id": "from-document-key" },
        },
    );
    let records = encoder("").encode(&raw).expect("encodes").records;
    assert_eq!(text(&records[0].key), r#"{"_id":"from-document-key"}"#);
}

// ---------------------------------------------------------------------------------------------
// Values (C18)
// ---------------------------------------------------------------------------------------------

fn c18_insert() -> RawDocumentBuf {
    let dec = |s: &str| s.parse::<Decimal128>().expect("decimal");
    event(
        "insert",
        rawdoc! {
            "fullDocument": {
                "_id": 104,
                "price": dec("75.25"),
                "big": dec("12345678901234567890.123456789"),
                "negz": dec("-0"),
                "dnan": dec("NaN"),
                "q": 3,
                "n": 9_007_199_254_740_993_i64,
                "d": 1.5,
            },
            "ns": { "db": "pay", "coll": "orders" },
            "documentKey": { "_id": 104 },
        },
    )
}

#[test]
fn c18_numbers_keep_their_type_in_canonical_mode() {
    let records = encoder("json = \"canonical\"\nvalue = \"document\"")
        .encode(&c18_insert())
        .expect("encodes")
        .records;
    assert_eq!(text(&records[0].key), r#"{"_id":{"$numberInt":"104"}}"#);
    assert_eq!(
        records[0].value.as_deref().map(text).as_deref(),
        Some(concat!(
            r#"{"_id":{"$numberInt":"104"},"#,
            r#""price":{"$numberDecimal":"75.25"},"#,
            r#""big":{"$numberDecimal":"12345678901234567890.123456789"},"#,
            r#""negz":{"$numberDecimal":"-0"},"#,
            r#""dnan":{"$numberDecimal":"NaN"},"#,
            r#""q":{"$numberInt":"3"},"#,
            r#""n":{"$numberLong":"9007199254740993"},"#,
            r#""d":{"$numberDouble":"1.5"}}"#,
        ))
    );
}

#[test]
fn c18_relaxed_mode_keeps_decimals_wrapped_and_longs_exact() {
    let records = encoder("json = \"relaxed\"\nvalue = \"document\"")
        .encode(&c18_insert())
        .expect("encodes")
        .records;
    assert_eq!(text(&records[0].key), r#"{"_id":{"$numberInt":"104"}}"#);
    assert_eq!(
        records[0].value.as_deref().map(text).as_deref(),
        Some(concat!(
            r#"{"_id":104,"#,
            r#""price":{"$numberDecimal":"75.25"},"#,
            r#""big":{"$numberDecimal":"12345678901234567890.123456789"},"#,
            r#""negz":{"$numberDecimal":"-0"},"#,
            r#""dnan":{"$numberDecimal":"NaN"},"#,
            r#""q":3,"#,
            r#""n":9007199254740993,"#,
            r#""d":1.5}"#,
        ))
    );
}

#[test]
fn c18_change_event_value_holds_the_same_numbers() {
    let records = encoder("json = \"canonical\"")
        .encode(&c18_insert())
        .expect("encodes")
        .records;
    let value = records[0].value.as_deref().map(text).expect("a value");
    assert_eq!(
        value,
        format!(
            "{}{}",
            head("insert", JsonMode::Canonical),
            concat!(
                r#","fullDocument":{"_id":{"$numberInt":"104"},"#,
                r#""price":{"$numberDecimal":"75.25"},"#,
                r#""big":{"$numberDecimal":"12345678901234567890.123456789"},"#,
                r#""negz":{"$numberDecimal":"-0"},"#,
                r#""dnan":{"$numberDecimal":"NaN"},"#,
                r#""q":{"$numberInt":"3"},"#,
                r#""n":{"$numberLong":"9007199254740993"},"#,
                r#""d":{"$numberDouble":"1.5"}},"#,
                r#""ns":{"db":"pay","coll":"orders"},"#,
                r#""documentKey":{"_id":{"$numberInt":"104"}}}"#,
            )
        )
    );
}

// ---------------------------------------------------------------------------------------------
// Record size, errors
// ---------------------------------------------------------------------------------------------

#[test]
fn record_size_counts_key_value_and_header_bytes() {
    // GIVEN a record with a 9-byte key, a 3-byte value and headers of 1+2 and 4+0 bytes
    let record = Record {
        topic: Arc::from("a-topic-name-that-does-not-count"),
        key: br#"{"_id":1}"#.to_vec(),
        value: Some(b"abc".to_vec()),
        headers: vec![("h", b"xy".to_vec()), ("name", Vec::new())],
        partition: None,
    };
    // THEN its size is 9 + 3 + 3 + 4
    assert_eq!(record.size(), 19);
    // and a tombstone counts no value
    let tombstone = Record {
        value: None,
        ..record
    };
    assert_eq!(tombstone.size(), 16);
}

#[test]
fn record_size_of_encoded_records() {
    let records = encoder("")
        .encode(&delete_event())
        .expect("encodes")
        .records;
    let header_bytes: usize = headers("delete", Some("shop.orders"))
        .iter()
        .map(|(n, v)| n.len() + v.len())
        .sum();
    // (20 + 6) + (15 + 11) + (18 + token) + (18 + 12) + (15 + 24) + (14 + 11) + (12 + 12)
    assert_eq!(header_bytes, 188 + TOKEN.len());
    let key_bytes = r#"{"_id":"abc"}"#.len();
    let value_bytes = records[0].value.as_ref().expect("the delete").len();
    assert_eq!(records[0].size(), key_bytes + value_bytes + header_bytes);
    assert_eq!(records[1].size(), key_bytes + header_bytes);
}

#[test]
fn an_event_without_id_is_missing_its_token() {
    // GIVEN an event whose _id a $project removed
    let raw = rawdoc! {
        "operationType": "insert",
        "ns": { "db": "shop", "coll": "orders" },
        "documentKey": { "_id": 1 },
    };
    // WHEN it is encoded
    let result = encoder("").encode(&raw);
    // THEN it is refused, not published
    assert!(
        matches!(result, Err(EncodeError::MissingToken)),
        "{result:?}"
    );
}

#[test]
fn an_id_that_is_not_a_document_is_missing_its_token() {
    let raw = rawdoc! { "_id": "replaced", "operationType": "insert" };
    let result = encoder("").encode(&raw);
    assert!(
        matches!(result, Err(EncodeError::MissingToken)),
        "{result:?}"
    );
}

#[test]
fn malformed_bson_is_an_error() {
    // GIVEN a document whose only element has the undefined type 0x20
    let bytes = [8, 0, 0, 0, 0x20, b'k', 0, 0];
    let raw = RawDocument::from_bytes(&bytes).expect("length and terminator are right");
    // WHEN it is encoded
    let result = encoder("").encode(raw);
    // THEN it is a Malformed error, not a panic
    assert!(
        matches!(result, Err(EncodeError::Malformed(_))),
        "{result:?}"
    );
}

#[test]
fn a_document_event_without_document_key_is_an_error_not_a_shared_key() {
    // GIVEN an insert whose documentKey a user stage removed
    let config = crate::Config::from_toml(
        "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
         [[pipelines]]\nname = \"p\"\ndatabase = \"shop\"\n",
        std::iter::empty(),
    )
    .expect("valid");
    let mut encoder = RecordEncoder::new(&config.pipelines[0], "");
    let raw = bson::rawdoc! { "_id": { "_data": "82" }, "operationType": "insert",
    "ns": { "db": "shop", "coll": "orders" } };
    // WHEN it is encoded THEN it is refused, naming the operation
    let error = encoder.encode(&raw).expect_err("must be refused");
    assert_eq!(
        error.to_string(),
        "insert event has no documentKey; the `pipeline` stages must keep it (it is the record key)"
    );
}
