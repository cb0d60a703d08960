//! Configuration texts and files: [`config_toml`], the integration tests' one-pipeline
//! configuration on the shared servers, and the fault suite's [`Cfg`] (one pipeline `p` on
//! `<db>.t`) and [`GroupCfg`] (pipelines `p<i>` of one group), which share their sections.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongo_kafka_bridge::Config;
use mongodb::Client;

use crate::common::servers::{kafka_bootstrap, mongo_uri};

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

/// A config of one exactly-once pipeline on `db`.t against `servers` (MongoDB URI, Kafka
/// bootstrap; the shared ones when `None`), whose MongoDB client names itself `app` (so a fail
/// point can target this bridge alone).
pub fn eos_config(db: &str, app: &str, servers: Option<(&str, &str)>) -> String {
    let text = config_toml("p", db, Some("t"), "delivery = \"exactly_once\"\n");
    let (uri, kafka) = (mongo_uri(), kafka_bootstrap());
    let (to_uri, to_kafka) = servers.unwrap_or((&uri, &kafka));
    let sep = if to_uri.contains('?') { '&' } else { '?' };
    text.replacen(&uri, &format!("{to_uri}{sep}appName={app}"), 1)
        .replacen(&format!("\"{kafka}\""), &format!("\"{to_kafka}\""), 1)
}

/// Sets (or replaces) librdkafka properties in a `config_toml` text.
pub fn with_props(text: &str, props: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let key = line
            .split('=')
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches('"');
        if props.iter().any(|(k, _)| *k == key) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
        if line.trim() == "[kafka.properties]" {
            for (k, v) in props {
                out.push_str(&format!("\"{k}\" = \"{v}\"\n"));
            }
        }
    }
    out
}

/// Parses a config from TOML text (no environment overrides).
pub fn config(text: &str) -> Config {
    Config::from_toml(text, std::iter::empty()).expect("test config is valid")
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

/// The sections before the pipelines of the fault suite's configurations; `bridge` and
/// `properties` are extra lines of `[bridge]` and `[kafka.properties]`.
struct Sections<'a> {
    uri: &'a str,
    offsets_db: &'a str,
    kafka: &'a str,
    properties: &'a str,
    shutdown_timeout_ms: u32,
    bridge: &'a str,
    listen: &'a str,
}

impl Sections<'_> {
    fn toml(&self) -> String {
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
shutdown_timeout_ms = {shutdown}
max_await_time_ms = 200
max_restart_backoff_ms = 2000
{bridge}

[metrics]
listen = "{listen}"
"#,
            uri = self.uri,
            offsets = self.offsets_db,
            kafka = self.kafka,
            properties = self.properties,
            shutdown = self.shutdown_timeout_ms,
            bridge = self.bridge,
            listen = self.listen,
        )
    }
}

/// The bridge configuration of one fault scenario: pipeline `p` on `<db>.t` ([`COLL`]).
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
    /// Extra lines in `[[pipelines]]` (e.g. `delivery = "exactly_once"`).
    pub pipeline_extra: String,
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
            pipeline_extra: String::new(),
        }
    }

    pub fn topic(&self) -> String {
        format!("{}.{COLL}", self.db)
    }

    pub fn offsets_db(&self) -> String {
        format!("{}_offsets", self.db)
    }

    pub fn toml(&self) -> String {
        let sections = Sections {
            uri: &self.uri,
            offsets_db: &self.offsets_db(),
            kafka: &self.bootstrap,
            properties: &self.properties,
            shutdown_timeout_ms: 20000,
            bridge: &self.bridge,
            listen: &self.listen,
        };
        format!(
            "{}\n[[pipelines]]\nname = \"{name}\"\ndatabase = \"{db}\"\ncollection = \"{COLL}\"\n\
             json = \"relaxed\"\n{extra}",
            sections.toml(),
            name = self.pipeline,
            db = self.db,
            extra = self.pipeline_extra,
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

    /// The offsets document's `commitSequence` (0 without one).
    pub async fn commit_sequence(&self, client: &Client) -> i64 {
        self.offsets(client)
            .await
            .and_then(|d| d.get_i64("commitSequence").ok())
            .unwrap_or(0)
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

/// A group scenario's configuration: `pipelines` pipelines `p<i>` on collections `t<i>`, each
/// to its own one-partition topic `<db>.t<i>`, in group `faults`.
pub struct GroupCfg {
    pub uri: String,
    pub kafka: String,
    pub db: String,
    pub pipelines: usize,
}

impl GroupCfg {
    pub fn offsets_db(&self) -> String {
        format!("{}_offsets", self.db)
    }

    pub fn topic(&self, i: usize) -> String {
        format!("{}.t{i}", self.db)
    }

    /// The same servers and database with `pipelines` pipelines.
    pub fn with_pipelines(&self, pipelines: usize) -> Self {
        Self {
            uri: self.uri.clone(),
            kafka: self.kafka.clone(),
            db: self.db.clone(),
            pipelines,
        }
    }

    pub fn toml(&self) -> String {
        let mut out = Sections {
            uri: &self.uri,
            offsets_db: &self.offsets_db(),
            kafka: &self.kafka,
            properties: "",
            shutdown_timeout_ms: 10000,
            bridge: "group_id = \"faults\"",
            listen: "127.0.0.1:0",
        }
        .toml();
        for i in 0..self.pipelines {
            out.push_str(&self.entry(i, "json = \"relaxed\"\n"));
        }
        out
    }

    /// The `[[pipelines]]` entry `p<i>` with `extra` lines.
    pub fn entry(&self, i: usize, extra: &str) -> String {
        format!(
            "\n[[pipelines]]\nname = \"p{i}\"\ndatabase = \"{db}\"\ncollection = \"t{i}\"\n\
             topic = \"{topic}\"\n{extra}",
            db = self.db,
            topic = self.topic(i)
        )
    }

    /// The offsets documents of the pipelines, by name.
    pub async fn offsets(&self, client: &Client) -> std::collections::BTreeMap<String, Document> {
        let coll = client
            .database(&self.offsets_db())
            .collection::<Document>("offsets");
        let mut out = std::collections::BTreeMap::new();
        for i in 0..self.pipelines {
            let name = format!("p{i}");
            if let Ok(Some(d)) = coll.find_one(doc! { "_id": &name }).await {
                out.insert(name, d);
            }
        }
        out
    }
}
