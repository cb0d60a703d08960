//! The bridge under test: in-process ([`start_bridge`]), as a command run to its end
//! ([`bridge_cli`]), and as a child process: [`spawn_binary`] (guarded by [`Killed`]) for the
//! integration tests, [`BridgeProc`] (its JSON log in a file of the suite's) for the fault suite.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use mongo_kafka_bridge::{Bridge, BridgeError};

use crate::common::config::{config, config_toml};
use crate::common::mongo::{mongo, wait_offsets};

/// The built binary, or `MKB_BRIDGE_BIN` (a copy, so a long run in the background is not
/// disturbed by the next build).
pub fn binary() -> PathBuf {
    std::env::var_os("MKB_BRIDGE_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_mongo-kafka-bridge")),
        PathBuf::from,
    )
}

/// Starts the bridge in-process.
pub async fn start_bridge(text: &str) -> Bridge {
    Bridge::start(config(text)).await.expect("bridge starts")
}

/// Starts the bridge in-process on `text` and waits (30 s) until pipeline `name` (its offsets
/// in `<db>_offsets`) committed its first position: its stream is open.
pub async fn start_opened(text: &str, db: &str, name: &str) -> Bridge {
    let bridge = start_bridge(text).await;
    let client = mongo().await;
    let opened = |d: &bson::Document| d.contains_key("resumeToken");
    wait_offsets(&client, db, name, Duration::from_secs(30), opened).await;
    bridge
}

/// [`start_opened`] on one pipeline `name` watching `db.coll` ([`config_toml`]).
pub async fn bridge_on(name: &str, db: &str, coll: &str, extra: &str) -> Bridge {
    start_opened(&config_toml(name, db, Some(coll), extra), db, name).await
}

/// Waits for `bridge` to stop on its own within `timeout`; its result.
pub async fn stops_within(bridge: Bridge, timeout: Duration) -> Result<(), BridgeError> {
    tokio::time::timeout(timeout, bridge.wait())
        .await
        .unwrap_or_else(|_| panic!("the bridge did not stop within {timeout:?}"))
}

/// Runs `mongo-kafka-bridge ARGS --config CONFIG` to its end; its exit code, stdout, stderr.
pub fn bridge_cli(args: &[&str], config: &Path) -> (Option<i32>, String, String) {
    let out = Command::new(binary())
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .expect("run the bridge binary");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// Starts `mongo-kafka-bridge run --config FILE` as a child process, its logs appended to
/// `<config>.log` (a pipe nobody reads would block the child once full).
pub fn spawn_binary(config: &Path) -> Child {
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

/// The JSON lines of a bridge's log.
pub fn log_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `mongo-kafka-bridge --log-format json run --no-status --config FILE`, stdout and stderr (the
/// log) to a file; killed with SIGKILL when dropped still running.
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
        Self::spawn_args(
            &["--log-format", "json", "run", "--no-status"],
            config,
            log,
            env,
        )
    }

    /// `mongo-kafka-bridge ARGS --config CONFIG` with `env`, its output to `log`.
    pub fn spawn_args(args: &[&str], config: &Path, log: PathBuf, env: &[(&str, &str)]) -> Self {
        let file = std::fs::File::create(&log).expect("log file");
        let stdout = file.try_clone().expect("dup log file");
        let mut cmd = Command::new(binary());
        cmd.args(args)
            .arg("--config")
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
