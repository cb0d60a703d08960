//! A pipeline's heartbeat record (README "Heartbeats"): its topic's name and its bytes. When
//! one is written and what it commits is `relay/heartbeat.rs`'s; `config/heartbeat.rs` lists
//! the feature's pieces.
//!
//! The record, a public contract:
//! - topic: `heartbeat_topic`, default `<topic_prefix>heartbeats` (the Debezium form's prefix
//!   in that form; [`super::topics::heartbeat`]);
//! - key: `{"pipeline":"<name>"}`, compact JSON;
//! - value: relaxed Extended JSON `{"pipeline", "clusterTime", "positionTime", "wallTime"}`:
//!   the `clusterTime` of the last event the position covers (`null` before any), the position's
//!   best-known cluster time (`positionTime`, as in the offsets document) and when the bridge
//!   wrote the heartbeat (`wallTime`, its clock);
//! - headers: `mongo.operation_type` = `heartbeat`, `mongo.pipeline`, `mongo.format` =
//!   `json-relaxed`, and `mongo.cluster_time` (`<seconds>.<increment>`) when known.
//!
//! Invariant: keys and values are JSON whatever the pipeline's `format` and `key_format`, so
//! pipelines of every format can share one heartbeat topic and one consumer reads them all.

use std::sync::Arc;

use bson::{RawBson, RawDocumentBuf, Timestamp, rawdoc};

use super::Record;
use crate::extjson::JsonMode;

/// What one heartbeat says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Beat {
    /// `clusterTime` of the last event the committed position covers.
    pub cluster_time: Option<Timestamp>,
    /// The committed position's best-known cluster time.
    pub position_time: Option<Timestamp>,
    /// When the heartbeat was made, ms since the Unix epoch.
    pub wall_time_ms: i64,
}

/// The heartbeat record of `pipeline` on `topic`.
pub(crate) fn record(topic: &Arc<str>, pipeline: &str, beat: &Beat) -> Record {
    let time = |t: Option<Timestamp>| t.map_or(RawBson::Null, RawBson::Timestamp);
    let value = rawdoc! {
        "pipeline": pipeline,
        "clusterTime": time(beat.cluster_time),
        "positionTime": time(beat.position_time),
        "wallTime": bson::DateTime::from_millis(beat.wall_time_ms),
    };
    let mut headers = vec![
        ("mongo.operation_type", b"heartbeat".to_vec()),
        ("mongo.pipeline", pipeline.as_bytes().to_vec()),
        ("mongo.format", b"json-relaxed".to_vec()),
    ];
    if let Some(t) = beat.cluster_time {
        let text = format!("{}.{}", t.time, t.increment);
        headers.push(("mongo.cluster_time", text.into_bytes()));
    }
    Record {
        topic: Arc::clone(topic),
        key: json(&rawdoc! { "pipeline": pipeline }, JsonMode::Canonical),
        value: Some(json(&value, JsonMode::Relaxed)),
        headers,
        partition: None,
    }
}

/// `doc`, one of the bridge's own (never ambiguous), as compact JSON in `mode`.
fn json(doc: &RawDocumentBuf, mode: JsonMode) -> Vec<u8> {
    let mut out = Vec::with_capacity(160);
    crate::extjson::write_document(&mut out, doc, mode)
        .expect("the bridge's own heartbeat document is always writable as JSON");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PipelineConfig;

    #[test]
    fn the_record_names_the_pipeline_and_both_times() {
        let beat = Beat {
            cluster_time: Some(Timestamp {
                time: 1_764_403_200,
                increment: 3,
            }),
            position_time: Some(Timestamp {
                time: 1_764_403_260,
                increment: 0,
            }),
            wall_time_ms: 1_764_403_260_123,
        };
        let r = record(&Arc::from("cdc.heartbeats"), "orders", &beat);
        assert_eq!(&*r.topic, "cdc.heartbeats");
        assert_eq!(r.key, br#"{"pipeline":"orders"}"#);
        let value = String::from_utf8(r.value.unwrap()).unwrap();
        assert_eq!(
            value,
            r#"{"pipeline":"orders","clusterTime":{"$timestamp":{"t":1764403200,"i":3}},"positionTime":{"$timestamp":{"t":1764403260,"i":0}},"wallTime":{"$date":"2025-11-29T08:01:00.123Z"}}"#
        );
        assert!(
            r.headers
                .contains(&("mongo.cluster_time", b"1764403200.3".to_vec()))
        );
        let none = record(
            &Arc::from("h"),
            "p",
            &Beat {
                cluster_time: None,
                position_time: None,
                wall_time_ms: 0,
            },
        );
        let value = String::from_utf8(none.value.unwrap()).unwrap();
        assert!(
            value.contains(r#""clusterTime":null,"positionTime":null"#),
            "{value}"
        );
        assert!(!none.headers.iter().any(|(n, _)| *n == "mongo.cluster_time"));
    }

    #[test]
    fn the_topic_is_configured_or_under_the_prefix_and_absent_when_off() {
        let p = |body: &str| PipelineConfig::for_test(body);
        let topic = super::super::topics::heartbeat;
        assert_eq!(topic(&p(""), "cdc."), None);
        assert_eq!(
            topic(&p("heartbeat_interval_ms = 5000\n"), "cdc.").as_deref(),
            Some("cdc.heartbeats")
        );
        assert_eq!(
            topic(
                &p("heartbeat_interval_ms = 5000\nheartbeat_topic = \"beats\"\n"),
                "cdc."
            )
            .as_deref(),
            Some("beats")
        );
    }
}
