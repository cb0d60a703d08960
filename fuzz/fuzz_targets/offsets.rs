//! Fuzz target `offsets`: the offsets document parser and the progress record decoder.
//!
//! Input: one byte choosing the reader, then its bytes:
//! - even: a BSON document (as MongoDB returns the offsets document) → `OffsetsDoc::parse`;
//! - odd: a progress record's value (canonical Extended JSON from the progress topic) →
//!   the exactly-once decoder, then the `$set`/`$unset` that bring a document forward to it.
//!
//! What must hold: nothing panics; every refusal is an error (a sentence), and a parsed
//! document's resume token is a document whose bytes read back.
#![no_main]

use bson::Document;
use libfuzzer_sys::fuzz_target;
use mongo_kafka_bridge::fuzzing::decode_progress;
use mongo_kafka_bridge::offsets::OffsetsDoc;

fuzz_target!(|data: &[u8]| {
    let [reader, bytes @ ..] = data else {
        return;
    };
    if reader % 2 == 0 {
        let Ok(doc) = Document::from_reader(bytes) else {
            return;
        };
        if let Ok(parsed) = OffsetsDoc::parse(&doc) {
            if let Some(token) = &parsed.resume_token {
                assert!(
                    token.to_document().is_ok(),
                    "a parsed token does not read back"
                );
            }
        }
    } else if let Ok(Some((set, unset))) = decode_progress("p", "cdc.", "uid", bytes) {
        // What is set is never also unset.
        assert!(
            set.keys().all(|k| !unset.contains_key(k)),
            "{set} vs {unset}"
        );
    }
});
