//! Tests for the Extended JSON transcoder: the BSON corpus, golden strings, property tests
//! (round trip through `bson`'s own Extended JSON parser, arbitrary and mutated bytes) and the
//! shared sample documents.

use std::path::{Path, PathBuf};

use bson::{
    Binary, Bson, DateTime, Decimal128, Document, JavaScriptCodeWithScope, RawDocument,
    RawDocumentBuf, Regex, Timestamp, doc, oid::ObjectId, spec::BinarySubtype,
};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

use super::scalars::{
    ESCAPE, word_needs_escape, write_base64, write_decimal128, write_f64_finite, write_iso8601,
    write_json_string,
};
use super::*;

// ---------------------------------------------------------------- helpers

const MODES: [JsonMode; 2] = [JsonMode::Canonical, JsonMode::Relaxed];

fn raw(doc: &Document) -> RawDocumentBuf {
    RawDocumentBuf::from_document(doc).expect("test document encodes to BSON")
}

fn ej(doc: &Document, mode: JsonMode) -> String {
    to_string(&raw(doc), mode).expect("well-formed BSON transcodes")
}

fn canonical(doc: &Document) -> String {
    ej(doc, JsonMode::Canonical)
}

fn relaxed(doc: &Document) -> String {
    ej(doc, JsonMode::Relaxed)
}

fn parse_json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("invalid JSON ({e}): {s}"))
}

fn from_hex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn shared_dir(name: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data")
        .join(name);
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: {} is absent (not part of a plain clone)",
            dir.display()
        );
        None
    }
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("readable directory")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

/// The value of `map` if it has exactly the one key `key`.
fn single<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    if map.len() == 1 { map.get(key) } else { None }
}

fn parse_double(s: &str) -> Option<f64> {
    match s {
        "Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

fn same_double(a: f64, b: f64, ulps: u64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    a.to_bits() == b.to_bits()
        || (a.is_sign_negative() == b.is_sign_negative()
            && a.to_bits().abs_diff(b.to_bits()) <= ulps)
}

/// ULP tolerance for plain JSON non-integers parsed by serde_json.
const SERDE_ULPS: u64 = 8;

/// Compares parsed JSON: objects key by key *in order*; `$numberDouble` strings by value
/// (bit-exact or both NaN); numbers by kind (integer vs non-integer) and value, non-integers
/// within `ulps` (serde_json is built without `float_roundtrip`, and its default parser can be
/// a few ULPs off for large exponents; `doubles_round_trip_and_read_as_non_integers` checks
/// the exact text with Rust's correctly rounded parser).
fn json_eq(expected: &Value, actual: &Value, path: &str, ulps: u64) -> Result<(), String> {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            if let (Some(Value::String(es)), Some(Value::String(as_))) =
                (single(e, "$numberDouble"), single(a, "$numberDouble"))
            {
                return match (parse_double(es), parse_double(as_)) {
                    (Some(x), Some(y)) if same_double(x, y, 0) => Ok(()),
                    _ => Err(format!("{path}: $numberDouble {es:?} vs {as_:?}")),
                };
            }
            let ek: Vec<&String> = e.keys().collect();
            let ak: Vec<&String> = a.keys().collect();
            if ek != ak {
                return Err(format!("{path}: keys {ek:?} vs {ak:?}"));
            }
            for (k, ev) in e {
                json_eq(ev, &a[k], &format!("{path}.{k}"), ulps)?;
            }
            Ok(())
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                return Err(format!("{path}: array length {} vs {}", e.len(), a.len()));
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                json_eq(ev, av, &format!("{path}[{i}]"), ulps)?;
            }
            Ok(())
        }
        (Value::Number(e), Value::Number(a)) => {
            let ok = if e.is_f64() || a.is_f64() {
                e.is_f64() == a.is_f64()
                    && same_double(
                        e.as_f64().expect("number as f64"),
                        a.as_f64().expect("number as f64"),
                        ulps,
                    )
            } else {
                e.to_string() == a.to_string()
            };
            if ok {
                Ok(())
            } else {
                Err(format!("{path}: number {e} vs {a}"))
            }
        }
        _ if expected == actual => Ok(()),
        _ => Err(format!("{path}: {expected} vs {actual}")),
    }
}

/// Relaxed Extended JSON derived from parsed canonical Extended JSON, per the spec's
/// conversion table: numeric wrappers become JSON numbers (non-finite doubles keep theirs),
/// dates in years 1970..=9999 become RFC 3339 strings. Independent of the encoder (chrono).
fn relax(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(s)) = single(m, "$numberInt") {
                return Value::from(s.parse::<i64>().expect("$numberInt digits"));
            }
            if let Some(Value::String(s)) = single(m, "$numberLong") {
                return Value::from(s.parse::<i64>().expect("$numberLong digits"));
            }
            if let Some(Value::String(s)) = single(m, "$numberDouble") {
                let f = parse_double(s).expect("$numberDouble value");
                if let Some(n) = Number::from_f64(f) {
                    return Value::Number(n);
                }
                return v.clone();
            }
            if let Some(Value::Object(d)) = single(m, "$date") {
                if let Some(Value::String(s)) = single(d, "$numberLong") {
                    let ms: i64 = s.parse().expect("$date millis");
                    if (0..=253_402_300_799_999).contains(&ms) {
                        let t = chrono::DateTime::from_timestamp_millis(ms).expect("in range");
                        let fmt = if ms % 1000 == 0 {
                            "%Y-%m-%dT%H:%M:%SZ"
                        } else {
                            "%Y-%m-%dT%H:%M:%S%.3fZ"
                        };
                        return serde_json::json!({ "$date": t.format(fmt).to_string() });
                    }
                }
                return v.clone();
            }
            Value::Object(m.iter().map(|(k, x)| (k.clone(), relax(x))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(relax).collect()),
        _ => v.clone(),
    }
}

/// Structural equality of `bson` values after an Extended JSON round trip: key order
/// matters; doubles compare bit-exact (any NaN equals any NaN, since JSON has one NaN);
/// Decimal128 compares by its spec string (payloads and non-canonical encodings cannot
/// survive JSON); regex options compare sorted (the encoder sorts them, as the spec says).
fn bson_eq(expected: &Bson, actual: &Bson, path: &str) -> Result<(), String> {
    match (expected, actual) {
        (Bson::Double(a), Bson::Double(b)) if same_double(*a, *b, 0) => Ok(()),
        (Bson::Decimal128(a), Bson::Decimal128(b)) if a.to_string() == b.to_string() => Ok(()),
        (Bson::RegularExpression(a), Bson::RegularExpression(b)) => {
            let mut sorted: Vec<char> = a.options.chars().collect();
            sorted.sort_unstable();
            let sorted: String = sorted.into_iter().collect();
            if a.pattern == b.pattern && sorted == b.options {
                Ok(())
            } else {
                Err(format!("{path}: {a:?} vs {b:?}"))
            }
        }
        (Bson::Document(a), Bson::Document(b)) => doc_eq(a, b, path),
        (Bson::Array(a), Bson::Array(b)) => {
            if a.len() != b.len() {
                return Err(format!("{path}: array length {} vs {}", a.len(), b.len()));
            }
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                bson_eq(x, y, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        (Bson::JavaScriptCodeWithScope(a), Bson::JavaScriptCodeWithScope(b)) => {
            if a.code != b.code {
                return Err(format!("{path}: code {:?} vs {:?}", a.code, b.code));
            }
            doc_eq(&a.scope, &b.scope, &format!("{path}.$scope"))
        }
        _ if expected == actual => Ok(()),
        _ => Err(format!("{path}: {expected:?} vs {actual:?}")),
    }
}

fn doc_eq(a: &Document, b: &Document, path: &str) -> Result<(), String> {
    let ak: Vec<&String> = a.keys().collect();
    let bk: Vec<&String> = b.keys().collect();
    if ak != bk {
        return Err(format!("{path}: keys {ak:?} vs {bk:?}"));
    }
    for (k, v) in a {
        bson_eq(v, &b[k.as_str()], &format!("{path}.{k}"))?;
    }
    Ok(())
}

fn db_pointer(namespace: &str, oid: ObjectId) -> Bson {
    let v =
        serde_json::json!({ "$dbPointer": { "$ref": namespace, "$id": { "$oid": oid.to_hex() } } });
    Bson::try_from(v).expect("bson parses $dbPointer")
}

// ---------------------------------------------------------------- BSON corpus

#[test]
fn bson_corpus_valid_cases() {
    let Some(dir) = shared_dir("bson-corpus") else {
        return;
    };
    let (mut checked, mut exact, mut derived, mut skipped) = (0usize, 0usize, 0usize, 0usize);
    let mut failures = Vec::new();
    for path in json_files(&dir) {
        let name = path
            .file_name()
            .expect("file name")
            .to_string_lossy()
            .into_owned();
        let suite = parse_json(&std::fs::read_to_string(&path).expect("readable corpus file"));
        let Some(cases) = suite.get("valid").and_then(Value::as_array) else {
            continue;
        };
        for case in cases {
            let desc = case["description"].as_str().unwrap_or("?");
            let cej_text = case["canonical_extjson"]
                .as_str()
                .expect("canonical_extjson");
            let cej = parse_json(cej_text);
            let rej = match case.get("relaxed_extjson").and_then(Value::as_str) {
                Some(s) => parse_json(s),
                None => {
                    derived += 1;
                    relax(&cej)
                }
            };
            let mut inputs = vec![("canonical_bson", case["canonical_bson"].as_str())];
            inputs.push(("degenerate_bson", case["degenerate_bson"].as_str()));
            for (which, hex) in inputs {
                let Some(hex) = hex else { continue };
                let Ok(doc) = RawDocumentBuf::from_bytes(from_hex(hex)) else {
                    eprintln!("skipped {name} / {desc} / {which}: not accepted as a document");
                    skipped += 2;
                    continue;
                };
                for (mode, expected) in [(JsonMode::Canonical, &cej), (JsonMode::Relaxed, &rej)] {
                    checked += 1;
                    let got = match to_string(&doc, mode) {
                        Ok(s) => s,
                        Err(e) => {
                            failures.push(format!("{name} / {desc} / {which} / {mode:?}: {e}"));
                            continue;
                        }
                    };
                    if let Err(e) = json_eq(expected, &parse_json(&got), "$", 0) {
                        failures.push(format!(
                            "{name} / {desc} / {which} / {mode:?}: {e}\n    got {got}"
                        ));
                    }
                    if mode == JsonMode::Canonical
                        && serde_json::to_string(expected).expect("serialisable") == got
                    {
                        exact += 1;
                    }
                }
            }
        }
    }
    eprintln!(
        "bson corpus: {checked} valid-case conversions checked ({derived} relaxed \
         expectations derived from canonical_extjson), {skipped} skipped, {exact} canonical \
         outputs byte-identical to the compacted corpus text"
    );
    assert!(checked > 0, "no corpus case found");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn bson_corpus_decode_errors() {
    let Some(dir) = shared_dir("bson-corpus") else {
        return;
    };
    let (mut by_bson, mut by_us, mut lossy) = (0usize, 0usize, 0usize);
    let mut failures = Vec::new();
    for path in json_files(&dir) {
        let name = path
            .file_name()
            .expect("file name")
            .to_string_lossy()
            .into_owned();
        let suite = parse_json(&std::fs::read_to_string(&path).expect("readable corpus file"));
        let Some(cases) = suite.get("decodeErrors").and_then(Value::as_array) else {
            continue;
        };
        for case in cases {
            let desc = case["description"].as_str().unwrap_or("?");
            let bytes = from_hex(case["bson"].as_str().expect("bson hex"));
            let Ok(doc) = RawDocument::from_bytes(&bytes) else {
                by_bson += 1;
                continue;
            };
            for mode in MODES {
                let mut out = b"prefix".to_vec();
                let result = write_document(&mut out, doc, mode);
                if desc.contains("UTF-8") {
                    // Documented choice: invalid UTF-8 is replaced, not rejected.
                    match result {
                        Ok(()) => {
                            let s = std::str::from_utf8(&out[6..]).expect("UTF-8 output");
                            parse_json(s);
                            if s.contains('\u{FFFD}') {
                                lossy += 1;
                            } else {
                                failures.push(format!("{name} / {desc}: no U+FFFD in {s}"));
                            }
                        }
                        Err(e) => failures.push(format!("{name} / {desc}: {e}")),
                    }
                } else if result.is_ok() {
                    failures.push(format!(
                        "{name} / {desc} / {mode:?}: accepted: {}",
                        String::from_utf8_lossy(&out)
                    ));
                } else {
                    assert_eq!(out, b"prefix", "output restored on error");
                    by_us += 1;
                }
            }
        }
    }
    eprintln!(
        "bson corpus decodeErrors: {by_bson} rejected by RawDocument::from_bytes, {by_us} \
         (case × mode) rejected by the encoder, {lossy} invalid-UTF-8 cases replaced"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------- golden strings

#[test]
fn golden_int32_id() {
    let d = doc! { "_id": 1004_i32 };
    assert_eq!(canonical(&d), r#"{"_id":{"$numberInt":"1004"}}"#);
    assert_eq!(relaxed(&d), r#"{"_id":1004}"#);
}

#[test]
fn golden_numbers() {
    let dec = |s: &str| Bson::Decimal128(s.parse::<Decimal128>().expect("decimal literal"));
    let d = doc! {
        "price": dec("75.25"),
        "big": dec("12345678901234567890.123456789"),
        "negz": dec("-0"),
        "dnan": dec("NaN"),
        "q": 3_i32,
        "n": 9_007_199_254_740_993_i64,
        "d": 1.5,
    };
    let decimals = concat!(
        r#""price":{"$numberDecimal":"75.25"},"#,
        r#""big":{"$numberDecimal":"12345678901234567890.123456789"},"#,
        r#""negz":{"$numberDecimal":"-0"},"#,
        r#""dnan":{"$numberDecimal":"NaN"},"#,
    );
    assert_eq!(
        canonical(&d),
        format!(
            r#"{{{decimals}"q":{{"$numberInt":"3"}},"n":{{"$numberLong":"9007199254740993"}},"d":{{"$numberDouble":"1.5"}}}}"#
        )
    );
    assert_eq!(
        relaxed(&d),
        format!(r#"{{{decimals}"q":3,"n":9007199254740993,"d":1.5}}"#)
    );
}

#[test]
fn golden_field_order_is_kept() {
    let d = doc! { "_id": { "dept": "Purchasing", "company": "ACME" } };
    let expected = r#"{"_id":{"dept":"Purchasing","company":"ACME"}}"#;
    assert_eq!(canonical(&d), expected);
    assert_eq!(relaxed(&d), expected);
}

#[test]
fn golden_dates() {
    let cases: [(i64, &str); 7] = [
        (1_704_164_645_000, r#""2024-01-02T03:04:05Z""#),
        (1_704_164_645_123, r#""2024-01-02T03:04:05.123Z""#),
        (1_704_164_645_007, r#""2024-01-02T03:04:05.007Z""#),
        (0, r#""1970-01-01T00:00:00Z""#),
        (951_782_400_000, r#""2000-02-29T00:00:00Z""#),
        (253_402_300_799_999, r#""9999-12-31T23:59:59.999Z""#),
        (253_402_300_800_000, r#"{"$numberLong":"253402300800000"}"#),
    ];
    for (ms, relaxed_date) in cases {
        let d = doc! { "t": DateTime::from_millis(ms) };
        assert_eq!(
            canonical(&d),
            format!(r#"{{"t":{{"$date":{{"$numberLong":"{ms}"}}}}}}"#)
        );
        assert_eq!(
            relaxed(&d),
            format!(r#"{{"t":{{"$date":{relaxed_date}}}}}"#)
        );
    }
    let before_epoch = doc! { "t": DateTime::from_millis(-1) };
    assert_eq!(
        relaxed(&before_epoch),
        r#"{"t":{"$date":{"$numberLong":"-1"}}}"#
    );
}

#[test]
fn golden_doubles() {
    let cases: [(f64, &str); 16] = [
        (1.0, "1.0"),
        (-1.0, "-1.0"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.5, "1.5"),
        (0.1, "0.1"),
        (0.0001, "0.0001"),
        (0.00001, "1.0E-5"),
        (1e15, "1000000000000000.0"),
        (1e16, "1.0E+16"),
        (1.234_567_892_123_2e18, "1.2345678921232E+18"),
        (123_456_789.125, "123456789.125"),
        (f64::MAX, "1.7976931348623157E+308"),
        (f64::MIN_POSITIVE, "2.2250738585072014E-308"),
        (5e-324, "5.0E-324"),
        (-44.85466, "-44.85466"),
    ];
    for (v, text) in cases {
        let d = doc! { "d": v };
        assert_eq!(
            canonical(&d),
            format!(r#"{{"d":{{"$numberDouble":"{text}"}}}}"#)
        );
        assert_eq!(relaxed(&d), format!(r#"{{"d":{text}}}"#));
    }
    for (v, text) in [
        (f64::NAN, "NaN"),
        (f64::INFINITY, "Infinity"),
        (f64::NEG_INFINITY, "-Infinity"),
    ] {
        let expected = format!(r#"{{"d":{{"$numberDouble":"{text}"}}}}"#);
        let d = doc! { "d": v };
        assert_eq!(canonical(&d), expected);
        assert_eq!(relaxed(&d), expected);
    }
}

#[test]
fn golden_every_type() {
    let oid = ObjectId::parse_str("57e193d7a9cc81b4027498b5").expect("oid");
    let d = doc! {
        "s": "a\"b\\c\n\u{1}\u{7f}é☆/",
        "t": true, "f": false, "z": Bson::Null,
        "oid": oid,
        "bin": Binary { subtype: BinarySubtype::Generic, bytes: b"hello".to_vec() },
        "uuid": Binary { subtype: BinarySubtype::Uuid, bytes: vec![0xc8; 16] },
        "old": Binary { subtype: BinarySubtype::BinaryOld, bytes: vec![0xff, 0xff] },
        "user": Binary { subtype: BinarySubtype::UserDefined(0x80), bytes: b"123".to_vec() },
        "re": Regex { pattern: "a/b\"".into(), options: "xmi".into() },
        "ts": Timestamp { time: 42, increment: 4_294_967_295 },
        "code": Bson::JavaScriptCode("function() {}".into()),
        "cws": JavaScriptCodeWithScope { code: "x".into(), scope: doc! { "x": 1_i32 } },
        "sym": Bson::Symbol("sym".into()),
        "ptr": db_pointer("db.coll", oid),
        "u": Bson::Undefined, "min": Bson::MinKey, "max": Bson::MaxKey,
        "arr": [1_i32, "two", [], {}],
    };
    let common_head = concat!(
        r#"{"s":"a\"b\\c\n\u0001"#,
        "\u{7f}é☆/\",",
        r#""t":true,"f":false,"z":null,"oid":{"$oid":"57e193d7a9cc81b4027498b5"},"#,
        r#""bin":{"$binary":{"base64":"aGVsbG8=","subType":"00"}},"#,
        r#""uuid":{"$binary":{"base64":"yMjIyMjIyMjIyMjIyMjIyA==","subType":"04"}},"#,
        r#""old":{"$binary":{"base64":"//8=","subType":"02"}},"#,
        r#""user":{"$binary":{"base64":"MTIz","subType":"80"}},"#,
        r#""re":{"$regularExpression":{"pattern":"a/b\"","options":"imx"}},"#,
        r#""ts":{"$timestamp":{"t":42,"i":4294967295}},"#,
        r#""code":{"$code":"function() {}"},"#,
    );
    let common_tail = concat!(
        r#""sym":{"$symbol":"sym"},"#,
        r#""ptr":{"$dbPointer":{"$ref":"db.coll","$id":{"$oid":"57e193d7a9cc81b4027498b5"}}},"#,
        r#""u":{"$undefined":true},"min":{"$minKey":1},"max":{"$maxKey":1},"#,
    );
    assert_eq!(
        canonical(&d),
        format!(
            r#"{common_head}"cws":{{"$code":"x","$scope":{{"x":{{"$numberInt":"1"}}}}}},{common_tail}"arr":[{{"$numberInt":"1"}},"two",[],{{}}]}}"#
        )
    );
    assert_eq!(
        relaxed(&d),
        format!(
            r#"{common_head}"cws":{{"$code":"x","$scope":{{"x":1}}}},{common_tail}"arr":[1,"two",[],{{}}]}}"#
        )
    );
}

#[test]
fn base64_lengths() {
    // Reference values from RFC 4648 section 10.
    for (input, expected) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ] {
        let mut out = Vec::new();
        write_base64(&mut out, input.as_bytes());
        assert_eq!(out, expected.as_bytes());
    }
}

/// A one-element document `{"k": <string value bytes>}` built by hand.
fn doc_with_string(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut d = vec![0, 0, 0, 0, 0x02];
    d.extend_from_slice(key);
    d.push(0);
    d.extend_from_slice(&i32::try_from(value.len() + 1).expect("small").to_le_bytes());
    d.extend_from_slice(value);
    d.extend_from_slice(&[0, 0]);
    let n = i32::try_from(d.len()).expect("small").to_le_bytes();
    d[..4].copy_from_slice(&n);
    d
}

#[test]
fn invalid_utf8_is_replaced() {
    let bytes = doc_with_string(b"k\xC3", b"a\xFFb\xE2\x98c\0");
    let doc = RawDocument::from_bytes(&bytes).expect("well-framed document");
    for mode in MODES {
        let s = to_string(doc, mode).expect("lossy, not an error");
        assert_eq!(s, "{\"k\u{FFFD}\":\"a\u{FFFD}b\u{FFFD}c\\u0000\"}");
        parse_json(&s);
    }
}

#[test]
fn unsorted_regex_options_are_sorted() {
    // `bson` sorts options when it writes, so build the degenerate BSON by hand.
    let bytes = [
        16, 0, 0, 0, 0x0B, b'a', 0, b'a', b'b', b'c', 0, b'm', b'i', b'x', 0, 0,
    ];
    let doc = RawDocument::from_bytes(&bytes).expect("well-framed document");
    let s = to_string(doc, JsonMode::Canonical).expect("valid regex");
    assert_eq!(
        s,
        r#"{"a":{"$regularExpression":{"pattern":"abc","options":"imx"}}}"#
    );
}

#[test]
fn malformed_input_is_an_error_and_out_is_restored() {
    let good = doc_with_string(b"k", b"v");
    // String length claims more bytes than the document has.
    let mut bad = good.clone();
    bad[7] = 50;
    // Unknown element type.
    let mut unknown = good.clone();
    unknown[4] = 0x42;
    // Boolean 2.
    let boolean = [10, 0, 0, 0, 0x08, b'b', 0, 2, 0, 0];
    for bytes in [&bad[..], &unknown[..], &boolean[..]] {
        let doc = RawDocument::from_bytes(bytes).expect("well-framed document");
        for mode in MODES {
            let mut out = b"[".to_vec();
            let err = write_document(&mut out, doc, mode).expect_err("malformed");
            assert!(matches!(err, ExtJsonError::Malformed { .. }), "{err}");
            assert_eq!(out, b"[");
        }
    }
}

fn nested(levels: usize) -> RawDocumentBuf {
    let mut d = RawDocumentBuf::new();
    for _ in 1..levels {
        let mut outer = RawDocumentBuf::new();
        outer.append("a", d);
        d = outer;
    }
    d
}

#[test]
fn depth_limit() {
    let ok = nested(MAX_DEPTH);
    let s = to_string(&ok, JsonMode::Canonical).expect("exactly MAX_DEPTH levels is fine");
    assert_eq!(s.matches('{').count(), MAX_DEPTH);
    let deep = nested(MAX_DEPTH + 1);
    assert_eq!(
        to_string(&deep, JsonMode::Relaxed),
        Err(ExtJsonError::TooDeep)
    );
    // As a value, the same document is one level deeper than its contents.
    let mut out = Vec::new();
    let value = RawBsonRef::Document(&deep);
    assert_eq!(
        write_value(&mut out, value, JsonMode::Canonical),
        Err(ExtJsonError::TooDeep)
    );
    assert!(out.is_empty());
}

#[test]
fn write_array_and_value_entry_points() {
    let d = raw(&doc! { "a": [1_i32, 2.5, "x"] });
    let arr = d.get_array("a").expect("array");
    let mut out = Vec::new();
    write_array(&mut out, arr, JsonMode::Relaxed).expect("array");
    assert_eq!(out, br#"[1,2.5,"x"]"#);
    out.clear();
    write_array(&mut out, arr, JsonMode::Canonical).expect("array");
    assert_eq!(out, br#"[{"$numberInt":"1"},{"$numberDouble":"2.5"},"x"]"#);
    out.clear();
    write_value(&mut out, RawBsonRef::Int64(-7), JsonMode::Canonical).expect("value");
    assert_eq!(out, br#"{"$numberLong":"-7"}"#);
}

/// `{k:v,…}` assembled from `write_value` on each element must equal `write_document`.
fn assert_values_match_document(doc: &RawDocument, mode: JsonMode) {
    let mut expected = Vec::new();
    write_document(&mut expected, doc, mode).expect("document");
    let mut assembled = b"{".to_vec();
    for (i, element) in doc.iter().enumerate() {
        let (key, value) = element.expect("valid element");
        if i > 0 {
            assembled.push(b',');
        }
        assembled.extend_from_slice(serde_json::to_string(key).expect("key").as_bytes());
        assembled.push(b':');
        write_value(&mut assembled, value, mode).expect("value");
    }
    assembled.push(b'}');
    assert_eq!(
        String::from_utf8_lossy(&assembled),
        String::from_utf8_lossy(&expected)
    );
}

#[test]
fn value_entry_point_matches_document_walk_for_every_type() {
    let oid = ObjectId::new();
    let d = doc! {
        "d": 2.5, "s": "x", "doc": { "a": 1_i32 }, "arr": [Bson::Null], "bin": Binary { subtype: BinarySubtype::BinaryOld, bytes: vec![1, 2, 3] },
        "u": Bson::Undefined, "oid": oid, "b": true, "dt": DateTime::from_millis(5), "n": Bson::Null,
        "re": Regex { pattern: "p".into(), options: "si".into() }, "ptr": db_pointer("a.b", oid),
        "code": Bson::JavaScriptCode("c".into()), "sym": Bson::Symbol("y".into()),
        "cws": JavaScriptCodeWithScope { code: "c".into(), scope: doc! { "q": 1_i64 } },
        "i": 1_i32, "ts": Timestamp { time: 1, increment: 2 }, "l": 3_i64,
        "dec": Bson::Decimal128("1.23E+3".parse().expect("decimal")), "max": Bson::MaxKey, "min": Bson::MinKey,
    };
    for mode in MODES {
        assert_values_match_document(&raw(&d), mode);
    }
}

// ---------------------------------------------------------------- property tests

fn arb_key() -> impl Strategy<Value = String> {
    // No NUL (BSON keys are C strings). No leading '$': Extended JSON cannot tell such keys
    // from type wrappers (spec, "Restrictions and limitations"), so they cannot round-trip.
    prop_oneof!["[a-zA-Z_][a-zA-Z0-9_.]{0,8}", "([^\\x00$][^\\x00]{0,8})?",]
}

fn arb_leaf() -> impl Strategy<Value = Bson> {
    prop_oneof![
        any::<u64>().prop_map(|b| Bson::Double(f64::from_bits(b))),
        any::<f64>().prop_map(Bson::Double),
        any::<String>().prop_map(Bson::String),
        any::<bool>().prop_map(Bson::Boolean),
        Just(Bson::Null),
        ("[^\\x00]{0,8}", "[a-z]{0,6}")
            .prop_map(|(pattern, options)| { Bson::RegularExpression(Regex { pattern, options }) }),
        any::<String>().prop_map(Bson::JavaScriptCode),
        any::<i32>().prop_map(Bson::Int32),
        any::<i64>().prop_map(Bson::Int64),
        (any::<u32>(), any::<u32>())
            .prop_map(|(time, increment)| Bson::Timestamp(Timestamp { time, increment })),
        (any::<u8>(), prop::collection::vec(any::<u8>(), 0..40)).prop_map(|(s, bytes)| {
            Bson::Binary(Binary {
                subtype: BinarySubtype::from(s),
                bytes,
            })
        }),
        any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(ObjectId::from_bytes(b))),
        prop_oneof![any::<i64>(), 0_i64..=253_402_300_799_999, -100_i64..100]
            .prop_map(|ms| Bson::DateTime(DateTime::from_millis(ms))),
        any::<String>().prop_map(Bson::Symbol),
        any::<[u8; 16]>().prop_map(|b| Bson::Decimal128(Decimal128::from_bytes(b))),
        Just(Bson::Undefined),
        Just(Bson::MaxKey),
        Just(Bson::MinKey),
        (any::<String>(), any::<[u8; 12]>())
            .prop_map(|(ns, oid)| db_pointer(&ns, ObjectId::from_bytes(oid))),
    ]
}

fn arb_document_of(value: BoxedStrategy<Bson>) -> impl Strategy<Value = Document> {
    prop::collection::vec((arb_key(), value), 0..8).prop_map(|kv| kv.into_iter().collect())
}

fn arb_value() -> BoxedStrategy<Bson> {
    arb_leaf()
        .prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                arb_document_of(inner.clone()).prop_map(Bson::Document),
                prop::collection::vec(inner.clone(), 0..8).prop_map(Bson::Array),
                (any::<String>(), arb_document_of(inner)).prop_map(|(code, scope)| {
                    Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope { code, scope })
                }),
            ]
        })
        .boxed()
}

fn arb_document() -> impl Strategy<Value = Document> {
    arb_document_of(arb_value())
}

/// Encoder must not panic; on success the output is UTF-8 JSON, on error `out` is untouched
/// and `bson` itself does not accept the document either.
fn check_arbitrary_bytes(bytes: &[u8]) {
    let Ok(doc) = RawDocument::from_bytes(bytes) else {
        return;
    };
    let bson_accepts = Document::try_from(doc).is_ok();
    for mode in MODES {
        let mut out = b"prefix".to_vec();
        match write_document(&mut out, doc, mode) {
            Ok(()) => {
                let s = std::str::from_utf8(&out[6..]).expect("output is UTF-8");
                parse_json(s);
            }
            Err(e) => {
                assert_eq!(out, b"prefix", "output restored on error");
                assert!(
                    !bson_accepts,
                    "rejected ({e}) a document that bson accepts: {bytes:02x?}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn canonical_round_trips_through_bson_parser(d in arb_document()) {
        let rawd = raw(&d);
        let text = to_string(&rawd, JsonMode::Canonical).expect("valid document");
        let json = parse_json(&text);
        let Value::Object(map) = json.clone() else { panic!("not an object: {text}") };
        let back = Document::try_from(map).expect("bson parses canonical output");
        if let Err(e) = doc_eq(&d, &back, "$") {
            panic!("{e}\n  json {text}");
        }

        // Relaxed output is the relaxed form of the canonical output.
        let relaxed_text = to_string(&rawd, JsonMode::Relaxed).expect("valid document");
        if let Err(e) = json_eq(&relax(&json), &parse_json(&relaxed_text), "$", SERDE_ULPS) {
            panic!("{e}\n  canonical {text}\n  relaxed {relaxed_text}");
        }
        for mode in MODES {
            assert_values_match_document(&rawd, mode);
        }
    }

    #[test]
    fn strings_escape_like_serde_json(s in any::<String>(), pad in 0_usize..9) {
        // Vary the alignment against the 8-byte fast path.
        let s = format!("{}{s}\u{1}\"x\\", "a".repeat(pad));
        let mut out = Vec::new();
        write_json_string(&mut out, s.as_bytes());
        prop_assert_eq!(String::from_utf8(out).expect("UTF-8"), serde_json::to_string(&s).expect("string"));
    }

    #[test]
    fn word_escape_check_is_exact(w in any::<u64>(), spice in any::<[u8; 8]>()) {
        // Mix in the interesting byte values so that they are actually hit.
        let mut bytes = w.to_le_bytes();
        for (b, s) in bytes.iter_mut().zip(spice) {
            if s % 4 == 0 {
                *b = [b'"', b'\\', 0x1F, 0x20, 0x00, 0x7F, 0x80, 0xA2][usize::from(s / 4 % 8)];
            }
        }
        let expected = bytes.iter().any(|&b| ESCAPE[usize::from(b)] != 0);
        prop_assert_eq!(word_needs_escape(u64::from_le_bytes(bytes)), expected);
    }

    #[test]
    fn decimal128_matches_bson_display(bytes in any::<[u8; 16]>()) {
        let mut out = Vec::new();
        write_decimal128(&mut out, &bytes);
        prop_assert_eq!(String::from_utf8(out).expect("ASCII"), Decimal128::from_bytes(bytes).to_string());
    }

    #[test]
    fn doubles_round_trip_and_read_as_non_integers(bits in any::<u64>()) {
        let v = f64::from_bits(bits);
        prop_assume!(v.is_finite());
        let mut out = Vec::new();
        write_f64_finite(&mut out, v);
        let s = std::str::from_utf8(&out).expect("ASCII");
        prop_assert_eq!(s.parse::<f64>().expect("parses").to_bits(), bits);
        prop_assert!(s.contains('.'), "{}", s);
        let n = parse_json(s);
        prop_assert!(n.as_number().is_some_and(Number::is_f64), "{}", s);
    }

    #[test]
    fn relaxed_dates_match_chrono(ms in 0_i64..=253_402_300_799_999) {
        let mut out = Vec::new();
        write_iso8601(&mut out, ms);
        let t = chrono::DateTime::from_timestamp_millis(ms).expect("in range");
        let fmt = if ms % 1000 == 0 { "%Y-%m-%dT%H:%M:%SZ" } else { "%Y-%m-%dT%H:%M:%S%.3fZ" };
        prop_assert_eq!(String::from_utf8(out).expect("ASCII"), t.format(fmt).to_string());
    }

    #[test]
    fn arbitrary_bytes_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 5..300)) {
        let n = bytes.len();
        bytes[..4].copy_from_slice(&i32::try_from(n).expect("small").to_le_bytes());
        bytes[n - 1] = 0;
        check_arbitrary_bytes(&bytes);
    }

    #[test]
    fn mutated_documents_never_panic(
        d in arb_document(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut bytes = raw(&d).into_bytes();
        let n = bytes.len();
        for (i, b) in edits {
            // Keep the outer frame, so that the walk, not the framing check, meets the damage.
            let k = i.index(n);
            if (4..n - 1).contains(&k) {
                bytes[k] = b;
            }
        }
        check_arbitrary_bytes(&bytes);
    }
}

// ---------------------------------------------------------------- sample documents

#[test]
fn sample_documents_transcode_to_their_own_text() {
    let Some(dir) = shared_dir("sample") else {
        return;
    };
    let (mut lines, mut identical) = (0usize, 0usize);
    let mut failures = Vec::new();
    for path in json_files(&dir) {
        let name = path
            .file_name()
            .expect("file name")
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&path).expect("readable sample file");
        for (no, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            lines += 1;
            let line = line.trim();
            let json = parse_json(line);
            let Value::Object(map) = json.clone() else {
                panic!("{name}:{no}: not an object")
            };
            let d = Document::try_from(map).expect("sample line is canonical Extended JSON");
            let out = canonical(&d);
            if out == line {
                identical += 1;
            }
            if let Err(e) = json_eq(&json, &parse_json(&out), "$", 0) {
                failures.push(format!("{name}:{}: {e}", no + 1));
            }
            if let Err(e) = json_eq(&relax(&json), &parse_json(&relaxed(&d)), "$", SERDE_ULPS) {
                failures.push(format!("{name}:{} (relaxed): {e}", no + 1));
            }
        }
    }
    eprintln!("samples: {lines} lines checked, {identical} byte-identical canonical output");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        identical, lines,
        "canonical output should reproduce compact sample lines"
    );
}
