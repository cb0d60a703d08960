//! `bench limit-copy`: the limit of an initial snapshot on this machine. It reads the whole
//! collection with the bridge's snapshot queries (`--paging batch`, default: one `find` per
//! batch, sorted and hinted on `_id`, read concern majority, bracket by bracket of `_id` types,
//! through the bridge's own `snapshot::copy::CopyCursor`, so the queries are the same) or with
//! one cursor over the whole collection (`--paging cursor`: what a server can do when nothing
//! has to be ordered against a change stream), and produces every document as the server's
//! BSON bytes, keyed by the raw BSON of `{_id: <value>}`, with the other limit programs'
//! producer. There is no other logic: no encoding, no markers, no headers, no ordered window,
//! no checkpoint.
//!
//! The harness times it from process start until the topic's high watermark reaches the
//! collection's size; the program's own `secs` run from opening the cursor to the last ack.

use std::time::{Duration, Instant};

use bson::{RawDocumentBuf, doc};
use futures::StreamExt;
use mongodb::options::{Hint, ReadConcern};
use rdkafka::producer::Producer;
use serde_json::json;

use crate::Servers;
use crate::proc_stat::{cpu_seconds, peak_rss_kib};
use crate::produce::{Counting, finish, producer, send};

/// `bench limit-copy`.
#[derive(clap::Args)]
pub struct CopyArgs {
    #[command(flatten)]
    servers: Servers,
    /// Target topic.
    #[arg(long)]
    topic: String,
    /// The cursor's `batchSize` (the bridge's `snapshot_batch_size`).
    #[arg(long, default_value_t = 1000)]
    batch_size: u32,
    /// librdkafka `compression.type`.
    #[arg(long, default_value = "none")]
    compression: String,
    /// `batch`: the bridge's queries (one `find` per batch); `cursor`: one cursor.
    #[arg(long, default_value = "batch")]
    paging: String,
}

/// Copies the collection into the topic; returns the figures as JSON.
pub async fn run(args: CopyArgs) -> anyhow::Result<String> {
    let producer = producer(&args.servers.bootstrap, &args.compression, &[])?;
    // Ask for the topic's metadata at once, as the bridge does at start: it makes librdkafka
    // connect now, so the idempotent producer gets its id while the cursor opens. Without it
    // (sparse connections) the first record waits ~0.5-1 s for the producer id.
    let metadata = {
        let (producer, topic) = (producer.clone(), args.topic.clone());
        tokio::task::spawn_blocking(move || {
            let timeout = Duration::from_secs(5);
            producer
                .client()
                .fetch_metadata(Some(&topic), timeout)
                .map(drop)
        })
    };
    let client = crate::mongo(&args.servers.uri).await?;
    let coll = client
        .database(&args.servers.db)
        .collection::<RawDocumentBuf>(&args.servers.coll);
    let started = Instant::now();
    if args.paging == "batch" {
        let (count, bytes) = paged(&client, &args, &producer).await?;
        return report(&producer, metadata, started, count, bytes).await;
    }
    let mut cursor = coll
        .find(doc! {})
        .sort(doc! { "_id": 1 })
        .hint(Hint::Keys(doc! { "_id": 1 }))
        .batch_size(args.batch_size)
        .read_concern(ReadConcern::majority())
        .batch()
        .await?;
    let (mut count, mut bytes) = (0u64, 0u64);
    while let Some(batch) = cursor.next().await {
        let batch = batch?;
        for value in batch.doc_slices()? {
            let document = value?
                .as_document()
                .ok_or_else(|| anyhow::anyhow!("a batch element is not a document"))?;
            bytes += produce(&producer, &args.topic, document).await?;
            count += 1;
        }
    }
    report(&producer, metadata, started, count, bytes).await
}

/// The bridge's queries: one `find` per batch through its own copy cursor.
async fn paged(
    client: &mongodb::Client,
    args: &CopyArgs,
    producer: &rdkafka::producer::ThreadedProducer<Counting>,
) -> anyhow::Result<(u64, u64)> {
    use mongo_kafka_bridge::snapshot::copy::{CopyCursor, Read};
    let ns = (args.servers.db.as_str(), args.servers.coll.as_str());
    let mut copy = CopyCursor::new(client, ns, doc! {}, args.batch_size, None);
    let (mut count, mut bytes) = (0u64, 0u64);
    loop {
        let (next, read) = copy.next().await;
        copy = next;
        let Read::Batch(batch) = read? else {
            return Ok((count, bytes));
        };
        for document in &batch.docs {
            bytes += produce(producer, &args.topic, document).await?;
            count += 1;
        }
    }
}

/// Produces `document` (its BSON) keyed by the BSON of `{_id}`; its size in bytes.
async fn produce(
    producer: &rdkafka::producer::ThreadedProducer<Counting>,
    topic: &str,
    document: &bson::RawDocument,
) -> anyhow::Result<u64> {
    let mut key = RawDocumentBuf::new();
    let id = document
        .get("_id")?
        .ok_or_else(|| anyhow::anyhow!("no _id"))?;
    key.append_ref("_id", id);
    send(producer, topic, key.as_bytes(), document.as_bytes(), None).await?;
    Ok(document.as_bytes().len() as u64)
}

/// Waits for the last acknowledgement; the figures as JSON.
async fn report(
    producer: &rdkafka::producer::ThreadedProducer<Counting>,
    metadata: tokio::task::JoinHandle<Result<(), rdkafka::error::KafkaError>>,
    started: Instant,
    count: u64,
    bytes: u64,
) -> anyhow::Result<String> {
    // Done long ago; its outcome does not matter (a failure shows as undelivered records).
    let _ = metadata.await;
    let (delivered, failed) = finish(producer, count).await;
    let secs = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds();
    Ok(json!({
        "documents": count,
        "delivered": delivered,
        "failed": failed,
        "secs": secs,
        "rate": count as f64 / secs.max(1e-9),
        "mb_per_s": bytes as f64 / 1e6 / secs.max(1e-9),
        "document_bytes": bytes as f64 / (count.max(1) as f64),
        "cpu_s": cpu,
        "cpu_us_per_event": cpu * 1e6 / (count.max(1) as f64),
        "peak_rss_kib": peak_rss_kib(),
    })
    .to_string())
}
