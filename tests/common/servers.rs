//! The servers under test: the shared pair from `MONGODB_URI` / `KAFKA_BOOTSTRAP` (defaults: the
//! local `scripts/services` pair), and named `scripts/services` instances of a test or scenario
//! alone, for what stops, freezes or restarts servers or sets server-wide fail points. An
//! instance is stopped and wiped when dropped, also when the test fails.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mongodb::Client;

use crate::common::config::config_toml;

/// MongoDB URI of the servers under test.
pub fn mongo_uri() -> String {
    std::env::var("MONGODB_URI")
        .unwrap_or_else(|_| "mongodb://127.0.0.1:27018/?directConnection=true".to_owned())
}

/// Kafka bootstrap servers under test.
pub fn kafka_bootstrap() -> String {
    std::env::var("KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:19093".to_owned())
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

/// A named `scripts/services` instance, stopped and wiped when dropped (also on panic).
pub struct Instance {
    pub name: String,
    pub script: PathBuf,
    /// `MONGODB_URI` of the instance.
    pub mongo_uri: String,
    /// `KAFKA_BOOTSTRAP` of the instance (empty for a MongoDB alone).
    pub kafka: String,
    /// `MKB_KAFKA_BROKER` of `scripts/services up`: `kafka` (Apache Kafka) or `noida`.
    pub broker: String,
    /// `MKB_KAFKA_NODES`: the brokers of an Apache Kafka cluster (1 or 3).
    pub nodes: usize,
    /// Every `KEY=VALUE` the `up` printed (e.g. `MKB_KAFKA_SASL_SSL_BOOTSTRAP`).
    pub vars: HashMap<String, String>,
}

impl Instance {
    /// Instance `<name>-<pid>` of a test (`up --fresh --plain EXTRA`), or `None` (reason
    /// printed) when the servers are not ours to manage.
    pub fn managed(name: &str, extra: &[&str]) -> Option<Self> {
        let script = services_managed()?;
        let name = format!("{name}-{}", std::process::id());
        Some(Self::up(&script, &name, extra))
    }

    /// [`Instance::managed`] with MongoDB only (`--only mongo`); the tests keep the shared Kafka.
    pub fn mongo(name: &str, extra: &[&str]) -> Option<Self> {
        Self::managed(name, &[&["--only", "mongo"], extra].concat())
    }

    /// `scripts/services up --name <name> --fresh --plain EXTRA` (e.g. `--brokers 3`).
    pub fn up(script: &Path, name: &str, extra: &[&str]) -> Self {
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
        let mut args = vec!["up", "--fresh", "--plain"];
        args.extend(extra);
        let out = inst.run(&args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "scripts/services up --name {name} failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in stdout.lines() {
            if let Some((k, v)) = line.split_once('=') {
                let v = v.trim_matches(['\'', '"']);
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

    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new(&self.script)
            .args(args)
            .args(["--name", &self.name])
            .stdin(Stdio::null())
            .output()
            .expect("run scripts/services")
    }

    /// Runs `scripts/services ARGS --name <name>`, which must succeed; its stdout.
    pub fn services(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "scripts/services {args:?} --name {} failed: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// True on Apache Kafka (not a stand-in broker).
    pub fn is_kafka(&self) -> bool {
        self.broker == "kafka"
    }

    /// SIGSTOP the broker.
    pub fn freeze_kafka(&self) {
        self.services(&["freeze", "kafka"]);
    }

    /// SIGCONT the broker.
    pub fn thaw_kafka(&self) {
        self.services(&["thaw", "kafka"]);
    }

    /// Stops MongoDB and starts it again on the same port with its data.
    pub fn restart_mongo(&self) {
        // Stopped for a few seconds, as an operator's restart or a crash would be: long enough
        // for readiness to notice (a `getMore` unanswered for `max_await_time_ms` + 2 s).
        self.services(&["down", "--only", "mongo"]);
        std::thread::sleep(std::time::Duration::from_secs(5));
        self.services(&["up", "--only", "mongo", "--plain", "--timeout", "90"]);
    }

    /// A client for this instance's MongoDB.
    pub async fn client(&self) -> Client {
        Client::with_uri_str(&self.mongo_uri)
            .await
            .expect("valid MongoDB URI")
    }

    /// [`config_toml`] pointed at this instance's MongoDB (and its Kafka, when it has one).
    pub fn config(&self, name: &str, db: &str, coll: Option<&str>, extra: &str) -> String {
        let text = config_toml(name, db, coll, extra).replace(&mongo_uri(), &self.mongo_uri);
        if self.kafka.is_empty() {
            text
        } else {
            text.replace(&kafka_bootstrap(), &self.kafka)
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if !self.kafka.is_empty() {
            let _ = self.run(&["thaw", "kafka"]);
        }
        let out = self.run(&["down", "--wipe"]);
        if !out.status.success() {
            eprintln!(
                "warning: scripts/services down --name {} --wipe: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
