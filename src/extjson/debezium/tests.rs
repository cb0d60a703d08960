//! Hand-checked unit tests of the Java rules and the writers, and the property test.
#![allow(clippy::unwrap_used)]

use bson::{RawDocumentBuf, rawdoc};
use proptest::prelude::*;

use super::java::{java_raw, write_java_string};
use super::*;

#[test]
fn java_double_to_string_known_values() {
    // GIVEN values whose JDK 17 text is documented or known (JDK-4511638), WHEN printed,
    // THEN they read as JDK 17 prints them, including its non-shortest results.
    let cases: &[(f64, &str)] = &[
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.0, "1.0"),
        (7.0, "7.0"),
        (100.0, "100.0"),
        (0.001, "0.001"),
        (9.99e-4, "9.99E-4"),
        (1234567.0, "1234567.0"),
        (1e7, "1.0E7"),
        (12345678.9, "1.23456789E7"),
        (123456789.0, "1.23456789E8"),
        (1e16, "1.0E16"),
        (1e20, "1.0E20"),
        (1e21, "1.0E21"),
        (1e23, "9.999999999999999E22"),
        (2e23, "1.9999999999999998E23"),
        (8.41e21, "8.409999999999999E21"),
        (4_611_686_018_427_387_904.0, "4.6116860184273879E18"),
        (1_152_921_504_606_847_232.0, "1.15292150460684723E18"),
        (1e-7, "1.0E-7"),
        (1.5e-7, "1.5E-7"),
        (f64::MIN_POSITIVE, "2.2250738585072014E-308"),
        (f64::from_bits(1), "4.9E-324"),
        (f64::MAX, "1.7976931348623157E308"),
        (f64::NAN, "NaN"),
        (f64::INFINITY, "Infinity"),
        (f64::NEG_INFINITY, "-Infinity"),
        (-1.0 / 3.0, "-0.3333333333333333"),
    ];
    for &(v, expected) in cases {
        assert_eq!(java_double_to_string(v), expected, "{v:e}");
    }
}

#[test]
fn java_escaping_classes() {
    // Raw: letters (not modifier letters), digits, punctuation, symbols, space separators.
    for c in [
        'a', 'é', '✓', '\u{a0}', '/', '<', '&', '>', '\'', '\u{1fbf}', 'ア', '١',
    ] {
        assert!(java_raw(c as u16), "{c:?} should be raw");
    }
    // Escaped: controls, DEL, C1, format, marks, modifier letters, separators, private use,
    // unassigned in Unicode 13, surrogates.
    for unit in [
        0x00, 0x1F, 0x7F, 0x85, 0xAD, 0x200D, 0x0301, 0x02B0, 0x0640, 0x2028, 0x2029, 0xE000,
        0x0378, 0x0C5D, 0xD83D, 0xDE00, 0xFEFF,
    ] {
        assert!(!java_raw(unit), "U+{unit:04X} should be escaped");
    }
    let mut out = String::new();
    write_java_string(&mut out, "a\"\\\u{8}\u{c}\n\r\t\u{0}😀é");
    assert_eq!(out, r#""a\"\\\b\f\n\r\t\u0000\ud83d\ude00é""#);
}

#[test]
fn too_deep_is_an_error_not_a_crash() {
    let mut doc = rawdoc! { "leaf": 1 };
    for _ in 0..crate::extjson::MAX_DEPTH {
        doc = rawdoc! { "d": doc };
    }
    assert!(matches!(after_json(&doc), Err(DebeziumJsonError::TooDeep)));
}

#[test]
fn db_pointer_and_old_binary() {
    // GIVEN hand-made BSON (pymongo and SecantusDB cannot keep these types), WHEN written,
    // THEN as the Java writer does (bench/peers/DebeziumJsonProbe.java, probe-vectors.jsonl).
    let mut bytes = vec![0u8; 4];
    bytes.extend_from_slice(b"\x0cp\0");
    bytes.extend_from_slice(&8i32.to_le_bytes());
    bytes.extend_from_slice(b"db.coll\0");
    bytes.extend_from_slice(&[0x65, 0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3]);
    bytes.extend_from_slice(b"\x05b\0");
    bytes.extend_from_slice(&7i32.to_le_bytes());
    bytes.push(2);
    bytes.extend_from_slice(&3i32.to_le_bytes());
    bytes.extend_from_slice(b"abc");
    bytes.push(0);
    let len = bytes.len() as i32;
    bytes[..4].copy_from_slice(&len.to_le_bytes());
    let doc = RawDocumentBuf::from_bytes(bytes).unwrap();
    assert_eq!(
        after_json(&doc).unwrap(),
        concat!(
            r#"{"p": {"$ref": "db.coll","$id": {"$oid": "65a000000000000000000003"}},"#,
            r#""b": {"$binary": "YWJj","$type": "02"}}"#,
        )
    );
    assert_eq!(
        updated_fields_json(&doc).unwrap(),
        concat!(
            r#"{"p": {"$ref": "db.coll", "$id": {"$oid": "65a000000000000000000003"}}, "#,
            r#""b": {"$binary": {"base64": "YWJj", "subType": "02"}}}"#,
        )
    );
}

/// A random key: any string without NUL (BSON keys are C strings).
fn key() -> impl Strategy<Value = String> {
    "[^\\x00]{0,8}"
}

/// A random BSON value of the types the legacy strict format can carry back: everything but
/// non-finite doubles (written bare, not JSON). Depth-limited.
fn value() -> impl Strategy<Value = bson::Bson> {
    use bson::Bson;
    let leaf = prop_oneof![
        any::<i32>().prop_map(Bson::Int32),
        any::<i64>().prop_map(Bson::Int64),
        any::<f64>()
            .prop_filter("finite", |v| v.is_finite())
            .prop_map(Bson::Double),
        prop::num::f64::NORMAL.prop_map(Bson::Double),
        any::<String>().prop_map(Bson::String),
        any::<bool>().prop_map(Bson::Boolean),
        Just(Bson::Null),
        any::<i64>().prop_map(|ms| Bson::DateTime(bson::DateTime::from_millis(ms))),
        any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(bson::oid::ObjectId::from_bytes(b))),
        (prop::collection::vec(any::<u8>(), 0..20), 0u8..10).prop_map(|(bytes, t)| {
            Bson::Binary(bson::Binary {
                subtype: bson::spec::BinarySubtype::from(if t == 2 { 0 } else { t }),
                bytes,
            })
        }),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(bson::Bson::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|fields| { bson::Bson::Document(fields.into_iter().collect()) }),
        ]
    })
}

/// Reads the legacy strict JSON back into BSON: plain integers are Int32 (the only type the
/// writer prints bare without a point or exponent), wrappers by their `$` keys.
fn from_strict(value: &serde_json::Value) -> bson::Bson {
    use bson::Bson;
    use serde_json::Value;
    match value {
        Value::Null => Bson::Null,
        Value::Bool(b) => Bson::Boolean(*b),
        Value::Number(n) if n.is_f64() => Bson::Double(n.as_f64().unwrap()),
        Value::Number(n) => Bson::Int32(i32::try_from(n.as_i64().unwrap()).unwrap()),
        Value::String(s) => Bson::String(s.clone()),
        Value::Array(items) => Bson::Array(items.iter().map(from_strict).collect()),
        Value::Object(map) => {
            let keys: Vec<&str> = map.keys().map(String::as_str).collect();
            match keys.as_slice() {
                ["$numberLong"] => {
                    Bson::Int64(map["$numberLong"].as_str().unwrap().parse().unwrap())
                }
                ["$date"] => {
                    Bson::DateTime(bson::DateTime::from_millis(map["$date"].as_i64().unwrap()))
                }
                ["$oid"] => Bson::ObjectId(map["$oid"].as_str().unwrap().parse().unwrap()),
                ["$binary", "$type"] => Bson::Binary(bson::Binary {
                    subtype: u8::from_str_radix(map["$type"].as_str().unwrap(), 16)
                        .unwrap()
                        .into(),
                    bytes: super::replay_tests::base64_decode(map["$binary"].as_str().unwrap()),
                }),
                _ => Bson::Document(
                    map.iter()
                        .map(|(k, v)| (k.clone(), from_strict(v)))
                        .collect(),
                ),
            }
        }
    }
}

/// `value` with every double as serde_json reads JDK 17's text of it: serde_json's default
/// float parser may be one ulp off, so exactness is `java_doubles_read_back`'s business (Rust's
/// parser) and this comparison checks the structure and every other value.
fn through_serde_json(value: bson::Bson) -> bson::Bson {
    use bson::Bson;
    match value {
        Bson::Double(v) => Bson::Double(serde_json::from_str(&java_double_to_string(v)).unwrap()),
        Bson::Array(items) => Bson::Array(items.into_iter().map(through_serde_json).collect()),
        Bson::Document(doc) => Bson::Document(
            doc.into_iter()
                .map(|(k, v)| (k, through_serde_json(v)))
                .collect(),
        ),
        other => other,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The strict writer's output is JSON and carries the values back (keys and order too);
    /// the relaxed writers' outputs are JSON; doubles round-trip through JDK 17's text.
    #[test]
    fn strict_output_round_trips(fields in prop::collection::vec((key(), value()), 0..8)) {
        let doc: bson::Document = fields.into_iter().collect();
        let raw = RawDocumentBuf::from_document(&doc).unwrap();
        let text = after_json(&raw).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        // Documents that spell a wrapper ({"$oid": …}) cannot come back as documents; the
        // generated keys practically never do.
        prop_assert_eq!(from_strict(&parsed), through_serde_json(bson::Bson::Document(doc)));
        let relaxed = updated_fields_json(&raw).unwrap();
        prop_assert!(serde_json::from_str::<serde_json::Value>(&relaxed).unwrap().is_object());
    }

    #[test]
    fn java_doubles_read_back(bits in any::<u64>()) {
        let v = f64::from_bits(bits);
        prop_assume!(v.is_finite());
        let text = java_double_to_string(v);
        prop_assert_eq!(text.parse::<f64>().unwrap().to_bits(), bits);
    }

    #[test]
    fn keys_are_json_with_one_string(id in value()) {
        let mut key = RawDocumentBuf::new();
        key.append("_id", bson::RawBson::try_from(id).unwrap());
        let text = key_json(&key).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        prop_assert!(parsed["id"].is_string());
    }
}
