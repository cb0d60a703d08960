//! The fault suite's machinery: named server instances (torn down by a guard, also on panic),
//! the bridge binary as a child process, a steady write load with checkable content, a real
//! Kafka consumer, and the comparison of MongoDB's writes with what the consumer read.
//!
//! The load: inserts of `{_id: <i64>}` (one event each) interleaved with `$inc: {n: 1}` on a
//! small set of pre-existing documents `{_id: "u<k>", n: 0}` (the k-th update of a document
//! carries `updatedFields.n = k`, so per-document order is checkable). The truth is read back
//! from MongoDB at the end: every `_id` present, every update document's final `n`. A write
//! whose outcome the writer could not know (a server restart mid-write) is therefore counted
//! exactly as MongoDB applied it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::{Client, Collection};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// `MKB_FAULTS_LONG=1`: the long form (more kills, longer outages, more fuzz inputs).
pub fn long_form() -> bool {
    std::env::var("MKB_FAULTS_LONG").ok().as_deref() == Some("1")
}

/// Prints a progress line (visible with `--nocapture`).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!("[faults {:>7.1}s] {}", $crate::harness::since_start(), format!($($arg)*))
    };
}

static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// Seconds since the suite started.
pub fn since_start() -> f64 {
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

// ---------------------------------------------------------------------------------------------
// Server instances

/// A named `scripts/services` instance, stopped and wiped when dropped (also on panic).
pub struct Instance {
    pub name: String,
    script: PathBuf,
    pub mongo_uri: String,
    pub kafka: String,
    /// `MKB_KAFKA_BROKER` of `scripts/services up`: `kafka` (Apache Kafka) or `noida`.
    pub broker: String,
    /// `MKB_KAFKA_NODES`: the brokers of an Apache Kafka cluster (1 or 3).
    pub nodes: usize,
    /// Every `KEY=VALUE` the `up` printed (e.g. `MKB_KAFKA_SASL_SSL_BOOTSTRAP`).
    pub vars: HashMap<String, String>,
}

impl Instance {
    /// `up --name <name> --fresh` (MongoDB only with `mongo_only`).
    pub fn up(script: &Path, name: &str, mongo_only: bool) -> Self {
        let only: &[&str] = if mongo_only {
            &["--only", "mongo"]
        } else {
            &[]
        };
        Self::up_with(script, name, only)
    }

    /// `up --name <name> --fresh EXTRA` (e.g. `--brokers 3`).
    pub fn up_with(script: &Path, name: &str, extra: &[&str]) -> Self {
        let mongo_only = extra.windows(2).any(|w| w == ["--only", "mongo"]);
        let mut inst = Self {
            name: name.to_owned(),
            script: script.to_owned(),
            mongo_uri: String::new(),
            kafka: String::new(),
            broker: String::new(),
            nodes: 1,
            vars: HashMap::new(),
        };
        let mut args = vec!["up", "--fresh", "--plain", "--timeout", "90"];
        args.extend(extra);
        let out = inst.services(&args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "scripts/services up --name {name} failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in stdout.lines() {
            if let Some((k, v)) = line.split_once('=') {
                inst.vars.insert(k.to_owned(), v.to_owned());
                match k {
                    "MONGODB_URI" => inst.mongo_uri = v.to_owned(),
                    "KAFKA_BOOTSTRAP" => inst.kafka = v.to_owned(),
                    "MKB_KAFKA_BROKER" => inst.broker = v.to_owned(),
                    "MKB_KAFKA_NODES" => inst.nodes = v.parse().expect("MKB_KAFKA_NODES"),
                    _ => {}
                }
            }
        }
        assert!(!inst.mongo_uri.is_empty(), "no MONGODB_URI in: {stdout}");
        assert!(
            mongo_only || !inst.kafka.is_empty(),
            "no KAFKA_BOOTSTRAP in: {stdout}"
        );
        inst
    }

    fn services(&self, args: &[&str]) -> std::process::Output {
        Command::new(&self.script)
            .args(args)
            .args(["--name", &self.name])
            .stdin(Stdio::null())
            .output()
            .expect("run scripts/services")
    }

    fn must(&self, args: &[&str]) {
        let out = self.services(args);
        assert!(
            out.status.success(),
            "scripts/services {args:?} --name {} failed: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// True on Apache Kafka (not a stand-in broker).
    pub fn is_kafka(&self) -> bool {
        self.broker == "kafka"
    }

    /// `scripts/services ARGS --name <name>`, which must succeed.
    pub fn services_ok(&self, args: &[&str]) {
        self.must(args);
    }

    /// SIGSTOP the broker.
    pub fn freeze_kafka(&self) {
        self.must(&["freeze", "kafka"]);
    }

    /// SIGCONT the broker.
    pub fn thaw_kafka(&self) {
        self.must(&["thaw", "kafka"]);
    }

    /// Stops MongoDB and starts it again on the same port with its data.
    pub fn restart_mongo(&self) {
        // Stopped for a few seconds, as an operator's restart or a crash would be: long enough
        // for readiness to notice (a `getMore` unanswered for `max_await_time_ms` + 2 s).
        self.must(&["down", "--only", "mongo"]);
        std::thread::sleep(std::time::Duration::from_secs(5));
        self.must(&["up", "--only", "mongo", "--plain", "--timeout", "90"]);
    }

    /// A client for this instance's MongoDB.
    pub async fn client(&self) -> Client {
        Client::with_uri_str(&self.mongo_uri)
            .await
            .expect("valid MongoDB URI")
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if !self.kafka.is_empty() {
            let _ = self.services(&["thaw", "kafka"]);
        }
        let out = self.services(&["down", "--wipe"]);
        if !out.status.success() {
            eprintln!(
                "warning: scripts/services down --name {} --wipe: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
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

/// The broker `scripts/services up` starts when not told: `$MKB_BROKER`, else Apache Kafka.
pub fn default_broker() -> String {
    std::env::var("MKB_BROKER")
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| "kafka".to_owned())
}

/// Creates `topic` with `partitions` partitions on `bootstrap`.
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    crate::support::create_topic_at(bootstrap, topic, partitions, &[]).await;
}

// ---------------------------------------------------------------------------------------------
// Configuration

/// The bridge configuration of one scenario.
pub struct Cfg {
    pub uri: String,
    pub bootstrap: String,
    pub db: String,
    pub pipeline: String,
    /// Extra lines in `[bridge]`.
    pub bridge: String,
    /// Extra lines in `[kafka.properties]`.
    pub properties: String,
    /// Default `127.0.0.1:0`.
    pub listen: String,
}

/// The watched collection of every scenario.
pub const COLL: &str = "t";

impl Cfg {
    pub fn new(uri: &str, bootstrap: &str, db: &str) -> Self {
        Self {
            uri: uri.to_owned(),
            bootstrap: bootstrap.to_owned(),
            db: db.to_owned(),
            pipeline: "p".to_owned(),
            bridge: String::new(),
            properties: String::new(),
            listen: "127.0.0.1:0".to_owned(),
        }
    }

    pub fn topic(&self) -> String {
        format!("{}.{COLL}", self.db)
    }

    pub fn offsets_db(&self) -> String {
        format!("{}_offsets", self.db)
    }

    pub fn toml(&self) -> String {
        format!(
            r#"[mongodb]
uri = "{uri}"
offsets_database = "{offsets}"

[kafka]
bootstrap_servers = "{kafka}"
[kafka.properties]
"linger.ms" = 5
{properties}

[bridge]
commit_interval_ms = 200
shutdown_timeout_ms = 20000
max_await_time_ms = 200
max_restart_backoff_ms = 2000
{bridge}

[metrics]
listen = "{listen}"

[[pipelines]]
name = "{name}"
database = "{db}"
collection = "{COLL}"
json = "relaxed"
"#,
            uri = self.uri,
            offsets = self.offsets_db(),
            kafka = self.bootstrap,
            properties = self.properties,
            bridge = self.bridge,
            listen = self.listen,
            name = self.pipeline,
            db = self.db,
        )
    }

    /// Writes the TOML to `dir/<file>` and returns the path.
    pub fn write(&self, dir: &Path, file: &str) -> PathBuf {
        let path = dir.join(file);
        std::fs::write(&path, self.toml()).expect("write config");
        path
    }

    /// The offsets document of the pipeline.
    pub async fn offsets(&self, client: &Client) -> Option<Document> {
        client
            .database(&self.offsets_db())
            .collection::<Document>("offsets")
            .find_one(doc! { "_id": &self.pipeline })
            .await
            .ok()
            .flatten()
    }

    /// Waits until the pipeline committed its first position.
    pub async fn wait_started(&self, client: &Client, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(d) = self.offsets(client).await
                && d.contains_key("resumeToken")
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "pipeline {} committed no position within {timeout:?}",
                self.pipeline
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The bridge binary

/// `mongo-kafka-bridge --log-format json run --config FILE`, stderr (the log) to a file; killed
/// with SIGKILL when dropped still running.
pub struct BridgeProc {
    pub child: Child,
    pub log: PathBuf,
    pub exit: Option<ExitStatus>,
}

impl BridgeProc {
    pub fn spawn(config: &Path, log: PathBuf) -> Self {
        Self::spawn_with(config, log, &[])
    }

    pub fn spawn_with(config: &Path, log: PathBuf, env: &[(&str, &str)]) -> Self {
        let file = std::fs::File::create(&log).expect("log file");
        let stdout = file.try_clone().expect("dup log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mongo-kafka-bridge"));
        cmd.args(["--log-format", "json", "run", "--no-status", "--config"])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(file);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn the bridge binary");
        Self {
            child,
            log,
            exit: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Graceful stop.
    pub fn sigterm(&self) {
        signal(self.pid(), "TERM");
    }

    /// Crash.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        self.exit = self.child.wait().ok();
    }

    /// The exit status, waiting at most `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while self.exit.is_none() {
            self.exit = self.child.try_wait().expect("try_wait");
            if self.exit.is_some() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.exit
    }

    pub fn running(&mut self) -> bool {
        self.exit.is_none() && {
            self.exit = self.child.try_wait().expect("try_wait");
            self.exit.is_none()
        }
    }

    /// SIGTERM, then the exit status (panics when it does not exit within `timeout`).
    pub fn stop(&mut self, timeout: Duration) -> ExitStatus {
        self.sigterm();
        match self.wait_exit(timeout) {
            Some(s) => s,
            None => panic!(
                "the bridge did not stop within {timeout:?} after SIGTERM; log tail:\n{}",
                self.log_tail(30)
            ),
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log_text();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The HTTP address from the "bridge started" log line.
    pub fn metrics_addr(&mut self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            for line in self.log_text().lines() {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(line)
                    && let Some(addr) = v["metrics_addr"].as_str()
                {
                    return addr.to_owned();
                }
            }
            assert!(
                self.running(),
                "the bridge exited ({:?}) before serving HTTP:\n{}",
                self.exit,
                self.log_tail(30)
            );
            assert!(
                Instant::now() < deadline,
                "no metrics_addr in the log within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Pipeline restarts (transient errors) the log reports.
    pub fn restarts(&self) -> usize {
        self.log_text()
            .matches("restarting from the committed position")
            .count()
    }
}

impl Drop for BridgeProc {
    fn drop(&mut self) {
        if self.running() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sends `SIG<name>` to `pid` (no libc in the dependencies: the `kill` utility).
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid}");
}

/// VmRSS of `pid` in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// A blocking HTTP/1.1 GET; the status code and body, or `None` when unreachable.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let addr: std::net::SocketAddr = addr.parse().ok()?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((code, body))
}

// ---------------------------------------------------------------------------------------------
// The write load

/// Documents the load updates: `{_id: "u<k>", n: 0}`, written before the bridge starts.
pub async fn prepare_update_keys(coll: &Collection<Document>, keys: u32) {
    let docs: Vec<Document> = (0..keys)
        .map(|k| doc! { "_id": format!("u{k}"), "n": 0_i32 })
        .collect();
    coll.insert_many(docs).await.expect("insert update keys");
}

/// A running write load.
pub struct Load {
    stop: Arc<AtomicBool>,
    /// Writes acknowledged so far.
    pub acked: Arc<AtomicU64>,
    /// Write attempts that failed (retried).
    pub errors: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

/// Starts a write load of `rate` writes/s: three inserts, then one `$inc` on the next of
/// `keys` update documents, repeated. Inserts use `_id` from `first_id` on.
pub fn start_load(coll: Collection<Document>, rate: u32, keys: u32, first_id: i64) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let (s, a, e) = (Arc::clone(&stop), Arc::clone(&acked), Arc::clone(&errors));
    let task = tokio::spawn(async move {
        let period = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
        let mut next = Instant::now();
        let mut id = first_id;
        let mut op: u64 = 0;
        while !s.load(Ordering::Relaxed) {
            let now = Instant::now();
            if next > now {
                tokio::time::sleep(next - now).await;
            } else if now - next > Duration::from_secs(1) {
                next = now; // fell behind (a slow or stopped server): no burst afterwards
            }
            next += period;
            let update = op % 4 == 3 && keys > 0;
            let key = format!("u{}", (op / 4) % u64::from(keys.max(1)));
            loop {
                let result = if update {
                    coll.update_one(doc! { "_id": &key }, doc! { "$inc": { "n": 1 } })
                        .await
                        .map(|_| ())
                } else {
                    // `at`: when it was written, for delivery delays (`Rec::written_ms`).
                    match coll
                        .insert_one(doc! { "_id": id, "at": bson::DateTime::now() })
                        .await
                    {
                        Err(err) if is_duplicate_key(&err) => Ok(()), // an earlier attempt landed
                        other => other.map(|_| ()),
                    }
                };
                match result {
                    Ok(()) => {
                        a.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    Err(_) => {
                        e.fetch_add(1, Ordering::Relaxed);
                        if s.load(Ordering::Relaxed) {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
            if !update {
                id += 1;
            }
            op += 1;
        }
    });
    Load {
        stop,
        acked,
        errors,
        task,
    }
}

fn is_duplicate_key(err: &mongodb::error::Error) -> bool {
    matches!(
        &*err.kind,
        mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(w)) if w.code == 11000
    )
}

impl Load {
    /// Stops the load and waits for the writer.
    pub async fn stop(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        (
            self.acked.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
        )
    }
}

/// What MongoDB holds after the load: the events the bridge must deliver.
#[derive(Debug, Default)]
pub struct Truth {
    pub inserts: BTreeSet<i64>,
    /// Update document → final `n` (updates 1..=n happened).
    pub updates: BTreeMap<String, i64>,
}

impl Truth {
    pub async fn read(coll: &Collection<Document>) -> Self {
        let mut truth = Self::default();
        let mut cursor = coll.find(doc! {}).await.expect("find");
        while let Some(d) = cursor.try_next().await.expect("read documents") {
            match d.get("_id") {
                Some(Bson::Int64(i)) => {
                    truth.inserts.insert(*i);
                }
                Some(Bson::String(k)) => {
                    let n = match d.get("n") {
                        Some(Bson::Int32(n)) => i64::from(*n),
                        Some(Bson::Int64(n)) => *n,
                        other => panic!("unexpected n {other:?}"),
                    };
                    truth.updates.insert(k.clone(), n);
                }
                other => panic!("unexpected _id {other:?}"),
            }
        }
        truth
    }

    fn expected(&self) -> HashSet<EventId> {
        let mut set: HashSet<EventId> = self.inserts.iter().map(|i| EventId::Insert(*i)).collect();
        for (k, n) in &self.updates {
            for i in 1..=*n {
                set.insert(EventId::Update(k.clone(), i));
            }
        }
        set
    }
}

// ---------------------------------------------------------------------------------------------
// The consumer

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

fn parse_rec(m: &rdkafka::message::BorrowedMessage<'_>) -> Rec {
    let cluster_time = m.headers().and_then(|h| {
        h.iter()
            .find(|h| h.key == "mongo.cluster_time")
            .and_then(|h| h.value)
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(parse_ts)
    });
    let value: Option<serde_json::Value> = m.payload().and_then(|p| serde_json::from_slice(p).ok());
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
    Rec {
        partition: m.partition(),
        offset: m.offset(),
        event,
        cluster_time,
        timestamp_ms: m.timestamp().to_millis(),
        written_ms,
    }
}

/// Parses `<seconds>.<increment>`.
pub fn parse_ts(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// A consumer reading every partition of a topic from the beginning, in a thread.
pub struct Consumer {
    stop: Arc<AtomicBool>,
    records: Arc<Mutex<Vec<Rec>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Consumer {
    pub fn start(bootstrap: &str, topic: &str, partitions: i32) -> Self {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", format!("faults-{}", std::process::id()))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            .set("reconnect.backoff.max.ms", "500")
            .set("fetch.wait.max.ms", "100")
            .set("topic.metadata.refresh.interval.ms", "2000")
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .expect("partition");
        }
        consumer.assign(&tpl).expect("assign");
        let stop = Arc::new(AtomicBool::new(false));
        let records = Arc::new(Mutex::new(Vec::new()));
        let (s, r) = (Arc::clone(&stop), Arc::clone(&records));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                    let rec = parse_rec(&m);
                    r.lock().expect("records lock").push(rec);
                }
            }
        });
        Self {
            stop,
            records,
            thread: Some(thread),
        }
    }

    pub fn snapshot(&self) -> Vec<Rec> {
        self.records.lock().expect("records lock").clone()
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
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Verification

/// MongoDB's writes compared with what the consumer read.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Change events the writes produced.
    pub writes: usize,
    /// Distinct expected events read.
    pub unique: usize,
    pub missing: usize,
    pub first_missing: Vec<EventId>,
    /// Extra copies of expected events.
    pub duplicates: usize,
    /// Records of events MongoDB does not have, or that are not load events.
    pub unexpected: usize,
    /// Per-document order violations of first occurrences.
    pub order_violations: Vec<String>,
    /// Event → number of copies read.
    pub copies: HashMap<EventId, usize>,
    /// Event → cluster time of its first copy.
    pub times: HashMap<EventId, (u32, u32)>,
}

pub fn verify(truth: &Truth, recs: &[Rec]) -> Verdict {
    let expected = truth.expected();
    let mut recs: Vec<&Rec> = recs.iter().collect();
    recs.sort_by_key(|r| (r.partition, r.offset));
    let mut v = Verdict {
        writes: expected.len(),
        ..Verdict::default()
    };
    // Per update document: the last first-seen n.
    let mut last_first: HashMap<&str, i64> = HashMap::new();
    for r in &recs {
        let Some(e) = &r.event else {
            v.unexpected += 1;
            continue;
        };
        if !expected.contains(e) {
            v.unexpected += 1;
            continue;
        }
        let c = v.copies.entry(e.clone()).or_insert(0);
        *c += 1;
        if *c > 1 {
            v.duplicates += 1;
            continue;
        }
        if let Some(t) = r.cluster_time {
            v.times.insert(e.clone(), t);
        }
        if let EventId::Update(k, n) = e {
            let last = last_first.entry(k.as_str()).or_insert(0);
            if *n != *last + 1 && v.order_violations.len() < 10 {
                v.order_violations.push(format!(
                    "{k}: update n={n} first seen after n={last} (partition {} offset {})",
                    r.partition, r.offset
                ));
            }
            *last = (*last).max(*n);
        }
    }
    v.unique = v.copies.len();
    let mut missing: Vec<EventId> = expected
        .iter()
        .filter(|e| !v.copies.contains_key(*e))
        .cloned()
        .collect();
    missing.sort();
    v.missing = missing.len();
    missing.truncate(10);
    v.first_missing = missing;
    v
}

impl Verdict {
    /// Panics unless nothing is missing, nothing unexpected arrived and order holds.
    pub fn assert_sound(&self, scenario: &str) {
        assert_eq!(
            self.missing, 0,
            "{scenario}: {} of {} events missing in Kafka, first {:?}",
            self.missing, self.writes, self.first_missing
        );
        assert!(
            self.order_violations.is_empty(),
            "{scenario}: per-document order broken: {:?}",
            self.order_violations
        );
        assert_eq!(
            self.unexpected, 0,
            "{scenario}: records of events MongoDB does not have"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Results

/// One line of the results table.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub scenario: String,
    pub runs: String,
    pub writes: Option<usize>,
    pub delivered: Option<usize>,
    pub missing: Option<usize>,
    pub duplicates: Option<usize>,
    pub peak_rss_mib: Option<f64>,
    pub recovery_s: Option<f64>,
    pub seconds: f64,
    pub outcome: String,
    /// Failed checks that lose no data (observability): the scenario completes, its numbers
    /// are reported, and the suite fails.
    pub problems: Vec<String>,
}

impl Row {
    pub fn new(scenario: &str) -> Self {
        Self {
            scenario: scenario.to_owned(),
            outcome: "pass".to_owned(),
            ..Self::default()
        }
    }

    /// Records a failed check when `ok` is false.
    pub fn check(&mut self, ok: bool, problem: impl FnOnce() -> String) {
        if !ok {
            let text = problem();
            crate::say!("{}: FAILED CHECK: {text}", self.scenario);
            self.problems.push(text);
        }
    }

    pub fn with_verdict(mut self, v: &Verdict) -> Self {
        self.writes = Some(v.writes);
        self.delivered = Some(v.unique);
        self.missing = Some(v.missing);
        self.duplicates = Some(v.duplicates);
        self
    }
}

fn cell<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "–".to_owned(), |v| v.to_string())
}

/// The results as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | runs | writes | delivered (unique) | missing | duplicates | peak RSS (MiB) | recovery (s) | took (s) | result |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {} |\n",
            r.scenario,
            r.runs,
            cell(r.writes),
            cell(r.delivered),
            cell(r.missing),
            cell(r.duplicates),
            cell(r.peak_rss_mib.map(|m| format!("{m:.1}"))),
            cell(r.recovery_s.map(|s| format!("{s:.1}"))),
            r.seconds,
            r.outcome,
        ));
    }
    out
}
