//! Record size, and events that cannot be encoded.

use super::*;

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
    let config = crate::config::Config::from_toml(
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
