//! `eosreset`: an `offsets reset` made while the bridge is stopped wins over the older progress
//! record in the progress topic on the next start (its `resetSequence` is higher), for
//! `--to-now` and for `--delete` (which, in this mode, keeps a document with the epoch and the
//! reset sequence raised; the start follows `start_at = "now"`).
//!
//! Batches of 100 inserts: 0 delivered before the first stop; A written while stopped, then
//! `reset --to-now`, then B: B exactly once, A never; stopped again, C written, then
//! `reset --delete`, started, D written: D exactly once, C never. Each check a fresh
//! `read_committed` read (see the module doc of `exactly_once`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongodb::Collection;

use crate::common::bridge::{BridgeProc, binary};
use crate::common::kafka::Isolation;
use crate::common::records::{EventId, read};
use crate::say;
use crate::stage::Stage;
use crate::suite::{Ctx, Row};

const BATCH: i64 = 100;
/// Batch names and their first `_id` (batch k: `1000·k ..`).
const BATCHES: [&str; 5] = ["0", "A", "B", "C", "D"];
/// How many copies of each of its inserts `read_committed` must have at the end.
const EXPECTED: [usize; 5] = [1, 0, 1, 0, 1];

async fn write_batch(coll: &Collection<Document>, k: usize) {
    let docs: Vec<Document> = (0..BATCH)
        .map(|i| doc! { "_id": 1000 * k as i64 + i })
        .collect();
    coll.insert_many(docs).await.expect("insert a batch");
}

/// Per batch: (distinct ids, records) of a fresh `read_committed` read.
async fn batches(bootstrap: &str, topic: &str) -> BTreeMap<usize, (usize, usize)> {
    let mut ids: BTreeMap<usize, std::collections::HashSet<i64>> = BTreeMap::new();
    let mut out: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    for r in read(bootstrap, topic, Isolation::Committed).await {
        if let Some(EventId::Insert(id)) = r.event {
            let k = (id / 1000) as usize;
            ids.entry(k).or_default().insert(id);
            out.entry(k).or_default().1 += 1;
        }
    }
    for (k, c) in &mut out {
        c.0 = ids[k].len();
    }
    out
}

/// Waits (up to 60 s) until batch `k` is complete in `read_committed`, then 2 s more (late
/// records of skipped batches would show by then); the last read.
async fn wait_batch(bootstrap: &str, topic: &str, k: usize) -> BTreeMap<usize, (usize, usize)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while batches(bootstrap, topic).await.get(&k).map(|c| c.0) != Some(BATCH as usize)
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    batches(bootstrap, topic).await
}

/// Batches `0..=upto` hold what [`EXPECTED`] says.
fn check_batches(row: &mut Row, when: &str, seen: &BTreeMap<usize, (usize, usize)>, upto: usize) {
    for k in 0..=upto {
        let (distinct, records) = seen.get(&k).copied().unwrap_or_default();
        let want = EXPECTED[k] * BATCH as usize;
        row.check(distinct == want && records == want, || {
            format!(
                "{when}: batch {}: {distinct} distinct inserts in {records} records, expected \
                 {want} once each",
                BATCHES[k]
            )
        });
    }
}

fn offsets_command(config: &Path, args: &[&str]) {
    let out = std::process::Command::new(binary())
        .args(["offsets", "reset"])
        .args(args)
        .arg("--config")
        .arg(config)
        .arg("p")
        .output()
        .expect("run offsets reset");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "offsets reset {args:?} failed ({}): {text}",
        out.status
    );
}

/// The fields of an offsets document a reset changes, for the report.
fn summary(doc: Option<&Document>) -> String {
    let Some(d) = doc else {
        return "no document".to_owned();
    };
    let field = |f: &str| d.get(f).map_or_else(|| "–".to_owned(), |v| v.to_string());
    format!(
        "epoch {}, commitSequence {}, resetSequence {}, clusterTime {}, progressOffset {}, \
         resumeToken {}",
        field("epoch"),
        field("commitSequence"),
        field("resetSequence"),
        field("clusterTime"),
        field("progressOffset"),
        if d.contains_key("resumeToken") {
            "set"
        } else {
            "none"
        }
    )
}

fn sequence(doc: &Document, field: &str) -> i64 {
    doc.get_i64(field).unwrap_or(0)
}

/// Stops `proc` gracefully (`when`: for the report).
fn stop(row: &mut Row, proc: &mut BridgeProc, when: &str) {
    let status = proc.stop(Duration::from_secs(30));
    row.check(status.success(), || {
        format!("graceful stop {when}: {status}")
    });
}

pub async fn offsets_reset(ctx: &Ctx) -> Vec<Row> {
    // (no update documents: the batches are inserts)
    let stage = super::stage(ctx, "eosreset", "eosreset", 0, "", "start_at = \"now\"\n").await;
    let (inst, cfg, client, coll) = stage.parts();
    let topic = cfg.topic();
    let mut row = Row::new("exactly once: offsets reset and --delete while stopped");
    // Batch 0, delivered; a graceful stop leaves the progress record and the offsets
    // document at the same position.
    let mut proc = stage.spawn("eosreset-0.log");
    cfg.wait_started(client, Duration::from_secs(60)).await;
    write_batch(coll, 0).await;
    let seen = wait_batch(&inst.kafka, &topic, 0).await;
    check_batches(&mut row, "before the first stop", &seen, 0);
    stop(&mut row, &mut proc, "after batch 0");
    reset_to_now(&stage, &mut row).await;
    reset_delete(&stage, &mut row).await;
    let seen = batches(&inst.kafka, &topic).await;
    check_batches(&mut row, "at the end", &seen, 4);
    say!(
        "eosreset: read_committed per batch (distinct, records): {}",
        (0..5)
            .map(|k| format!(
                "{}: {:?}",
                BATCHES[k],
                seen.get(&k).copied().unwrap_or_default()
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let delivered: usize = seen.values().map(|c| c.0).sum();
    let records: usize = seen.values().map(|c| c.1).sum();
    row.writes = Some(5 * BATCH as usize);
    row.delivered = Some(delivered);
    row.duplicates = Some(records - delivered);
    row.missing = Some(
        (0..5)
            .filter(|k| EXPECTED[*k] == 1)
            .map(|k| BATCH as usize - seen.get(&k).map_or(0, |c| c.0))
            .sum(),
    );
    row.runs = "2 resets, 3 starts".to_owned();
    row.seconds = stage.started.elapsed().as_secs_f64();
    vec![row]
}

/// With the bridge stopped: A written, `offsets reset --to-now`, started, B written: B once, A
/// never, and the start did not take the older progress record.
async fn reset_to_now(stage: &Stage, row: &mut Row) {
    let (inst, cfg, client, coll) = stage.parts();
    let topic = cfg.topic();
    let before = cfg.offsets(client).await.expect("offsets document");
    write_batch(coll, 1).await;
    offsets_command(&stage.config, &["--to-now"]);
    let reset = cfg.offsets(client).await.expect("offsets document");
    say!(
        "eosreset: offsets reset --to-now: {} → {}",
        summary(Some(&before)),
        summary(Some(&reset))
    );
    row.check(
        sequence(&reset, "resetSequence") == sequence(&before, "resetSequence") + 1,
        || {
            format!(
                "reset --to-now: resetSequence {} → {} (expected +1)",
                sequence(&before, "resetSequence"),
                sequence(&reset, "resetSequence")
            )
        },
    );
    write_batch(coll, 2).await;
    let mut proc = stage.spawn("eosreset-1.log");
    let seen = wait_batch(&inst.kafka, &topic, 2).await;
    check_batches(row, "after reset --to-now", &seen, 2);
    let ahead = proc
        .log_text()
        .contains("the progress topic is ahead of the offsets document");
    row.check(!ahead, || {
        "after reset --to-now the start took the older progress record (\"the progress topic is \
         ahead of the offsets document\")"
            .to_owned()
    });
    stop(row, &mut proc, "after batch B");
}

/// With the bridge stopped: C written, `offsets reset --delete` (a document with the epoch and
/// resetSequence raised and no position kept), started, D written: D once, C never.
async fn reset_delete(stage: &Stage, row: &mut Row) {
    let (inst, cfg, client, coll) = stage.parts();
    let topic = cfg.topic();
    let before = cfg.offsets(client).await.expect("offsets document");
    write_batch(coll, 3).await;
    offsets_command(&stage.config, &["--delete"]);
    let kept = cfg.offsets(client).await;
    say!(
        "eosreset: offsets reset --delete: {} → {}",
        summary(Some(&before)),
        summary(kept.as_ref())
    );
    row.check(
        kept.as_ref().is_some_and(|d| {
            d.get_i64("epoch").ok() == before.get_i64("epoch").ok().map(|e| e + 1)
                && sequence(d, "resetSequence") == sequence(&before, "resetSequence") + 1
                && !d.contains_key("resumeToken")
        }),
        || {
            format!(
                "reset --delete should keep a document with epoch and resetSequence + 1 and no \
                 position; before {before:?}, after {kept:?}"
            )
        },
    );
    let mut proc = stage.spawn("eosreset-2.log");
    cfg.wait_started(client, Duration::from_secs(60)).await;
    write_batch(coll, 4).await;
    let seen = wait_batch(&inst.kafka, &topic, 4).await;
    check_batches(row, "after reset --delete", &seen, 4);
    let ahead = proc
        .log_text()
        .contains("the progress topic is ahead of the offsets document");
    row.check(!ahead, || {
        "after reset --delete the start took the older progress record".to_owned()
    });
    stop(row, &mut proc, "at the end");
}
