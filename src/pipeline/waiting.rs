//! What a (re)starting pipeline waits for: a step of its start that waits on MongoDB (the
//! namespace check, taking its offsets document, opening the change stream) and takes long is
//! said in the log and in `/readyz`, instead of a silent start. A first step that does not
//! answer within seconds while `mongodb.uri` names a `replicaSet` has the hosts asked for their
//! set name, so a wrong `replicaSet` is named at once, not after server selection gives up.
//!
//! Why: a process started after a `kill -9` may find the server still busy with the killed
//! process's queries (a copy's `find` runs on at the server until it ends; the driver cannot
//! cancel what a dead process sent), or the server unreachable while the driver's server
//! selection retries. Either way the new process waits; it says on what, for how long, and
//! where to look.
//!
//! Invariants: it only watches. The step is the same future, polled by the same task, with the
//! same cancellation; nothing is retried or timed out here. The health's waiting mark is set
//! only while a slow step runs and cleared when it ends, whatever its outcome (the source sets
//! and clears the same mark for its `getMore`s, and does not run during these steps).

use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::observe::health::{PipelineHealth, now_ms};

/// How long a step runs before it is said (then again every [`REPEAT`]).
pub(super) const FIRST_NOTE: Duration = Duration::from_secs(10);

/// How often a step still running is said again.
const REPEAT: Duration = Duration::from_secs(30);

/// Runs `step` (named for people by `what`) for `pipeline`, saying so when it takes longer than
/// [`FIRST_NOTE`]: a warning then and every [`REPEAT`], `/readyz`'s "no answer from MongoDB"
/// line meanwhile, and how long it took once it ends.
pub(super) async fn said<F: Future>(
    pipeline: &str,
    health: &PipelineHealth,
    what: &str,
    step: F,
) -> F::Output {
    let started = Instant::now();
    tokio::pin!(step);
    let mut note_at = started + FIRST_NOTE;
    let mut said = false;
    let out = loop {
        tokio::select! {
            out = &mut step => break out,
            () = tokio::time::sleep_until(note_at) => {
                if !said {
                    health.awaiting_server(now_ms() - FIRST_NOTE.as_millis() as i64);
                    said = true;
                }
                warn!(pipeline, waited_s = started.elapsed().as_secs(),
                      "still waiting for MongoDB to answer: {what}. The server may be \
                       unreachable (the driver's server selection retries for \
                       `serverSelectionTimeoutMS`, 30 s by default, then the error is logged), \
                       or still running queries of a process that was killed (a copy's `find` \
                       runs on until it ends: `db.currentOp({{\"appName\": \"mongo-kafka-bridge\"}})` \
                       lists them, `db.killOp(opid)` ends one)");
                note_at += REPEAT;
            }
        }
    };
    if said {
        health.awaiting_server(0);
        info!(
            pipeline,
            waited_s = started.elapsed().as_secs(),
            "no longer waiting for MongoDB: {what} (an error, if any, follows)"
        );
    }
    out
}

/// How long the start's first MongoDB step runs before the hosts are probed for their
/// replica-set name ([`naming_a_set_mismatch`]).
const PROBE_AFTER: Duration = Duration::from_secs(3);

/// Runs `step`; when it has not ended within [`PROBE_AFTER`] and `mongodb.uri` names a
/// `replicaSet`, asks each host directly for its set name meanwhile, and logs a name that
/// differs as the cause at once. The driver otherwise selects no server until its
/// `serverSelectionTimeoutMS` (30 s by default) and the run's error names the mismatch only
/// after it. Only a log line: the step and its outcome are unchanged (a mismatch can be a
/// moment of a reconfiguration; the lifecycle's attempts decide).
pub(super) async fn naming_a_set_mismatch<F: Future>(
    ctx: &super::context::PipelineContext,
    step: F,
) -> F::Output {
    tokio::pin!(step);
    tokio::select! {
        out = &mut step => return out,
        () = tokio::time::sleep(PROBE_AFTER) => {}
    }
    let probe = crate::mongo::replica_set_mismatch(&ctx.config);
    tokio::pin!(probe);
    tokio::select! {
        out = &mut step => out,
        mismatch = &mut probe => {
            if let Some(mismatch) = mismatch {
                tracing::error!(pipeline = %ctx.pipeline.name, error = %ctx.report(&mismatch),
                    remedy = mismatch.remedy(),
                    "MongoDB does not answer as the configured replica set; the driver keeps \
                     selecting a server until serverSelectionTimeoutMS");
            }
            step.await
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_slow_step_is_marked_while_it_runs_and_unmarked_after() {
        let health = PipelineHealth::default();
        health.server_answer_bound_ms.store(1, Ordering::Relaxed);
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let watched = said("p", &health, "taking its offsets document", rx);
        tokio::pin!(watched);
        // GIVEN a step that has not answered for longer than the first note
        tokio::select! {
            _ = &mut watched => panic!("the step has not answered"),
            () = tokio::time::sleep(FIRST_NOTE + Duration::from_secs(1)) => {}
        }
        // THEN the pipeline is marked as waiting on the server
        assert!(health.awaiting_server_since_ms.load(Ordering::Relaxed) > 0);
        // AND once it answers, the step's own output comes back and the mark is gone
        tx.send(7).expect("the step waits");
        assert_eq!(watched.await, Ok(7));
        assert_eq!(health.awaiting_server_since_ms.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_quick_step_leaves_no_mark() {
        let health = PipelineHealth::default();
        assert_eq!(said("p", &health, "x", async { 3 }).await, 3);
        assert_eq!(health.awaiting_server_since_ms.load(Ordering::Relaxed), 0);
    }
}
