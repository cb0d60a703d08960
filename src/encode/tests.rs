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
                ValueMode::Debezium | ValueMode::Unwrapped => {
                    unreachable!("encode/debezium/tests.rs, encode/unwrap_tests.rs")
                }
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
                ValueMode::Debezium | ValueMode::Unwrapped => {
                    unreachable!("encode/debezium/tests.rs, encode/unwrap_tests.rs")
                }
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

fn delete_event() -> RawDocumentBuf {
    event(
        "delete",
        rawdoc! {
            "ns": { "db": "shop", "coll": "orders" },
            "documentKey": { "_id": "abc" },
        },
    )
}

mod headers;
mod keys;
mod operations;
mod records;
mod tombstones;
mod topics;
mod values;
