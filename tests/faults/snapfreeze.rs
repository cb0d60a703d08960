//! `snapfreeze` (long form only): the MongoDB server frozen (SIGSTOP, then SIGCONT) for 30 s in
//! the middle of the initial snapshot of a collection seeded with `id_of(0..40 000)` (about
//! 26 700 documents: the kinds kept, booleans twice), while a writer updates, replaces, deletes
//! and inserts. On servers of its own (`scripts/services --name`).
//!
//! Asserted: the copy finishes (`lastSnapshot` in the offsets document) and the topic's
//! compacted view equals the collection (every document, its latest version); the copy repeats
//! documents only across a pipeline restart (each bounded by what was in flight); the bridge
//! process keeps running; `/readyz` answers 503 naming the pipeline for most of the freeze (a
//! frozen server answers nothing: `max_await_time_ms` + 2 s without an answer), and 200 again
//! after the thaw. Reported: pipeline restarts, the log's warnings, the seconds from the thaw
//! until the copy moves again and until `/readyz` is 200.
//!
//! The `_id`s are of the kinds every server under test pages correctly (`PAGED_EVERYWHERE`):
//! this scenario is about the freeze, `tests/faults/snapshot.rs` about the kinds.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bson::{Bson, Document, doc};
use mongodb::{Client, Collection};

use crate::common::bridge::BridgeProc;
use crate::common::collect::RawRecord;
use crate::common::kafka::create_topic_at;
use crate::common::mirror::{
    assert_mirror, compacted, copied, missing_from_mirror, settle_at, snapshot_lines,
};
use crate::common::observe::fetch;
use crate::common::servers::Instance;
use crate::common::snapshot::{PAGED_EVERYWHERE, seed_kinds, write_while};
use crate::exactly_once::evidence::warnings;
use crate::samples::{Sample, Sampler, first_ready_after, not_ready_between};
use crate::say;
use crate::suite::{Ctx, Row};

const DOCS: usize = 40_000;
const BATCH: i64 = 500;
const IN_FLIGHT: usize = 500;
/// Copied documents a pipeline restart may repeat: the in-flight records, one batch, the
/// source channel.
const REPEAT_BOUND_PER_RESTART: usize = IN_FLIGHT + BATCH as usize + 256;
/// The copy is frozen once it committed this many documents (of [`DOCS`]).
const FREEZE_AT: i64 = 2_000;
const NAME: &str = "snapfreeze";
const WAIT: Duration = Duration::from_secs(300);

/// The scenario's servers, collection and bridge.
struct Setup {
    inst: Instance,
    client: Client,
    coll: Collection<Document>,
    ids: Vec<Bson>,
    /// `snapfreeze.toml` in the run's directory.
    config: PathBuf,
}

/// Servers of its own, the topic (3 partitions), [`DOCS`] seeded documents and the snapshot
/// pipeline's configuration (batches of [`BATCH`], [`IN_FLIGHT`] records in flight at most).
async fn setup(ctx: &Ctx) -> Setup {
    let inst = ctx.up(NAME, &[]);
    create_topic_at(&inst.kafka, NAME, 3, &[]).await;
    let client = inst.client().await;
    let coll = client.database(NAME).collection::<Document>("items");
    let ids = seed_kinds(&coll, DOCS, &PAGED_EVERYWHERE).await;
    let lines = snapshot_lines(NAME, &format!("snapshot_batch_size = {BATCH}\n"));
    let text = inst.config(NAME, NAME, Some("items"), &lines).replace(
        "[bridge]\n",
        &format!("[bridge]\nmax_in_flight_events = {IN_FLIGHT}\n"),
    );
    let config = ctx.dir.join("snapfreeze.toml");
    std::fs::write(&config, text).expect("write the configuration");
    Setup {
        inst,
        client,
        coll,
        ids,
        config,
    }
}

/// The offsets document once `check` holds, and when; `None` after `timeout`. Read errors
/// (a connection the freeze broke) are retried.
async fn poll_offsets(
    client: &Client,
    timeout: Duration,
    check: impl Fn(&Document) -> bool,
) -> Option<(Document, Instant)> {
    let offsets = client
        .database(&format!("{NAME}_offsets"))
        .collection::<Document>("offsets");
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(d)) = offsets.find_one(doc! { "_id": NAME }).await
            && check(&d)
        {
            return Some((d, Instant::now()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

fn finished(d: &Document) -> bool {
    d.contains_key("lastSnapshot") && !d.contains_key("snapshot")
}

/// What the freeze showed.
struct Freeze {
    frozen_at: Instant,
    thawed_at: Instant,
    /// Committed copy progress just before the freeze.
    copied_before: i64,
    /// `/readyz` 10 s into the freeze.
    mid: Option<(u16, String)>,
    /// The log's lines before the freeze.
    lines_before: usize,
}

/// Freezes MongoDB for `freeze` once the copy committed [`FREEZE_AT`] documents, then thaws it.
async fn freeze_mid_copy(s: &Setup, proc: &BridgeProc, addr: &str, freeze: Duration) -> Freeze {
    let (d, _) = poll_offsets(&s.client, WAIT, |d| {
        copied(d) >= FREEZE_AT || d.contains_key("lastSnapshot")
    })
    .await
    .expect("the copy committed no progress within 300 s");
    let copied_before = copied(&d);
    assert!(
        !d.contains_key("lastSnapshot"),
        "the copy finished before the freeze"
    );
    let lines_before = proc.log_text().lines().count();
    s.inst.services(&["freeze", "mongo"]);
    let frozen_at = Instant::now();
    say!("snapfreeze: MongoDB SIGSTOPped for {freeze:?} at {copied_before} documents copied");
    let mid_at = Duration::from_secs(10).min(freeze / 2);
    tokio::time::sleep(mid_at).await;
    let mid = fetch(addr, "/readyz");
    tokio::time::sleep(freeze - mid_at).await;
    s.inst.services(&["thaw", "mongo"]);
    Freeze {
        frozen_at,
        thawed_at: Instant::now(),
        copied_before,
        mid,
        lines_before,
    }
}

/// Copied records, the documents among them, and the records (copied or streamed) of the
/// topic's documents: distinct keys, and repeats of an identical record.
struct Counts {
    copies: usize,
    copied_docs: usize,
    keys: usize,
    repeated_events: usize,
}

fn counts(records: &[RawRecord]) -> Counts {
    use std::collections::HashSet;
    let op = |r: &RawRecord| r.header("mongo.operation_type").unwrap_or_default();
    let copies: Vec<&RawRecord> = records.iter().filter(|r| op(r) == "snapshot").collect();
    let copied_docs: HashSet<&Vec<u8>> = copies.iter().filter_map(|r| r.key.as_ref()).collect();
    let events: Vec<&RawRecord> = records
        .iter()
        .filter(|r| !op(r).starts_with("snapshot") && op(r) != "gap")
        .collect();
    let distinct: HashSet<_> = events.iter().map(|r| (&r.key, &r.value)).collect();
    Counts {
        copies: copies.len(),
        copied_docs: copied_docs.len(),
        keys: compacted(records).len(),
        repeated_events: events.len() - distinct.len(),
    }
}

/// Readiness during the freeze (from 5 s in: the bound is 2.2 s) and after the thaw.
fn check_readiness(row: &mut Row, samples: &[Sample], f: &Freeze) -> (usize, usize) {
    let settled = f.frozen_at + Duration::from_secs(5);
    let not_ready = not_ready_between(samples, settled, f.thawed_at);
    let during = samples
        .iter()
        .filter(|s| s.at >= settled && s.at <= f.thawed_at)
        .count();
    row.check(not_ready > 0 && not_ready * 2 >= during, || {
        format!(
            "/readyz stayed 200 while MongoDB was frozen ({not_ready}/{during} samples not ready)"
        )
    });
    let names = f
        .mid
        .as_ref()
        .is_some_and(|(c, b)| *c != 200 && b.contains(&format!("pipeline {NAME}")));
    row.check(names, || {
        format!("/readyz 10 s into the freeze: {:?}", f.mid)
    });
    row.check(first_ready_after(samples, f.thawed_at).is_some(), || {
        "/readyz never 200 again after the thaw".to_owned()
    });
    (not_ready, during)
}

/// What the run left: the writer's writes, the topic, the samples, the bridge's log since
/// the freeze, its restarts, and when the copy moved again and finished.
struct Outcome {
    writes: usize,
    records: Vec<RawRecord>,
    samples: Vec<Sample>,
    warnings: Vec<String>,
    restarts: usize,
    /// Still running at the end, and stopped gracefully.
    stayed_up: bool,
    /// Seconds from the thaw until the committed copy progress moved by two batches.
    moved: Option<f64>,
    done: bool,
}

/// Runs the bridge and a writer, freezes MongoDB for `freeze` in the middle of the copy, and
/// waits for the copy to finish and the topic to settle.
async fn run(ctx: &Ctx, s: &Setup, freeze: Duration) -> (Freeze, Outcome) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let writer = tokio::spawn(write_while(s.coll.clone(), s.ids.clone(), stop_rx));
    let mut proc = BridgeProc::spawn(&s.config, ctx.dir.join("snapfreeze.log"));
    let addr = proc.metrics_addr(Duration::from_secs(30));
    let sampler = Sampler::start(Some(proc.pid()), addr.clone());
    let f = freeze_mid_copy(s, &proc, &addr, freeze).await;
    let moved = poll_offsets(&s.client, WAIT, |d| {
        copied(d) >= f.copied_before + 2 * BATCH || finished(d)
    })
    .await
    .map(|(_, at)| at.duration_since(f.thawed_at).as_secs_f64());
    let done = poll_offsets(&s.client, WAIT, finished).await.is_some();
    stop_tx.send(true).unwrap();
    let writes = writer.await.unwrap();
    let records = settle_at(&s.inst.kafka, &s.coll, NAME).await;
    let samples = sampler.finish();
    let log = proc.log_text();
    let since: Vec<&str> = log.lines().skip(f.lines_before).collect();
    let running = proc.running();
    let stayed_up = running && proc.stop(Duration::from_secs(30)).success();
    let outcome = Outcome {
        writes,
        records,
        samples,
        warnings: warnings(&since.join("\n")),
        restarts: proc.restarts(),
        stayed_up,
        moved,
        done,
    };
    (f, outcome)
}

pub async fn mongo_frozen_mid_copy(ctx: &Ctx) -> Vec<Row> {
    let started = Instant::now();
    // GIVEN a copy of 40 000 documents under a writer
    let s = setup(ctx).await;
    // WHEN MongoDB is frozen for 30 s in the middle of the copy, then thawed
    let (f, o) = run(ctx, &s, Duration::from_secs(30)).await;
    // THEN the copy finishes, the topic mirrors the collection, and /readyz told
    let missing = missing_from_mirror(&s.coll, &o.records).await;
    let c = counts(&o.records);
    let mut row = Row::new("MongoDB frozen 30 s mid-copy (SIGSTOP)");
    let (not_ready, during) = check_readiness(&mut row, &o.samples, &f);
    let ready_again = first_ready_after(&o.samples, f.thawed_at)
        .map(|t| t.duration_since(f.thawed_at).as_secs_f64());
    let (restarts, repeated) = (o.restarts, c.copies - c.copied_docs);
    say!(
        "snapfreeze: {} documents, {} writes, {} copied records of {} documents \
         ({repeated} repeated), {} document keys, {missing} missing, {} repeated events, \
         {restarts} pipeline restart(s); /readyz not 200 in {not_ready}/{during} samples from 5 s \
         into the freeze, 10 s in: {:?}; the copy moved again {:?} s and /readyz was 200 again \
         {ready_again:?} s after the thaw; the log's warnings and errors since the freeze:\n  {}",
        s.ids.len(),
        o.writes,
        c.copies,
        c.copied_docs,
        c.keys,
        c.repeated_events,
        f.mid,
        o.moved,
        o.warnings.join("\n  ")
    );
    row.check(o.stayed_up, || {
        "the bridge exited, or did not stop gracefully".into()
    });
    row.check(o.moved.is_some(), || {
        "the copy did not move within 300 s after the thaw".into()
    });
    row.check(o.done, || "the copy never finished".into());
    row.check(repeated <= restarts * REPEAT_BOUND_PER_RESTART, || {
        format!("{repeated} documents copied twice with {restarts} pipeline restart(s)")
    });
    row.check(missing == 0, || {
        format!("{missing} documents missing in the mirror")
    });
    assert_mirror(&s.coll, &o.records).await;
    row.writes = Some(o.writes);
    row.delivered = Some(c.keys);
    row.missing = Some(missing);
    row.duplicates = Some(repeated + c.repeated_events);
    let runs = format!(
        "{} docs, frozen at {} copied, {restarts} restart(s)",
        s.ids.len(),
        f.copied_before
    );
    row.finish(runs, o.moved, started);
    vec![row]
}
