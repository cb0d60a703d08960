//! The limit programs: raw change-stream read, raw librdkafka produce, and both together with no
//! bridge logic (no encoding, no ordered window, no checkpoint): events are produced as the
//! server's BSON bytes, keyed by the raw `documentKey` bytes.

use std::path::PathBuf;
use std::time::Instant;

use futures::StreamExt;
use rdkafka::message::{Header, OwnedHeaders};

use crate::Servers;
use crate::proc_stat::{cpu_seconds, figures};
use crate::produce::{finish, producer, send};
use crate::stream::open;

/// What the limit program does.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Change-stream catch-up read only: events read and dropped.
    Read,
    /// librdkafka produce only, of the backlog's own events (loaded first, up to 64 MiB, cycled).
    Produce,
    /// Read and produce together, no bridge logic: the limit.
    Relay,
    /// The fair limit: read the same stream (the bridge's stages) and produce, for each event,
    /// exactly the records the bridge produces, encoded by the bridge's own encoder before the
    /// timed run (see `fair.rs`).
    Fair,
    /// The inline limit: read, encode with the bridge's encoder and produce, in one loop, with
    /// none of the bridge's machinery (see `inline.rs`).
    Inline,
}

/// `bench limit`.
#[derive(clap::Args)]
pub struct LimitArgs {
    #[command(flatten)]
    pub servers: Servers,
    /// read, produce, relay, fair or inline.
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// Events to read (the backlog size) or records to produce.
    #[arg(long)]
    pub count: u64,
    /// Start position: a file written by `bench token`.
    #[arg(long)]
    pub token: PathBuf,
    /// Target topic (produce, relay, fair).
    #[arg(long, default_value = "")]
    pub topic: String,
    /// librdkafka `compression.type`.
    #[arg(long, default_value = "none")]
    pub compression: String,
    /// Relay mode: attach headers shaped like the bridge's (8 names, ~300 bytes: operation
    /// type, namespace, resume token, cluster and wall time, pipeline; values copied from the
    /// event), to measure what headers cost the broker and librdkafka.
    #[arg(long)]
    headers: bool,
    /// Open the stream with `$changeStreamSplitLargeEvent`, as the bridge does, to measure what
    /// the stage costs the server.
    #[arg(long)]
    split_stage: bool,
    /// Fair and inline modes: the records' format (`format` and `key_format` of the bridge's pipeline).
    #[arg(long, default_value = "json")]
    pub format: String,
    /// A librdkafka producer property, `KEY=VALUE` (repeatable), over the bridge's settings
    /// (e.g. `linger.ms`, `batch.size` pinned for an instruction count).
    #[arg(long, value_parser = property)]
    pub property: Vec<(String, String)>,
}

/// `KEY=VALUE`.
fn property(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{s}: KEY=VALUE"))
}

/// Headers with the bridge's names and sizes, values taken from the raw event.
fn bridge_like_headers(event: &bson::RawDocument) -> OwnedHeaders {
    let text = |key: &str| event.get_str(key).unwrap_or("").to_owned();
    let token = event
        .get_document("_id")
        .ok()
        .and_then(|t| t.get_str("_data").ok())
        .unwrap_or("")
        .to_owned();
    let ns = event
        .get_document("ns")
        .map(|ns| {
            format!(
                "{}.{}",
                ns.get_str("db").unwrap_or(""),
                ns.get_str("coll").unwrap_or("")
            )
        })
        .unwrap_or_default();
    let values = [
        ("mongo.operation_type", text("operationType")),
        ("mongo.namespace", ns),
        ("mongo.resume_token", token),
        ("mongo.cluster_time", "1795953972.1".to_owned()),
        ("mongo.wall_time", "2026-11-29T12:00:00.000Z".to_owned()),
        ("mongo.pipeline", "limit-relay".to_owned()),
    ];
    let mut headers = OwnedHeaders::new_with_capacity(values.len());
    for (key, value) in &values {
        headers = headers.insert(Header {
            key,
            value: Some(value.as_bytes()),
        });
    }
    headers
}

/// `bench limit` in modes read, produce and relay (`main.rs` gives fair mode to `fair.rs`).
pub async fn run(args: LimitArgs) -> anyhow::Result<String> {
    anyhow::ensure!(
        !matches!(args.mode, Mode::Fair | Mode::Inline),
        "fair and inline modes run fair::run and inline::run"
    );
    let mut stream = open(&args.servers, &args.token, args.split_stage).await?;
    let mut bytes: u64 = 0;
    let (events, secs, failed) = match args.mode {
        Mode::Produce => {
            // The backlog's own events, loaded first (not timed), then produced `count` times.
            let mut events = Vec::new();
            let mut loaded = 0usize;
            while (events.len() as u64) < args.count && loaded < 64 * 1024 * 1024 {
                let Some(event) = stream.next().await else {
                    break;
                };
                let event = event?;
                loaded += event.as_bytes().len();
                let key = event.get_document("documentKey")?.as_bytes().to_vec();
                events.push((key, event.into_bytes()));
            }
            drop(stream);
            anyhow::ensure!(!events.is_empty(), "no events to produce");
            let producer = producer(&args.servers.bootstrap, &args.compression, &args.property)?;
            let started = Instant::now();
            for i in 0..args.count {
                let (key, value) = &events[i as usize % events.len()];
                bytes += value.len() as u64;
                send(&producer, &args.topic, key, value, None).await?;
            }
            let (n, failed) = finish(&producer, args.count).await;
            (n, started.elapsed().as_secs_f64(), failed)
        }
        Mode::Read | Mode::Relay | Mode::Fair | Mode::Inline => {
            // Read: events dropped. Relay: each produced as the server's bytes.
            let producer = match args.mode {
                Mode::Relay => Some(producer(
                    &args.servers.bootstrap,
                    &args.compression,
                    &args.property,
                )?),
                _ => None,
            };
            let mut first = None;
            let mut n = 0;
            while n < args.count {
                let Some(event) = stream.next().await else {
                    break;
                };
                let event = event?;
                first.get_or_insert_with(Instant::now);
                bytes += event.as_bytes().len() as u64;
                if let Some(producer) = &producer {
                    let key = event.get_document("documentKey")?;
                    let headers = args.headers.then(|| bridge_like_headers(&event));
                    send(
                        producer,
                        &args.topic,
                        key.as_bytes(),
                        event.as_bytes(),
                        headers,
                    )
                    .await?;
                }
                n += 1;
            }
            let (n, failed) = match &producer {
                Some(producer) => finish(producer, n).await,
                None => (n, 0),
            };
            (n, first.map_or(0.0, |t| t.elapsed().as_secs_f64()), failed)
        }
    };
    let cpu = cpu_seconds();
    Ok(figures(events, secs, bytes, failed, cpu).to_string())
}
