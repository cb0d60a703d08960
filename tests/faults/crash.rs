//! kill -9 of the bridge binary at random moments under a steady write load, restarting it each
//! time: nothing missing, per-document order of first occurrences intact, and duplicates only
//! of events after the position committed before each kill.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bson::Document;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::Ctx;
use crate::harness::*;
use crate::say;

const MAX_IN_FLIGHT: usize = 1000;
const RATE: u32 = 300;

pub async fn kill9(ctx: &Ctx) -> Vec<Row> {
    let started = Instant::now();
    let kills = if ctx.long { 200 } else { 20 };
    let inst = Instance::up(&ctx.script, &ctx.instance("kill9"), false);
    let mut cfg = Cfg::new(&inst.mongo_uri, &inst.kafka, "kill9");
    cfg.bridge = format!("max_in_flight_events = {MAX_IN_FLIGHT}");
    create_topic(&inst.kafka, &cfg.topic(), 3).await;
    let client = inst.client().await;
    let coll = client.database(&cfg.db).collection::<Document>(COLL);
    prepare_update_keys(&coll, 20).await;
    let consumer = Consumer::start(&inst.kafka, &cfg.topic(), 3);
    let path = cfg.write(&ctx.dir, "kill9.toml");
    let log = |i: usize| ctx.dir.join(format!("kill9-{i}.log"));
    let mut proc = BridgeProc::spawn(&path, log(0));
    cfg.wait_started(&client, Duration::from_secs(60)).await;
    let load = start_load(coll.clone(), RATE, 20, 0);
    let mut rng = StdRng::seed_from_u64(ctx.seed);
    // The committed clusterTime right after each kill: what the next instance resumes after.
    let mut committed: Vec<(u32, u32)> = Vec::new();
    let mut restarts = 0;
    let mut pids = vec![proc.pid()];
    let mut spontaneous: Vec<String> = Vec::new();
    let mut forced = 0;
    let mut k = 0;
    while k < kills {
        // Progress guard: when the committed position has not moved over the last five kills
        // (a slow server makes every instance die before its first commit), this instance
        // first commits progress (up to 30 s), then dies at its random moment.
        let stalled = committed.len() >= 5 && {
            let last = committed[committed.len() - 5..].to_vec();
            last.iter().all(|t| *t == last[0]) && load.acked.load(Ordering::Relaxed) > 0
        };
        if stalled {
            let from = committed.last().copied().unwrap_or((0, 0));
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline && proc.running() {
                let now = committed_time(&cfg.offsets(&client).await.unwrap_or_default());
                if now > from {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            forced += 1;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..1500))).await;
        if !proc.running() {
            // It stopped by itself: record why and who holds the pipeline, then go on (the
            // data checks below still apply; the row fails on this).
            let doc = cfg.offsets(&client).await.unwrap_or_default();
            let owner = doc.get_str("owner").unwrap_or("?").to_owned();
            let owner_pid: Option<u32> = owner.split(':').nth(1).and_then(|p| p.parse().ok());
            let who = match owner_pid.and_then(|p| pids.iter().position(|x| *x == p)) {
                Some(i) if i + 1 == pids.len() => "itself".to_owned(),
                Some(i) => format!("instance #{i} (pid {}, killed earlier)", pids[i]),
                None => "an unknown process".to_owned(),
            };
            let line = proc
                .log_text()
                .lines()
                .rev()
                .find(|l| l.starts_with("error:"))
                .unwrap_or("(no error line)")
                .to_owned();
            say!(
                "kill -9: instance #{} (pid {}) exited {:?} before kill {}: {line}; the offsets \
                 document (epoch {:?}) is owned by {who}",
                pids.len() - 1,
                proc.pid(),
                proc.exit,
                k + 1,
                doc.get_i64("epoch").ok()
            );
            spontaneous.push(format!(
                "instance #{} exited {:?} ({line}); epoch {:?} owned by {who}",
                pids.len() - 1,
                proc.exit,
                doc.get_i64("epoch").ok()
            ));
            restarts += proc.restarts();
            committed.push(committed_time(&doc));
            proc = BridgeProc::spawn(&path, log(1000 + pids.len()));
            pids.push(proc.pid());
            continue;
        }
        proc.kill9();
        k += 1;
        restarts += proc.restarts();
        let doc = cfg.offsets(&client).await.expect("offsets document");
        let ts = committed_time(&doc);
        committed.push(ts);
        if k % 10 == 0 {
            say!(
                "kill -9: {k} kills, {} writes so far, committed clusterTime {}.{}",
                load.acked.load(Ordering::Relaxed),
                ts.0,
                ts.1
            );
        }
        if k < kills {
            proc = BridgeProc::spawn(&path, log(k));
            pids.push(proc.pid());
        }
    }
    let (acked, errors) = load.stop().await;
    proc = BridgeProc::spawn(&path, log(kills));
    let restarted = Instant::now();
    let truth = Truth::read(&coll).await;
    let deadline = Instant::now() + Duration::from_secs(180);
    let done = loop {
        let (v, done) = consumer.wait_complete(&truth, Duration::from_secs(5)).await;
        if v.missing == 0 || Instant::now() > deadline {
            break done;
        }
        if !proc.running() {
            spontaneous.push(format!(
                "the last instance exited {:?} ({})",
                proc.exit,
                proc.log_tail(1)
            ));
            restarts += proc.restarts();
            let doc = cfg.offsets(&client).await.unwrap_or_default();
            committed.push(committed_time(&doc));
            proc = BridgeProc::spawn(&path, log(2000 + pids.len()));
            pids.push(proc.pid());
        }
    };
    // Late duplicates still on their way.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let v = verify(&truth, &consumer.snapshot());
    let status = proc.stop(Duration::from_secs(30));
    restarts += proc.restarts();
    v.assert_sound("kill -9");
    assert!(status.success(), "graceful stop after the kills: {status}");

    // Duplicates only of events after the position committed before some kill: an event read
    // c times must have a cluster time after the committed one of at least c - 1 kills (plus
    // pipeline restarts inside a process, which also replay from the committed position).
    let mut bad = Vec::new();
    for (event, copies) in &v.copies {
        if *copies <= 1 {
            continue;
        }
        let Some(t) = v.times.get(event) else {
            bad.push(format!(
                "{event:?}: {copies} copies, no mongo.cluster_time header"
            ));
            continue;
        };
        let replays = committed.iter().filter(|c| *c < t).count() + restarts;
        if copies - 1 > replays {
            bad.push(format!(
                "{event:?} at {}.{}: {copies} copies, but only {replays} kills/restarts after a commit before it",
                t.0, t.1
            ));
        }
    }
    bad.sort();
    bad.truncate(10);
    assert!(
        bad.is_empty(),
        "duplicates of events committed before a kill:\n{}",
        bad.join("\n")
    );
    // The coarse bound: each replay re-sends at most the in-flight window plus what was
    // delivered since the last commit (commit interval 200 ms at RATE writes/s, with slack).
    let bound = (kills + restarts) * (MAX_IN_FLIGHT + RATE as usize);
    assert!(
        v.duplicates <= bound,
        "{} duplicates > bound {bound}",
        v.duplicates
    );
    let recovery = done.duration_since(restarted).as_secs_f64();
    say!(
        "kill -9: {kills} kills ({forced} after waiting for a commit: the position had not moved \
         over five kills), {restarts} in-process restarts, {acked} writes ({errors} retried) → \
         {} events, {} delivered, {} missing, {} duplicates (bound {bound}), order intact; \
         caught up {recovery:.1} s after the last restart",
        v.writes,
        v.unique,
        v.missing,
        v.duplicates
    );
    let mut row = Row::new("kill -9 + restart").with_verdict(&v);
    row.check(spontaneous.is_empty(), || {
        format!(
            "{} instance(s) stopped without being killed: {}",
            spontaneous.len(),
            spontaneous.join("; ")
        )
    });
    row.runs = format!("{kills} kills");
    row.recovery_s = Some(recovery);
    row.seconds = started.elapsed().as_secs_f64();
    vec![row]
}

fn committed_time(doc: &Document) -> (u32, u32) {
    doc.get_timestamp("clusterTime")
        .map(|t| (t.time, t.increment))
        .unwrap_or((0, 0))
}
