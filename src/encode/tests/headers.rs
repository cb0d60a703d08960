//! The record headers.

use super::*;

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
