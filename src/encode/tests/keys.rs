//! Keys (C14, C20, C21).

use super::*;

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
