//! Oversize policy `dead_letter`: a record Kafka refuses as too large is replaced by a small stub
//! on the configured dead-letter topic, and the event then counts as delivered.
//!
//! The stub keeps the original key and headers, adds `mongo.error`, and its value is
//! `{"documentKey":<the original key JSON>,"clusterTime":"<s>.<i>"|null,"topic":…,"size":<bytes>,
//! "reason":…}`. Nothing is dropped silently: each stub is counted and logged by the relay.
//! Limits that trigger it: the producer's `message.max.bytes` (checked by librdkafka when the
//! record is enqueued) and the topic's `max.message.bytes` (the broker answers
//! `MESSAGE_TOO_LARGE`), see Kafka's and librdkafka's configuration references.

use std::sync::Arc;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::encode::Record;

/// Whether `error` means the record is too large for the producer or the topic.
pub fn is_oversize(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::InvalidMessageSize)
    )
}

/// The stub for a refused record of `size` bytes originally bound for `topic`.
pub fn stub(
    dead_letter_topic: &Arc<str>,
    topic: &str,
    key: &[u8],
    headers: &[(&'static str, Vec<u8>)],
    size: usize,
    error: &KafkaError,
) -> Record {
    let reason = format!("{error}");
    let cluster_time = headers
        .iter()
        .find(|(name, _)| *name == "mongo.cluster_time")
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned());
    let key_json: serde_json::Value =
        serde_json::from_slice(key).unwrap_or_else(|_| String::from_utf8_lossy(key).into());
    let value = serde_json::json!({
        "documentKey": key_json,
        "clusterTime": cluster_time,
        "topic": topic,
        "size": size,
        "reason": reason,
    });
    let mut headers = headers.to_vec();
    headers.push(("mongo.error", reason.into_bytes()));
    Record {
        topic: Arc::clone(dead_letter_topic),
        key: key.to_vec(),
        value: Some(value.to_string().into_bytes()),
        headers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stub_keeps_key_and_headers_and_describes_the_refusal() {
        let error = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        let headers = vec![
            ("mongo.operation_type", b"insert".to_vec()),
            ("mongo.cluster_time", b"1700000000.3".to_vec()),
        ];
        let dlq: Arc<str> = Arc::from("orders.dlq");
        let key = br#"{"_id":{"$numberInt":"1"}}"#;
        let record = stub(&dlq, "shop.orders", key, &headers, 2_000_000, &error);
        assert_eq!(&*record.topic, "orders.dlq");
        assert_eq!(record.key, key.to_vec());
        assert_eq!(record.headers.len(), 3);
        assert_eq!(record.headers[2].0, "mongo.error");
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
        assert!(is_oversize(&error));
        assert!(!is_oversize(&KafkaError::MessageProduction(
            RDKafkaErrorCode::MessageTimedOut
        )));
    }
}
