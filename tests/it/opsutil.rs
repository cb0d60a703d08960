//! Helpers of the operations tests: a minimal HTTP GET, named server instances of
//! `scripts/services` (for tests that stop or freeze servers), the Prometheus tools.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::services_managed;

/// `GET path` on `addr`: (status code, body). Panics when the server does not answer.
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    try_http_get(addr, path).unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}

/// `GET path` on `addr`, or the I/O error.
pub fn try_http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_owned()))
}

/// `GET path` from an async test without blocking the runtime.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || http_get(addr, &path))
        .await
        .unwrap()
}

/// Like [`get`], `None` while nothing answers on `addr`.
pub async fn try_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || try_http_get(addr, &path).ok())
        .await
        .unwrap()
}

/// Polls `probe` every 100 ms until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A named `scripts/services` instance of this test alone; stopped and wiped on drop.
pub struct Instance {
    script: PathBuf,
    name: String,
    /// `MONGODB_URI` of the instance.
    pub mongo_uri: String,
    /// `KAFKA_BOOTSTRAP` of the instance.
    pub kafka: String,
}

impl Instance {
    /// Starts instance `name` (with `extra` options), or `None` (printed reason) when the
    /// servers are not ours to manage.
    pub fn up(name: &str, extra: &[&str]) -> Option<Self> {
        let script = services_managed()?;
        let name = format!("{name}-{}", std::process::id());
        let mut instance = Self {
            script,
            name,
            mongo_uri: String::new(),
            kafka: String::new(),
        };
        let out = instance.services(&[&["up", "--fresh", "--plain"], extra].concat());
        for line in out.lines() {
            if let Some(v) = line.strip_prefix("MONGODB_URI=") {
                instance.mongo_uri = v.trim_matches(['\'', '"']).to_owned();
            }
            if let Some(v) = line.strip_prefix("KAFKA_BOOTSTRAP=") {
                instance.kafka = v.trim_matches(['\'', '"']).to_owned();
            }
        }
        assert!(!instance.mongo_uri.is_empty(), "no MONGODB_URI in: {out}");
        Some(instance)
    }

    /// Runs `scripts/services ARGS --name NAME`; panics when it fails; its stdout.
    pub fn services(&self, args: &[&str]) -> String {
        let out = Command::new(&self.script)
            .args(args)
            .args(["--name", &self.name])
            .output()
            .expect("run scripts/services");
        assert!(
            out.status.success(),
            "scripts/services {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = Command::new(&self.script)
            .args(["down", "--wipe", "--name", &self.name])
            .output();
    }
}

/// Paths of `prometheus` and `promtool`, installing Debian's package when missing
/// (`scripts/prometheus-tools ensure`); `None` with a printed reason when they cannot be had.
pub fn prometheus_tools() -> Option<(PathBuf, PathBuf)> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/prometheus-tools");
    let out = Command::new(&script).arg("ensure").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let find = |key: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .map(PathBuf::from)
    };
    match (
        out.status.success(),
        find("MKB_PROMETHEUS="),
        find("MKB_PROMTOOL="),
    ) {
        (true, Some(p), Some(t)) => Some((p, t)),
        _ => {
            eprintln!(
                "skipped: prometheus/promtool unavailable: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            None
        }
    }
}

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
