//! The real Debezium MongoDB connector 3.6.3.Final beside the bridge: started and stopped
//! through `bench/peers/connect.py` (a Kafka Connect 4.3.0 worker of its own, on the machine's
//! Java), and the BSON corpus' documents for it to capture.

use std::path::{Path, PathBuf};
use std::process::Command;

use bson::RawDocumentBuf;

use crate::common::corpus::corpus_documents;
use crate::common::servers::{kafka_bootstrap, mongo_uri};
use crate::common::unique;

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `.cache/venv`'s Python with the peers prepared (downloaded once into `.cache/peers`), or why
/// the real connector cannot run here.
pub fn peers() -> Result<PathBuf, String> {
    let python = root().join(".cache/venv/bin/python");
    if !python.is_file() {
        return Err(format!(
            "{} is absent (scripts/services creates it)",
            python.display()
        ));
    }
    if let Ok(broker) = std::env::var("MKB_KAFKA_BROKER")
        && broker != "kafka"
    {
        return Err(format!(
            "the broker is {broker}: Kafka Connect runs against Apache Kafka"
        ));
    }
    let Ok(version) = Command::new("java").arg("-version").output() else {
        return Err("no java on PATH (Kafka Connect needs Java 17+)".to_owned());
    };
    // The reference is Debezium on OpenJDK 17: Double.toString and the escaped characters of
    // its JSON strings follow the JDK (README "The Debezium form").
    let version = String::from_utf8_lossy(&version.stderr).into_owned();
    assert!(
        version.contains(" version \"17."),
        "the Debezium reference runs on Java 17, PATH has: {version}(put a JDK 17 first on PATH)"
    );
    let out = Command::new(&python)
        .arg(root().join("bench/peers/connect.py"))
        .arg("prepare")
        .output()
        .expect("run connect.py prepare");
    assert!(
        out.status.success(),
        "connect.py prepare failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(python)
}

/// One Debezium connector in its own Connect worker, stopped when dropped.
pub struct Debezium {
    python: PathBuf,
    pub workdir: PathBuf,
    /// The worker's REST URL.
    pub rest: String,
    /// The connector's name.
    pub name: String,
}

impl Debezium {
    /// Starts Debezium on `db.coll` with `topic.prefix` `prefix` and `args` (`--snapshot …`,
    /// `--schemas`, `--mode …`), waiting until its task runs. Blocks: call it off the runtime.
    pub fn start(python: &Path, db: &str, coll: &str, prefix: &str, args: &[&str]) -> Self {
        let name = format!("dbz-{prefix}");
        let workdir = std::env::temp_dir().join(unique("mkb-dbz"));
        let out = Command::new(python)
            .arg(root().join("bench/peers/connect.py"))
            .args(["start", "debezium", "--mongodb-uri", &mongo_uri()])
            .args(["--bootstrap", &kafka_bootstrap(), "--topic-prefix", prefix])
            .args(["--collection", &format!("{db}.{coll}"), "--name", &name])
            .arg("--workdir")
            .arg(&workdir)
            .args(args)
            .output()
            .expect("run connect.py start");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut started = Self {
            python: python.to_owned(),
            workdir,
            rest: String::new(),
            name,
        };
        assert!(
            out.status.success(),
            "Debezium did not start: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout.lines().last().unwrap_or_default();
        let json: serde_json::Value = serde_json::from_str(line).expect("connect.py start JSON");
        json["rest"]
            .as_str()
            .expect("rest URL")
            .clone_into(&mut started.rest);
        started
    }

    /// The connector's offsets as Connect's REST API gives them (KIP-875).
    pub fn offsets(&self) -> String {
        let out = Command::new(&self.python)
            .arg(root().join("bench/peers/connect.py"))
            .args(["offsets", "--rest", &self.rest, "--connector", &self.name])
            .output()
            .expect("run connect.py offsets");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8")
    }

    /// Stops the connector, not the worker (`PUT /connectors/NAME/stop`, KIP-875: its tasks
    /// end and their last offsets are committed), and waits until it says STOPPED.
    pub fn stop_connector(&self) {
        let url = format!("{}/connectors/{}", self.rest, self.name);
        let put = Command::new("curl")
            .args(["-sf", "-X", "PUT", &format!("{url}/stop")])
            .status()
            .expect("run curl");
        assert!(put.success(), "PUT {url}/stop");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let out = Command::new("curl")
                .args(["-sf", &format!("{url}/status")])
                .output();
            let status = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
            if status.is_ok_and(|s| s.contains("\"state\":\"STOPPED\"")) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} did not stop",
                self.name
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// Stops the worker (Connect commits its last offsets on a graceful stop).
    pub fn stop(&self) {
        let _ = Command::new(&self.python)
            .arg(root().join("bench/peers/connect.py"))
            .arg("stop")
            .arg("--workdir")
            .arg(&self.workdir)
            .output();
    }
}

impl Drop for Debezium {
    fn drop(&mut self) {
        self.stop();
        // Its log (connect.log) is kept when the test fails.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.workdir);
        }
    }
}

/// Every valid document of the BSON corpus (`../shared/data/bson-corpus`) with `_id` 1000 + i;
/// none (with a printed reason) when the corpus is absent.
pub fn corpus() -> Vec<RawDocumentBuf> {
    let mut out = Vec::new();
    for doc in corpus_documents() {
        let mut with_id = RawDocumentBuf::new();
        with_id.append("_id", 1000 + out.len() as i32);
        for element in &doc {
            let Ok((key, value)) = element else { break };
            if key != "_id" {
                with_id.append_ref(key, value);
            }
        }
        out.push(with_id);
    }
    out
}
