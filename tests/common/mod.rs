//! What both test binaries (`tests/it`, `tests/faults`) share, one file per role:
//!
//! - [`servers`]: the servers under test (`MONGODB_URI`, `KAFKA_BOOTSTRAP`) and named
//!   `scripts/services` instances of a test's own;
//! - [`config`]: configuration texts and files (the integration tests' `config_toml`, the fault
//!   suite's [`config::Cfg`] and [`config::GroupCfg`]);
//! - [`bridge`]: the bridge in-process, as a command, and as a child process;
//! - [`observe`]: its HTTP endpoints and metrics, and the Prometheus tools;
//! - [`kafka`]: topics, consumers assigned a whole topic, a fresh read with an isolation level;
//! - [`collect`]: what the integration tests read back from a topic (as text or bytes);
//! - [`records`]: the write load's records as a consumer decodes them, read fresh or followed;
//! - [`mongo`]: MongoDB clients, the offsets document, fail points, change streams;
//! - [`load`]: a steady write load with checkable content, and the truth read back after it;
//! - [`verdict`]: the truth compared with what a consumer read;
//! - [`corpus`]: the shared test data (`../shared/data`) and the BSON corpus' documents;
//! - [`snapshot`] and [`mirror`]: documents of every `_id` type, a writer, and the compacted
//!   topic compared with the collection.
//!
//! Each binary includes it with `#[path = "../common/mod.rs"] mod common;`: a `mod common;` in
//! `tests/<binary>/main.rs` would look for `tests/<binary>/common`.

pub mod bridge;
pub mod collect;
pub mod config;
pub mod corpus;
pub mod kafka;
pub mod load;
pub mod mirror;
pub mod mongo;
pub mod observe;
pub mod records;
pub mod servers;
pub mod snapshot;
pub mod verdict;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

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

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
