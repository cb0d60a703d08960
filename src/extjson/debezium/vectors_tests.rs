//! Inline vectors of the value writers: strings the real Debezium 3.6.3 wrote (JDK 17,
//! SecantusDB, Kafka 4.4; `bench/peers/capture_debezium.py`) for the tricky values, typed in
//! as literals, so every `cargo test` enforces byte-exactness without the capture. Keys and
//! `updateDescription` are in `key_tests.rs`; the full replay in `replay_tests.rs`.
#![allow(clippy::unwrap_used)]

use bson::spec::BinarySubtype;
use bson::{Binary, Decimal128, RawArrayBuf, RawDocumentBuf, Regex, Timestamp, rawdoc};

use super::*;

/// A BSON array of `items` (`rawdoc!` takes no `Vec`).
pub(super) fn arr<T: Into<bson::RawBson>>(items: impl IntoIterator<Item = T>) -> RawArrayBuf {
    let mut array = RawArrayBuf::new();
    for item in items {
        array.push(item);
    }
    array
}

fn strict(doc: &RawDocumentBuf) -> String {
    after_json(doc).unwrap()
}

fn relaxed(doc: &RawDocumentBuf) -> String {
    updated_fields_json(doc).unwrap()
}

/// The doubles of the capture's types document, in its order.
const DOUBLES: [f64; 58] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    7.0,
    3.25,
    0.1,
    0.2,
    0.3,
    1.0 / 3.0,
    2.0 / 3.0,
    100.0,
    4.35,
    2.5,
    1e-3,
    9.99e-4,
    1e-4,
    1e-7,
    1.5e-7,
    123456789.0,
    1234567.0,
    9999999.0,
    1e7,
    1.0000001e7,
    12345678.9,
    1e15,
    1e16,
    1e17,
    1e20,
    1e21,
    1e22,
    1e23,
    2e23,
    8.41e21,
    5e-324,
    2.2250738585072014e-308,
    2.225073858507201e-308,
    1.7976931348623157e308,
    9007199254740993.0,
    9007199254740992.0,
    9223372036854775808.0,
    18446744073709551616.0,
    4611686018427387904.0,
    1152921504606847232.0,
    1.1e-310,
    4.9e-324,
    1e-300,
    1e300,
    3.0e10,
    1.0e-5,
    5.0e-5,
    0.001,
    0.01,
    0.5,
    9.5,
    1000000.5,
    4.9e-324,
    1.2345678901234567e-8,
];

const DOUBLES_STRICT: &str = concat!(
    "0.0,-0.0,1.0,-1.0,7.0,3.25,0.1,0.2,0.3,0.3333333333333333,0.6666666666666666,100.0,4.35,",
    "2.5,0.001,9.99E-4,1.0E-4,1.0E-7,1.5E-7,1.23456789E+8,1234567.0,9999999.0,1.0E+7,",
    "1.0000001E+7,1.23456789E+7,1.0E+15,1.0E+16,1.0E+17,1.0E+20,1.0E+21,1.0E+22,",
    "9.999999999999999E+22,1.9999999999999998E+23,8.409999999999999E+21,4.9E-324,",
    "2.2250738585072014E-308,2.225073858507201E-308,1.7976931348623157E+308,",
    "9.007199254740992E+15,9.007199254740992E+15,9.223372036854776E+18,1.8446744073709552E+19,",
    "4.6116860184273879E+18,1.15292150460684723E+18,1.1E-310,4.9E-324,1.0E-300,1.0E+300,",
    "3.0E+10,1.0E-5,5.0E-5,0.001,0.01,0.5,9.5,1000000.5,4.9E-324,1.2345678901234567E-8",
);

#[test]
fn doubles_as_debezium_writes_them() {
    let doc = rawdoc! {
        "d": arr(DOUBLES), "nan": f64::NAN, "inf": f64::INFINITY, "ninf": f64::NEG_INFINITY,
    };
    assert_eq!(
        strict(&doc),
        format!(r#"{{"d": [{DOUBLES_STRICT}],"nan": NaN,"inf": Infinity,"ninf": -Infinity}}"#)
    );
    let non_finite = concat!(
        r#""nan": {"$numberDouble": "NaN"}, "inf": {"$numberDouble": "Infinity"}, "#,
        r#""ninf": {"$numberDouble": "-Infinity"}"#,
    );
    assert_eq!(
        relaxed(&doc),
        format!(
            r#"{{"d": [{}], {non_finite}}}"#,
            DOUBLES_STRICT.replace(',', ", ")
        )
    );
}

#[test]
fn integers_and_decimals() {
    let decimals: Vec<Decimal128> = [
        "0",
        "-0",
        "1.0",
        "12345.678900",
        "0.0000001",
        "1.23E+40",
        "-1.5E-8",
        "0E-10",
        "1E-6176",
        "9.999999999999999999999999999999999E+6144",
        "NaN",
        "-NaN",
        "-Infinity",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    let doc = rawdoc! {
        "i32": [0, 1, -1, i32::MAX, i32::MIN],
        "i64": [0_i64, 7_i64, 9007199254740993_i64, i64::MAX, i64::MIN],
        "dec": arr(decimals),
    };
    let decimals = concat!(
        r#"[{"$numberDecimal": "0"},{"$numberDecimal": "-0"},{"$numberDecimal": "1.0"},"#,
        r#"{"$numberDecimal": "12345.678900"},{"$numberDecimal": "1E-7"},"#,
        r#"{"$numberDecimal": "1.23E+40"},{"$numberDecimal": "-1.5E-8"},"#,
        r#"{"$numberDecimal": "0E-10"},{"$numberDecimal": "1E-6176"},"#,
        r#"{"$numberDecimal": "9.999999999999999999999999999999999E+6144"},"#,
        r#"{"$numberDecimal": "NaN"},{"$numberDecimal": "NaN"},{"$numberDecimal": "-Infinity"}]"#,
    );
    let longs = concat!(
        r#"{"$numberLong": "0"},{"$numberLong": "7"},{"$numberLong": "9007199254740993"},"#,
        r#"{"$numberLong": "9223372036854775807"},{"$numberLong": "-9223372036854775808"}"#,
    );
    assert_eq!(
        strict(&doc),
        format!(r#"{{"i32": [0,1,-1,2147483647,-2147483648],"i64": [{longs}],"dec": {decimals}}}"#)
    );
    let relaxed_ints = concat!(
        r#""i32": [0, 1, -1, 2147483647, -2147483648], "#,
        r#""i64": [0, 7, 9007199254740993, 9223372036854775807, -9223372036854775808]"#,
    );
    assert_eq!(
        relaxed(&doc),
        format!(
            r#"{{{relaxed_ints}, "dec": {}}}"#,
            decimals.replace("},{", "}, {")
        )
    );
}

#[test]
fn strings_with_every_escaping_class() {
    let doc = rawdoc! {
        "quote": "say \"hi\"", "backslash": "a\\b", "slash": "a/b</c>", "html": "<&>'",
        "controls": (1u8..32).map(char::from).collect::<String>(), "del": "x\u{7f}y",
        "c1": "\u{80}\u{85}\u{9f}", "nul": "a\0b", "e_acute": "é", "check": "✓",
        "nbsp": "a\u{a0}b", "soft_hyphen": "a\u{ad}b", "line_sep": "a\u{2028}b",
        "zwj": "👨\u{200d}👩", "combining": "e\u{301}", "modifier_letter": "ʰˈ", "emoji": "😀",
        "max_cp": "\u{10ffff}", "bom": "\u{feff}", "private": "\u{e000}", "unassigned": "\u{378}",
        "newer_unicode": "\u{c5d}\u{1fbf}\u{1fae8}", "mixed": "Zoë\t\"✓\"\n\\😀",
        "ke\u{1}y\u{2028}😀": 1,
    };
    let expected = concat!(
        r#"{"quote": "say \"hi\"","backslash": "a\\b","slash": "a/b</c>","html": "<&>'","#,
        r#""controls": "\u0001\u0002\u0003\u0004\u0005\u0006\u0007\b\t\n\u000b\f\r\u000e\u000f"#,
        r#"\u0010\u0011\u0012\u0013\u0014\u0015\u0016\u0017\u0018\u0019\u001a\u001b\u001c\u001d"#,
        r#"\u001e\u001f","del": "x\u007fy","c1": "\u0080\u0085\u009f","nul": "a\u0000b","#,
        r#""e_acute": "é","check": "✓","nbsp": "a"#,
        "\u{a0}",
        r#"b","soft_hyphen": "a\u00adb","line_sep": "a\u2028b","#,
        r#""zwj": "\ud83d\udc68\u200d\ud83d\udc69","combining": "e\u0301","#,
        r#""modifier_letter": "\u02b0\u02c8","emoji": "\ud83d\ude00","max_cp": "\udbff\udfff","#,
        r#""bom": "\ufeff","private": "\ue000","unassigned": "\u0378","#,
        r#""newer_unicode": "\u0c5d᾿\ud83e\udee8","mixed": "Zoë\t\"✓\"\n\\\ud83d\ude00","#,
        r#""ke\u0001y\u2028\ud83d\ude00": 1}"#,
    );
    assert_eq!(strict(&doc), expected);
}

#[test]
fn dates_binaries_regexes_timestamps() {
    let millis = [
        0_i64,
        -1,
        1,
        -86400000,
        1714979289000,
        1714979289100,
        1714979289120,
        1714979289123,
        -62135596800000,
        253402300799999,
        253402300800000,
        60000,
    ];
    let bin = |subtype: BinarySubtype, bytes: &[u8]| Binary {
        subtype,
        bytes: bytes.to_vec(),
    };
    let doc = rawdoc! {
        "dates": arr(millis.iter().map(|&ms| bson::DateTime::from_millis(ms))),
        "bin": [
            bin(BinarySubtype::Generic, b"\x01\x02"), bin(BinarySubtype::Generic, b""),
            bin(BinarySubtype::UuidOld, &[0x12; 16]), bin(BinarySubtype::UserDefined(0x8F), b"u"),
            bin(BinarySubtype::UserDefined(0xFF), b"\xff"),
        ],
        "re": [
            Regex { pattern: "a/b\"c\\d".into(), options: "".into() },
            Regex { pattern: "x".into(), options: "xmi".into() },
        ],
        "ts": [Timestamp { time: 1, increment: 2 }, Timestamp { time: u32::MAX, increment: 0 }],
    };
    assert_eq!(
        strict(&doc),
        concat!(
            r#"{"dates": [{"$date": 0},{"$date": -1},{"$date": 1},{"$date": -86400000},"#,
            r#"{"$date": 1714979289000},{"$date": 1714979289100},{"$date": 1714979289120},"#,
            r#"{"$date": 1714979289123},{"$date": -62135596800000},{"$date": 253402300799999},"#,
            r#"{"$date": 253402300800000},{"$date": 60000}],"#,
            r#""bin": [{"$binary": "AQI=","$type": "00"},{"$binary": "","$type": "00"},"#,
            r#"{"$binary": "EhISEhISEhISEhISEhISEg==","$type": "03"},{"$binary": "dQ==","$type": "8F"},"#,
            r#"{"$binary": "/w==","$type": "FF"}],"#,
            r#""re": [{"$regex": "a/b\"c\\d","$options": ""},{"$regex": "x","$options": "imx"}],"#,
            r#""ts": [{"$timestamp": {"t": 1,"i": 2}},{"$timestamp": {"t": 4294967295,"i": 0}}]}"#,
        )
    );
    assert_eq!(
        relaxed(&doc),
        concat!(
            r#"{"dates": [{"$date": "1970-01-01T00:00:00Z"}, {"$date": {"$numberLong": "-1"}}, "#,
            r#"{"$date": "1970-01-01T00:00:00.001Z"}, {"$date": {"$numberLong": "-86400000"}}, "#,
            r#"{"$date": "2024-05-06T07:08:09Z"}, {"$date": "2024-05-06T07:08:09.1Z"}, "#,
            r#"{"$date": "2024-05-06T07:08:09.12Z"}, {"$date": "2024-05-06T07:08:09.123Z"}, "#,
            r#"{"$date": {"$numberLong": "-62135596800000"}}, {"$date": "9999-12-31T23:59:59.999Z"}, "#,
            r#"{"$date": {"$numberLong": "253402300800000"}}, {"$date": "1970-01-01T00:01:00Z"}], "#,
            r#""bin": [{"$binary": {"base64": "AQI=", "subType": "00"}}, "#,
            r#"{"$binary": {"base64": "", "subType": "00"}}, "#,
            r#"{"$binary": {"base64": "EhISEhISEhISEhISEhISEg==", "subType": "03"}}, "#,
            r#"{"$binary": {"base64": "dQ==", "subType": "8F"}}, "#,
            r#"{"$binary": {"base64": "/w==", "subType": "FF"}}], "#,
            r#""re": [{"$regularExpression": {"pattern": "a/b\"c\\d", "options": ""}}, "#,
            r#"{"$regularExpression": {"pattern": "x", "options": "imx"}}], "#,
            r#""ts": [{"$timestamp": {"t": 1, "i": 2}}, {"$timestamp": {"t": 4294967295, "i": 0}}]}"#,
        )
    );
}

#[test]
fn other_types_and_nesting() {
    let scope = rawdoc! { "x": 1_i64, "y": [1.5] };
    let doc = rawdoc! {
        "oid": bson::oid::ObjectId::parse_str("65a000000000000000000001").unwrap(),
        "min": bson::RawBson::MinKey, "max": bson::RawBson::MaxKey, "null": bson::RawBson::Null,
        "t": true, "f": false, "undef": bson::RawBson::Undefined,
        "sym": bson::RawBson::Symbol("symé".into()),
        "code": bson::RawBson::JavaScriptCode("function() { return \"x\"; }".into()),
        "cws": bson::RawBson::JavaScriptCodeWithScope(bson::RawJavaScriptCodeWithScope {
            code: "function() { return x; }".into(), scope,
        }),
        "nested": { "a": { "b": [1, { "c": "d" }, [2, [3, []]]] }, "e": {}, "f": [], "g": { "h": {} } },
    };
    assert_eq!(
        strict(&doc),
        concat!(
            r#"{"oid": {"$oid": "65a000000000000000000001"},"min": {"$minKey": 1},"#,
            r#""max": {"$maxKey": 1},"null": null,"t": true,"f": false,"#,
            r#""undef": {"$undefined": true},"sym": {"$symbol": "symé"},"#,
            r#""code": {"$code": "function() { return \"x\"; }"},"#,
            r#""cws": {"$code": "function() { return x; }","$scope": {"x": {"$numberLong": "1"},"y": [1.5]}},"#,
            r#""nested": {"a": {"b": [1,{"c": "d"},[2,[3,[]]]]},"e": {},"f": [],"g": {"h": {}}}}"#,
        )
    );
    assert!(relaxed(&doc).ends_with(concat!(
        r#""cws": {"$code": "function() { return x; }", "$scope": {"x": 1, "y": [1.5]}}, "#,
        r#""nested": {"a": {"b": [1, {"c": "d"}, [2, [3, []]]]}, "e": {}, "f": [], "g": {"h": {}}}}"#,
    )));
}
