//! The shared test data (`../shared/data`, beside the repository): its folders, skipped with a
//! printed reason when absent, and the BSON corpus' valid documents.

use std::path::{Path, PathBuf};

use bson::RawDocumentBuf;

/// `../shared/data/<name>`, or `None` (with the reason printed) when it is absent.
pub fn shared(name: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data")
        .join(name);
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("skipped part: {} is absent", dir.display());
        None
    }
}

/// Every `canonical_bson` of the BSON corpus' valid cases, as a document, file by file in name
/// order; none when the corpus is absent. `dbref.json` is left out: SecantusDB's change stream
/// fails with InternalError (1) on a document holding a DBRef-shaped sub-document (a stand-in
/// quirk; mongod streams it), and the transcoder's unit tests cover the DBRef rule instead.
pub fn corpus_documents() -> Vec<RawDocumentBuf> {
    let Some(dir) = shared("bson-corpus") else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        if path.extension().is_none_or(|e| e != "json") || path.ends_with("dbref.json") {
            continue;
        }
        let suite: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for case in suite["valid"].as_array().into_iter().flatten() {
            let Some(hex) = case["canonical_bson"].as_str() else {
                continue;
            };
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            if let Ok(doc) = RawDocumentBuf::from_bytes(bytes) {
                out.push(doc);
            }
        }
    }
    out
}
