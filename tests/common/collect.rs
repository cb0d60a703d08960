//! What the integration tests read back from a topic: every record of every partition from
//! the beginning ([`Received`] as text, [`RawRecord`] as bytes), until enough arrived and then
//! nothing more for a while, and the views the tests take of them (by key, by integer `_id`).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::message::{BorrowedMessage, Headers, Message};

use crate::common::kafka::{assign_from_start, consumer, partitions};
use crate::common::servers::kafka_bootstrap;
use crate::common::unique;

/// One record as a consumer saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp (ms; the producer's `CreateTime`), when it has one.
    pub timestamp_ms: Option<i64>,
    pub key: Option<String>,
    pub value: Option<String>,
    pub headers: Vec<(String, String)>,
}

impl Received {
    /// The value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    /// The value parsed as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.value.as_deref().expect("record has a value"))
            .expect("JSON value")
    }
}

/// One record as a consumer saw it, as bytes (BSON keys and values).
#[derive(Debug, Clone, PartialEq)]
pub struct RawRecord {
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp (ms; the producer's `CreateTime`), when it has one.
    pub timestamp_ms: Option<i64>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl RawRecord {
    /// The value of header `name` as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }

    /// The record a consumer read, as bytes.
    fn of(m: &BorrowedMessage<'_>) -> Self {
        let headers = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec()))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            partition: m.partition(),
            offset: m.offset(),
            timestamp_ms: m.timestamp().to_millis(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers,
        }
    }

    /// The record as text (UTF-8 keys, values and headers).
    fn text(self) -> Received {
        let text = |b: Option<Vec<u8>>| b.map(|b| String::from_utf8(b).expect("UTF-8"));
        Received {
            partition: self.partition,
            offset: self.offset,
            timestamp_ms: self.timestamp_ms,
            key: text(self.key),
            value: text(self.value),
            headers: self
                .headers
                .into_iter()
                .map(|(n, v)| (n, String::from_utf8(v).expect("UTF-8 header")))
                .collect(),
        }
    }
}

/// Like [`collect`], keeping keys and values as bytes.
pub async fn collect_raw(topic: &str, count: usize, timeout: Duration) -> Vec<RawRecord> {
    raw_from(&kafka_bootstrap(), topic, count, Duration::ZERO, timeout).await
}

/// Every record of `topic` as bytes, read until nothing more arrived for `quiet` (or `timeout`).
pub async fn collect_raw_quiet(topic: &str, quiet: Duration, timeout: Duration) -> Vec<RawRecord> {
    raw_from(&kafka_bootstrap(), topic, 1, quiet, timeout).await
}

/// [`collect_raw_quiet`] on `bootstrap`.
pub async fn collect_raw_quiet_at(
    bootstrap: &str,
    topic: &str,
    quiet: Duration,
    timeout: Duration,
) -> Vec<RawRecord> {
    raw_from(bootstrap, topic, 1, quiet, timeout).await
}

/// Reads every partition of `topic` from the beginning (no consumer group) until `count`
/// records arrived or `timeout` passed; returns them ordered by partition, then offset.
pub async fn collect(topic: &str, count: usize, timeout: Duration) -> Vec<Received> {
    collect_from(&kafka_bootstrap(), topic, count, Duration::ZERO, timeout).await
}

/// Like [`collect`] on `bootstrap`, and after `min` records keeps reading until nothing more
/// arrived for `quiet` (so extra records show up too).
pub async fn collect_from(
    bootstrap: &str,
    topic: &str,
    min: usize,
    quiet: Duration,
    timeout: Duration,
) -> Vec<Received> {
    let raw = raw_from(bootstrap, topic, min, quiet, timeout).await;
    raw.into_iter().map(RawRecord::text).collect()
}

/// Records of `topic` on `bootstrap`: at least `min`, then until nothing more arrived for
/// 500 ms (so unexpected extra records are seen), or `timeout`. (Callers first wait for the
/// commit, so every record is written.)
pub async fn collect_at(
    bootstrap: &str,
    topic: &str,
    min: usize,
    timeout: Duration,
) -> Vec<Received> {
    collect_from(bootstrap, topic, min, Duration::from_millis(500), timeout).await
}

/// [`collect_at`] on the Kafka under test.
pub async fn records(topic: &str, min: usize, timeout: Duration) -> Vec<Received> {
    collect_at(&kafka_bootstrap(), topic, min, timeout).await
}

/// Every record of `topic` in partition order, then offset order: at least `min`, then until
/// nothing arrived for `quiet`, or until `timeout` (read on the blocking pool).
async fn raw_from(
    bootstrap: &str,
    topic: &str,
    min: usize,
    quiet: Duration,
    timeout: Duration,
) -> Vec<RawRecord> {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    let read = move || {
        let consumer = consumer(
            &bootstrap,
            &unique("collector"),
            &[("enable.partition.eof", "false")],
        );
        let deadline = Instant::now() + timeout;
        let Some(partitions) = partitions(&consumer, &topic, timeout) else {
            return Vec::new();
        };
        assign_from_start(&consumer, &topic, partitions);
        let mut out: Vec<RawRecord> = Vec::new();
        let mut last = Instant::now();
        while Instant::now() < deadline && (out.len() < min || last.elapsed() < quiet) {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
                last = Instant::now();
                out.push(RawRecord::of(&m));
            }
        }
        out.sort_by_key(|r| (r.partition, r.offset));
        out
    };
    tokio::task::spawn_blocking(read)
        .await
        .expect("collector thread")
}

/// Records grouped by key, each group in partition order (= delivery order per key).
pub fn by_key(records: &[Received]) -> HashMap<String, Vec<&Received>> {
    let mut map: HashMap<String, Vec<&Received>> = HashMap::new();
    for r in records {
        map.entry(r.key.clone().unwrap_or_default())
            .or_default()
            .push(r);
    }
    map
}

/// How many records each integer `_id` has (Int32 or Int64: the stand-in may return small
/// Int64 values as Int32).
pub fn per_id(records: &[Received]) -> HashMap<i64, usize> {
    let mut counts = HashMap::new();
    for r in records {
        let key: serde_json::Value = serde_json::from_str(r.key.as_deref().unwrap()).unwrap();
        let id = &key["_id"];
        let text = id["$numberInt"]
            .as_str()
            .or(id["$numberLong"].as_str())
            .unwrap();
        *counts.entry(text.parse::<i64>().unwrap()).or_default() += 1;
    }
    counts
}

/// The canonical Extended JSON key of the document with `_id: id` (an Int32).
pub fn key_of(id: i32) -> String {
    format!(r#"{{"_id":{{"$numberInt":"{id}"}}}}"#)
}

/// The integer `_id`s (Int32 or Int64) of the records' keys; keys of another shape are left out.
pub fn key_ids(records: &[Received]) -> HashSet<i64> {
    records
        .iter()
        .filter_map(|r| r.key.as_deref())
        .filter_map(|k| serde_json::from_str::<serde_json::Value>(k).ok())
        .filter_map(|k| {
            let id = &k["_id"];
            id["$numberInt"]
                .as_str()
                .or(id["$numberLong"].as_str())
                .and_then(|s| s.parse().ok())
        })
        .collect()
}

/// The operation types of `records` (`mongo.operation_type`), in order.
pub fn operation_types(records: &[Received]) -> Vec<&str> {
    records
        .iter()
        .map(|r| r.header("mongo.operation_type").unwrap())
        .collect()
}

/// The operation types of one key's records (`group`, from [`by_key`]), each at its first
/// occurrence: a replay after a restart may repeat events (at-least-once).
pub fn first_operations<'a>(group: &[&'a Received]) -> Vec<&'a str> {
    let mut firsts: Vec<&str> = Vec::new();
    for r in group {
        let op = r.header("mongo.operation_type").unwrap();
        if !firsts.contains(&op) {
            firsts.push(op);
        }
    }
    firsts
}
