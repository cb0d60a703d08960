//! The Debezium form against records of the real connector (Debezium 3.6.3 on OpenJDK 17, run
//! by `bench/peers/connect.py` on SecantusDB: `dbz094703` schemas off, `dbz092117` schemas on):
//! each event below is the change event that record was made of, built as the server sent it.
//! Processing times (the top-level `ts_ms`, a copy's `source.ts_*`) are compared as `0`.

use bson::oid::ObjectId;
use bson::spec::BinarySubtype;
use bson::{Binary, DateTime, RawBson, RawDocument, RawDocumentBuf, Timestamp, rawdoc};

use crate::config::{Config, ValueMode};
use crate::encode::{Record, RecordEncoder};
use crate::snapshot::{CopyTarget, Marker, Reason};

use super::SnapshotMark;

fn encoder(prefix: &str, extra: &str) -> RecordEncoder {
    let text = format!(
        "[mongodb]\nuri = \"mongodb://127.0.0.1:27017/\"\n[kafka]\nbootstrap_servers = \
         \"127.0.0.1:9092\"\ntopic_prefix = \"cdc.\"\n[[pipelines]]\nname = \"p\"\ndatabase = \
         \"smoke\"\ncollection = \"c\"\nvalue = \"debezium\"\n{extra}\n[pipelines.debezium]\n\
         topic_prefix = \"{prefix}\"\n"
    );
    let config = Config::from_toml(&text, std::iter::empty()).expect("valid config");
    assert_eq!(config.pipelines[0].value, ValueMode::Debezium);
    RecordEncoder::new(&config.pipelines[0], &config.kafka.topic_prefix)
}

/// `text` with every `"ts_ms":N,"transaction"` (top level) set to 0.
pub(super) fn processing_time_zero(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(",\"transaction\":") {
        let head = &rest[..at];
        let start = head.rfind("\"ts_ms\":").expect("ts_ms before transaction") + 8;
        out.push_str(&head[..start]);
        out.push('0');
        out.push_str(",\"transaction\":");
        rest = &rest[at + 15..];
    }
    out.push_str(rest);
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

fn value(record: &Record) -> String {
    processing_time_zero(&text(record.value.as_deref().expect("a value")))
}

/// A stream event of `dbz094703`'s collection `smoke.c094703` at `(wall ms, increment)`.
fn event(kind: &str, wall: i64, inc: u32, key: RawBson, rest: RawDocumentBuf) -> RawDocumentBuf {
    let mut raw = rawdoc! {
        "_id": { "_data": "8200" },
        "operationType": kind,
        "clusterTime": Timestamp { time: u32::try_from(wall / 1000).expect("u32"), increment: inc },
        "wallTime": DateTime::from_millis(wall),
    };
    for element in &rest {
        let (name, value) = element.expect("valid");
        raw.append_ref(name, value);
    }
    raw.append("ns", rawdoc! { "db": "smoke", "coll": "c094703" });
    raw.append("documentKey", rawdoc! { "_id": key });
    raw
}

fn source(ts: i64, ord: i32, tail: &str) -> String {
    format!(
        r#""source":{{"version":"3.6.3.Final","connector":"mongodb","name":"dbz094703","ts_ms":{ts},"snapshot":"false","db":"smoke","sequence":null,"ts_us":{ts}000,"ts_ns":{ts}000000,"collection":"c094703","ord":{ord},{tail},"wallTime":{ts}}}"#
    )
}

const NOT_IN_TXN: &str = r#""lsid":null,"txnNumber":null"#;

#[test]
fn an_insert_is_op_c_with_the_document_as_after() {
    let mut encoder = encoder("dbz094703", "");
    let oid = ObjectId::parse_str("65f000000000000000000002").expect("oid");
    let doc = rawdoc! { "_id": oid, "name": "oid-doc", "v": 1 };
    let raw = event(
        "insert",
        1_796_291_259_294,
        2,
        RawBson::ObjectId(oid),
        rawdoc! { "fullDocument": doc },
    );
    let encoded = encoder.encode(&raw).expect("encodes");
    assert_eq!(encoded.records.len(), 1);
    let record = &encoded.records[0];
    assert_eq!(&*record.topic, "dbz094703.smoke.c094703");
    assert_eq!(
        text(&record.key),
        r#"{"id":"{\"$oid\": \"65f000000000000000000002\"}"}"#
    );
    let expected = format!(
        r#"{{"before":null,"after":"{{\"_id\": {{\"$oid\": \"65f000000000000000000002\"}},\"name\": \"oid-doc\",\"v\": 1}}","updateDescription":null,{},"op":"c","ts_ms":0,"transaction":null}}"#,
        source(1_796_291_259_294, 2, NOT_IN_TXN)
    );
    assert_eq!(value(record), expected);
    let names: Vec<&str> = record.headers.iter().map(|(n, _)| *n).collect();
    assert_eq!(&names[..4], &crate::encode::headers::CONTEXT_HEADERS);
    assert_eq!(record.headers[0].1, b"dbz094703");
    assert_eq!(record.headers[2].1, b"mongodb");
    assert!(
        record
            .headers
            .contains(&("mongo.format", b"debezium-json".to_vec()))
    );
}

#[test]
fn updates_carry_update_description_and_a_replace_has_none() {
    let mut encoder = encoder("dbz094703", "");
    let after = rawdoc! { "_id": 1, "name": "replaced", "n": 2, "list": [1, 2] };
    let set = rawdoc! {
        "fullDocument": after.clone(),
        "updateDescription": {
            "updatedFields": { "int32": 43, "nested.a.b.1.c": "e", "added": 7_i64 },
            "removedFields": [], "truncatedArrays": [],
        },
    };
    let unset = rawdoc! {
        "fullDocument": after.clone(),
        "updateDescription": {
            "updatedFields": {}, "removedFields": ["bool", "regex"], "truncatedArrays": [],
        },
    };
    let cases = [
        (
            "update",
            set,
            r#"{"removedFields":null,"updatedFields":"{\"int32\": 43, \"nested.a.b.1.c\": \"e\", \"added\": 7}","truncatedArrays":null}"#,
        ),
        (
            "update",
            unset,
            r#"{"removedFields":["bool","regex"],"updatedFields":"{}","truncatedArrays":null}"#,
        ),
        ("replace", rawdoc! { "fullDocument": after }, "null"),
    ];
    for (kind, rest, description) in cases {
        let raw = event(kind, 1_796_291_259_325, 6, RawBson::Int32(1), rest);
        let encoded = encoder.encode(&raw).expect("encodes");
        let expected = format!(
            r#"{{"before":null,"after":"{{\"_id\": 1,\"name\": \"replaced\",\"n\": 2,\"list\": [1,2]}}","updateDescription":{description},{},"op":"u","ts_ms":0,"transaction":null}}"#,
            source(1_796_291_259_325, 6, NOT_IN_TXN)
        );
        assert_eq!(value(&encoded.records[0]), expected, "{kind}");
        assert_eq!(text(&encoded.records[0].key), r#"{"id":"1"}"#);
    }
}

#[test]
fn a_delete_in_a_transaction_is_op_d_then_a_tombstone() {
    let mut encoder = encoder("dbz094703", "");
    let lsid = rawdoc! {
        "id": Binary { subtype: BinarySubtype::Uuid, bytes: b"\xb7\xd2\xf4\x1c\xb7\x7a\x45\xfc\xaa\x31\x7f\x1f\x6e\xeb\xd8\xe6".to_vec() },
    };
    let raw = event(
        "delete",
        1_796_291_259_382,
        8,
        RawBson::String("str-id".into()),
        rawdoc! { "lsid": lsid, "txnNumber": 9_i64 },
    );
    let encoded = encoder.encode(&raw).expect("encodes");
    assert_eq!(encoded.records.len(), 2);
    let lsid = r#""lsid":"{\"id\": {\"$binary\": \"t9L0HLd6RfyqMX8fbuvY5g==\",\"$type\": \"04\"}}","txnNumber":9"#;
    let expected = format!(
        r#"{{"before":null,"after":null,"updateDescription":null,{},"op":"d","ts_ms":0,"transaction":null}}"#,
        source(1_796_291_259_382, 8, lsid)
    );
    assert_eq!(value(&encoded.records[0]), expected);
    assert_eq!(text(&encoded.records[1].key), r#"{"id":"\"str-id\""}"#);
    assert_eq!(encoded.records[1].key, encoded.records[0].key);
    assert_eq!(encoded.records[1].value, None);

    let quiet = self::encoder("dbz094703", "tombstones = false\n")
        .encode(&raw)
        .expect("encodes");
    assert_eq!(quiet.records.len(), 1, "tombstones.on.delete = false");
}

#[test]
fn pre_images_are_written_as_before() {
    let mut encoder = encoder("dbz", "full_document_before_change = \"required\"\n");
    let raw = event(
        "delete",
        1_700_000_000_000,
        1,
        RawBson::Int32(1),
        rawdoc! { "fullDocumentBeforeChange": { "_id": 1, "n": 7_i64 } },
    );
    let value = value(&encoder.encode(&raw).expect("encodes").records[0]);
    assert!(
        value.starts_with(
            r#"{"before":"{\"_id\": 1,\"n\": {\"$numberLong\": \"7\"}}","after":null,"#
        ),
        "{value}"
    );
}

#[test]
fn events_debezium_does_not_capture_have_no_record() {
    let mut encoder = encoder("dbz", "");
    for kind in [
        "drop",
        "rename",
        "dropDatabase",
        "invalidate",
        "createIndexes",
    ] {
        let raw = rawdoc! {
            "_id": { "_data": "8200" }, "operationType": kind,
            "clusterTime": Timestamp { time: 1, increment: 1 },
            "ns": { "db": "smoke", "coll": "c" },
        };
        let encoded = encoder.encode(&raw).expect("encodes");
        assert!(encoded.records.is_empty(), "{kind}");
        assert_eq!(encoded.token, rawdoc! { "_data": "8200" });
    }
}

fn target() -> CopyTarget {
    CopyTarget {
        db: "smoke".into(),
        coll: "c094703".into(),
        snapshot_id: "s1".into(),
        reason: Reason::Initial,
        shard_key: None,
    }
}

#[test]
fn copied_documents_are_op_r_and_the_snapshots_last_says_so() {
    let mut encoder = encoder("dbz094703", "");
    let doc = rawdoc! { "_id": 1, "name": "snap-int-id", "n": 1 };
    for (mark, word) in [(SnapshotMark::Within, "true"), (SnapshotMark::Last, "last")] {
        let (records, diverted) = encoder
            .encode_copy(&target(), &doc, None, mark)
            .expect("encodes");
        assert!(diverted.is_none());
        assert_eq!(records.len(), 1);
        let value = value(&records[0]);
        let (head, source) = value.split_once(r#""source":{"#).expect("a source");
        assert_eq!(
            head,
            r#"{"before":null,"after":"{\"_id\": 1,\"name\": \"snap-int-id\",\"n\": 1}","updateDescription":null,"#
        );
        let expected_tail = format!(r#""snapshot":"{word}","db":"smoke","sequence":null,"#);
        assert!(source.contains(&expected_tail), "{source}");
        assert!(
            source.ends_with(
                r#""collection":"c094703","ord":-1,"lsid":null,"txnNumber":null,"wallTime":null},"op":"r","ts_ms":0,"transaction":null}"#
            ),
            "{source}"
        );
        assert_eq!(text(&records[0].key), r#"{"id":"1"}"#);
    }
    assert!(
        encoder.markers(&target(), Marker::End, 1, 3).is_empty(),
        "no snapshot markers"
    );
}

/// The schemas-on record `dbz092117` wrote for the delete in its transaction.
const SCHEMAS_DELETE: &str = include_str!("tests/schemas_delete.json");

#[test]
fn schemas_on_wrap_key_and_value_in_debeziums_schemas() {
    let mut encoder = {
        let text = "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
                    [[pipelines]]\nname = \"p\"\ndatabase = \"smoke\"\ncollection = \"c092117\"\n\
                    value = \"debezium\"\n[pipelines.debezium]\ntopic_prefix = \"dbz092117\"\n\
                    schemas = true\n";
        let config = Config::from_toml(text, std::iter::empty()).expect("valid");
        RecordEncoder::new(&config.pipelines[0], "")
    };
    let oid = ObjectId::parse_str("65f000000000000000000002").expect("oid");
    let lsid = rawdoc! {
        "id": Binary { subtype: BinarySubtype::Uuid, bytes: b"\x83\xa5\x34\x9d\x4a\xf6\x4d\x64\xa0\xac\xf7\xa9\x1a\x0b\x06\x34".to_vec() },
    };
    let mut raw = event(
        "delete",
        1_796_289_717_524,
        8,
        RawBson::ObjectId(oid),
        rawdoc! { "lsid": lsid, "txnNumber": 9_i64 },
    );
    raw = rename_collection(&raw, "c092117");
    let encoded = encoder.encode(&raw).expect("encodes");
    let (key, value_text) = SCHEMAS_DELETE
        .trim_end()
        .split_once('\n')
        .expect("two lines");
    assert_eq!(text(&encoded.records[0].key), key);
    assert_eq!(value(&encoded.records[0]), processing_time_zero(value_text));
    assert_eq!(
        encoded.records[1].value, None,
        "a tombstone is null, schema or not"
    );
}

/// `raw` with `ns.coll` set to `coll`.
fn rename_collection(raw: &RawDocument, coll: &str) -> RawDocumentBuf {
    let mut out = RawDocumentBuf::new();
    for element in raw {
        let (name, value) = element.expect("valid");
        if name == "ns" {
            out.append("ns", rawdoc! { "db": "smoke", "coll": coll });
        } else {
            out.append_ref(name, value);
        }
    }
    out
}
