//! Tests of the record formats (`format`, `key_format`, `mongo.format`) and of the
//! `on_ambiguous` policy: what JSON cannot carry exactly is never written as JSON.

use bson::{RawDocumentBuf, Timestamp, rawdoc};

use super::*;
use crate::config::Config;

fn encoder(pipeline_extra: &str) -> RecordEncoder {
    let text = format!(
        "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
         [[pipelines]]\nname = \"p\"\ndatabase = \"shop\"\ncollection = \"orders\"\n\
         full_document = \"update_lookup\"\n{pipeline_extra}"
    );
    let config = Config::from_toml(&text, std::iter::empty()).expect("valid");
    RecordEncoder::new(&config.pipelines[0], "")
}

/// An insert of `document` (whose `_id` is the document key).
fn insert(document: RawDocumentBuf) -> RawDocumentBuf {
    let id = document
        .get("_id")
        .expect("readable")
        .expect("has _id")
        .to_raw_bson();
    let mut key = RawDocumentBuf::new();
    key.append("_id", id);
    rawdoc! {
        "_id": { "_data": "8200" },
        "operationType": "insert",
        "clusterTime": Timestamp { time: 1_700_000_000, increment: 1 },
        "fullDocument": document,
        "ns": { "db": "shop", "coll": "orders" },
        "documentKey": key,
    }
}

fn header<'a>(record: &'a Record, name: &str) -> Option<&'a [u8]> {
    record
        .headers
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.as_slice())
}

#[test]
fn bson_values_and_keys_are_the_servers_bytes() {
    // GIVEN an insert, and pipelines that publish BSON
    let event = insert(rawdoc! { "_id": 1_i64, "f": { "$date": "not a date" } });
    for (extra, value_bytes) in [
        ("format = \"bson\"\n", event.as_bytes().to_vec()),
        (
            "format = \"bson\"\nvalue = \"document\"\n",
            rawdoc! { "_id": 1_i64, "f": { "$date": "not a date" } }
                .as_bytes()
                .to_vec(),
        ),
    ] {
        let mut encoder = encoder(&format!("{extra}key_format = \"bson\"\n"));
        // WHEN it is encoded
        let encoded = encoder.encode(&event).expect("encodes");
        // THEN value and key are BSON, untouched (a $-key is no problem in BSON)
        let record = &encoded.records[0];
        assert_eq!(
            record.value.as_deref(),
            Some(value_bytes.as_slice()),
            "{extra}"
        );
        assert_eq!(record.key, rawdoc! { "_id": 1_i64 }.as_bytes().to_vec());
        assert_eq!(header(record, "mongo.format"), Some(&b"bson"[..]));
        assert_eq!(encoded.diverted, None);
    }
}

#[test]
fn a_json_value_can_have_a_bson_key_and_namespace_keys_follow_key_format() {
    let mut encoder = encoder("key_format = \"bson\"\njson = \"canonical\"\n");
    let drop = rawdoc! {
        "_id": { "_data": "8201" }, "operationType": "drop",
        "ns": { "db": "shop", "coll": "orders" },
    };
    let encoded = encoder.encode(&drop).expect("encodes");
    let record = &encoded.records[0];
    assert_eq!(
        record.key,
        rawdoc! { "db": "shop", "coll": "orders" }
            .as_bytes()
            .to_vec()
    );
    assert_eq!(header(record, "mongo.format"), Some(&b"json-canonical"[..]));
}

#[test]
fn an_ambiguous_document_fails_naming_the_key_the_field_and_the_fix() {
    let event = insert(rawdoc! { "_id": 1, "f": { "$date": "2020-01-01T00:00:00Z" } });
    let error = encoder("").encode(&event).expect_err("ambiguous");
    assert_eq!(
        error.to_string(),
        "the event of document {\"_id\":{\"$numberInt\":\"1\"}} cannot be written as Extended \
         JSON exactly: field \"fullDocument.f.$date\": a parser would not read it back as \
         written: the key is an Extended JSON type-wrapper keyword. Remedy: set on_ambiguous = \
         \"bson\" (that event is published as BSON) or \"dead_letter\" (a stub goes to \
         dead_letter_topic), or format = \"bson\" for every event"
    );
}

#[test]
fn on_ambiguous_bson_publishes_that_event_as_bson() {
    let event = insert(rawdoc! { "_id": 1, "f": { "$oid": "x" } });
    let encoded = encoder("on_ambiguous = \"bson\"\n")
        .encode(&event)
        .expect("encodes");
    let record = &encoded.records[0];
    assert_eq!(record.value.as_deref(), Some(event.as_bytes()));
    // The key is not ambiguous: it stays canonical Extended JSON, like the document's others.
    assert_eq!(record.key, br#"{"_id":{"$numberInt":"1"}}"#.to_vec());
    assert_eq!(header(record, "mongo.format"), Some(&b"bson"[..]));
    let diverted = encoded.diverted.expect("diverted");
    assert_eq!(diverted.outcome, "bson");
    assert_eq!(diverted.problem.path, "fullDocument.f.$oid");
}

#[test]
fn an_ambiguous_key_becomes_a_bson_key_for_every_event_of_its_document() {
    let key = rawdoc! { "_id": { "$date": 5 } };
    let event = rawdoc! {
        "_id": { "_data": "8202" }, "operationType": "delete",
        "ns": { "db": "shop", "coll": "orders" }, "documentKey": key.clone(),
    };
    let encoded = encoder("on_ambiguous = \"bson\"\n")
        .encode(&event)
        .expect("encodes");
    assert_eq!(encoded.records.len(), 2, "the delete and its tombstone");
    for record in &encoded.records {
        assert_eq!(record.key, key.as_bytes().to_vec());
    }
    assert_eq!(
        encoded.diverted.expect("diverted").problem.path,
        "documentKey._id.$date"
    );
}

#[test]
fn on_ambiguous_dead_letter_replaces_the_records_by_a_stub() {
    let event = insert(rawdoc! { "_id": 1, "f": { "$numberLong": "1", "x": 2 } });
    let mut encoder = encoder("on_ambiguous = \"dead_letter\"\ndead_letter_topic = \"dlq\"\n");
    let encoded = encoder.encode(&event).expect("encodes");
    assert_eq!(encoded.records.len(), 1);
    let stub = &encoded.records[0];
    assert_eq!(&*stub.topic, "dlq");
    assert_eq!(stub.key, br#"{"_id":{"$numberInt":"1"}}"#.to_vec());
    assert_eq!(header(stub, "mongo.format"), Some(&b"json-canonical"[..]));
    let value: serde_json::Value =
        serde_json::from_slice(stub.value.as_deref().expect("value")).expect("JSON");
    assert_eq!(value["topic"], "shop.orders");
    assert_eq!(
        value["documentKey"],
        serde_json::json!({"_id": {"$numberInt": "1"}})
    );
    assert!(
        value["reason"]
            .as_str()
            .expect("reason")
            .contains("type-wrapper")
    );
    assert_eq!(encoded.diverted.expect("diverted").outcome, "dead_lettered");
}

#[test]
fn invalid_utf8_goes_to_the_policy_unless_replacement_is_asked_for() {
    // GIVEN a document whose string holds an invalid byte
    let mut bytes = insert(rawdoc! { "_id": 1, "name": "abc" }).into_bytes();
    let at = bytes.windows(3).position(|w| w == b"abc").expect("value");
    bytes[at + 1] = 0xFF;
    let event = RawDocumentBuf::from_bytes(bytes).expect("framed");
    // THEN by default it fails, naming the field and the opt-in
    let error = encoder("").encode(&event).expect_err("not UTF-8");
    let text = error.to_string();
    assert!(
        text.contains("field \"fullDocument.name\": not valid UTF-8"),
        "{text}"
    );
    assert!(text.contains("replace_invalid_utf8 = true"), "{text}");
    // AND with the opt-in it is written with U+FFFD
    let encoded = encoder("replace_invalid_utf8 = true\n")
        .encode(&event)
        .expect("encodes");
    let value = String::from_utf8(encoded.records[0].value.clone().expect("value")).expect("UTF-8");
    assert!(value.contains("\"name\":\"a\u{FFFD}c\""), "{value}");
}
