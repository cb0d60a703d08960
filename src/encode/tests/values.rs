//! Values (C18).

use super::*;

fn c18_insert() -> RawDocumentBuf {
    let dec = |s: &str| s.parse::<Decimal128>().expect("decimal");
    event(
        "insert",
        rawdoc! {
            "fullDocument": {
                "_id": 104,
                "price": dec("75.25"),
                "big": dec("12345678901234567890.123456789"),
                "negz": dec("-0"),
                "dnan": dec("NaN"),
                "q": 3,
                "n": 9_007_199_254_740_993_i64,
                "d": 1.5,
            },
            "ns": { "db": "pay", "coll": "orders" },
            "documentKey": { "_id": 104 },
        },
    )
}

#[test]
fn c18_numbers_keep_their_type_in_canonical_mode() {
    let records = encoder("json = \"canonical\"\nvalue = \"document\"")
        .encode(&c18_insert())
        .expect("encodes")
        .records;
    assert_eq!(text(&records[0].key), r#"{"_id":{"$numberInt":"104"}}"#);
    assert_eq!(
        records[0].value.as_deref().map(text).as_deref(),
        Some(concat!(
            r#"{"_id":{"$numberInt":"104"},"#,
            r#""price":{"$numberDecimal":"75.25"},"#,
            r#""big":{"$numberDecimal":"12345678901234567890.123456789"},"#,
            r#""negz":{"$numberDecimal":"-0"},"#,
            r#""dnan":{"$numberDecimal":"NaN"},"#,
            r#""q":{"$numberInt":"3"},"#,
            r#""n":{"$numberLong":"9007199254740993"},"#,
            r#""d":{"$numberDouble":"1.5"}}"#,
        ))
    );
}

#[test]
fn c18_relaxed_mode_keeps_decimals_wrapped_and_longs_exact() {
    let records = encoder("json = \"relaxed\"\nvalue = \"document\"")
        .encode(&c18_insert())
        .expect("encodes")
        .records;
    assert_eq!(text(&records[0].key), r#"{"_id":{"$numberInt":"104"}}"#);
    assert_eq!(
        records[0].value.as_deref().map(text).as_deref(),
        Some(concat!(
            r#"{"_id":104,"#,
            r#""price":{"$numberDecimal":"75.25"},"#,
            r#""big":{"$numberDecimal":"12345678901234567890.123456789"},"#,
            r#""negz":{"$numberDecimal":"-0"},"#,
            r#""dnan":{"$numberDecimal":"NaN"},"#,
            r#""q":3,"#,
            r#""n":9007199254740993,"#,
            r#""d":1.5}"#,
        ))
    );
}

#[test]
fn c18_change_event_value_holds_the_same_numbers() {
    let records = encoder("json = \"canonical\"")
        .encode(&c18_insert())
        .expect("encodes")
        .records;
    let value = records[0].value.as_deref().map(text).expect("a value");
    assert_eq!(
        value,
        format!(
            "{}{}",
            head("insert", JsonMode::Canonical),
            concat!(
                r#","fullDocument":{"_id":{"$numberInt":"104"},"#,
                r#""price":{"$numberDecimal":"75.25"},"#,
                r#""big":{"$numberDecimal":"12345678901234567890.123456789"},"#,
                r#""negz":{"$numberDecimal":"-0"},"#,
                r#""dnan":{"$numberDecimal":"NaN"},"#,
                r#""q":{"$numberInt":"3"},"#,
                r#""n":{"$numberLong":"9007199254740993"},"#,
                r#""d":{"$numberDouble":"1.5"}},"#,
                r#""ns":{"db":"pay","coll":"orders"},"#,
                r#""documentKey":{"_id":{"$numberInt":"104"}}}"#,
            )
        )
    );
}
