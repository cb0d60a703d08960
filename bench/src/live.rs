//! The live measurement: a fixed-rate writer (inserts, updates, deletes) and, in the same
//! process, a consumer of the bridge's topic that computes, for every record carrying a
//! `bench_ts` stamp, the latency from the MongoDB write to the consumer seeing the record.
//! That latency is split at the record's Kafka timestamp: the producer's `CreateTime`, which
//! librdkafka (and the Java client) stamps when the record is handed to it (the bridge and the
//! limit programs set none of their own; KIP-32). *write → enqueue* is the server's commit,
//! the change stream's read wait and the system's own read and encode; *enqueue → consumer* is
//! the producer's linger and batch, the broker's append and the consumer's fetch. Clocks: one
//! machine, the timestamp in milliseconds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bson::Document;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use serde_json::json;

use crate::{Servers, load, now_us};

/// `bench live`.
#[derive(clap::Args)]
pub struct LiveArgs {
    #[command(flatten)]
    servers: Servers,
    /// Topic the system under test writes the collection's events to.
    #[arg(long)]
    topic: String,
    /// Operations per second (6 inserts, 3 updates, 1 delete in every 10).
    #[arg(long)]
    rate: u64,
    /// Seconds of writing.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Approximate document size in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Seconds to wait after the writes for the last records.
    #[arg(long, default_value_t = 10.0)]
    settle: f64,
}

/// What the consumer saw.
#[derive(Default)]
struct Seen {
    /// Latencies of stamped records, µs.
    latencies: Vec<i64>,
    /// Of those carrying a `CreateTime`: write → enqueue and enqueue → consumer, µs.
    to_enqueue: Vec<i64>,
    from_enqueue: Vec<i64>,
    /// Records seen (stamped or not).
    records: u64,
    /// Stamped records seen by the deadline of the "sustained" check.
    stamped_by_deadline: u64,
}

/// The last `bench_ts` stamp in a JSON value (relaxed or canonical, any spacing), also where
/// the document is itself a JSON string inside the record (Debezium's `after` and
/// `updatedFields`: `\"bench_ts\": {\"$numberLong\": \"…\"}`), or in a BSON value (an
/// int64 element: `limit-relay` produces the server's bytes).
fn stamp(payload: &[u8]) -> Option<i64> {
    const KEY: &[u8] = b"bench_ts";
    let Some(at) = payload
        .windows(KEY.len() + 1)
        .rposition(|w| w.starts_with(KEY) && matches!(w[KEY.len()], b'"' | b'\\'))
    else {
        return bson_stamp(payload);
    };
    let at = at + KEY.len();
    let rest = &payload[at..];
    let start = rest.iter().take(40).position(u8::is_ascii_digit)?;
    let digits = &rest[start..];
    let end = digits
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// The last `bench_ts` int64 element (type 0x12) in BSON bytes.
fn bson_stamp(payload: &[u8]) -> Option<i64> {
    const ELEMENT: &[u8] = b"\x12bench_ts\x00";
    let at = payload.windows(ELEMENT.len()).rposition(|w| w == ELEMENT)? + ELEMENT.len();
    let bytes = payload.get(at..at + 8)?;
    Some(i64::from_le_bytes(bytes.try_into().ok()?))
}

fn consumer(bootstrap: &str, topic: &str) -> anyhow::Result<BaseConsumer> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("bench-live-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .create()?;
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let partitions = metadata
        .topics()
        .first()
        .map_or(0, |t| t.partitions().len());
    anyhow::ensure!(partitions > 0, "topic {topic} has no partitions");
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10))?;
        assignment.add_partition_offset(topic, p, Offset::Offset(high))?;
    }
    consumer.assign(&assignment)?;
    Ok(consumer)
}

fn percentile(sorted: &[i64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i] as f64 / 1000.0
}

/// `bench live`.
pub async fn run(args: LiveArgs) -> anyhow::Result<String> {
    let client = crate::mongo(&args.servers.uri).await?;
    let coll = client
        .database(&args.servers.db)
        .collection::<Document>(&args.servers.coll);
    let consumer = consumer(&args.servers.bootstrap, &args.topic)?;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    // Stamped records seen before this instant (µs) count as delivered "in time".
    let deadline_us = Arc::new(std::sync::atomic::AtomicI64::new(i64::MAX));
    let reader = {
        let (seen, stop, deadline_us) = (
            Arc::clone(&seen),
            Arc::clone(&stop),
            Arc::clone(&deadline_us),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Some(Ok(message)) = consumer.poll(Duration::from_millis(50)) else {
                    continue;
                };
                let now = now_us();
                let ts = message.payload().and_then(stamp);
                let created = match message.timestamp() {
                    rdkafka::Timestamp::CreateTime(ms) => Some(ms * 1000),
                    _ => None,
                };
                let mut seen = seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                seen.records += 1;
                if let Some(ts) = ts {
                    seen.latencies.push(now - ts);
                    if let Some(created) = created {
                        seen.to_enqueue.push(created - ts);
                        seen.from_enqueue.push(now - created);
                    }
                    if now <= deadline_us.load(Ordering::Relaxed) {
                        seen.stamped_by_deadline += 1;
                    }
                }
            }
        })
    };
    let stats = load::mixed(
        &coll,
        args.size,
        args.rate,
        Duration::from_secs_f64(args.duration),
    )
    .await?;
    deadline_us.store(now_us() + 1_000_000, Ordering::Relaxed);
    let expected = stats.stamped();
    let settle_until = Instant::now() + Duration::from_secs_f64(args.settle);
    while Instant::now() < settle_until {
        let got = seen.lock().map_or(0, |s| s.latencies.len() as u64);
        if got >= expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    reader
        .join()
        .map_err(|_| anyhow::anyhow!("consumer thread panicked"))?;
    let mut seen = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    let records = seen.records;
    let by_deadline = seen.stamped_by_deadline;
    seen.to_enqueue.sort_unstable();
    seen.from_enqueue.sort_unstable();
    let (to_enqueue, from_enqueue) = (&seen.to_enqueue, &seen.from_enqueue);
    let split = json!({
        "write_to_enqueue_p50_ms": percentile(to_enqueue, 0.50),
        "write_to_enqueue_p99_ms": percentile(to_enqueue, 0.99),
        "enqueue_to_consumer_p50_ms": percentile(from_enqueue, 0.50),
        "enqueue_to_consumer_p99_ms": percentile(from_enqueue, 0.99),
        "create_time_fraction": to_enqueue.len() as f64 / seen.latencies.len().max(1) as f64,
    });
    let lat = &mut seen.latencies;
    lat.sort_unstable();
    Ok(json!({
        "target_rate": args.rate,
        "write_rate": stats.total() as f64 / stats.secs,
        "inserts": stats.inserts, "updates": stats.updates, "deletes": stats.deletes,
        "expected_stamped": expected,
        "received_stamped": lat.len(),
        "received_records": records,
        "delivered_within_1s_fraction": by_deadline as f64 / expected.max(1) as f64,
        "p50_ms": percentile(lat, 0.50),
        "p99_ms": percentile(lat, 0.99),
        "max_ms": percentile(lat, 1.0),
        "split": split,
    })
    .to_string())
}
