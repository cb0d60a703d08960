//! Watching the bridge from outside: its HTTP endpoints (a minimal GET, blocking or from async
//! code), sums over its Prometheus text, and the `prometheus`/`promtool` binaries.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use mongo_kafka_bridge::observe::metrics::{Metrics, RESTARTS};

use crate::common::root;

/// `GET path` on `addr` (HTTP/1.0, the connection closed by the server): status code and body.
fn request(
    addr: SocketAddr,
    path: &str,
    connect: Duration,
    read: Duration,
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, connect)?;
    stream.set_read_timeout(Some(read))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes)?;
    let response = String::from_utf8_lossy(&bytes);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_owned()))
}

/// `GET path` on `addr`, or the I/O error.
pub fn try_http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    request(addr, path, Duration::from_secs(5), Duration::from_secs(10))
}

/// `GET path` on `addr`: (status code, body). Panics when the server does not answer.
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    try_http_get(addr, path).unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
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

/// The fault suite's blocking GET of `addr` (as the bridge logged it), with short timeouts (2 s
/// to connect, 3 s to read): the status code and body, or `None` when nothing answered.
pub fn fetch(addr: &str, path: &str) -> Option<(u16, String)> {
    let addr: SocketAddr = addr.parse().ok()?;
    request(addr, path, Duration::from_secs(2), Duration::from_secs(3))
        .ok()
        .filter(|(code, _)| *code != 0)
}

/// The sum of the samples of `name` in a Prometheus text whose labels contain each of
/// `labels` (e.g. `pipeline="p3"`); 0 without any.
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>()
        + 0.0 // an empty sum is -0.0
}

/// Sum of a counter family's series of `pipeline` whose labels contain every `labels` pair.
pub fn counter(metrics: &Metrics, family: &str, pipeline: &str, labels: &[(&str, &str)]) -> f64 {
    let mut wanted = vec![format!("pipeline=\"{pipeline}\"")];
    wanted.extend(labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")));
    let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
    metric_sum(&metrics.render(), family, &wanted)
}

/// The pipeline restarts of `pipeline`.
pub fn restarts(metrics: &Metrics, pipeline: &str) -> f64 {
    counter(metrics, RESTARTS, pipeline, &[])
}

/// Paths of `prometheus` and `promtool`, installing Debian's package when missing
/// (`scripts/prometheus-tools ensure`); `None` with a printed reason when they cannot be had.
pub fn prometheus_tools() -> Option<(PathBuf, PathBuf)> {
    let script = root().join("scripts/prometheus-tools");
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
