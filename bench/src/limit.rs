//! The limit programs: raw change-stream read, raw librdkafka produce, and both together with no
//! bridge logic (no encoding, no ordered window, no checkpoint): events are produced as the
//! server's BSON bytes, keyed by the raw `documentKey` bytes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bson::{Document, RawDocumentBuf};
use futures::StreamExt;
use mongo_kafka_bridge::source::{RawStream, current_token, to_resume_token};
use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use serde_json::json;

use crate::Servers;
use crate::proc_stat::{cpu_seconds, peak_rss_kib};

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
}

/// `bench limit`.
#[derive(clap::Args)]
pub struct LimitArgs {
    #[command(flatten)]
    pub servers: Servers,
    /// read, produce, relay or fair.
    #[arg(long, value_enum)]
    mode: Mode,
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
    /// Fair mode: the records' format (`format` and `key_format` of the bridge's pipeline).
    #[arg(long, default_value = "json")]
    pub format: String,
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

/// Counts delivery reports.
#[derive(Default)]
pub(crate) struct Counting {
    delivered: AtomicU64,
    failed: AtomicU64,
}

impl rdkafka::ClientContext for Counting {}

impl ProducerContext for Counting {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => self.delivered.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.failed.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// The same producer settings as the bridge (`sink.rs`): idempotent, acks=all, 5 in flight,
/// murmur2_random, linger 5 ms.
pub(crate) fn producer(
    bootstrap: &str,
    compression: &str,
) -> anyhow::Result<ThreadedProducer<Counting>> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("max.in.flight.requests.per.connection", "5")
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "120000")
        .set("compression.type", compression)
        .create_with_context(Counting::default())?)
}

/// Enqueues one record, waiting while librdkafka's queue is full (backpressure, as the bridge).
pub(crate) async fn send(
    producer: &ThreadedProducer<Counting>,
    topic: &str,
    key: &[u8],
    value: &[u8],
    headers: Option<OwnedHeaders>,
) -> anyhow::Result<()> {
    let mut record = BaseRecord::to(topic).key(key).payload(value);
    if let Some(headers) = headers {
        record = record.headers(headers);
    }
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err((e, _)) => return Err(e.into()),
        }
    }
}

/// Opens the change stream of the collection after the saved token.
pub(crate) async fn open(
    servers: &Servers,
    token: &Path,
    split_stage: bool,
) -> anyhow::Result<RawStream> {
    let token = RawDocumentBuf::from_bytes(std::fs::read(token)?)?;
    let client = crate::mongo(&servers.uri).await?;
    let coll = client
        .database(&servers.db)
        .collection::<Document>(&servers.coll);
    let stages = if split_stage {
        vec![bson::doc! { mongo_kafka_bridge::source::split::SPLIT_STAGE: {} }]
    } else {
        Vec::new()
    };
    let stream = coll
        .watch()
        .pipeline(stages)
        .start_after(to_resume_token(&token)?)
        .await?;
    Ok(stream.with_type::<RawDocumentBuf>())
}

/// `bench token`: the stream's resume token right after opening (what the bridge commits first).
pub async fn save_token(servers: &Servers, out: &Path) -> anyhow::Result<String> {
    let client = crate::mongo(&servers.uri).await?;
    let coll = client
        .database(&servers.db)
        .collection::<Document>(&servers.coll);
    let mut stream = coll.watch().await?.with_type::<RawDocumentBuf>();
    let mut token = current_token(&stream)?;
    while token.is_none() {
        if stream.next_if_any().await?.is_some() {
            anyhow::bail!("the collection is being written to; save the token before the load");
        }
        token = current_token(&stream)?;
    }
    let token = token.ok_or_else(|| anyhow::anyhow!("no resume token"))?;
    std::fs::write(out, token.as_bytes())?;
    Ok(json!({ "token_bytes": token.as_bytes().len() }).to_string())
}

/// `bench limit`.
pub async fn run(args: LimitArgs) -> anyhow::Result<String> {
    if args.mode == Mode::Fair {
        return crate::fair::run(&args).await;
    }
    // (Fair mode has its own program, above.)
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
            let producer = producer(&args.servers.bootstrap, &args.compression)?;
            let started = Instant::now();
            for i in 0..args.count {
                let (key, value) = &events[i as usize % events.len()];
                bytes += value.len() as u64;
                send(&producer, &args.topic, key, value, None).await?;
            }
            let (n, failed) = finish(&producer, args.count).await;
            (n, started.elapsed().as_secs_f64(), failed)
        }
        Mode::Read | Mode::Relay | Mode::Fair => {
            // Read: events dropped. Relay: each produced as the server's bytes.
            let producer = match args.mode {
                Mode::Relay => Some(producer(&args.servers.bootstrap, &args.compression)?),
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
    Ok(json!({
        "events": events,
        "secs": secs,
        "rate": events as f64 / secs.max(1e-9),
        "mb_per_s": bytes as f64 / 1e6 / secs.max(1e-9),
        "failed": failed,
        "cpu_s": cpu,
        "cpu_us_per_event": cpu * 1e6 / (events.max(1) as f64),
        "peak_rss_kib": peak_rss_kib(),
    })
    .to_string())
}

/// Waits until `count` records are delivered (or failed); returns (delivered, failed).
pub(crate) async fn finish(producer: &ThreadedProducer<Counting>, count: u64) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let delivered = producer.context().delivered.load(Ordering::Relaxed);
        let failed = producer.context().failed.load(Ordering::Relaxed);
        if delivered + failed >= count || Instant::now() > deadline {
            let _ = producer.flush(Duration::from_secs(1));
            return (delivered, failed);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
