//! History-loss policy `skip`: gap markers that tell every consumer that changes were skipped.
//!
//! When a pipeline's committed resume token is no longer in the oplog and its policy is
//! `on_history_lost = "skip"`, the bridge restarts at the current cluster time. Before it moves
//! the offsets, it publishes one **gap marker** to *every partition* of every topic the pipeline
//! writes, so each consumer of each group sees it whatever partitions it owns:
//! key `{"pipeline":"<name>"}`, value
//! `{"operationType":"gap","pipeline":…,"from":<committed clusterTime>,"to":<new start>,"reason":…}`
//! (times as Extended JSON timestamps, `from` null when unknown), header
//! `mongo.operation_type=gap`.
//!
//! Invariants: the markers are delivered before the offsets move, so a crash in between repeats
//! the markers instead of losing them; the topics are: the pipeline's `topic`, or its collection's
//! topic, or for a database / deployment scope every existing topic named
//! `<topic_prefix><db>.<coll>` / `<topic_prefix>*.*` (internal `__*` topics excluded).

use std::sync::Arc;
use std::time::Duration;

use bson::Timestamp;

use crate::config::PipelineConfig;
use crate::encode::Record;
use crate::error::BridgeError;
use crate::sink::KafkaSink;

/// Bound of the metadata request and of the markers' delivery.
const GAP_TIMEOUT: Duration = Duration::from_secs(30);

/// The marker's value for `pipeline`, skipping from `from` to `to` because of `reason`.
pub fn marker_value(
    pipeline: &str,
    from: Option<Timestamp>,
    to: Timestamp,
    reason: &str,
) -> String {
    let ts = |t: Timestamp| format!(r#"{{"$timestamp":{{"t":{},"i":{}}}}}"#, t.time, t.increment);
    let from = from.map_or_else(|| "null".to_owned(), ts);
    let text = |s: &str| serde_json::Value::String(s.to_owned()).to_string();
    format!(
        r#"{{"operationType":"gap","pipeline":{},"from":{from},"to":{},"reason":{}}}"#,
        text(pipeline),
        ts(to),
        text(reason)
    )
}

/// Whether `topic` is one the pipeline writes, given the cluster's topic list.
pub fn writes_to(p: &PipelineConfig, prefix: &str, topic: &str) -> bool {
    if let Some(fixed) = &p.topic {
        return topic == fixed;
    }
    let Some(rest) = topic.strip_prefix(prefix) else {
        return false;
    };
    if rest.starts_with("__") {
        return false;
    }
    match (&p.database, &p.collection) {
        (Some(db), Some(coll)) => rest == format!("{db}.{coll}"),
        (Some(db), None) => rest
            .strip_prefix(db.as_str())
            .is_some_and(|r| r.is_empty() || r.starts_with('.')),
        _ => rest.contains('.'),
    }
}

/// Publishes the gap marker to every partition of every topic `p` writes; returns how many
/// markers were delivered. Errors: the first delivery error, or a metadata timeout.
pub async fn publish(
    sink: &KafkaSink,
    p: &PipelineConfig,
    prefix: &str,
    from: Option<Timestamp>,
    to: Timestamp,
    reason: &str,
) -> Result<usize, BridgeError> {
    let delivery_error = |topic: &str, source| BridgeError::Delivery {
        pipeline: p.name.clone(),
        topic: topic.to_owned(),
        source: Box::new(source),
    };
    let topics = sink.topics(GAP_TIMEOUT).await.ok_or_else(|| {
        delivery_error(
            "*",
            rdkafka::error::KafkaError::MetadataFetch(
                rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
            ),
        )
    })?;
    let key = serde_json::json!({ "pipeline": p.name })
        .to_string()
        .into_bytes();
    let value = marker_value(&p.name, from, to, reason).into_bytes();
    let mut deliveries = Vec::new();
    for (topic, partitions) in topics.iter().filter(|(t, _)| writes_to(p, prefix, t)) {
        let record = Record {
            topic: Arc::from(topic.as_str()),
            key: key.clone(),
            value: Some(value.clone()),
            headers: vec![
                ("mongo.operation_type", b"gap".to_vec()),
                ("mongo.pipeline", p.name.as_bytes().to_vec()),
            ],
        };
        for partition in 0..*partitions {
            let delivery = sink
                .enqueue_waiting(&record, Some(partition))
                .await
                .map_err(|e| delivery_error(topic, e))?;
            deliveries.push((topic.clone(), delivery));
        }
    }
    let count = deliveries.len();
    for (topic, delivery) in deliveries {
        match delivery.await {
            Ok(Ok(_)) => {}
            Ok(Err((e, _))) => return Err(delivery_error(&topic, e)),
            Err(_) => {
                return Err(BridgeError::DeliveryCancelled {
                    pipeline: p.name.clone(),
                });
            }
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipeline(text: &str) -> PipelineConfig {
        let toml = format!(
            "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
             [[pipelines]]\nname = \"p\"\n{text}"
        );
        crate::Config::from_toml(&toml, std::iter::empty())
            .expect("valid")
            .pipelines
            .remove(0)
    }

    #[test]
    fn marker_value_is_the_documented_json() {
        let to = Timestamp {
            time: 1700000100,
            increment: 2,
        };
        let from = Some(Timestamp {
            time: 1700000000,
            increment: 7,
        });
        assert_eq!(
            marker_value("orders", from, to, "history lost"),
            r#"{"operationType":"gap","pipeline":"orders","from":{"$timestamp":{"t":1700000000,"i":7}},"to":{"$timestamp":{"t":1700000100,"i":2}},"reason":"history lost"}"#
        );
        assert!(marker_value("o\"x", None, to, "r").contains(r#""pipeline":"o\"x","from":null"#));
    }

    #[test]
    fn topics_of_each_scope() {
        let coll = pipeline("database = \"shop\"\ncollection = \"orders\"\n");
        assert!(writes_to(&coll, "cdc.", "cdc.shop.orders"));
        assert!(!writes_to(&coll, "cdc.", "cdc.shop.orders2"));
        let db = pipeline("database = \"shop\"\n");
        assert!(writes_to(&db, "", "shop.orders"));
        assert!(writes_to(&db, "", "shop"));
        assert!(!writes_to(&db, "", "shopping.orders"));
        let all = pipeline("");
        assert!(writes_to(&all, "", "any.thing"));
        assert!(!writes_to(&all, "", "__consumer_offsets"));
        let fixed = pipeline("database = \"shop\"\ntopic = \"orders-cdc\"\n");
        assert!(writes_to(&fixed, "", "orders-cdc"));
        assert!(!writes_to(&fixed, "", "shop.orders"));
    }
}
