//! Two instances on one pipeline: a second binary starts on the same configuration while the
//! first runs under load. The offsets document never regresses, the older instance exits
//! non-zero with the fenced error, and nothing is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bson::{Document, Timestamp};
use mongodb::Client;

use crate::common::bridge::BridgeProc;
use crate::common::load::{Truth, start_load};
use crate::say;
use crate::stage::Stage;
use crate::suite::{Ctx, Row};

/// One sample of the offsets document.
#[derive(Debug, Clone)]
struct Seen {
    epoch: i64,
    cluster_time: Option<Timestamp>,
    position_time: Option<Timestamp>,
    events: i64,
}

/// A timestamp as (seconds, increment); (0, 0) for none.
fn ts(t: Option<Timestamp>) -> (u32, u32) {
    t.map_or((0, 0), |t| (t.time, t.increment))
}

pub async fn two_instances(ctx: &Ctx) -> Vec<Row> {
    let stage = Stage::up(ctx, "fence", "fence", 20, |_| {}).await;
    let (_, cfg, client, coll) = stage.parts();
    let consumer = stage.consumer();
    let mut a = stage.spawn("fence-a.log");
    cfg.wait_started(client, Duration::from_secs(60)).await;
    // Poll the offsets document all along.
    let sampler = Sampler::start(client, &cfg.offsets_db(), &cfg.pipeline);
    let load = start_load(coll.clone(), 250, 20, 0);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let b = stage.spawn("fence-b.log");
    let b_started = Instant::now();
    wait_fenced(&mut a).await;
    let fenced_after = b_started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (acked, errors) = load.stop().await;
    let truth = Truth::read(coll).await;
    let (v, _) = consumer
        .wait_complete(&truth, Duration::from_secs(120))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = sampler.stop().await;
    let (a_log, a_outcome) = stop_both(a, b);
    v.assert_sound("two instances");
    // Never a regression: epoch, clusterTime and positionTime non-decreasing over the whole
    // run; eventsCommitted non-decreasing within an epoch.
    let (mut problems, position_steps) = regressions(&seen);
    let epochs: std::collections::BTreeSet<i64> = seen.iter().map(|s| s.epoch).collect();
    problems.truncate(10);
    assert!(
        problems.is_empty(),
        "the offsets document regressed:\n{}",
        problems.join("\n")
    );
    assert!(
        epochs.contains(&1) && epochs.contains(&2) && epochs.len() == 2,
        "epochs seen: {epochs:?}"
    );
    let fenced_line = a_log
        .lines()
        .rev()
        .find(|l| l.to_ascii_lowercase().contains("fenced"))
        .unwrap_or_default();
    say!(
        "two instances: A was fenced {fenced_after:.1} s after B started and {a_outcome}; its last fenced \
         line: {}",
        fenced_line.chars().take(300).collect::<String>()
    );
    say!(
        "two instances: {acked} writes ({errors} retried), {} events, {} delivered, {} missing, \
         {} duplicates; {} offsets samples over epochs {epochs:?}, none regressed (positionTime \
         stepped back within one second {position_steps} times)",
        v.writes,
        v.unique,
        v.missing,
        v.duplicates,
        seen.len()
    );
    let mut row = Row::new("two instances, one pipeline (fencing)").with_verdict(&v);
    row.finish(
        format!("2 instances, {} offsets samples", seen.len()),
        Some(fenced_after),
        stage.started,
    );
    vec![row]
}

/// The pipeline's offsets document, sampled every 50 ms in a task until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Seen>>,
}

impl Sampler {
    fn start(client: &Client, offsets_db: &str, pipeline: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let coll = client
            .database(offsets_db)
            .collection::<Document>("offsets");
        let pipeline = pipeline.to_owned();
        let task = tokio::spawn(async move {
            let mut seen = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                if let Ok(Some(d)) = coll.find_one(bson::doc! { "_id": &pipeline }).await {
                    seen.push(Seen {
                        epoch: d.get_i64("epoch").unwrap_or(-1),
                        cluster_time: d.get_timestamp("clusterTime").ok(),
                        position_time: d.get_timestamp("positionTime").ok(),
                        events: d.get_i64("eventsCommitted").unwrap_or(-1),
                    });
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            seen
        });
        Self { stop, task }
    }

    /// Stops the sampling; every sample.
    async fn stop(self) -> Vec<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("poller")
    }
}

/// Waits (60 s) until `a` is fenced: it exits or logs the fenced error (an instance may stand
/// by after being fenced instead of exiting).
async fn wait_fenced(a: &mut BridgeProc) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while a.running()
        && !a.log_text().to_ascii_lowercase().contains("fenced")
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stops the newer instance `b`, then the older `a` if it stands by: only now, after B (so it
/// cannot take the pipeline back in between). Asserts A was fenced and B kept running to a
/// graceful stop; A's log and what became of A.
fn stop_both(mut a: BridgeProc, mut b: BridgeProc) -> (String, String) {
    let b_running = b.running();
    let b_status = b.stop(Duration::from_secs(30));
    let a_standing_by = a.running();
    let a_status = if a_standing_by {
        a.stop(Duration::from_secs(30))
    } else {
        a.exit.expect("A exited")
    };
    let a_log = a.log_text();
    let a_outcome = if a_standing_by {
        format!("stood by after the fence, then stopped on SIGTERM ({a_status})")
    } else {
        format!("exited {a_status}")
    };
    if !a_standing_by {
        assert!(
            !a_status.success(),
            "the fenced instance exited {a_status}, expected non-zero"
        );
    }
    assert!(
        a_log.to_ascii_lowercase().contains("fenced"),
        "no fenced error in the older instance's log:\n{}",
        a.log_tail(20)
    );
    assert!(b_running, "the newer instance stopped:\n{}", b.log_tail(20));
    assert!(
        b_status.success(),
        "newer instance's graceful stop: {b_status}"
    );
    (a_log, a_outcome)
}

/// The regressions between consecutive samples (epoch, clusterTime or positionTime going
/// back; eventsCommitted going back within an epoch), and how often positionTime stepped back
/// within one second.
fn regressions(seen: &[Seen]) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut position_steps = 0;
    for w in seen.windows(2) {
        let (p, n) = (&w[0], &w[1]);
        if n.epoch < p.epoch {
            problems.push(format!("epoch {} → {}", p.epoch, n.epoch));
        }
        if ts(n.cluster_time) < ts(p.cluster_time) {
            problems.push(format!(
                "clusterTime {:?} → {:?} (epoch {} → {})",
                ts(p.cluster_time),
                ts(n.cluster_time),
                p.epoch,
                n.epoch
            ));
        }
        // positionTime of a watermark is the bridge's clock in whole seconds (increment 0),
        // so after an event at (s, i > 0) a watermark in the same second reads (s, 0): a
        // known sub-second step back, reported but not failed; a whole second back fails.
        if ts(n.position_time) < ts(p.position_time) {
            position_steps += 1;
        }
        if ts(n.position_time).0 < ts(p.position_time).0 {
            problems.push(format!(
                "positionTime {:?} → {:?} (epoch {} → {})",
                ts(p.position_time),
                ts(n.position_time),
                p.epoch,
                n.epoch
            ));
        }
        if n.epoch == p.epoch && n.events < p.events {
            problems.push(format!(
                "eventsCommitted {} → {} in epoch {}",
                p.events, n.events, n.epoch
            ));
        }
    }
    (problems, position_steps)
}
