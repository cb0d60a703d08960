//! Kafka from the tests' side: topics (created, reconfigured, their partitions), and consumers
//! assigned every partition of a topic from its beginning, without a consumer group's offsets;
//! [`scan`] reads a topic afresh to the end of every partition with a chosen isolation level.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::common::servers::kafka_bootstrap;

/// Creates `topic` with `partitions` partitions (replication 1) on the Kafka under test.
pub async fn create_topic(topic: &str, partitions: i32) {
    create_topic_at(&kafka_bootstrap(), topic, partitions, &[]).await;
}

/// Creates `topic` on `bootstrap` with `partitions` partitions (replication 1) and topic-level
/// `configs`; a topic that already exists is fine.
pub async fn create_topic_at(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for (k, v) in configs {
        new = new.set(k, v);
    }
    let results = admin
        .create_topics(
            [&new],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(20))),
        )
        .await
        .expect("create_topics request");
    for r in results {
        if let Err((name, code)) = r {
            assert_eq!(
                code,
                rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists,
                "creating {name}"
            );
        }
    }
}

/// Sets topic config `key` = `value` on `bootstrap` (IncrementalAlterConfigs).
pub async fn set_topic_config(bootstrap: &str, topic: &str, key: &str, value: &str) {
    use rdkafka::admin::{AlterConfig, ResourceSpecifier};
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let alter = AlterConfig::new(ResourceSpecifier::Topic(topic)).set(key, value);
    let results = admin
        .alter_configs([&alter], &AdminOptions::new())
        .await
        .unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// The partitions of `topic` on `bootstrap` (0 when it does not exist or does not answer).
pub fn partitions_of(bootstrap: &str, topic: &str) -> usize {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("metadata client");
    consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .ok()
        .and_then(|md| md.topics().first().map(|t| t.partitions().len()))
        .unwrap_or(0)
}

/// A consumer of `bootstrap` in group `group` (whose offsets it never commits), with
/// `settings`. `auto.offset.reset` is `error` unless `settings` say otherwise: a test's reader
/// that lost its position must say so, not jump to the end (librdkafka's default, `latest`)
/// and read as if the records it skipped were never written.
pub fn consumer(bootstrap: &str, group: &str, settings: &[(&str, &str)]) -> BaseConsumer {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "error");
    for (k, v) in settings {
        config.set(*k, *v);
    }
    config.create().expect("consumer")
}

/// The partitions of `topic` once it has some (asked every 100 ms), or `None` after `timeout`.
pub fn partitions(consumer: &BaseConsumer, topic: &str, timeout: Duration) -> Option<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(md) = consumer.fetch_metadata(Some(topic), Duration::from_secs(5))
            && let Some(t) = md.topics().iter().find(|t| t.name() == topic)
            && !t.partitions().is_empty()
        {
            return Some(t.partitions().len() as i32);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Assigns `consumer` partitions `0..partitions` of `topic`, each from its beginning.
pub fn assign_from_start(consumer: &BaseConsumer, topic: &str, partitions: i32) {
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&tpl).expect("assign");
}

/// A consumer's `isolation.level`, always set explicitly (librdkafka defaults to
/// `read_committed`, the Java client and kafka-python to `read_uncommitted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    Committed,
    Uncommitted,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Committed => "read_committed",
            Self::Uncommitted => "read_uncommitted",
        }
    }
}

/// Calls `each` for every record of `topic`, read by a new consumer from offset 0 of every
/// partition to the end (`enable.partition.eof`), with `isolation`; panics when it does not
/// reach the end of every partition within 60 s. Blocking (a few hundred ms).
///
/// A fresh consumer each call: on noida-db 0.2.3 a `read_committed` consumer that has read
/// past an aborted transaction skips every later committed record of the same producer (see
/// the fault suite's `exactly_once` module doc).
pub fn scan(
    bootstrap: &str,
    topic: &str,
    isolation: Isolation,
    mut each: impl FnMut(&BorrowedMessage<'_>),
) {
    let consumer = consumer(
        bootstrap,
        &format!("faults-eos-read-{}", std::process::id()),
        &[
            ("enable.partition.eof", "true"),
            ("isolation.level", isolation.as_str()),
            ("fetch.wait.max.ms", "10"),
        ],
    );
    let partitions = partitions(&consumer, topic, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no partitions of {topic} within 30 s"));
    assign_from_start(&consumer, topic, partitions);
    let mut at_end = vec![false; partitions as usize];
    let mut records = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while at_end.iter().any(|e| !e) {
        assert!(
            Instant::now() < deadline,
            "reading {topic} ({}) did not reach the end of every partition within 60 s \
             (at the end: {at_end:?}, {records} records)",
            isolation.as_str(),
        );
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                records += 1;
                each(&m);
            }
            Some(Err(KafkaError::PartitionEOF(p))) => at_end[p as usize] = true,
            Some(Err(_)) | None => {} // transient (a broker still starting, a frozen one)
        }
    }
}
