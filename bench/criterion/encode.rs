//! Encoder micro-benchmark: a raw change event (BSON bytes as the server sends them) → relaxed
//! and canonical Extended JSON bytes, for ~1 KB, ~20 KB and ~250 KB documents and for the real
//! sample documents (`../shared/data/sample`, when present), against the naive path a user
//! would write (`bson::Document` → `serde_json::Value` → bytes). `extjson-strict` is the same
//! transcoding with the checks the encoder applies (ambiguous documents, invalid UTF-8), next to
//! `extjson` with them compiled out: the difference is what the checks cost.
//!
//! `cargo bench --bench encode` (add `-- --quick` for a short run). Under
//! `cargo test --all-targets` every case runs once as a smoke test.

// A binary exports nothing: the library's lints on public items (Cargo.toml) do not apply.
#![allow(unreachable_pub, missing_docs)]

use std::hint::black_box;
use std::path::Path;

use bson::{Bson, Document, RawDocumentBuf, doc, oid::ObjectId};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mongo_kafka_bridge::config::PipelineConfig;
use mongo_kafka_bridge::encode::RecordEncoder;
use mongo_kafka_bridge::extjson::{self, JsonMode, Utf8};

/// A document of about `size` BSON bytes shaped like the load generator's (`bench/src/load.rs`).
fn document(size: usize) -> Document {
    let filler: String = (0..size.saturating_sub(230))
        .map(|i| (b'a' + ((i * 7 + i / 13) % 26) as u8) as char)
        .collect();
    doc! {
        "_id": ObjectId::new(),
        "seq": 12_345_i64,
        "bench_ts": 1_764_403_200_123_456_i64,
        "status": "pending",
        "customer": { "name": "customer-345", "city": "Lyon", "vip": false },
        "total": 123.45,
        "items": [ { "sku": "A-1", "qty": 2_i32 }, { "sku": "B-7", "qty": 1_i32 } ],
        "created": bson::DateTime::from_millis(1_764_403_200_123),
        "pad": filler,
    }
}

/// The insert event MongoDB sends for `full` (field order as the server's).
fn insert_event(full: Document) -> RawDocumentBuf {
    let id = full.get("_id").cloned().unwrap_or(Bson::Null);
    let event = doc! {
        "_id": { "_data": "8265A1B2C3000000012B022C0100296E5A1004B1A2C3D4E5F60718293A4B5C6D7E8F46645F69640064656A1B2C3D4E5F607182930004" },
        "operationType": "insert",
        "clusterTime": bson::Timestamp { time: 1_764_403_200, increment: 1 },
        "wallTime": bson::DateTime::from_millis(1_764_403_200_123),
        "fullDocument": full,
        "ns": { "db": "shop", "coll": "orders" },
        "documentKey": { "_id": id },
    };
    RawDocumentBuf::from_document(&event).expect("event encodes")
}

/// Insert events of the real sample documents (canonical Extended JSON lines), if present.
fn sample_events() -> Vec<RawDocumentBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/sample");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    let mut events = Vec::new();
    for path in paths
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
    {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()).take(200) {
            let Ok(serde_json::Value::Object(map)) = serde_json::from_str(line) else {
                continue;
            };
            if let Ok(d) = Document::try_from(map) {
                events.push(insert_event(d));
            }
        }
    }
    events
}

/// The naive path: decode into a `bson::Document`, convert to a `serde_json::Value`, serialize.
fn naive(raw: &RawDocumentBuf, mode: JsonMode) -> Vec<u8> {
    let d = Document::from_reader(raw.as_bytes()).expect("valid BSON");
    let value = match mode {
        JsonMode::Relaxed => Bson::Document(d).into_relaxed_extjson(),
        JsonMode::Canonical => Bson::Document(d).into_canonical_extjson(),
    };
    serde_json::to_vec(&value).expect("serializable")
}

/// The bridge's transcoder: raw BSON bytes → Extended JSON bytes.
fn transcode(raw: &RawDocumentBuf, mode: JsonMode, out: &mut Vec<u8>) -> usize {
    out.clear();
    extjson::write_document(out, raw, mode).expect("valid BSON");
    out.len()
}

/// [`transcode`] with the strict checks the encoder applies (ambiguous documents, invalid
/// UTF-8); `transcode` is the same walk with the checks compiled out.
fn transcode_strict(raw: &RawDocumentBuf, mode: JsonMode, out: &mut Vec<u8>) -> usize {
    out.clear();
    extjson::write_document_strict(out, raw, mode, Utf8::Refuse).expect("unambiguous BSON");
    out.len()
}

fn encoder(json: &str) -> RecordEncoder {
    let pipeline: PipelineConfig = toml::from_str(&format!(
        "name = \"orders\"\ndatabase = \"shop\"\ncollection = \"orders\"\njson = \"{json}\"\n"
    ))
    .expect("pipeline config");
    RecordEncoder::new(&pipeline, "")
}

fn bench_set(c: &mut Criterion, name: &str, events: &[RawDocumentBuf]) {
    let bytes: usize = events.iter().map(|e| e.as_bytes().len()).sum();
    let mut group = c.benchmark_group(format!("encode/{name}"));
    group.throughput(Throughput::Bytes(bytes as u64));
    if bytes > 1_000_000 {
        group.sample_size(20);
    }
    let mut out = Vec::with_capacity(bytes * 2);
    for (label, mode) in [
        ("relaxed", JsonMode::Relaxed),
        ("canonical", JsonMode::Canonical),
    ] {
        group.bench_function(BenchmarkId::new("extjson", label), |b| {
            b.iter(|| {
                events
                    .iter()
                    .map(|e| transcode(black_box(e), mode, &mut out))
                    .sum::<usize>()
            })
        });
        group.bench_function(BenchmarkId::new("extjson-strict", label), |b| {
            b.iter(|| {
                events
                    .iter()
                    .map(|e| transcode_strict(black_box(e), mode, &mut out))
                    .sum::<usize>()
            })
        });
        group.bench_function(BenchmarkId::new("naive", label), |b| {
            b.iter(|| {
                events
                    .iter()
                    .map(|e| naive(black_box(e), mode).len())
                    .sum::<usize>()
            })
        });
        // The whole record: key, value and headers, as the relay builds it.
        let mut enc = encoder(label);
        group.bench_function(BenchmarkId::new("record", label), |b| {
            b.iter(|| {
                events
                    .iter()
                    .map(|e| enc.encode(black_box(e)).expect("encodes").records.len())
                    .sum::<usize>()
            })
        });
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    for (name, size) in [("1KB", 1024), ("20KB", 20 * 1024), ("250KB", 250 * 1024)] {
        bench_set(c, name, &[insert_event(document(size))]);
    }
    let samples = sample_events();
    if samples.is_empty() {
        eprintln!("encode: ../shared/data/sample is absent, skipping the sample documents");
    } else {
        bench_set(c, "samples", &samples);
    }
}

criterion_group!(encode, benches);
criterion_main!(encode);
