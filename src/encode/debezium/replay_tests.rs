//! Replays whole records of a capture of the real connector (`bench/peers/capture_debezium.py
//! OUTDIR`) when `MKB_DBZ_VECTORS=OUTDIR` is set: every record Debezium wrote (snapshot and
//! stream, every BSON type as value and as `_id`, pre-images) against the record the Debezium
//! form makes of the BSON Debezium was shown, key and value byte for byte, processing times
//! (top-level `ts_ms`, a copy's `source.ts_*`) set to 0 on both sides.

use base64::Engine as _;

use crate::config::Config;
use crate::encode::RecordEncoder;
use crate::snapshot::{CopyTarget, Reason};

use super::SnapshotMark;

fn zero_times(text: &str) -> String {
    let mut out = super::tests::processing_time_zero(text);
    for (from, to) in [
        ("\"ts_ms\":", ",\"snapshot\":\"true\""),
        ("\"ts_ms\":", ",\"snapshot\":\"last\""),
    ] {
        if let Some(end) = out.find(to) {
            let start = out[..end].rfind(from).expect("ts_ms") + from.len();
            out.replace_range(start..end, "0");
        }
    }
    if out.contains("\"ord\":-1,") {
        let start = out.find("\"ts_us\":").expect("ts_us");
        let end = out.find(",\"collection\":").expect("collection");
        out.replace_range(start..end, "\"ts_us\":0,\"ts_ns\":0");
    }
    out
}

fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("readable")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

fn bytes(value: &serde_json::Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(value.as_str().expect("base64 text"))
        .expect("base64")
}

#[test]
fn replay_connector_records() {
    let Ok(dir) = std::env::var("MKB_DBZ_VECTORS") else {
        eprintln!("skipped: MKB_DBZ_VECTORS is unset (a capture_debezium.py OUTDIR)");
        return;
    };
    let dir = std::path::Path::new(&dir);
    let mut compared = 0;
    for run in ["main", "ids", "preimage"] {
        let records = lines(&dir.join(format!("records-{run}.jsonl")));
        let events = lines(&dir.join(format!("events-{run}.jsonl")));
        compared += replay(run, &records, &events);
    }
    eprintln!("{compared} connector records equal");
    assert!(compared > 0);
}

fn replay(run: &str, records: &[serde_json::Value], events: &[serde_json::Value]) -> usize {
    let topic = records[0]["topic"].as_str().expect("topic");
    let mut parts = topic.splitn(3, '.');
    let (prefix, db, coll) = (parts.next(), parts.next(), parts.next());
    let (Some(prefix), Some(db), Some(coll)) = (prefix, db, coll) else {
        panic!("topic {topic}");
    };
    let text = format!(
        "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
         [[pipelines]]\nname = \"p\"\ndatabase = \"{db}\"\ncollection = \"{coll}\"\n\
         value = \"debezium\"\n[pipelines.debezium]\ntopic_prefix = \"{prefix}\"\n"
    );
    let config = Config::from_toml(&text, std::iter::empty()).expect("valid");
    let mut encoder = RecordEncoder::new(&config.pipelines[0], "");
    let target = CopyTarget {
        db: db.into(),
        coll: coll.into(),
        snapshot_id: "s".into(),
        reason: Reason::Initial,
        shard_key: None,
    };
    let snapshot_docs = events.iter().filter(|e| e["from"] == "snapshot");
    let mut stream = events
        .iter()
        .filter(|e| e["from"] != "snapshot")
        .map(|e| bson::RawDocumentBuf::from_bytes(bytes(&e["bson"])).expect("BSON"))
        .filter(|e| {
            let kind = e.get_str("operationType").unwrap_or("");
            ["insert", "update", "replace", "delete"].contains(&kind)
        });
    let mut snapshot_docs =
        snapshot_docs.map(|e| bson::RawDocumentBuf::from_bytes(bytes(&e["bson"])).expect("BSON"));
    let mut ours = Vec::new();
    let mut lookups_missed = Vec::new();
    for record in records {
        let Some(value) = record["value"].as_str() else {
            continue; // a tombstone: ours come with their delete
        };
        let copied = value.contains("\"op\":\"r\"");
        let mut lookup_missed = false;
        let made = if copied {
            let doc = snapshot_docs.next().expect("a snapshot document");
            let mark = if value.contains("\"snapshot\":\"last\"") {
                SnapshotMark::Last
            } else {
                SnapshotMark::Within
            };
            encoder
                .encode_copy(&target, &doc, None, mark)
                .expect("encodes")
                .0
        } else {
            let event = stream.next().expect("a change event");
            // The capture's own stream looked the document up later than Debezium did (the
            // lookup is not point in time): it may have found it deleted.
            lookup_missed = event.get_str("operationType") == Ok("update")
                && matches!(event.get("fullDocument"), Ok(Some(bson::RawBsonRef::Null)));
            encoder.encode(&event).expect("encodes").records
        };
        if lookup_missed {
            lookups_missed.push(ours.len());
        }
        ours.extend(made);
    }
    assert_eq!(ours.len(), records.len(), "{run}: record count");
    for (i, (theirs, ours)) in records.iter().zip(&ours).enumerate() {
        let key = String::from_utf8(ours.key.clone()).expect("UTF-8");
        assert_eq!(key, theirs["key"].as_str().expect("key"), "{run} #{i} key");
        let value = ours
            .value
            .as_ref()
            .map(|v| zero_times(std::str::from_utf8(v).expect("UTF-8")));
        let mut expected = theirs["value"].as_str().map(zero_times);
        if let Some(text) = expected.as_mut().filter(|_| lookups_missed.contains(&i)) {
            let start = text.find(",\"after\":").expect("after") + 9;
            let end = text
                .find(",\"updateDescription\":")
                .expect("updateDescription");
            text.replace_range(start..end, "null");
        }
        assert_eq!(value, expected, "{run} #{i} value");
    }
    ours.len()
}
