//! Oversize policy `dead_letter`: a record Kafka refuses as too large is replaced by a small stub
//! on the configured dead-letter topic, and the event then counts as delivered.
//!
//! The stub keeps the original key and headers, adds `mongo.error`, sets `mongo.format` to
//! `json-canonical` (its own value's), and its value is `{"documentKey":<the original key as
//! canonical Extended JSON, also when keys are BSON>,"clusterTime":"<s>.<i>"|null,"topic":…,
//! "size":<bytes>,"reason":…}`. The same stub stands for an event JSON cannot carry exactly
//! (`on_ambiguous = "dead_letter"`), built by the encoder. Limits that trigger it: the producer's `message.max.bytes` (checked by librdkafka
//! when the record is enqueued) and the topic's `max.message.bytes` (the broker answers
//! `MESSAGE_TOO_LARGE`), see Kafka's and librdkafka's configuration references.
//!
//! Invariants: nothing is dropped silently (each stub is counted and logged where it is made,
//! `kafka/delivery.rs`); a stub is never replaced by a stub of itself: a stub Kafka refuses fails
//! the pipeline with the reason.

use std::sync::Arc;

use super::format::lossy_json;
use super::headers::set_format;
use super::record::Record;
use crate::config::Format;

/// What is known of a record Kafka refused: enough to name it and to build its stub.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Refused {
    /// The topic it was bound for.
    pub topic: Arc<str>,
    /// Its key bytes.
    pub key: Vec<u8>,
    /// Its headers (the bridge's own names only).
    pub headers: Vec<(&'static str, Vec<u8>)>,
    /// Key plus value bytes.
    pub size: usize,
    /// Whether it was enqueued (and so is part of the producer's open transaction, if any):
    /// `false` when librdkafka or the bridge refused it at enqueue.
    pub enqueued: bool,
}

impl Refused {
    /// A record librdkafka refused when it was enqueued.
    pub(crate) fn from_record(record: Record) -> Self {
        let size = record.key.len() + record.value.as_ref().map_or(0, Vec::len);
        Self {
            topic: record.topic,
            key: record.key,
            headers: record.headers,
            size,
            enqueued: false,
        }
    }

    /// The key as text, for errors and logs (BSON keys as canonical Extended JSON).
    pub(crate) fn key_text(&self, key_format: Format) -> String {
        match key_format {
            Format::Json => String::from_utf8_lossy(&self.key).into_owned(),
            Format::Bson => {
                bson::RawDocument::from_bytes(&self.key).map_or_else(|e| e.to_string(), lossy_json)
            }
        }
    }
}

/// The stub on `dead_letter_topic` for `refused`, refused for `reason`; its key bytes are in
/// `key_format`.
pub(crate) fn stub(
    dead_letter_topic: &Arc<str>,
    refused: &Refused,
    reason: &str,
    key_format: Format,
) -> Record {
    let cluster_time = refused
        .headers
        .iter()
        .find(|(name, _)| *name == "mongo.cluster_time")
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned());
    let key_json = match key_format {
        Format::Json => serde_json::from_slice(&refused.key).ok(),
        Format::Bson => bson::RawDocument::from_bytes(&refused.key)
            .ok()
            .and_then(|doc| serde_json::from_str(&lossy_json(doc)).ok()),
    };
    let key_json: serde_json::Value =
        key_json.unwrap_or_else(|| String::from_utf8_lossy(&refused.key).into());
    let value = serde_json::json!({
        "documentKey": key_json,
        "clusterTime": cluster_time,
        "topic": &*refused.topic,
        "size": refused.size,
        "reason": reason,
    });
    let mut headers = refused.headers.clone();
    set_format(&mut headers, b"json-canonical");
    headers.push(("mongo.error", reason.as_bytes().to_vec()));
    Record {
        topic: Arc::clone(dead_letter_topic),
        key: refused.key.clone(),
        value: Some(value.to_string().into_bytes()),
        headers,
        partition: None,
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};

    use super::*;

    #[test]
    fn stub_keeps_key_and_headers_and_describes_the_refusal() {
        let error = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        let key = br#"{"_id":{"$numberInt":"1"}}"#;
        let refused = Refused::from_record(Record {
            topic: Arc::from("shop.orders"),
            key: key.to_vec(),
            value: Some(vec![b'x'; 2_000_000 - key.len()]),
            headers: vec![
                ("mongo.operation_type", b"insert".to_vec()),
                ("mongo.cluster_time", b"1700000000.3".to_vec()),
                ("mongo.format", b"json-relaxed".to_vec()),
            ],
            partition: None,
        });
        let dlq: Arc<str> = Arc::from("orders.dlq");
        let record = stub(&dlq, &refused, &error.to_string(), Format::Json);
        assert_eq!(&*record.topic, "orders.dlq");
        assert_eq!(record.key, key.to_vec());
        assert_eq!(record.headers.len(), 4);
        assert_eq!(
            record.headers[2],
            ("mongo.format", b"json-canonical".to_vec())
        );
        assert_eq!(record.headers[3].0, "mongo.error");
        let value: serde_json::Value =
            serde_json::from_slice(record.value.as_deref().expect("stub has a value"))
                .expect("JSON");
        assert_eq!(
            value["documentKey"],
            serde_json::json!({"_id": {"$numberInt": "1"}})
        );
        assert_eq!(value["clusterTime"], "1700000000.3");
        assert_eq!(value["topic"], "shop.orders");
        assert_eq!(value["size"], 2_000_000);
    }

    #[test]
    fn a_bson_key_is_described_as_canonical_extended_json() {
        let key = bson::rawdoc! { "_id": 7_i64 };
        let refused = Refused {
            topic: Arc::from("t"),
            key: key.as_bytes().to_vec(),
            headers: Vec::new(),
            size: 10,
            enqueued: false,
        };
        let record = stub(&Arc::from("dlq"), &refused, "too large", Format::Bson);
        assert_eq!(record.key, key.as_bytes().to_vec());
        let value: serde_json::Value =
            serde_json::from_slice(record.value.as_deref().expect("value")).expect("JSON");
        assert_eq!(
            value["documentKey"],
            serde_json::json!({"_id": {"$numberLong": "7"}})
        );
        assert_eq!(
            refused.key_text(Format::Bson),
            r#"{"_id":{"$numberLong":"7"}}"#
        );
    }
}
