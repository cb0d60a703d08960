//! Fuzz target `split`: the reassembly of split change events (`source/split.rs`,
//! `$changeStreamSplitLargeEvent`), driven as the source's reader drives it.
//!
//! Input: BSON documents one after the other, each read by its length prefix (the last one
//! takes what is left); each is pushed in order.
//!
//! What must hold: nothing panics; a whole event comes out only with its last fragment, with
//! `_id` first (the last fragment's token when it had one), no `splitEvent`, each top-level
//! field once; an event out of sequence is an error.
#![no_main]

use bson::{RawDocument, RawDocumentBuf};
use libfuzzer_sys::fuzz_target;
use mongo_kafka_bridge::fuzzing::Reassembler;

fuzz_target!(|data: &[u8]| {
    let mut reassembler = Reassembler::default();
    let mut rest = data;
    while rest.len() >= 5 {
        let declared = i32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let len = usize::try_from(declared)
            .ok()
            .filter(|n| (5..=rest.len()).contains(n))
            .unwrap_or(rest.len());
        let (one, tail) = rest.split_at(len);
        rest = tail;
        let Ok(doc) = RawDocument::from_bytes(one) else {
            continue;
        };
        let last_id = doc.get("_id").ok().flatten().map(|v| v.to_raw_bson());
        let was_fragment = doc.get("splitEvent").ok().flatten().is_some();
        match reassembler.push(doc.to_raw_document_buf()) {
            Ok(Some(whole)) => check(&whole, last_id.as_ref(), was_fragment),
            Ok(None) => assert!(reassembler.is_pending(), "a fragment taken, none pending"),
            Err(_) => {}
        }
    }
});

fn check(whole: &RawDocumentBuf, last_id: Option<&bson::RawBson>, was_fragment: bool) {
    if !was_fragment {
        return;
    }
    let keys: Vec<&str> = whole.iter().flatten().map(|(k, _)| k).collect();
    assert!(!keys.contains(&"splitEvent"), "splitEvent kept: {keys:?}");
    let mut unique = keys.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), keys.len(), "a field twice: {keys:?}");
    if let Some(id) = last_id {
        assert_eq!(keys.first(), Some(&"_id"), "_id not first: {keys:?}");
        // Compared as bytes: a double `_id` may be NaN, which is never equal to itself.
        let got = whole.get("_id").ok().flatten().map(|v| v.to_raw_bson());
        assert_eq!(
            got.map(|v| bytes_of(&v)),
            Some(bytes_of(id)),
            "not the last fragment's token"
        );
    }
}

/// The BSON bytes of `{_id: value}`.
fn bytes_of(value: &bson::RawBson) -> Vec<u8> {
    let mut doc = RawDocumentBuf::new();
    doc.append("_id", value.clone());
    doc.into_bytes()
}
