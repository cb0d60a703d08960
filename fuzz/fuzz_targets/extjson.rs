//! Fuzz target `extjson`: every writer of raw BSON, on any document bytes.
//!
//! Input: one byte choosing the encoder (a pipeline configuration, see [`encoders`]), one byte
//! choosing the event's shape (see [`event`]), then a BSON document (its length prefix and
//! terminator must match, as for every `RawDocument`; what lies inside is arbitrary).
//!
//! What must hold, whatever the bytes:
//! - nothing panics (the transcoder's invariant: malformed BSON is an error);
//! - the Extended JSON writers' output is UTF-8 and JSON; on error `out` is as on entry;
//! - what strict transcoding writes, lossy transcoding writes the same;
//! - Debezium's relaxed strings (`updatedFields`, the key) are JSON;
//! - the encoder of every form and policy the configuration allows (`value` × `format` ×
//!   `key_format` × `json` × `on_ambiguous` × `replace_invalid_utf8` × `tombstones` × Debezium
//!   `schemas`) returns records or an error, and its JSON values are JSON.
#![no_main]

use std::sync::{Mutex, OnceLock};

use bson::{DateTime, RawBsonRef, RawDocument, RawDocumentBuf, Timestamp, rawdoc};
use libfuzzer_sys::fuzz_target;
use mongo_kafka_bridge::Config;
use mongo_kafka_bridge::encode::RecordEncoder;
use mongo_kafka_bridge::extjson::{self, JsonMode, Utf8, debezium};
use serde::de::IgnoredAny;

fuzz_target!(|data: &[u8]| {
    let [selector, shape, bytes @ ..] = data else {
        return;
    };
    let Ok(doc) = RawDocument::from_bytes(bytes) else {
        return;
    };
    transcode(doc);
    as_array(bytes);
    debezium_strings(doc);
    encode(*selector, *shape, doc);
});

/// Asserts `bytes` are one JSON value (any depth).
fn assert_json(bytes: &[u8], what: &str) {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    de.disable_recursion_limit();
    if let Err(e) = serde::Deserialize::deserialize(&mut de).and_then(|IgnoredAny| de.end()) {
        panic!(
            "{what} is not JSON ({e}): {}",
            String::from_utf8_lossy(bytes)
        );
    }
}

const SENTINEL: &[u8] = b"kept:";

/// The Extended JSON v2 writers in both modes, lossy and strict.
fn transcode(doc: &RawDocument) {
    for mode in [JsonMode::Canonical, JsonMode::Relaxed] {
        let mut lossy = SENTINEL.to_vec();
        let lossy_result = extjson::write_document(&mut lossy, doc, mode);
        match &lossy_result {
            Ok(()) => assert_json(&lossy[SENTINEL.len()..], "write_document"),
            Err(_) => assert_eq!(lossy, SENTINEL, "out changed on error"),
        }
        for utf8 in [Utf8::Refuse, Utf8::Replace] {
            let mut strict = SENTINEL.to_vec();
            match extjson::write_document_strict(&mut strict, doc, mode, utf8) {
                Ok(()) => {
                    assert!(lossy_result.is_ok(), "strict wrote what lossy refused");
                    assert_eq!(strict, lossy, "strict and lossy differ");
                }
                Err(_) => assert_eq!(strict, SENTINEL, "out changed on error"),
            }
        }
        for (_, value) in doc.iter().flatten() {
            let mut out = Vec::new();
            if extjson::write_value(&mut out, value, mode).is_ok() {
                assert_json(&out, "write_value");
            }
        }
    }
}

/// The same bytes read as an array (`{"a": <bytes>}`), through `write_array`.
fn as_array(bytes: &[u8]) {
    let mut wrapper = Vec::with_capacity(bytes.len() + 8);
    let len = i32::try_from(bytes.len() + 8).unwrap_or(i32::MAX);
    wrapper.extend_from_slice(&len.to_le_bytes());
    wrapper.extend_from_slice(&[0x04, b'a', 0]);
    wrapper.extend_from_slice(bytes);
    wrapper.push(0);
    let Ok(Ok(array)) = RawDocument::from_bytes(&wrapper).map(|w| w.get_array("a")) else {
        return;
    };
    for mode in [JsonMode::Canonical, JsonMode::Relaxed] {
        let mut out = Vec::new();
        if extjson::write_array(&mut out, array, mode).is_ok() {
            assert_json(&out, "write_array");
        }
    }
}

/// Debezium's strings: `after`, `updatedFields`, `removedFields`, `truncatedArrays`, the key.
fn debezium_strings(doc: &RawDocument) {
    let _ = debezium::after_json(doc);
    if let Ok(updated) = debezium::updated_fields_json(doc) {
        assert_json(updated.as_bytes(), "updated_fields_json");
    }
    let _ = debezium::removed_fields_json(doc);
    let _ = debezium::truncated_arrays_json(doc);
    let _ = debezium::key_id(doc);
    if let Ok(key) = debezium::key_json(doc) {
        assert_json(key.as_bytes(), "key_json");
    }
}

/// Every pipeline configuration of the encoder's options that `Config::from_toml` accepts.
fn encoders() -> &'static [Mutex<RecordEncoder>] {
    static ENCODERS: OnceLock<Vec<Mutex<RecordEncoder>>> = OnceLock::new();
    ENCODERS.get_or_init(|| {
        let mut all = Vec::new();
        for value in ["change_event", "document", "debezium"] {
            for format in ["json", "bson"] {
                for key_format in ["json", "bson"] {
                    for json in ["relaxed", "canonical"] {
                        for on_ambiguous in ["fail", "dead_letter", "bson"] {
                            for replace in [false, true] {
                                for tombstones in [true, false] {
                                    for schemas in [false, true] {
                                        let text = config(
                                            value,
                                            format,
                                            key_format,
                                            json,
                                            on_ambiguous,
                                            replace,
                                            tombstones,
                                            schemas,
                                        );
                                        if let Ok(c) = Config::from_toml(&text, []) {
                                            let e = RecordEncoder::new(
                                                &c.pipelines[0],
                                                &c.kafka.topic_prefix,
                                            );
                                            all.push(Mutex::new(e));
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(
            all.len() > 100,
            "only {} encoder configurations load",
            all.len()
        );
        all
    })
}

#[allow(clippy::too_many_arguments)]
fn config(
    value: &str,
    format: &str,
    key_format: &str,
    json: &str,
    on_ambiguous: &str,
    replace: bool,
    tombstones: bool,
    schemas: bool,
) -> String {
    let dead_letter = if on_ambiguous == "dead_letter" {
        "dead_letter_topic = \"cdc.dlq\"\n"
    } else {
        ""
    };
    let debezium = if value == "debezium" {
        format!("[pipelines.debezium]\ntopic_prefix = \"dbz\"\nschemas = {schemas}\n")
    } else {
        String::new()
    };
    format!(
        "[mongodb]\nuri = \"mongodb://127.0.0.1:27017/\"\n[kafka]\n\
         bootstrap_servers = \"127.0.0.1:9092\"\ntopic_prefix = \"cdc.\"\n[[pipelines]]\n\
         name = \"p\"\ndatabase = \"shop\"\ncollection = \"orders\"\n\
         full_document = \"update_lookup\"\nvalue = \"{value}\"\nformat = \"{format}\"\n\
         key_format = \"{key_format}\"\njson = \"{json}\"\non_ambiguous = \"{on_ambiguous}\"\n\
         replace_invalid_utf8 = {replace}\ntombstones = {tombstones}\n{dead_letter}{debezium}"
    )
}

/// The operation types an event is built with: MongoDB's documented ones and one it may add.
const OPERATIONS: [&str; 8] = [
    "insert",
    "update",
    "replace",
    "delete",
    "drop",
    "rename",
    "invalidate",
    "shardCollection",
];

/// The change event of `shape`: 0 is `doc` itself; otherwise an event of operation type
/// `OPERATIONS[shape % 8]` carrying `doc` (as `fullDocument`, `updatedFields`, the pre-image
/// and, with bit 3, as the `documentKey`; else its `_id`), in a transaction with bit 6.
fn event(shape: u8, doc: &RawDocument) -> RawDocumentBuf {
    if shape == 0 {
        return doc.to_raw_document_buf();
    }
    let operation = OPERATIONS[usize::from(shape % 8)];
    let mut event = rawdoc! {
        "_id": { "_data": "8265941F25000000012B022C0100296E5A1004" },
        "operationType": operation,
        "clusterTime": Timestamp { time: 1_704_164_645, increment: u32::from(shape) },
        "wallTime": DateTime::from_millis(1_704_164_645_123),
        "ns": { "db": "shop", "coll": "orders" },
    };
    let key = match doc.get("_id") {
        Ok(Some(id)) if shape & 8 == 0 => {
            let mut key = RawDocumentBuf::new();
            key.append("_id", id.to_raw_bson());
            key
        }
        _ => doc.to_raw_document_buf(),
    };
    if matches!(operation, "insert" | "update" | "replace" | "delete") {
        event.append("documentKey", key);
    }
    if shape & 16 != 0 && operation != "insert" {
        event.append("fullDocumentBeforeChange", doc.to_raw_document_buf());
    }
    match operation {
        "insert" | "replace" => event.append("fullDocument", doc.to_raw_document_buf()),
        "update" => {
            let mut description = RawDocumentBuf::new();
            description.append("updatedFields", doc.to_raw_document_buf());
            let removed: bson::RawArrayBuf = doc
                .iter()
                .flatten()
                .filter(|(_, v)| matches!(v, RawBsonRef::Null))
                .map(|(k, _)| k)
                .collect();
            description.append("removedFields", removed);
            description.append("truncatedArrays", bson::RawArrayBuf::new());
            event.append("updateDescription", description);
            if shape & 32 != 0 {
                event.append("fullDocument", doc.to_raw_document_buf());
            }
        }
        "rename" => event.append("to", rawdoc! { "db": "shop", "coll": "orders2" }),
        _ => {}
    }
    if shape & 64 != 0 {
        event.append("lsid", rawdoc! { "id": 1_i32, "uid": 2_i32 });
        event.append("txnNumber", 7_i64);
    }
    event
}

/// One event through the encoder `selector` picks.
fn encode(selector: u8, shape: u8, doc: &RawDocument) {
    let encoders = encoders();
    let event = event(shape, doc);
    let mut encoder = encoders[usize::from(selector) % encoders.len()]
        .lock()
        .expect("the fuzz target runs on one thread");
    let Ok(encoded) = encoder.encode(&event) else {
        return;
    };
    for record in &encoded.records {
        let format = record
            .headers
            .iter()
            .find(|(name, _)| *name == "mongo.format");
        let is_json = format.is_some_and(|(_, f)| f.starts_with(b"json"));
        if let (true, Some(value)) = (is_json, &record.value) {
            assert_json(value, "a JSON record's value");
        }
    }
}
