//! `eostimeout`: the transaction coordinator times a transaction out. The bridge process is
//! paused (SIGSTOP) for 20 s under a steady write load while Kafka runs on, with
//! `transaction.timeout.ms = 8000`. The pause lands while a transaction is open, through the
//! `transaction_open` fail point (`src/failpoint.rs`): its command stops the bridge itself
//! right after a record of an open transaction was enqueued, so the landing never depends on
//! timing. The coordinator aborts the transaction the pause left open
//! (Kafka's `transaction.abort.timed.out.transaction.cleanup.interval.ms`, 1 s on the test
//! broker) and bumps the producer's epoch, so the woken producer's next request is refused.
//! The process must recover on its own (its pipeline restarts inside it and commits again),
//! and every event is in the topic once for `read_committed`, for a fresh read and for a
//! consumer that read throughout.
//!
//! Apache Kafka only: this is the path the stand-ins could not carry.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::bridge::{BridgeProc, signal};
use crate::common::kafka::Isolation;
use crate::common::load::{Truth, start_load};
use crate::common::records::{Consumer, read};
use crate::exactly_once::checks::{
    aborted, check_exactly_once, check_follower, wait_commit_after, wait_committed,
};
use crate::exactly_once::evidence::transactions;
use crate::say;
use crate::stage::Stage;
use crate::suite::{Ctx, Row};

const TRANSACTION_TIMEOUT_MS: u64 = 8000;
const PAUSE: Duration = Duration::from_secs(20);
const RATE: u32 = 150;

pub async fn coordinator_timeout(ctx: &Ctx) -> Vec<Row> {
    let mut row = Row::new(&format!(
        "exactly once: coordinator timed a transaction out (bridge paused {} s, \
         transaction.timeout.ms {TRANSACTION_TIMEOUT_MS})",
        PAUSE.as_secs()
    ));
    let timeout = format!("\"transaction.timeout.ms\" = {TRANSACTION_TIMEOUT_MS}");
    let stage = super::stage(ctx, "eostimeout", "eostimeout", 20, &timeout, "").await;
    let (inst, cfg, client, coll) = stage.parts();
    let topic = cfg.topic();
    let follower = Consumer::read_committed(&inst.kafka, &topic);
    let marker = ctx.dir.join("eostimeout.paused");
    let _ = std::fs::remove_file(&marker);
    // The 200th record enqueued in an open transaction: over a second into the load, after
    // the first commits.
    let pause = format!(
        "transaction_open@200=touch {}; kill -STOP $PPID",
        marker.display()
    );
    let mut proc = stage.spawn_with(
        "eostimeout.log",
        &[(mongo_kafka_bridge::failpoint::VARIABLE, pause.as_str())],
    );
    let addr = proc.metrics_addr(Duration::from_secs(30));
    cfg.wait_started(client, Duration::from_secs(60)).await;
    // GIVEN a transaction open (150 writes/s) when the bridge stops itself
    let before = transactions(&addr).unwrap_or_default();
    let load = start_load(coll.clone(), RATE, 20, 0);
    let recovered = pause_once(&stage, &mut proc, &marker, &mut row).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (acked, errors) = load.stop().await;
    let truth = Truth::read(coll).await;
    wait_committed(&inst.kafka, &topic, &truth, Duration::from_secs(180)).await;
    row.check(proc.running(), || {
        format!("the bridge exited: {:?}\n{}", proc.exit, proc.log_tail(10))
    });
    let after = transactions(&addr).unwrap_or_default();
    let timed_out = proc
        .log_text()
        .lines()
        .filter(|l| l.contains("restarting from the committed position"))
        .map(|l| l.chars().take(300).collect::<String>())
        .collect::<Vec<_>>();
    let status = proc.stop(Duration::from_secs(30));
    row.check(status.success(), || format!("graceful stop: {status}"));
    // AND exactly once for read_committed, fresh and throughout
    let committed = read(&inst.kafka, &topic, Isolation::Committed).await;
    let uncommitted = read(&inst.kafka, &topic, Isolation::Uncommitted).await;
    let v = check_exactly_once(&mut row, &truth, &committed);
    check_follower(&mut row, &follower, &committed).await;
    let aborted = aborted(&uncommitted, &committed).len();
    // The aborted transaction may have no record on the broker (librdkafka had not sent its
    // batch when the process stopped, and the abort purges it): the bridge's count of aborted
    // transactions is the evidence, the aborted records on the topic an illustration.
    row.check(after.1 > before.1, || {
        format!(
            "no aborted transaction (committed, aborted: {before:?} -> {after:?}): the pause \
             did not time the open transaction out"
        )
    });
    say!(
        "eostimeout: committing again {recovered:.1} s (at most) after SIGCONT; transactions (committed, \
         aborted) {before:?} -> {after:?}; {aborted} aborted records; {acked} writes ({errors} \
         retried), {} events, {} delivered, {} missing, {} duplicates; restarts: {}",
        v.writes,
        v.unique,
        v.missing,
        v.duplicates,
        if timed_out.is_empty() {
            "none".to_owned()
        } else {
            timed_out.join("\n  ")
        }
    );
    let mut row = row.with_verdict(&v);
    row.finish(
        format!("1 pause of {} s, a transaction open", PAUSE.as_secs()),
        Some(recovered),
        stage.started,
    );
    vec![row]
}

/// Waits for the fail point to stop the bridge (within 60 s), leaves it stopped longer than
/// `transaction.timeout.ms`, and wakes it: it commits again on its own (within 120 s). The
/// seconds from the wake-up until then.
async fn pause_once(stage: &Stage, proc: &mut BridgeProc, marker: &Path, row: &mut Row) -> f64 {
    let (_, cfg, client, _) = stage.parts();
    // WHEN the bridge is paused with a transaction open, longer than transaction.timeout.ms
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(marker.exists() && stopped(proc.pid())) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    row.check(stopped(proc.pid()), || {
        format!(
            "the transaction_open fail point did not stop the bridge within 60 s\n{}",
            proc.log_tail(10)
        )
    });
    tokio::time::sleep(PAUSE).await;
    let frozen_at = cfg.commit_sequence(client).await;
    signal(proc.pid(), "CONT");
    let woken = Instant::now();
    // THEN it commits again on its own
    wait_commit_after(cfg, client, proc, frozen_at).await;
    let recovered = woken.elapsed().as_secs_f64();
    row.check(cfg.commit_sequence(client).await > frozen_at, || {
        format!(
            "no commit within 120 s after the pause\n{}",
            proc.log_tail(10)
        )
    });
    recovered
}

/// Whether `pid` is stopped (state `T` in `/proc/<pid>/stat`).
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, after) = stat.rsplit_once(')')?;
            after.trim_start().chars().next()
        })
        == Some('T')
}
