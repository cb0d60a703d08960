//! The load generator: documents of a chosen size with a `bench_ts` stamp, written as a backlog
//! (`insert_many`, as fast as possible) or as a fixed-rate mix of inserts, updates and deletes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bson::oid::ObjectId;
use bson::{Document, doc};
use mongodb::Collection;
use serde_json::json;

use crate::{Servers, now_us};

/// `bench load`.
#[derive(clap::Args)]
pub struct LoadArgs {
    #[command(flatten)]
    servers: Servers,
    /// Approximate BSON size of each document in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Backlog: number of documents to insert as fast as possible.
    #[arg(long, default_value_t = 0)]
    count: u64,
    /// Fixed rate (operations per second) of an insert/update/delete mix, for `--duration`.
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Duration of a fixed-rate run, in seconds.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
}

/// Builds documents of about `size` bytes: a few typed fields like an order, plus a filler
/// string cut from a fixed pseudo-random text (so consecutive documents differ).
pub struct DocFactory {
    size: usize,
    text: String,
    seq: i64,
}

impl DocFactory {
    /// A factory of documents of about `size` BSON bytes.
    pub fn new(size: usize) -> Self {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ";
        let text = (0..size + 4096)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                alphabet[(state % alphabet.len() as u64) as usize] as char
            })
            .collect();
        Self { size, text, seq: 0 }
    }

    /// The next document, stamped with `ts` (µs since the epoch).
    pub fn next(&mut self, ts: i64) -> Document {
        self.seq += 1;
        let seq = self.seq;
        let pad_len = self.size.saturating_sub(230);
        let start = (seq as usize * 7919) % 4096;
        doc! {
            "_id": ObjectId::new(),
            "seq": seq,
            "bench_ts": ts,
            "status": "pending",
            "customer": { "name": format!("customer-{}", seq % 1000), "city": "Lyon", "vip": seq % 7 == 0 },
            "total": (seq % 10_000) as f64 / 100.0 + 0.25,
            "items": [ { "sku": "A-1", "qty": 2_i32 }, { "sku": "B-7", "qty": 1_i32 } ],
            "created": bson::DateTime::from_millis(ts / 1000),
            "pad": &self.text[start..start + pad_len],
        }
    }
}

/// Counts of a mixed run.
#[derive(Debug, Default, Clone, Copy)]
pub struct MixStats {
    pub inserts: u64,
    pub updates: u64,
    pub deletes: u64,
    pub secs: f64,
}

impl MixStats {
    /// Operations that carry a `bench_ts` stamp (inserts and updates).
    pub fn stamped(&self) -> u64 {
        self.inserts + self.updates
    }
    /// All operations.
    pub fn total(&self) -> u64 {
        self.inserts + self.updates + self.deletes
    }
}

/// Inserts `count` documents as fast as possible; returns (documents, seconds).
pub async fn backlog(coll: &Collection<Document>, size: usize, count: u64) -> anyhow::Result<f64> {
    let mut factory = DocFactory::new(size);
    let batch = (8 * 1024 * 1024 / size.max(1)).clamp(1, 1000) as u64;
    let started = Instant::now();
    let mut done = 0;
    while done < count {
        let n = batch.min(count - done);
        let ts = now_us();
        let docs: Vec<Document> = (0..n).map(|_| factory.next(ts)).collect();
        coll.insert_many(docs).await?;
        done += n;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// At most this many operations in one tick: a writer behind its rate (or asked for more than it
/// can write, to find its maximum) catches up in batches of this size, not in one giant batch.
const MAX_TICK_OPS: u64 = 1000;

/// Writes `rate` operations per second for `duration`: 6 inserts, 3 updates (`$set` of a new
/// `bench_ts`) and 1 delete (of the oldest document) in every 10, batched per 2 ms tick. A
/// tick's three writes run concurrently: they touch different documents (updates take
/// documents inserted in earlier ticks, deletes the oldest ones).
pub async fn mixed(
    coll: &Collection<Document>,
    size: usize,
    rate: u64,
    duration: Duration,
) -> anyhow::Result<MixStats> {
    let mut factory = DocFactory::new(size);
    let mut live: VecDeque<ObjectId> = VecDeque::new();
    let mut stats = MixStats::default();
    let mut op: u64 = 0;
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(2));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while started.elapsed() < duration {
        tick.tick().await;
        let due = ((rate as f64 * started.elapsed().as_secs_f64()) as u64).min(op + MAX_TICK_OPS);
        let ts = now_us();
        let (mut inserts, mut updates, mut deletes) = (Vec::new(), Vec::new(), Vec::new());
        let mut recent = live.len();
        while op < due {
            match op % 10 {
                6..=8 if recent > 0 => {
                    // Update a recent document not already chosen in this tick.
                    recent -= 1;
                    updates.push(live[recent]);
                }
                9 if live.len() > 1000 => {
                    if let Some(id) = live.pop_front() {
                        deletes.push(id);
                        recent = recent.saturating_sub(1);
                    }
                }
                _ => inserts.push(factory.next(ts)),
            }
            op += 1;
        }
        for d in &inserts {
            if let Ok(id) = d.get_object_id("_id") {
                live.push_back(id);
            }
        }
        stats.inserts += inserts.len() as u64;
        stats.updates += updates.len() as u64;
        stats.deletes += deletes.len() as u64;
        let insert = async {
            if !inserts.is_empty() {
                coll.insert_many(inserts).await?;
            }
            anyhow::Ok(())
        };
        let update = async {
            if !updates.is_empty() {
                coll.update_many(
                    doc! { "_id": { "$in": updates } },
                    doc! { "$set": { "bench_ts": ts, "status": "paid" }, "$inc": { "v": 1 } },
                )
                .await?;
            }
            anyhow::Ok(())
        };
        let delete = async {
            if !deletes.is_empty() {
                coll.delete_many(doc! { "_id": { "$in": deletes } }).await?;
            }
            anyhow::Ok(())
        };
        let (i, u, d) = tokio::join!(insert, update, delete);
        i.and(u).and(d)?;
    }
    stats.secs = started.elapsed().as_secs_f64();
    Ok(stats)
}

/// `bench load`.
pub async fn run(args: LoadArgs) -> anyhow::Result<String> {
    let client = crate::mongo(&args.servers.uri).await?;
    let coll = client
        .database(&args.servers.db)
        .collection::<Document>(&args.servers.coll);
    if args.rate > 0 {
        let s = mixed(
            &coll,
            args.size,
            args.rate,
            Duration::from_secs_f64(args.duration),
        )
        .await?;
        return Ok(json!({
            "inserts": s.inserts, "updates": s.updates, "deletes": s.deletes,
            "secs": s.secs, "rate": s.total() as f64 / s.secs,
        })
        .to_string());
    }
    let secs = backlog(&coll, args.size, args.count).await?;
    Ok(
        json!({ "written": args.count, "secs": secs, "rate": args.count as f64 / secs })
            .to_string(),
    )
}
