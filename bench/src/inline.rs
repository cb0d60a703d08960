//! `bench limit --mode inline`: the inline limit. It does the bridge's work with none of its
//! machinery, in one loop: read the next event of the same change stream (from the same start
//! position, with `$changeStreamSplitLargeEvent`), encode it with the bridge's own encoder
//! (`format` and `key_format` as given), and produce its records with the same topic, key,
//! value and headers. No window, no delivery future per record (a delivery counter), no
//! checkpoint, no metrics, no second task.
//!
//! Unlike `fair.rs` (encoding done in an untimed first pass), the encoder's cost is inside the
//! loop, so a whole-process instruction count (`scripts/bench --callgrind`) compares like with
//! like: bridge ÷ inline is what the bridge's own machinery costs.

use std::time::Instant;

use futures::StreamExt;

use crate::fair::{headers, pipeline};
use crate::limit::LimitArgs;
use crate::proc_stat::{cpu_seconds, figures};
use crate::produce::{finish, producer, send};
use crate::stream::open;

/// Reads, encodes and produces `args.count` events; waits for every record's acknowledgement.
pub async fn run(args: &LimitArgs) -> anyhow::Result<String> {
    let mut encoder = mongo_kafka_bridge::encode::RecordEncoder::new(&pipeline(args)?, "");
    let producer = producer(&args.servers.bootstrap, &args.compression, &args.property)?;
    let started = Instant::now();
    let mut stream = open(&args.servers, &args.token, true).await?;
    let (mut events, mut records, mut bytes) = (0u64, 0u64, 0u64);
    while events < args.count {
        let Some(event) = stream.next().await else {
            break;
        };
        let event = event?;
        bytes += event.as_bytes().len() as u64;
        for record in encoder.encode(&event)?.records {
            let value = record.value.as_deref().unwrap_or_default();
            let headers = Some(headers(&record));
            send(&producer, &args.topic, &record.key, value, headers).await?;
            records += 1;
        }
        events += 1;
    }
    let (delivered, failed) = finish(&producer, records).await;
    let secs = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds();
    let mut out = figures(events, secs, bytes, failed, cpu);
    out["records"] = delivered.into();
    Ok(out.to_string())
}
