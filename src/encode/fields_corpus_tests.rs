//! Field rules over the BSON corpus (`../shared/data/bson-corpus`, skipped with the reason when
//! absent): for every valid document and every path in it, an excluded path appears nowhere in
//! the rewritten document nor in a rewritten update naming it, a masked path holds only the
//! mask, and damaged bytes give an error or a document, never a panic.

use std::path::Path;

use bson::{RawBsonRef, RawDocument, RawDocumentBuf, doc};

use super::fields::FieldRewriter;
use crate::config::PipelineConfig;

/// Every `canonical_bson` of the corpus' valid cases that is a document; `None` when absent.
pub(super) fn corpus() -> Option<Vec<RawDocumentBuf>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/bson-corpus");
    if !dir.is_dir() {
        eprintln!(
            "skipping: {} is absent (not part of a plain clone)",
            dir.display()
        );
        return None;
    }
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("readable corpus")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable file");
        let spec: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        for case in spec["valid"].as_array().into_iter().flatten() {
            let Some(hex) = case["canonical_bson"].as_str() else {
                continue;
            };
            let bytes: Vec<u8> = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
                .collect();
            if let Ok(doc) = RawDocumentBuf::from_bytes(bytes)
                && doc.iter().all(|e| e.is_ok())
            {
                docs.push(doc);
            }
        }
    }
    Some(docs)
}

/// Every dotted path of `doc` (through documents and arrays of documents, array positions
/// not named), with `_id` left out at the top.
fn paths(doc: &RawDocument, prefix: &str, out: &mut Vec<String>) {
    for (key, value) in doc.iter().flatten() {
        if prefix.is_empty() && key == "_id" {
            continue;
        }
        let path = if prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{prefix}.{key}")
        };
        out.push(path.clone());
        match value {
            RawBsonRef::Document(d) => paths(d, &path, out),
            RawBsonRef::Array(a) => {
                for item in a.into_iter().flatten() {
                    if let RawBsonRef::Document(d) = item {
                        paths(d, &path, out);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The values at `path` in `doc` (through arrays).
fn values_at<'a>(doc: &'a RawDocument, path: &[&str], out: &mut Vec<RawBsonRef<'a>>) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    for (key, value) in doc.iter().flatten() {
        if key != *first {
            continue;
        }
        if rest.is_empty() {
            out.push(value);
            continue;
        }
        let mut inner = |v: RawBsonRef<'a>| {
            if let RawBsonRef::Document(d) = v {
                values_at(d, rest, out);
            }
        };
        match value {
            RawBsonRef::Array(a) => a.into_iter().flatten().for_each(&mut inner),
            other => inner(other),
        }
    }
}

/// Whether `path` is usable in a rule (the corpus has field names no rule can name).
fn nameable(path: &str) -> bool {
    path.split('.')
        .all(|p| !p.is_empty() && !p.starts_with('$') && !p.contains('\0'))
}

fn rewriter(rule: &str, path: &str) -> FieldRewriter {
    let p = PipelineConfig::for_test(&format!(
        "database = \"d\"\n[pipelines.fields]\n{rule} = [{}]",
        serde_json::to_string(path).expect("a JSON string")
    ));
    FieldRewriter::of(&p).expect("rules set")
}

#[test]
fn over_the_corpus_excluded_paths_vanish_and_masked_ones_hold_the_mask() {
    let Some(docs) = corpus() else {
        return;
    };
    let (mut checked, mut docs_with_paths) = (0, 0);
    for (i, raw) in docs.iter().enumerate() {
        let mut all = Vec::new();
        paths(raw, "", &mut all);
        all.retain(|p| nameable(p));
        docs_with_paths += usize::from(!all.is_empty());
        for path in &all {
            let parts: Vec<&str> = path.split('.').collect();
            let out = rewriter("exclude", path)
                .document(raw)
                .expect("valid input");
            let mut left = Vec::new();
            values_at(&out, &parts, &mut left);
            assert!(left.is_empty(), "doc {i}: {path} still present in {out:?}");
            let update = bson::to_raw_document_buf(&doc! {
                "_id": { "_data": "00" }, "operationType": "update",
                "documentKey": { "_id": 1 },
                "updateDescription": { "updatedFields": {}, "removedFields": [path.as_str()] },
            })
            .expect("an event");
            let event = rewriter("exclude", path)
                .event(&update)
                .expect("valid event");
            assert!(event.emptied, "doc {i}: removedFields still names {path}");
            let masked = rewriter("mask", path).document(raw).expect("valid input");
            let mut values = Vec::new();
            values_at(&masked, &parts, &mut values);
            assert!(
                values.iter().all(|v| v.as_str() == Some("****")),
                "doc {i}: {path} not masked in {masked:?}"
            );
            checked += 1;
        }
    }
    assert!(
        docs.len() > 100 && docs_with_paths > 100,
        "{} documents",
        docs.len()
    );
    eprintln!(
        "{checked} (document, path) pairs over {} corpus documents",
        docs.len()
    );
}

#[test]
fn damaged_corpus_bytes_never_panic_the_rules() {
    let Some(docs) = corpus() else {
        return;
    };
    let rules = FieldRewriter::of(&PipelineConfig::for_test(
        "database = \"d\"\n[pipelines.fields]\nhash_key = \"0123456789abcdef\"\n\
         exclude = [\"a.b\"]\nmask = [\"x\"]\nhash = [\"y\"]\ntruncate = { \"z\" = 2 }\n\
         rename = { \"a.c\" = \"d\" }",
    ))
    .expect("rules set");
    let mut tried = 0;
    for raw in &docs {
        let bytes = raw.as_bytes();
        for at in 4..bytes.len().saturating_sub(1) {
            for flip in [0x01_u8, 0x80, 0xff] {
                let mut damaged = bytes.to_vec();
                damaged[at] ^= flip;
                if let Ok(doc) = RawDocument::from_bytes(&damaged) {
                    let _ = rules.document(doc);
                    let _ = rules.event(doc);
                    tried += 1;
                }
            }
        }
    }
    assert!(tried > 1000, "{tried} damaged buffers");
}
