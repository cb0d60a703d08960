//! `check`: a preflight. Connects to MongoDB and Kafka with the configuration and prints one
//! ✔/⚠/✘ line per check with the remedy: deployment type (and a `replicaSet` the servers do not
//! belong to); the cluster's identity; privileges on each watched namespace and on the offsets
//! collection (a majority write that matches nothing); pre-/post-images on every collection a
//! pipeline captures; the oplog window against `--min-oplog-window-hours`; each pipeline's
//! offsets document (and the cluster its position was committed on); the producer librdkafka
//! builds from `[kafka.properties]`; Kafka reachability; each target topic (its partitions and
//! `cleanup.policy`) or who would create it; the topics' `max.message.bytes` against the largest
//! documents of each watched collection; with `[bridge] group_id`, the group's slots and
//! control topic; a pipeline's routes (`routing.rs`) and heartbeat topic (`heartbeat.rs`).
//!
//! Exit code 0 when nothing fails (warnings included), 1 when one fails (2 is a config error,
//! decided before this runs: the configuration `run` would refuse, `check` refuses too).
//!
//! Invariants: every network call is bounded in time ([`CHECK_TIMEOUT`]); nothing is written
//! anywhere (the offsets write probe matches no document); no line contains a secret.

use std::time::Duration;

use crate::config::Config;
use crate::error::BridgeError;

mod exactly_once;
mod fields;
mod group;
mod heartbeat;
mod images;
mod kafka;
mod mongo;
mod privileges;
mod routing;
mod snapshot;
mod state;
mod topics;
mod unwrap;

/// Bound of each network check.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Passed (`✔`).
    Pass,
    /// Passed, but something deserves attention before relying on it (`⚠`).
    Warn,
    /// Failed (`✘`): `run` would fail or lose a guarantee.
    Fail,
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckLine {
    /// How it came out.
    pub level: Level,
    /// What was checked and what was found, or the remedy.
    pub text: String,
}

impl CheckLine {
    /// Whether the check did not fail (a warning passes).
    pub fn ok(&self) -> bool {
        self.level != Level::Fail
    }
}

impl std::fmt::Display for CheckLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = match self.level {
            Level::Pass => "✔",
            Level::Warn => "⚠",
            Level::Fail => "✘",
        };
        write!(f, "{mark} {}", self.text)
    }
}

/// A passed (`ok`) or failed check.
pub(crate) fn line(ok: bool, text: impl Into<String>) -> CheckLine {
    CheckLine {
        level: if ok { Level::Pass } else { Level::Fail },
        text: text.into(),
    }
}

/// A check that passed with a warning.
pub(crate) fn warning(text: impl Into<String>) -> CheckLine {
    CheckLine {
        level: Level::Warn,
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
/// Errors: [`BridgeError::Config`] for what `run` refuses before taking anything: a URI the
/// driver rejects, a producer configuration librdkafka refuses (exit 2 in both commands).
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
    kafka::producer_builds(config)?;
    lines.extend(config.warnings().into_iter().map(warning));
    let (mongo_lines, largest) = mongo::check(config, options).await?;
    lines.extend(mongo_lines);
    lines.extend(kafka::check(config, &largest).await);
    Ok(lines)
}

/// A duration as `1h02m`, `3m20s` or `45s`.
pub(crate) fn human(secs: u64) -> String {
    match secs {
        0..=119 => format!("{secs}s"),
        120..=7199 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}
