//! `bench limit --mode fair`: the fair limit. It reads the same change stream as the bridge
//! (from the same start position, with `$changeStreamSplitLargeEvent`) and produces, for each
//! event, the very records the bridge produces: the same topic, key, value and headers, encoded
//! with the bridge's own encoder in a first, untimed pass over the backlog and kept in memory.
//! The broker and librdkafka then pay exactly the bridge's per-record cost, so bridge ÷ this
//! limit isolates what the bridge itself costs (reading, encoding, ordering, bookkeeping).
//!
//! Timing starts when the stream is opened again for the timed pass and ends when the last
//! record is acknowledged (`rate`); the encoding pass is not timed.

use std::time::Instant;

use futures::StreamExt;
use mongo_kafka_bridge::config::PipelineConfig;
use mongo_kafka_bridge::encode::{Record, RecordEncoder};
use rdkafka::message::{Header, OwnedHeaders};

use crate::limit::LimitArgs;
use crate::proc_stat::{cpu_seconds, figures};
use crate::produce::{finish, producer, send};
use crate::stream::open;

/// The bridge's pipeline for the benchmark collection, writing to `topic` in `format`.
pub(crate) fn pipeline(args: &LimitArgs) -> anyhow::Result<PipelineConfig> {
    let format = &args.format;
    Ok(toml::from_str(&format!(
        "name = \"fair\"\ndatabase = \"{}\"\ncollection = \"{}\"\ntopic = \"{}\"\n\
         format = \"{format}\"\nkey_format = \"{format}\"\n",
        args.servers.db, args.servers.coll, args.topic
    ))?)
}

pub(crate) fn headers(record: &Record) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
    for (key, value) in &record.headers {
        headers = headers.insert(Header {
            key,
            value: Some(value.as_slice()),
        });
    }
    headers
}

/// Encodes the backlog untimed, then reads it again and produces the encoded records.
pub async fn run(args: &LimitArgs) -> anyhow::Result<String> {
    let mut encoder = RecordEncoder::new(&pipeline(args)?, "");
    let mut stream = open(&args.servers, &args.token, true).await?;
    let mut encoded: Vec<Vec<Record>> = Vec::with_capacity(args.count as usize);
    while (encoded.len() as u64) < args.count {
        let Some(event) = stream.next().await else {
            break;
        };
        encoded.push(encoder.encode(&event?)?.records);
    }
    drop(stream);
    let count: u64 = encoded.iter().map(|r| r.len() as u64).sum();
    let producer = producer(&args.servers.bootstrap, &args.compression, &args.property)?;
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let mut stream = open(&args.servers, &args.token, true).await?;
    let mut bytes = 0;
    for records in &encoded {
        let Some(event) = stream.next().await else {
            break;
        };
        bytes += event?.as_bytes().len() as u64;
        for record in records {
            let value = record.value.as_deref().unwrap_or_default();
            send(
                &producer,
                &args.topic,
                &record.key,
                value,
                Some(headers(record)),
            )
            .await?;
        }
    }
    let (delivered, failed) = finish(&producer, count).await;
    let secs = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_before;
    let mut out = figures(encoded.len() as u64, secs, bytes, failed, cpu);
    out["records"] = delivered.into();
    Ok(out.to_string())
}
