//! `bench`: the Rust side of the benchmark harness (`scripts/bench` drives it).
//!
//! - `load`: the load generator. Writes documents of a given size with the official driver, as
//!   fast as possible (`insert_many` batches: a catch-up backlog) or at a fixed rate with a mix
//!   of inserts, updates and deletes. Every document and every update carries `bench_ts`
//!   (µs since the Unix epoch, Int64) so that a consumer can compute write → delivery latency.
//! - `token`: opens a change stream on a collection and saves its initial resume token to a file
//!   (the start position of the `limit` programs, like the bridge's first committed position).
//! - `limit`: what this machine can move without any bridge logic: `read` (raw change-stream
//!   catch-up, events read as `RawDocumentBuf` and dropped), `produce` (raw librdkafka produce of
//!   the same payloads, idempotent, acks=all, pipelined) and `relay` (read raw events and produce
//!   them as-is: the limit a bridge is judged against), `fair` (the bridge's own records,
//!   encoded in an untimed first pass) and `inline` (read, encode with the bridge's encoder and
//!   produce in one loop: the reference of the instruction counts).
//! - `live`: a fixed-rate mixed writer plus a consumer of the bridge's topic measuring the
//!   latency from each write to the consumer seeing the record.
//! - `limit-copy`: the limit of an initial snapshot: the collection read with the bridge's
//!   snapshot query (raw batches) and every document produced as-is, keyed by `{_id}`.
//!
//! Every subcommand prints one JSON object on stdout; progress and errors go to stderr.
//! CPU and peak RSS come from the process's own accounting (`/proc/self`, Linux).

// A binary exports nothing: the library's lints on public items (Cargo.toml) do not apply.
#![allow(unreachable_pub, missing_docs)]

mod copy;
mod fair;
mod inline;
mod limit;
mod live;
mod load;
mod proc_stat;
mod produce;
mod stream;

use clap::{Parser, Subcommand};

/// Benchmark load generator and limit programs for mongo-kafka-bridge.
#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Connection options shared by every subcommand.
#[derive(clap::Args, Clone)]
pub struct Servers {
    /// MongoDB URI.
    #[arg(
        long,
        env = "MONGODB_URI",
        default_value = "mongodb://127.0.0.1:27018/?directConnection=true"
    )]
    pub uri: String,
    /// Kafka bootstrap servers.
    #[arg(long, env = "KAFKA_BOOTSTRAP", default_value = "127.0.0.1:19093")]
    pub bootstrap: String,
    /// Database of the benchmark collections.
    #[arg(long, default_value = "bench")]
    pub db: String,
    /// Collection.
    #[arg(long)]
    pub coll: String,
}

#[derive(Subcommand)]
enum Command {
    /// Write documents (a backlog as fast as possible, or a fixed-rate mix).
    Load(load::LoadArgs),
    /// Save the initial resume token of a change stream on the collection.
    Token {
        #[command(flatten)]
        servers: Servers,
        /// File to write the token to (raw BSON).
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// Raw read / produce / read+produce limits.
    Limit(limit::LimitArgs),
    /// Fixed-rate writer plus latency consumer.
    Live(live::LiveArgs),
    /// Initial-snapshot limit: copy the collection into a topic, no bridge logic.
    LimitCopy(copy::CopyArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let out = runtime.block_on(async move {
        match cli.command {
            Command::Load(args) => load::run(args).await,
            Command::Token { servers, out } => stream::save_token(&servers, &out).await,
            Command::Limit(args) if args.mode == limit::Mode::Fair => fair::run(&args).await,
            Command::Limit(args) if args.mode == limit::Mode::Inline => inline::run(&args).await,
            Command::Limit(args) => limit::run(args).await,
            Command::Live(args) => live::run(args).await,
            Command::LimitCopy(args) => copy::run(args).await,
        }
    })?;
    println!("{out}");
    Ok(())
}

/// A MongoDB client for `uri`.
async fn mongo(uri: &str) -> anyhow::Result<mongodb::Client> {
    Ok(mongodb::Client::with_uri_str(uri).await?)
}

/// Microseconds since the Unix epoch.
fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}
