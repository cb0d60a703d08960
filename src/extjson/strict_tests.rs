//! Strict transcoding: the ambiguity rule (`ambiguity.rs`) checked against the Extended JSON
//! parser the tests use (the `bson` crate's), field paths, and invalid UTF-8.

use bson::{Bson, Document, RawDocumentBuf, doc, rawdoc};

use super::*;

fn strict(doc: &RawDocumentBuf) -> Result<String, ExtJsonError> {
    let mut out = Vec::new();
    write_document_strict(&mut out, doc, JsonMode::Canonical, Utf8::Refuse)?;
    Ok(String::from_utf8(out).expect("UTF-8"))
}

/// What the `bson` crate's Extended JSON parser reads from `json` (an error as text).
fn parsed(json: &str) -> Result<Bson, String> {
    let value: serde_json::Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    Bson::try_from(value).map_err(|e| e.to_string())
}

#[test]
fn ambiguous_documents_are_refused_and_a_parser_would_indeed_misread_them() {
    let cases: Vec<(Document, &str)> = vec![
        (doc! { "f": { "$date": "not a date" } }, "f.$date"),
        (doc! { "f": { "$date": "2020-01-01T00:00:00Z" } }, "f.$date"),
        (
            doc! { "f": { "$oid": "0123456789abcdef01234567" } },
            "f.$oid",
        ),
        (
            doc! { "f": { "$numberLong": "1", "x": 1 } },
            "f.$numberLong",
        ),
        (
            doc! { "f": { "$binary": "AQ==", "$type": "00" } },
            "f.$binary",
        ),
        (doc! { "f": { "$minKey": 1 } }, "f.$minKey"),
        (
            doc! { "f": { "$uuid": "c8edabc3-f738-4ca3-b68d-ab92a91478a3" } },
            "f.$uuid",
        ),
        (
            doc! { "a": [ 1, { "b": { "$timestamp": { "t": 1, "i": 2 } } } ] },
            "a.1.b.$timestamp",
        ),
    ];
    for (d, path) in cases {
        let raw = RawDocumentBuf::from_document(&d).expect("raw");
        // THEN strict mode refuses it, naming the field
        match strict(&raw) {
            Err(ExtJsonError::Ambiguous { path: p, .. }) => assert_eq!(p, path, "{d}"),
            other => panic!("{d}: expected Ambiguous, got {other:?}"),
        }
        // AND the lenient JSON of it does not read back as the same document
        let lenient = to_string(&raw, JsonMode::Canonical).expect("lenient");
        assert_ne!(parsed(&lenient), Ok(Bson::Document(d.clone())), "{lenient}");
    }
}

#[test]
fn other_dollar_keys_dotted_keys_query_operators_and_dbrefs_are_plain() {
    let cases = vec![
        doc! { "$price": 3, "a.b": "dotted" },
        doc! { "q": { "$regex": bson::Regex { pattern: "x".into(), options: String::new() }, "$options": "i" } },
        doc! { "q": { "$type": "string" } },
        doc! { "r": { "$ref": "users", "$id": 7 } },
        doc! { "r": { "$ref": "users", "$id": 7, "$db": "shop", "extra": true } },
        doc! { "r": { "$ref": 5, "x": 1 } },
    ];
    for d in cases {
        let raw = RawDocumentBuf::from_document(&d).expect("raw");
        // THEN strict mode writes what lenient mode writes
        let json = strict(&raw).unwrap_or_else(|e| panic!("{d}: {e}"));
        assert_eq!(json, to_string(&raw, JsonMode::Canonical).expect("lenient"));
        // AND a parser that accepts it reads the same document back
        if let Ok(back) = parsed(&json) {
            assert_eq!(back, Bson::Document(d.clone()), "{json}");
        }
    }
}

#[test]
fn a_dbref_out_of_its_layout_is_refused_at_the_document() {
    let raw = rawdoc! { "a": [ { "$id": 1, "$ref": "users" } ] };
    match strict(&raw) {
        Err(ExtJsonError::Ambiguous { path, reason }) => {
            assert_eq!(path, "a.0");
            assert!(reason.contains("DBRef"), "{reason}");
        }
        other => panic!("expected Ambiguous, got {other:?}"),
    }
}

#[test]
fn invalid_utf8_is_refused_with_its_path_or_replaced_when_asked() {
    // GIVEN a string value and a key with an invalid byte (the server does not validate UTF-8)
    let mut inner = RawDocumentBuf::new();
    inner.append("ok", "fine");
    let mut doc = RawDocumentBuf::new();
    doc.append("n", inner);
    let mut bytes = doc.into_bytes();
    let at = bytes.windows(4).position(|w| w == b"fine").expect("value");
    bytes[at + 1] = 0xFF;
    let raw = RawDocumentBuf::from_bytes(bytes).expect("framed");
    let mut out = Vec::new();
    assert_eq!(
        write_document_strict(&mut out, &raw, JsonMode::Relaxed, Utf8::Refuse),
        Err(ExtJsonError::InvalidUtf8 {
            path: "n.ok".into()
        })
    );
    assert!(out.is_empty());
    write_document_strict(&mut out, &raw, JsonMode::Relaxed, Utf8::Replace).expect("replaced");
    assert_eq!(
        String::from_utf8(out).expect("UTF-8"),
        "{\"n\":{\"ok\":\"f\u{FFFD}ne\"}}"
    );
    // AND a key with an invalid byte names the key as it reads
    let mut key_doc = RawDocumentBuf::new();
    key_doc.append("kéy", 1);
    let mut bytes = key_doc.into_bytes();
    let at = bytes.iter().position(|&b| b == 0xC3).expect("é");
    bytes[at + 1] = 0x28;
    let raw = RawDocumentBuf::from_bytes(bytes).expect("framed");
    let error = write_document_strict(&mut Vec::new(), &raw, JsonMode::Relaxed, Utf8::Refuse);
    assert_eq!(
        error,
        Err(ExtJsonError::InvalidUtf8 {
            path: "k\u{FFFD}(y".into()
        })
    );
}
