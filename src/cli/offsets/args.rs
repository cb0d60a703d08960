//! The `offsets` command's arguments, as clap parses them from the command line, and the
//! [`OffsetsCommand`] each asks for (`src/main.rs` dispatches, `offsets.rs` runs it).
//!
//! Invariant: argument errors clap cannot see (a timestamp's form, an unreadable offsets file)
//! are printed here naming the flag, and no command runs.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Subcommand};

use super::{DebeziumOffsets, ImportDebezium, OffsetsCommand, ResetTo};

/// `offsets`' subcommands.
#[derive(Debug, Subcommand)]
pub enum OffsetsArgs {
    /// One line per offsets document (and per configured pipeline without one).
    List,
    /// Every field of one pipeline's offsets document.
    Show {
        /// Pipeline name.
        name: String,
    },
    /// Move a pipeline's position (no token; it starts there next time) or delete it. Refused
    /// while a live instance holds the pipeline, unless --force.
    Reset(ResetArgs),
    /// Accept the configured scope and `pipeline` stages for a pipeline committed under others:
    /// it resumes from its position. Refused while a live instance holds it, unless --force.
    AcceptConfig(AcceptArgs),
    /// Accept the MongoDB cluster the configuration reaches for a pipeline committed on another
    /// (the move is intended): it resumes from its position. Refused like accept-config.
    AcceptCluster(AcceptArgs),
    /// Store another system's position as a pipeline's (the move without a gap).
    #[command(subcommand)]
    Import(ImportArgs),
}

/// `offsets accept-config` and `accept-cluster`.
#[derive(Debug, Args)]
pub struct AcceptArgs {
    /// Pipeline name.
    pub name: String,
    /// Proceed although a live instance holds the pipeline (it is fenced, and resumes).
    #[arg(long)]
    pub force: bool,
}

/// `offsets import`'s sources.
#[derive(Debug, Subcommand)]
pub enum ImportArgs {
    /// The position of Debezium's MongoDB connector, from Kafka Connect (README "Moving from
    /// Debezium"); refused while a live instance holds the pipeline, unless --force.
    Debezium(DebeziumArgs),
}

/// `offsets import debezium`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("from").required(true).args(["offsets", "connect_offsets_topic"])))]
pub struct DebeziumArgs {
    /// Pipeline name.
    pub name: String,
    /// The JSON of Kafka Connect's GET /connectors/NAME/offsets: a file, or - for stdin.
    #[arg(long, value_name = "FILE")]
    pub offsets: Option<PathBuf>,
    /// Read the offsets from this Kafka Connect offsets topic (the distributed worker's
    /// offset.storage.topic) on [kafka] bootstrap_servers.
    #[arg(long, value_name = "TOPIC", requires = "connector")]
    pub connect_offsets_topic: Option<String>,
    /// The connector's name in Kafka Connect (with --connect-offsets-topic).
    #[arg(long)]
    pub connector: Option<String>,
    /// The connector's topic.prefix (the offsets' server_id); default: the pipeline's
    /// [pipelines.debezium] topic_prefix.
    #[arg(long)]
    pub server_id: Option<String>,
    /// When the offsets hold no single partition of the current form {"server_id": …} (only
    /// an older Debezium's per replica set, per shard or per task generation ones): resume
    /// after the oldest of them (by sec/ord) instead of refusing. Nothing is lost; the events
    /// between it and the newer positions are published again (duplicates).
    #[arg(long)]
    pub use_oldest: bool,
    /// Proceed although a live instance holds the pipeline: it is fenced, and restarts from
    /// the imported position.
    #[arg(long)]
    pub force: bool,
}

/// `offsets reset`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).args(["to_now", "to_timestamp", "delete"])))]
pub struct ResetArgs {
    /// Pipeline name.
    pub name: String,
    /// Start at the deployment's current cluster time (the changes until now are skipped).
    #[arg(long)]
    pub to_now: bool,
    /// Start at this cluster time: RFC 3339, <seconds>.<increment> or Unix seconds.
    #[arg(long, value_name = "T")]
    pub to_timestamp: Option<String>,
    /// Forget the position (the document keeps its raised epoch, its sequences and streamUid): the next start
    /// follows the pipeline's `start_at`.
    #[arg(long)]
    pub delete: bool,
    /// Proceed although a live instance holds the pipeline: it is fenced, and restarts from the
    /// new position (or another instance takes the pipeline there).
    #[arg(long)]
    pub force: bool,
}

impl OffsetsArgs {
    /// The command these arguments ask for; `None` (after printing why on stderr) when an
    /// argument cannot be read (a timestamp, an offsets file).
    pub fn command(self) -> Option<OffsetsCommand> {
        offsets_command(self)
    }
}

fn offsets_command(args: OffsetsArgs) -> Option<OffsetsCommand> {
    Some(match args {
        OffsetsArgs::List => OffsetsCommand::List,
        OffsetsArgs::Show { name } => OffsetsCommand::Show { name },
        OffsetsArgs::AcceptConfig(AcceptArgs { name, force }) => {
            OffsetsCommand::AcceptConfig { name, force }
        }
        OffsetsArgs::AcceptCluster(AcceptArgs { name, force }) => {
            OffsetsCommand::AcceptCluster { name, force }
        }
        OffsetsArgs::Import(ImportArgs::Debezium(args)) => import_debezium(args)?,
        OffsetsArgs::Reset(r) => {
            let to = match (r.to_now, r.to_timestamp, r.delete) {
                (true, _, _) => ResetTo::Now,
                (_, Some(t), _) => match super::reset_timestamp(&t) {
                    Ok(ts) => ResetTo::Timestamp(ts),
                    Err(e) => {
                        eprintln!("error: --to-timestamp: {e}");
                        return None;
                    }
                },
                _ => ResetTo::Delete,
            };
            OffsetsCommand::Reset {
                name: r.name,
                to,
                force: r.force,
            }
        }
    })
}

/// `offsets import debezium`'s command; `None` (after printing why) when the offsets cannot be
/// read.
fn import_debezium(args: DebeziumArgs) -> Option<OffsetsCommand> {
    let from = match (args.offsets, args.connect_offsets_topic, args.connector) {
        (Some(path), _, _) => DebeziumOffsets::read(&path)
            .map_err(|e| eprintln!("error: --offsets {}: {e}", path.display()))
            .ok()?,
        (None, Some(topic), Some(connector)) => DebeziumOffsets::Topic { topic, connector },
        _ => return None, // clap requires one of them
    };
    Some(OffsetsCommand::ImportDebezium(ImportDebezium {
        name: args.name,
        from,
        server_id: args.server_id,
        use_oldest: args.use_oldest,
        force: args.force,
    }))
}
