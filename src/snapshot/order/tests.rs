//! MongoDB's comparison order over BSON vectors: the cases of the documented order
//! (<https://www.mongodb.com/docs/manual/reference/bson-type-comparison-order/>).

use std::cmp::Ordering;

use bson::spec::BinarySubtype;
use bson::{Binary, RawBson, Timestamp, oid::ObjectId, rawdoc};

use super::{Strings, compare, follows};

fn cmp(a: &RawBson, b: &RawBson) -> Option<Ordering> {
    compare(a.as_raw_bson_ref(), b.as_raw_bson_ref(), Strings::Binary)
}

fn dec(text: &str) -> RawBson {
    RawBson::Decimal128(text.parse().expect("a decimal"))
}

fn bin(subtype: BinarySubtype, bytes: &[u8]) -> RawBson {
    RawBson::Binary(Binary {
        subtype,
        bytes: bytes.to_vec(),
    })
}

/// Each value is strictly below the next one.
fn assert_strictly_increasing(values: &[RawBson]) {
    for pair in values.windows(2) {
        assert_eq!(cmp(&pair[0], &pair[1]), Some(Ordering::Less), "{pair:?}");
        assert_eq!(cmp(&pair[1], &pair[0]), Some(Ordering::Greater), "{pair:?}");
    }
}

#[test]
fn types_sort_in_the_documented_order() {
    assert_strictly_increasing(&[
        RawBson::MinKey,
        RawBson::Undefined,
        RawBson::Null,
        RawBson::Double(f64::NAN),
        RawBson::Int32(-5),
        RawBson::String(String::new()),
        RawBson::Document(rawdoc! {}),
        RawBson::Array(bson::RawArrayBuf::new()),
        bin(BinarySubtype::Generic, &[]),
        RawBson::ObjectId(ObjectId::from_bytes([0; 12])),
        RawBson::Boolean(false),
        RawBson::Boolean(true),
        RawBson::DateTime(bson::DateTime::from_millis(i64::MIN)),
        RawBson::Timestamp(Timestamp {
            time: 0,
            increment: 0,
        }),
        RawBson::RegularExpression(bson::Regex {
            pattern: "a".into(),
            options: String::new(),
        }),
        RawBson::JavaScriptCode("x".into()),
        RawBson::MaxKey,
    ]);
}

#[test]
fn numbers_compare_by_value_across_int_long_double_and_decimal() {
    assert_strictly_increasing(&[
        RawBson::Double(f64::NAN),
        RawBson::Double(f64::NEG_INFINITY),
        RawBson::Int64(i64::MIN),
        RawBson::Int32(-1),
        RawBson::Double(-0.5),
        dec("0.25"),
        RawBson::Int32(1),
        RawBson::Double(1.5),
        RawBson::Int64(2),
        dec("2.5"),
        RawBson::Int64(i64::MAX - 1),
        RawBson::Int64(i64::MAX),
        RawBson::Double(9_223_372_036_854_775_808.0),
        RawBson::Double(f64::INFINITY),
    ]);
    assert_eq!(
        cmp(&RawBson::Int32(3), &RawBson::Double(3.0)),
        Some(Ordering::Equal)
    );
    assert_eq!(
        cmp(&RawBson::Int64(3), &RawBson::Int32(3)),
        Some(Ordering::Equal)
    );
    assert_eq!(
        cmp(&RawBson::Double(-0.0), &RawBson::Int32(0)),
        Some(Ordering::Equal)
    );
    // An i64 is compared exactly, not rounded to a double.
    let big = (1_i64 << 53) + 1;
    assert_eq!(
        cmp(&RawBson::Int64(big), &RawBson::Double((1_i64 << 53) as f64)),
        Some(Ordering::Greater)
    );
    // Decimals equal as doubles are not decided.
    assert_eq!(cmp(&dec("1"), &RawBson::Int32(1)), None);
    assert_eq!(cmp(&dec("NaN"), &RawBson::Double(f64::NAN)), None);
}

#[test]
fn strings_compare_by_bytes_unless_a_collation_orders_them() {
    assert_strictly_increasing(&[
        RawBson::String("A".into()),
        RawBson::Symbol("B".into()),
        RawBson::String("a".into()),
        RawBson::String("ab".into()),
        RawBson::String("é".into()),
    ]);
    let (a, b) = (RawBson::String("b".into()), RawBson::String("a".into()));
    let unchecked = compare(a.as_raw_bson_ref(), b.as_raw_bson_ref(), Strings::Unchecked);
    assert_eq!(unchecked, None);
    assert!(follows(
        a.as_raw_bson_ref(),
        b.as_raw_bson_ref(),
        Strings::Unchecked
    ));
    // Strings inside a document are not decided either under a collation.
    let (x, y) = (
        RawBson::Document(rawdoc! { "s": "b" }),
        RawBson::Document(rawdoc! { "s": "a" }),
    );
    assert_eq!(
        compare(x.as_raw_bson_ref(), y.as_raw_bson_ref(), Strings::Unchecked),
        None
    );
}

#[test]
fn documents_compare_pair_by_pair_type_then_name_then_value() {
    let d = |doc: bson::RawDocumentBuf| RawBson::Document(doc);
    assert_strictly_increasing(&[
        d(rawdoc! {}),
        d(rawdoc! { "k": 0, "t": "subdoc" }),
        d(rawdoc! { "k": 1, "t": "subdoc" }),
        // k = 256 is above k = 1 whatever its bytes (little-endian 00 01 00 00).
        d(rawdoc! { "k": 256, "t": "subdoc" }),
        d(rawdoc! { "k": 256, "t": "subdoc", "u": 1 }),
        d(rawdoc! { "k": 256.5 }),
        // A string value ranks above any number, whatever the field names.
        d(rawdoc! { "a": "x" }),
        d(rawdoc! { "b": "x" }),
        d(rawdoc! { "b": { "c": 1 } }),
    ]);
    // Numbers of different types inside documents compare by value.
    assert_eq!(
        cmp(&d(rawdoc! { "k": 2_i64 }), &d(rawdoc! { "k": 2.0 })),
        Some(Ordering::Equal)
    );
}

#[test]
fn binary_sorts_by_length_then_subtype_then_bytes() {
    assert_strictly_increasing(&[
        bin(BinarySubtype::Uuid, &[9]),
        bin(BinarySubtype::Generic, &[0, 0]),
        bin(BinarySubtype::Generic, &[0, 1]),
        bin(BinarySubtype::Uuid, &[0, 0]),
    ]);
}

#[test]
fn dates_timestamps_and_object_ids_by_value() {
    assert_strictly_increasing(&[
        RawBson::ObjectId(ObjectId::from_bytes([0; 12])),
        RawBson::ObjectId(ObjectId::from_bytes([1; 12])),
    ]);
    assert_strictly_increasing(&[
        RawBson::DateTime(bson::DateTime::from_millis(-1)),
        RawBson::DateTime(bson::DateTime::from_millis(0)),
    ]);
    let ts = |time, increment| RawBson::Timestamp(Timestamp { time, increment });
    assert_strictly_increasing(&[ts(1, 9), ts(2, 0), ts(u32::MAX, 0)]);
}

#[test]
fn a_copy_follows_only_a_strictly_smaller_id() {
    let (one, two) = (RawBson::Int32(1), RawBson::Int64(2));
    let follows = |a: &RawBson, b: &RawBson| {
        follows(a.as_raw_bson_ref(), b.as_raw_bson_ref(), Strings::Binary)
    };
    assert!(follows(&one, &two));
    assert!(!follows(&two, &one));
    assert!(
        !follows(&one, &RawBson::Double(1.0)),
        "equal is a violation"
    );
    // The disorder SecantusDB's index makes (INFRA.md): k = 256 before k = 1.
    let (k256, k1) = (
        RawBson::Document(rawdoc! { "k": 256, "t": "subdoc" }),
        RawBson::Document(rawdoc! { "k": 1, "t": "subdoc" }),
    );
    assert!(!follows(&k256, &k1));
}
