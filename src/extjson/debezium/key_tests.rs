//! Inline vectors of the key and `updateDescription` writers (strings the real Debezium 3.6.3
//! wrote, typed in as literals; see `vectors_tests.rs`) and their error cases.
#![allow(clippy::unwrap_used)]

use bson::spec::BinarySubtype;
use bson::{Binary, Decimal128, RawDocumentBuf, Regex, Timestamp, rawdoc};

use super::vectors_tests::arr;
use super::*;

#[test]
fn keys_for_every_id_type() {
    let uuid = Binary {
        subtype: BinarySubtype::Uuid,
        bytes: vec![
            0x12, 0x34, 0x56, 0x78, 0x12, 0x34, 0x56, 0x78, 0x12, 0x34, 0x56, 0x78, 0x12, 0x34,
            0x56, 0x78,
        ],
    };
    let cases: Vec<(RawDocumentBuf, &str)> = vec![
        (rawdoc! { "_id": 1 }, r#"{"id":"1"}"#),
        (
            rawdoc! { "_id": 9007199254740993_i64 },
            r#"{"id":"9007199254740993"}"#,
        ),
        (rawdoc! { "_id": -0.5 }, r#"{"id":"-0.5"}"#),
        (rawdoc! { "_id": 3.0 }, r#"{"id":"3.0"}"#),
        (rawdoc! { "_id": 1e20 }, r#"{"id":"1.0E+20"}"#),
        (
            rawdoc! { "_id": 2e23 },
            r#"{"id":"1.9999999999999998E+23"}"#,
        ),
        (
            rawdoc! { "_id": f64::NAN },
            r#"{"id":"{\"$numberDouble\": \"NaN\"}"}"#,
        ),
        (rawdoc! { "_id": "alpha" }, r#"{"id":"\"alpha\""}"#),
        (rawdoc! { "_id": "" }, r#"{"id":"\"\""}"#),
        (
            rawdoc! { "_id": "q\"uo\\te é ✓ 😀 \u{2028} \u{1}" },
            r#"{"id":"\"q\\\"uo\\\\te é ✓ \\ud83d\\ude00 \\u2028 \\u0001\""}"#,
        ),
        (
            rawdoc! { "_id": bson::oid::ObjectId::parse_str("65a0000000000000000000ff").unwrap() },
            r#"{"id":"{\"$oid\": \"65a0000000000000000000ff\"}"}"#,
        ),
        (
            rawdoc! { "_id": uuid },
            r#"{"id":"{\"$binary\": {\"base64\": \"EjRWeBI0VngSNFZ4EjRWeA==\",\"subType\": \"04\"}}"}"#,
        ),
        (
            rawdoc! { "_id": bson::DateTime::from_millis(1714979289123) },
            r#"{"id":"{\"$date\": \"2024-05-06T07:08:09.123Z\"}"}"#,
        ),
        (
            rawdoc! { "_id": bson::DateTime::from_millis(-86400000) },
            r#"{"id":"{\"$date\": {\"$numberLong\": \"-86400000\"}}"}"#,
        ),
        (
            rawdoc! { "_id": { "a": 5_i64, "d": bson::DateTime::from_millis(1704067200000), "x": [1, 2.0] } },
            r#"{"id":"{\"a\": 5,\"d\": {\"$date\": \"2024-01-01T00:00:00Z\"},\"x\": [1,2.0]}"}"#,
        ),
        (rawdoc! { "_id": {} }, r#"{"id":"{}"}"#),
        (
            rawdoc! { "_id": "-1E+3".parse::<Decimal128>().unwrap() },
            r#"{"id":"{\"$numberDecimal\": \"-1E+3\"}"}"#,
        ),
        (rawdoc! { "_id": true }, r#"{"id":"true"}"#),
        (rawdoc! { "_id": bson::RawBson::Null }, r#"{"id":"null"}"#),
        (
            rawdoc! { "_id": bson::RawBson::MinKey },
            r#"{"id":"{\"$minKey\": 1}"}"#,
        ),
        (
            rawdoc! { "_id": Timestamp { time: 5, increment: 6 } },
            r#"{"id":"{\"$timestamp\": {\"t\": 5,\"i\": 6}}"}"#,
        ),
        (
            rawdoc! { "_id": Regex { pattern: "a".into(), options: "i".into() } },
            r#"{"id":"{\"$regularExpression\": {\"pattern\": \"a\",\"options\": \"i\"}}"}"#,
        ),
        (rawdoc! { "_id": [1, 2] }, r#"{"id":"[1,2]"}"#),
    ];
    for (key, expected) in cases {
        assert_eq!(key_json(&key).unwrap(), expected, "{key:?}");
    }
}

#[test]
fn update_description_fields() {
    let names = [
        "back\\slash",
        "ctl\u{1}",
        "del\u{7f}",
        "line\u{2028}",
        "q\"uote",
        "tab\t",
        "é",
        "😀",
    ];
    let ud = rawdoc! { "updatedFields": {}, "removedFields": arr(names), "truncatedArrays": [] };
    assert_eq!(
        removed_fields_json(&ud).unwrap(),
        concat!(
            r#"["back\\slash","ctl\u0001","del"#,
            "\u{7f}",
            r#"","line"#,
            "\u{2028}",
            r#"","q\"uote","tab\t","é","\uD83D\uDE00"]"#,
        )
    );
    assert_eq!(truncated_arrays_json(&ud).unwrap(), "null");
    let empty = rawdoc! { "updatedFields": {}, "removedFields": [] };
    assert_eq!(removed_fields_json(&empty).unwrap(), "null");
    assert_eq!(updated_fields_json(rawdoc! {}.as_ref()).unwrap(), "{}");
    let updated = rawdoc! {
        "a.b.c": bson::DateTime::from_millis(-1), "a.arr.1": -0.0, "arr.0": 42_i64,
        "new": bson::DateTime::from_millis(1714979289000), "big": 1e21,
        "bin": Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2] }, "s": "é\u{2028}😀",
    };
    assert_eq!(
        updated_fields_json(&updated).unwrap(),
        concat!(
            r#"{"a.b.c": {"$date": {"$numberLong": "-1"}}, "a.arr.1": -0.0, "arr.0": 42, "#,
            r#""new": {"$date": "2024-05-06T07:08:09Z"}, "big": 1.0E+21, "#,
            r#""bin": {"$binary": {"base64": "AQI=", "subType": "00"}}, "s": "é\u2028\ud83d\ude00"}"#,
        )
    );
}

#[test]
fn key_and_update_description_errors() {
    assert!(matches!(
        key_json(&rawdoc! { "x": 1 }),
        Err(DebeziumJsonError::MissingId)
    ));
    let bad = rawdoc! { "removedFields": [1] };
    assert!(matches!(
        removed_fields_json(&bad),
        Err(DebeziumJsonError::UpdateDescription {
            field: "removedFields",
            ..
        })
    ));
    let truncated = rawdoc! {
        "truncatedArrays": [{ "field": "arr", "newSize": 2 }, { "field": "a.b", "newSize": 0 }],
    };
    assert_eq!(
        truncated_arrays_json(&truncated).unwrap(),
        r#"[{"field":"arr","size":2},{"field":"a.b","size":0}]"#
    );
    assert_eq!(removed_fields_json(&rawdoc! {}).unwrap(), "null");
    assert_eq!(
        truncated_arrays_json(&rawdoc! { "truncatedArrays": bson::RawBson::Null }).unwrap(),
        "null"
    );
}
