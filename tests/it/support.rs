//! Test harness: servers from `MONGODB_URI` / `KAFKA_BOOTSTRAP` (defaults: the local
//! `scripts/services` pair), unique names per test, a real Kafka consumer that collects records,
//! and the bridge started in-process or as the built binary.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use mongo_kafka_bridge::{Bridge, Config};
use mongodb::Client;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// MongoDB URI of the servers under test.
pub fn mongo_uri() -> String {
    std::env::var("MONGODB_URI")
        .unwrap_or_else(|_| "mongodb://127.0.0.1:27018/?directConnection=true".to_owned())
}

/// Kafka bootstrap servers under test.
pub fn kafka_bootstrap() -> String {
    std::env::var("KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:19093".to_owned())
}

/// A name unique to this process and call, safe for databases and topics.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .subsec_nanos();
    format!("{prefix}_{}_{n}_{nanos:x}", std::process::id())
}

/// A MongoDB client for the test servers, for the tests' own reads and writes.
///
/// Its writes are not retryable writes (`retryWrites=false`): they are not what is under test
/// (the bridges keep the driver's default), and SecantusDB keeps a record of every retryable
/// write for 30 minutes, at most 10 000 of them, sorting them all on every later retryable write
/// once past the cap: ~35 ms more per write, measured, where one takes ~2 ms. With the tests'
/// own single-document writes (well over 10 000) counted too, the shared server went past the
/// cap during the run and every later retryable write, each commit of a bridge included, paid it.
pub async fn mongo() -> Client {
    let mut options = mongodb::options::ClientOptions::parse(mongo_uri())
        .await
        .expect("valid MONGODB_URI");
    options.retry_writes = Some(false);
    Client::with_options(options).expect("valid MONGODB_URI")
}

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

/// The line of [`config_toml`] that turns the history headroom sampler off.
///
/// SecantusDB answers the sampler's two one-document `find`s on `local.oplog.rs` (sorted
/// `{$natural: ±1}`, limit 1) by decoding the whole oplog while it holds its write lock: ~80 µs
/// per entry, 4 s per `find` at 50 000 entries, measured. mongod reads one document at either end
/// of its capped collection. With every bridge of the suite sampling every 15 s on the shared
/// server, whose oplog grows to tens of thousands of entries during the run, writes (takes,
/// commits, the tests' own inserts) queued for tens of seconds and fixed waits timed out. The
/// tests of the headroom series turn it back on with [`with_history`].
pub const HISTORY_OFF: &str = "history_interval_ms = 0\n";

/// `text` (from [`config_toml`]) with the history headroom sampler at its default interval.
pub fn with_history(text: &str) -> String {
    assert!(text.contains(HISTORY_OFF), "not a config_toml text");
    text.replacen(HISTORY_OFF, "", 1)
}

/// A config TOML with one pipeline; `pipeline_extra` is appended inside `[[pipelines]]`;
/// the history headroom sampler is off ([`HISTORY_OFF`]).
pub fn config_toml(name: &str, db: &str, coll: Option<&str>, pipeline_extra: &str) -> String {
    let offsets_db = format!("{db}_offsets");
    let coll_line = coll
        .map(|c| format!("collection = \"{c}\"\n"))
        .unwrap_or_default();
    format!(
        r#"
[mongodb]
uri = "{uri}"
offsets_database = "{offsets_db}"

[kafka]
bootstrap_servers = "{kafka}"
[kafka.properties]
"linger.ms" = 5

[bridge]
commit_interval_ms = 200
shutdown_timeout_ms = 10000
max_await_time_ms = 200

[metrics]
listen = "127.0.0.1:0"
{HISTORY_OFF}
[[pipelines]]
name = "{name}"
database = "{db}"
{coll_line}{pipeline_extra}
"#,
        uri = mongo_uri(),
        kafka = kafka_bootstrap(),
    )
}

/// Parses a config from TOML text (no environment overrides).
pub fn config(text: &str) -> Config {
    Config::from_toml(text, std::iter::empty()).expect("test config is valid")
}

/// Starts the bridge in-process.
pub async fn start_bridge(text: &str) -> Bridge {
    Bridge::start(config(text)).await.expect("bridge starts")
}

/// Reads the offsets document of `pipeline`.
pub async fn offsets_doc(client: &Client, db: &str, pipeline: &str) -> Option<bson::Document> {
    client
        .database(&format!("{db}_offsets"))
        .collection::<bson::Document>("offsets")
        .find_one(bson::doc! { "_id": pipeline })
        .await
        .expect("read offsets")
}

/// Waits until `check` holds on the offsets document, or panics after `timeout`.
pub async fn wait_offsets(
    client: &Client,
    db: &str,
    pipeline: &str,
    timeout: Duration,
    check: impl Fn(&bson::Document) -> bool,
) -> bson::Document {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(doc) = offsets_doc(client, db, pipeline).await
            && check(&doc)
        {
            return doc;
        }
        assert!(
            Instant::now() < deadline,
            "offsets of {pipeline} did not reach the expected state"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One record as a consumer saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub partition: i32,
    pub offset: i64,
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
}

/// Like [`collect`], keeping keys and values as bytes.
pub async fn collect_raw(topic: &str, count: usize, timeout: Duration) -> Vec<RawRecord> {
    let (bootstrap, topic) = (kafka_bootstrap(), topic.to_owned());
    let read = move || read_blocking(&bootstrap, &topic, count, Duration::ZERO, timeout);
    tokio::task::spawn_blocking(read)
        .await
        .expect("collector thread")
}

/// Every record of `topic` as bytes, read until nothing more arrived for `quiet` (or `timeout`).
pub async fn collect_raw_quiet(topic: &str, quiet: Duration, timeout: Duration) -> Vec<RawRecord> {
    let (bootstrap, topic) = (kafka_bootstrap(), topic.to_owned());
    let read = move || read_blocking(&bootstrap, &topic, 1, quiet, timeout);
    tokio::task::spawn_blocking(read)
        .await
        .expect("collector thread")
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
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || collect_blocking(&bootstrap, &topic, min, quiet, timeout))
        .await
        .expect("collector thread")
}

fn collect_blocking(
    bootstrap: &str,
    topic: &str,
    min: usize,
    quiet: Duration,
    timeout: Duration,
) -> Vec<Received> {
    let text = |b: Option<Vec<u8>>| b.map(|b| String::from_utf8(b).expect("UTF-8"));
    let mut out: Vec<Received> = read_blocking(bootstrap, topic, min, quiet, timeout)
        .into_iter()
        .map(|r| Received {
            partition: r.partition,
            offset: r.offset,
            key: text(r.key),
            value: text(r.value),
            headers: r
                .headers
                .into_iter()
                .map(|(n, v)| (n, String::from_utf8(v).expect("UTF-8 header")))
                .collect(),
        })
        .collect();
    out.sort_by_key(|r| (r.partition, r.offset));
    out
}

/// Every record of `topic` in partition order, then offset order.
fn read_blocking(
    bootstrap: &str,
    topic: &str,
    min: usize,
    quiet: Duration,
    timeout: Duration,
) -> Vec<RawRecord> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("collector"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .expect("consumer");
    let deadline = Instant::now() + timeout;
    let partitions = loop {
        let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(5));
        if let Ok(md) = md {
            let n = md.topics().first().map_or(0, |t| t.partitions().len());
            if n > 0 {
                break n as i32;
            }
        }
        if Instant::now() > deadline {
            return Vec::new();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&tpl).expect("assign");
    let mut out: Vec<RawRecord> = Vec::new();
    let mut last = Instant::now();
    while Instant::now() < deadline && (out.len() < min || last.elapsed() < quiet) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
            last = Instant::now();
            let headers = m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec()))
                        .collect()
                })
                .unwrap_or_default();
            out.push(RawRecord {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
                headers,
            });
        }
    }
    out.sort_by_key(|r| (r.partition, r.offset));
    out
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

/// The built binary.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mongo-kafka-bridge"))
}

/// Runs `mongo-kafka-bridge ARGS --config CONFIG` to its end; its exit code, stdout, stderr.
pub fn bridge_cli(args: &[&str], config: &std::path::Path) -> (Option<i32>, String, String) {
    let out = Command::new(binary())
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .expect("run the bridge binary");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// Writes `text` to a temp file and returns its path (kept alive by the returned guard).
pub fn config_file(text: &str) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut file = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("temp file");
    file.write_all(text.as_bytes()).expect("write config");
    file
}

/// Starts `mongo-kafka-bridge run --config FILE` as a child process, its logs appended to
/// `<config>.log` (a pipe nobody reads would block the child once full).
pub fn spawn_binary(config: &std::path::Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(config.with_extension("log"))
        .expect("log file");
    Command::new(binary())
        .args(["--log-format", "json", "run", "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn the bridge binary")
}

/// A child process killed (SIGKILL) when dropped, also when the test fails before it could
/// stop it: a bridge left running would load the shared servers for every later test.
pub struct Killed(pub Child);

impl Killed {
    /// Kills the process now and waits for it.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether the servers are ours to stop and restart (scripts/test started them).
pub fn services_managed() -> Option<PathBuf> {
    if std::env::var("MKB_SERVICES_MANAGED").ok().as_deref() != Some("1") {
        eprintln!(
            "skipped: servers are external (MKB_SERVICES_MANAGED unset); fault tests need their own instances"
        );
        return None;
    }
    std::env::var("MKB_SERVICES_SCRIPT").ok().map(PathBuf::from)
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
