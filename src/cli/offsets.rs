//! `mongo-kafka-bridge offsets list | show NAME | reset NAME (--to-now | --to-timestamp T |
//! --delete) [--force] | accept-config NAME [--force] | accept-cluster NAME [--force] | import
//! debezium NAME …`: what an operator would otherwise do by hand in mongosh on the offsets
//! collection. Reads and writes go through `crate::offsets::operator`; `print.rs` prints the
//! documents; `change.rs` resets and accepts a configuration, `cluster.rs` a cluster;
//! `debezium.rs` imports the position of Debezium's MongoDB connector (the move from Debezium).
//!
//! Invariants:
//! - A reset or an accept refuses while a live instance holds the pipeline (`leaseUntil` in
//!   the future) unless `--force`, and prints the document before and after.
//! - `accept-config` records the configured stream identity and keeps the position: it is the
//!   explicit way to resume a changed filter from the old position. `accept-cluster` records
//!   the MongoDB cluster `mongodb.uri` reaches and keeps the position: the explicit way to say
//!   that a position moved to another cluster on purpose.
//! - `--to-now` / `--to-timestamp` store a start position without a token
//!   (`startAtOperationTime`, what the core reads when there is no `resumeToken`) and increment
//!   `epoch`, so an instance that still runs is fenced on its next write instead of overwriting
//!   the reset.
//! - `--to-now` uses the deployment's own cluster time (`operationTime` of `hello`); when the
//!   server reports none the reset fails rather than guess from a local clock.

use std::io::Write;

use bson::{DateTime, Document, Timestamp};

use print::{age, cluster, id_text, print_doc, rfc3339, state};

use super::check::CHECK_TIMEOUT;
use crate::config::Config;
use crate::error::BridgeError;
use crate::event::format_timestamp;
use crate::offsets::OffsetsDoc;
use crate::offsets::operator::OffsetsAdmin;

pub mod args;
mod change;
mod cluster;
mod debezium;
mod print;

pub use debezium::{DebeziumOffsets, ImportDebezium};

/// Where `offsets reset` moves a pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTo {
    /// The deployment's current cluster time.
    Now,
    /// A given cluster time.
    Timestamp(Timestamp),
    /// Remove the position and everything recorded with it, keeping only the (incremented)
    /// epoch: the next start follows the pipeline's `start_at`.
    Delete,
}

/// One `offsets` subcommand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetsCommand {
    /// Every document of the offsets collection.
    List,
    /// One pipeline's document.
    Show {
        /// Pipeline name (`_id`).
        name: String,
    },
    /// Record the configured stream (scope and stages) as the one the position belongs to,
    /// keeping the position: the changed filter resumes from it.
    AcceptConfig {
        /// Pipeline name (`_id`).
        name: String,
        /// Proceed even though a live instance holds the pipeline (it will be fenced).
        force: bool,
    },
    /// Record the MongoDB cluster `mongodb.uri` reaches as the one the position belongs to,
    /// keeping the position: a pipeline refused because its position was committed on another
    /// cluster resumes from it here.
    AcceptCluster {
        /// Pipeline name (`_id`).
        name: String,
        /// Proceed even though a live instance holds the pipeline (it will be fenced).
        force: bool,
    },
    /// Store the position of Debezium's MongoDB connector as the pipeline's.
    ImportDebezium(ImportDebezium),
    /// Move or delete one pipeline's position.
    Reset {
        /// Pipeline name (`_id`).
        name: String,
        /// Target.
        to: ResetTo,
        /// Proceed even though a live instance holds the pipeline (it will be fenced).
        force: bool,
    },
}

/// Parses `T` of `--to-timestamp`: RFC 3339 (`2026-11-29T08:00:00Z`), `<seconds>.<increment>`
/// (as printed by `offsets show` and the `mongo.cluster_time` header) or Unix seconds.
///
/// Errors: a sentence saying which forms are accepted.
pub fn parse_timestamp(text: &str) -> Result<Timestamp, String> {
    let text = text.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        let secs = u32::try_from(t.timestamp()).map_err(|_| format!("{text:?} is out of range"))?;
        return Ok(Timestamp {
            time: secs,
            increment: 0,
        });
    }
    let (secs, inc) = text.split_once('.').unwrap_or((text, "0"));
    match (secs.parse::<u32>(), inc.parse::<u32>()) {
        (Ok(time), Ok(increment)) => Ok(Timestamp { time, increment }),
        _ => Err(format!(
            "{text:?} is not a time: use RFC 3339 (2026-11-29T08:00:00Z), <seconds>.<increment> \
             or Unix seconds"
        )),
    }
}

/// `T` of `--to-timestamp T` ([`parse_timestamp`]), refused when it lies in the future of this
/// machine's clock ([`refuse_future`]).
///
/// Errors: the sentence of either.
pub fn reset_timestamp(text: &str) -> Result<Timestamp, String> {
    let now = u32::try_from(chrono::Utc::now().timestamp()).unwrap_or(u32::MAX);
    parse_timestamp(text).and_then(|at| refuse_future(at, now))
}

/// How far ahead of this machine's clock `--to-timestamp` may be (seconds): clock skew
/// between hosts, not a time to wait for.
pub const FUTURE_TOLERANCE_S: u32 = 60;

/// Refuses a `--to-timestamp` that lies more than [`FUTURE_TOLERANCE_S`] after `now_s` (Unix
/// seconds): the stream would start there, and the events written until then would never be
/// published (a silent gap, often a time zone mistake).
///
/// Errors: a sentence naming both times and the way forward.
pub fn refuse_future(at: Timestamp, now_s: u32) -> Result<Timestamp, String> {
    if at.time <= now_s.saturating_add(FUTURE_TOLERANCE_S) {
        return Ok(at);
    }
    let show = |s: u32| {
        chrono::DateTime::from_timestamp(i64::from(s), 0)
            .map_or_else(|| s.to_string(), |t| t.to_rfc3339())
    };
    Err(format!(
        "{} is in the future (now is {}): the events written until then would never be \
         published. Give a past time (RFC 3339 with its offset, e.g. Z for UTC), or --to-now",
        show(at.time),
        show(now_s)
    ))
}

/// Runs `command`, writing its report to `out`. Returns whether it succeeded (`false`: a reset
/// was refused or the pipeline has no document).
///
/// Errors: [`BridgeError::Config`] for a URI the driver rejects; [`BridgeError::Checkpoint`] when
/// MongoDB cannot be reached or refuses the read or write.
pub async fn run(
    config: &Config,
    command: &OffsetsCommand,
    out: &mut impl Write,
) -> Result<bool, BridgeError> {
    let client = crate::mongo::client_with(config, |o| {
        o.server_selection_timeout = Some(CHECK_TIMEOUT);
        o.connect_timeout = Some(CHECK_TIMEOUT);
    })
    .await?;
    let command_run = Command {
        offsets: OffsetsAdmin::new(&client, &config.mongodb),
        client: client.clone(),
        config,
    };
    let result = command_run.run(command, out).await;
    client.shutdown().immediate(true).await;
    result
}

struct Command<'a> {
    offsets: OffsetsAdmin,
    client: mongodb::Client,
    config: &'a Config,
}

fn failed(name: &str, source: mongodb::error::Error) -> BridgeError {
    BridgeError::Checkpoint {
        pipeline: name.to_owned(),
        source: Box::new(source),
    }
}

impl Command<'_> {
    async fn run(
        &self,
        command: &OffsetsCommand,
        out: &mut impl Write,
    ) -> Result<bool, BridgeError> {
        match command {
            OffsetsCommand::List => self.list(out).await,
            OffsetsCommand::Show { name } => match self.find(name).await? {
                Some(doc) => {
                    print_doc(out, &doc);
                    Ok(true)
                }
                None => {
                    let _ = writeln!(out, "{}", self.missing(name));
                    Ok(false)
                }
            },
            OffsetsCommand::Reset { name, to, force } => self.reset(name, *to, *force, out).await,
            OffsetsCommand::AcceptConfig { name, force } => {
                self.accept_config(name, *force, out).await
            }
            OffsetsCommand::AcceptCluster { name, force } => {
                self.accept_cluster(name, *force, out).await
            }
            OffsetsCommand::ImportDebezium(import) => self.import_debezium(import, out).await,
        }
    }

    fn missing(&self, name: &str) -> String {
        let configured = self.config.pipelines.iter().any(|p| p.name == name);
        format!(
            "pipeline {name:?} has no offsets document in {}.{}{}",
            self.config.mongodb.offsets_database,
            self.config.mongodb.offsets_collection,
            if configured {
                " (it has not started yet: it will start at its `start_at`)"
            } else {
                " and is not in the configuration"
            }
        )
    }

    async fn find(&self, name: &str) -> Result<Option<Document>, BridgeError> {
        self.offsets.find(name).await.map_err(|e| failed(name, e))
    }

    async fn list(&self, out: &mut impl Write) -> Result<bool, BridgeError> {
        let docs = self.offsets.list().await.map_err(|e| failed("*", e))?;
        let _ = writeln!(
            out,
            "{:<24} {:<22} {:>10} {:>6} {:<28} {:>14}  {:<45} STATE",
            "PIPELINE", "POSITION", "AGE", "EPOCH", "LEASE", "EVENTS", "CLUSTER"
        );
        for d in &docs {
            let name = id_text(d);
            let Ok(parsed) = OffsetsDoc::parse(d) else {
                let _ = writeln!(
                    out,
                    "{name:<24} (invalid document: see `offsets show {name}`)"
                );
                continue;
            };
            let lease = match (parsed.live_owner(DateTime::now()), parsed.lease_until) {
                (Some((_, until)), _) => {
                    format!("live until {}", rfc3339(until.timestamp_millis() / 1000))
                }
                (None, Some(_)) => "expired".to_owned(),
                (None, None) => "none".to_owned(),
            };
            let (position, age) = match parsed.position() {
                Some((label, ts)) => (format!("{label} {}", format_timestamp(ts)), age(ts.time)),
                None => ("none".to_owned(), String::new()),
            };
            let _ = writeln!(
                out,
                "{name:<24} {position:<22} {age:>10} {:>6} {lease:<28} {:>14}  {:<45} {}",
                parsed.epoch.unwrap_or(0),
                parsed.events_committed,
                cluster(&parsed),
                state(&parsed, d),
            );
        }
        for p in &self.config.pipelines {
            if !docs.iter().any(|d| id_text(d) == p.name) {
                let _ = writeln!(
                    out,
                    "{:<24} (no document yet: starts at {})",
                    p.name, p.start_at
                );
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_parse_in_every_documented_form() {
        let t = |time, increment| Ok(Timestamp { time, increment });
        assert_eq!(parse_timestamp("1764403200.7"), t(1_764_403_200, 7));
        assert_eq!(parse_timestamp("1764403200"), t(1_764_403_200, 0));
        assert_eq!(parse_timestamp("2025-11-29T08:00:00Z"), t(1_764_403_200, 0));
        assert!(parse_timestamp("yesterday").is_err());
        assert!(parse_timestamp("1.x").is_err());
    }

    #[test]
    fn a_time_past_the_clock_and_its_tolerance_is_refused() {
        let at = |time| Timestamp { time, increment: 3 };
        let now = 1_764_403_200;
        assert_eq!(refuse_future(at(now - 3600), now), Ok(at(now - 3600)));
        assert_eq!(
            refuse_future(at(now + 60), now),
            Ok(at(now + 60)),
            "clock skew"
        );
        assert_eq!(
            refuse_future(at(now + 3600), now),
            Err(
                "2025-11-29T09:00:00+00:00 is in the future (now is 2025-11-29T08:00:00+00:00): \
                 the events written until then would never be published. Give a past time \
                 (RFC 3339 with its offset, e.g. Z for UTC), or --to-now"
                    .to_owned()
            )
        );
    }
}
