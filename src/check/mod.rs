//! `check`: a preflight. Connects to MongoDB and Kafka with the configuration and prints one
//! ✔/✘ line per check with the remedy: deployment type; privileges on each watched namespace and
//! on the offsets collection (a majority write that matches nothing); pre-/post-images where
//! configured; the oplog window against `--min-oplog-window-hours`; each pipeline's offsets
//! document; Kafka reachability; each target topic or auto-creation; the topics'
//! `max.message.bytes` against the largest documents of each watched collection.
//!
//! Exit code 0 when all pass, 1 when one fails (2 is a config error, decided before this runs).
//!
//! Invariants: every network call is bounded in time ([`CHECK_TIMEOUT`]); nothing is written
//! anywhere (the offsets write probe matches no document); no line contains a secret.

use std::time::Duration;

use crate::config::{Config, PipelineConfig};
use crate::error::BridgeError;

mod kafka;
mod mongo;
mod privileges;
mod state;

/// Bound of each network check.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckLine {
    /// Passed?
    pub ok: bool,
    /// What was checked and what was found, or the remedy.
    pub text: String,
}

impl std::fmt::Display for CheckLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", if self.ok { "✔" } else { "✘" }, self.text)
    }
}

pub(crate) fn line(ok: bool, text: impl Into<String>) -> CheckLine {
    CheckLine {
        ok,
        text: text.into(),
    }
}

/// Tunables of the preflight.
#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// The oplog window must be at least this long; zero only reports it.
    pub min_oplog_window: Duration,
}

/// The largest document of a watched collection, for the message-size check.
#[derive(Debug, Clone)]
pub(crate) struct Largest {
    /// Pipeline name.
    pub pipeline: String,
    /// `db.coll`.
    pub namespace: String,
    /// Target topic of the collection's records.
    pub topic: String,
    /// BSON size of its largest document (bytes).
    pub bytes: u64,
    /// How many copies of a document one record can carry (fullDocument, pre-image, …).
    pub copies: u64,
}

/// Runs every check; the lines in order.
///
/// Errors: only for a URI the driver rejects ([`BridgeError::Config`]).
pub async fn run_with(
    config: &Config,
    options: &CheckOptions,
) -> Result<Vec<CheckLine>, BridgeError> {
    let mut lines = vec![line(
        true,
        format!(
            "configuration valid ({} pipeline{})",
            config.pipelines.len(),
            if config.pipelines.len() == 1 { "" } else { "s" }
        ),
    )];
    let (mongo_lines, largest) = mongo::check(config, options).await?;
    lines.extend(mongo_lines);
    lines.extend(kafka::check(config, &largest).await);
    Ok(lines)
}

/// The topic a pipeline writes, when it is known before any event (a fixed `topic` or a
/// collection scope).
pub fn known_topic(p: &PipelineConfig, prefix: &str) -> Option<String> {
    match (&p.topic, &p.database, &p.collection) {
        (Some(topic), _, _) => Some(topic.clone()),
        (None, Some(db), Some(coll)) => Some(format!("{prefix}{db}.{coll}")),
        _ => None,
    }
}

/// A duration as `1h02m`, `3m20s` or `45s`.
pub(crate) fn human(secs: u64) -> String {
    match secs {
        0..=119 => format!("{secs}s"),
        120..=7199 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}
