//! The write load's records as a consumer reads them ([`Rec`], one decoder for every reader):
//! a long-lived [`Consumer`] on a thread of its own, and fresh reads of a whole topic with an
//! isolation level ([`read_all`], [`read`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::BaseConsumer;
use rdkafka::message::{BorrowedMessage, Headers, Message};

use crate::common::kafka::{Isolation, assign_from_start, consumer, partitions, scan};
use crate::common::load::Truth;
use crate::common::verdict::{Verdict, verify};

/// One change event of the load.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventId {
    Insert(i64),
    Update(String, i64),
}

/// One record as the consumer read it.
#[derive(Debug, Clone)]
pub struct Rec {
    pub partition: i32,
    pub offset: i64,
    pub event: Option<EventId>,
    /// `mongo.cluster_time` as (seconds, increment).
    pub cluster_time: Option<(u32, u32)>,
    /// The record's timestamp (ms; CreateTime: when the bridge produced it).
    pub timestamp_ms: Option<i64>,
    /// An insert's `fullDocument.at` (ms): when the load wrote it.
    pub written_ms: Option<i64>,
}

impl Rec {
    /// Decodes a record of the load (relaxed Extended JSON values; `event` is `None` for a
    /// record that is not one of the load's inserts or updates).
    pub fn decode(m: &BorrowedMessage<'_>) -> Self {
        let cluster_time = m.headers().and_then(|h| {
            h.iter()
                .find(|h| h.key == "mongo.cluster_time")
                .and_then(|h| h.value)
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(parse_ts)
        });
        let value: Option<serde_json::Value> =
            m.payload().and_then(|p| serde_json::from_slice(p).ok());
        let written_ms = value.as_ref().and_then(|v| {
            let at = v["fullDocument"]["at"]["$date"].as_str()?;
            Some(
                chrono::DateTime::parse_from_rfc3339(at)
                    .ok()?
                    .timestamp_millis(),
            )
        });
        let event = value.as_ref().and_then(|v| {
            let id = &v["documentKey"]["_id"];
            match v["operationType"].as_str()? {
                "insert" => {
                    let n = id
                        .as_i64()
                        .or_else(|| id["$numberLong"].as_str()?.parse().ok())?;
                    Some(EventId::Insert(n))
                }
                "update" => {
                    let n = v["updateDescription"]["updatedFields"]["n"].as_i64()?;
                    Some(EventId::Update(id.as_str()?.to_owned(), n))
                }
                _ => None,
            }
        });
        Self {
            partition: m.partition(),
            offset: m.offset(),
            event,
            cluster_time,
            timestamp_ms: m.timestamp().to_millis(),
            written_ms,
        }
    }
}

/// Parses `<seconds>.<increment>`.
pub fn parse_ts(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// A consumer reading every partition of a topic from the beginning, on a thread of its own
/// until dropped.
pub struct Consumer {
    stop: Arc<AtomicBool>,
    records: Arc<Mutex<Vec<Rec>>>,
    errors: Arc<Mutex<Vec<String>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// A `read_committed` follower's bootstrap and topic, to build it again at its position.
    follows: Option<(String, String)>,
}

impl Consumer {
    /// The fault suite's consumer of `partitions` partitions of `topic` (librdkafka's default
    /// isolation, `read_committed`).
    pub fn start(bootstrap: &str, topic: &str, partitions: i32) -> Self {
        let consumer = consumer(
            bootstrap,
            &format!("faults-{}", std::process::id()),
            &[
                ("enable.partition.eof", "false"),
                ("reconnect.backoff.max.ms", "500"),
                ("fetch.wait.max.ms", "100"),
                ("topic.metadata.refresh.interval.ms", "2000"),
            ],
        );
        assign_from_start(&consumer, topic, partitions);
        Self::spawn(consumer)
    }

    /// A `read_committed` consumer of every partition of `topic` (which exists), from before
    /// the bridge starts to the end, as a downstream team's would be: what it reads must be
    /// what a fresh read has. Apache Kafka only (the fault suite's `exactly_once` module doc
    /// says why not noida-db).
    pub fn read_committed(bootstrap: &str, topic: &str) -> Self {
        let consumer = follower_consumer(bootstrap);
        let partitions = partitions(&consumer, topic, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("no partitions of {topic} within 30 s"));
        assign_from_start(&consumer, topic, partitions);
        let mut follower = Self::spawn(consumer);
        follower.follows = Some((bootstrap.to_owned(), topic.to_owned()));
        follower
    }

    /// A follower that read nothing while behind: a new librdkafka consumer takes over at the
    /// offset after the last record it read of each partition (the same records list). For a
    /// client left without brokers by librdkafka >= 2.10 after a fenced KRaft broker's metadata
    /// (no broker listed, no re-bootstrap scheduled; confluentinc/librdkafka#5301): only a new
    /// client recovers, as for the bridge's own clients (`src/pipeline/recovery.rs`).
    pub fn rebuild_at_position(&self) {
        let Some((bootstrap, topic)) = &self.follows else {
            return;
        };
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.lock().expect("thread lock").take() {
            let _ = t.join();
        }
        let consumer = follower_consumer(bootstrap);
        let count = partitions(&consumer, topic, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("no partitions of {topic} within 30 s"));
        let mut tpl = rdkafka::TopicPartitionList::new();
        let seen = self.snapshot();
        for p in 0..count {
            let next = seen
                .iter()
                .filter(|r| r.partition == p)
                .map(|r| r.offset + 1)
                .max();
            let offset = next.map_or(rdkafka::Offset::Beginning, rdkafka::Offset::Offset);
            tpl.add_partition_offset(topic, p, offset)
                .expect("partition");
        }
        rdkafka::consumer::Consumer::assign(&consumer, &tpl).expect("assign");
        self.stop.store(false, Ordering::Relaxed);
        let thread = self.poll_thread(consumer, Arc::clone(&self.stop));
        *self.thread.lock().expect("thread lock") = Some(thread);
    }

    fn spawn(consumer: BaseConsumer) -> Self {
        let mut this = Self {
            stop: Arc::new(AtomicBool::new(false)),
            records: Arc::new(Mutex::new(Vec::new())),
            errors: Arc::new(Mutex::new(Vec::new())),
            thread: Mutex::new(None),
            follows: None,
        };
        let thread = this.poll_thread(consumer, Arc::clone(&this.stop));
        *this.thread.get_mut().expect("thread lock") = Some(thread);
        this
    }

    /// The thread that polls `consumer` into this consumer's records until `stop`.
    fn poll_thread(
        &self,
        consumer: BaseConsumer,
        s: Arc<AtomicBool>,
    ) -> std::thread::JoinHandle<()> {
        let (r, e_) = (Arc::clone(&self.records), Arc::clone(&self.errors));
        let s_start = Instant::now();
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match consumer.poll(Duration::from_millis(100)) {
                    Some(Ok(m)) => {
                        let rec = Rec::decode(&m);
                        r.lock().expect("records lock").push(rec);
                    }
                    Some(Err(e)) => {
                        let line = format!("{:?}: {e}", s_start.elapsed());
                        eprintln!("consumer error: {line}");
                        e_.lock().expect("errors lock").push(line);
                    }
                    None => {}
                }
            }
        })
    }

    /// Every error its `poll` returned, each with the time since it started (also printed as
    /// it happens): a broker that was down, or a position it could not read (it never resets
    /// on its own: `auto.offset.reset = error`).
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().expect("errors lock").clone()
    }

    pub fn snapshot(&self) -> Vec<Rec> {
        self.records.lock().expect("records lock").clone()
    }

    /// Waits until it has read `n` records or `timeout` passed; what it read.
    pub async fn read_up_to(&self, n: usize, timeout: Duration) -> Vec<Rec> {
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self.snapshot();
            if seen.len() >= n || Instant::now() >= deadline {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until every event of `truth` was read (or `timeout`); the verdict and when the
    /// last missing event arrived.
    pub async fn wait_complete(&self, truth: &Truth, timeout: Duration) -> (Verdict, Instant) {
        let deadline = Instant::now() + timeout;
        loop {
            let verdict = verify(truth, &self.snapshot());
            if verdict.missing == 0 || Instant::now() > deadline {
                // Records already in flight to the consumer: a short grace for duplicates.
                return (verdict, Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.get_mut().expect("thread lock").take() {
            let _ = t.join();
        }
    }
}

/// The settings of a long-lived `read_committed` follower ([`Consumer::read_committed`]).
fn follower_consumer(bootstrap: &str) -> BaseConsumer {
    consumer(
        bootstrap,
        &format!("faults-eos-follow-{}", std::process::id()),
        &[
            ("isolation.level", Isolation::Committed.as_str()),
            ("fetch.wait.max.ms", "50"),
        ],
    )
}

/// Every record of `topic`, read afresh from offset 0 of every partition to the end with
/// `isolation` ([`scan`]). Blocking (a few hundred ms); [`read`] runs it on the blocking pool.
pub fn read_all(bootstrap: &str, topic: &str, isolation: Isolation) -> Vec<Rec> {
    let mut records = Vec::new();
    scan(bootstrap, topic, isolation, |m| {
        records.push(Rec::decode(m))
    });
    records
}

/// [`read_all`] on the blocking pool.
pub async fn read(bootstrap: &str, topic: &str, isolation: Isolation) -> Vec<Rec> {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || read_all(&bootstrap, &topic, isolation))
        .await
        .expect("reader thread")
}
