//! kill -9 of the bridge binary at random moments under a steady write load, restarting it each
//! time: nothing missing, per-document order of first occurrences intact, and duplicates only
//! of events after the position committed before each kill.
//!
//! The kills run in blocks, each on fresh servers (its own `scripts/services` instance, topic,
//! consumer and verification): the short form is one block of 20 kills, the long form 10
//! blocks of 50 (`MKB_FAULTS_KILL_BLOCKS=N` for N blocks: 20 for 1 000 kills). Fresh servers every 50 kills because neither stand-in stays fast: SecantusDB
//! slowed from 150 to 10 writes/s after ~60 kills in an earlier long run, and noida-db keeps
//! every record in memory. One result row per block.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::load::{Load, Truth, start_load};
use crate::common::mongo::committed_time;
use crate::common::records::Consumer;
use crate::common::verdict::{Verdict, verify};
use crate::run::{Run, stalled};
use crate::say;
use crate::stage::Stage;
use crate::suite::{Ctx, Row};

const MAX_IN_FLIGHT: usize = 1000;
const RATE: u32 = 300;

pub async fn kill9(ctx: &Ctx) -> Vec<Row> {
    let (blocks, kills) = if ctx.long { (10, 50) } else { (1, 20) };
    let blocks = std::env::var("MKB_FAULTS_KILL_BLOCKS")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(blocks);
    let mut rows = Vec::new();
    for b in 0..blocks {
        let label = if blocks == 1 {
            "kill -9 + restart".to_owned()
        } else {
            format!("kill -9 + restart (block {}/{blocks})", b + 1)
        };
        rows.push(block(ctx, b, kills, &label).await);
    }
    rows
}

/// One block: `kills` kills on a fresh server instance, then the catch-up and the checks.
async fn block(ctx: &Ctx, b: usize, kills: usize, label: &str) -> Row {
    let name = format!("kill9-{b}");
    let stage = Stage::up(ctx, &name, "kill9", 20, |cfg| {
        cfg.bridge = format!("max_in_flight_events = {MAX_IN_FLIGHT}");
    })
    .await;
    let consumer = stage.consumer();
    let mut run = Crash::start(ctx, name, &stage).await;
    let load = start_load(stage.coll.clone(), RATE, 20, 0);
    // Block 0 uses the seed itself: the short form kills at the moments it always did.
    let mut rng = StdRng::seed_from_u64(ctx.seed.wrapping_add(b as u64));
    run.kill_loop(kills, &load, &mut rng).await;
    let (acked, errors) = load.stop().await;
    run.respawn();
    let restarted = Instant::now();
    let truth = Truth::read(&stage.coll).await;
    let done = run.catch_up(&consumer, &truth).await;
    // Late duplicates still on their way.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let v = verify(&truth, &consumer.snapshot());
    let status = run.run.proc.stop(Duration::from_secs(30));
    run.restarts += run.run.proc.restarts();
    let recovery = done.duration_since(restarted).as_secs_f64();
    let bound = (kills + run.restarts) * (MAX_IN_FLIGHT + RATE as usize);
    say!(
        "{}: {kills} kills ({} after waiting for a commit: the position had not moved over \
         five kills), {} in-process restarts, {acked} writes ({errors} retried) → {} events, \
         {} delivered, {} missing, {} duplicates (bound {bound}); caught up {recovery:.1} s \
         after the last restart",
        run.run.name,
        run.run.forced,
        run.restarts,
        v.writes,
        v.unique,
        v.missing,
        v.duplicates
    );
    let mut row = Row::new(label).with_verdict(&v);
    run.check(&mut row, &v, bound);
    row.check(status.success(), || {
        format!("graceful stop after the kills: {status}")
    });
    row.finish(format!("{kills} kills"), Some(recovery), stage.started);
    row
}

/// The bridge processes of one block, and what their kills left behind.
struct Crash<'a> {
    run: Run<'a>,
    /// The committed clusterTime right after each kill or exit: what the next instance
    /// resumes after.
    committed: Vec<(u32, u32)>,
    /// Pipeline restarts inside a process (which also replay from the committed position).
    restarts: usize,
    /// Instances that stopped without being killed.
    spontaneous: Vec<String>,
}

impl<'a> Crash<'a> {
    /// Starts the first instance and waits for its first commit.
    async fn start(ctx: &Ctx, name: String, stage: &'a Stage) -> Self {
        Self {
            run: Run::start(ctx, name, stage).await,
            committed: Vec::new(),
            restarts: 0,
            spontaneous: Vec::new(),
        }
    }

    fn respawn(&mut self) {
        self.run.respawn();
    }

    /// Kills at random moments, restarting after each but the last.
    async fn kill_loop(&mut self, kills: usize, load: &Load, rng: &mut StdRng) {
        let mut k = 0;
        while k < kills {
            if self.stalled(load) {
                self.wait_for_commit().await;
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(200..1500))).await;
            if !self.run.proc.running() {
                self.exited_by_itself(&format!("before kill {}", k + 1))
                    .await;
                self.respawn();
                continue;
            }
            self.run.proc.kill9();
            k += 1;
            self.restarts += self.run.proc.restarts();
            let doc = self.run.stage.cfg.offsets(&self.run.stage.client).await;
            let ts = committed_time(&doc.expect("offsets document"));
            self.committed.push(ts);
            if k % 10 == 0 {
                say!(
                    "{}: {k} kills, {} writes so far, committed clusterTime {}.{}",
                    self.run.name,
                    load.acked.load(Ordering::Relaxed),
                    ts.0,
                    ts.1
                );
            }
            if k < kills {
                self.respawn();
            }
        }
    }

    /// Progress guard: the committed position has not moved over the last five kills (a slow
    /// server makes every instance die before its first commit).
    fn stalled(&self, load: &Load) -> bool {
        stalled(&self.committed) && load.acked.load(Ordering::Relaxed) > 0
    }

    /// Lets the running instance commit progress first (up to 30 s); it then dies at its
    /// random moment.
    async fn wait_for_commit(&mut self) {
        let from = self.committed.last().copied().unwrap_or((0, 0));
        self.run.wait_for_commit(from, committed_time).await;
    }

    /// The instance stopped by itself: records why and who holds the pipeline (the data
    /// checks still apply; the row fails on this).
    async fn exited_by_itself(&mut self, when: &str) {
        let doc = self.run.offsets().await;
        let owner = doc.get_str("owner").unwrap_or("?").to_owned();
        let owner_pid: Option<u32> = owner.split(':').nth(1).and_then(|p| p.parse().ok());
        let who = match owner_pid.and_then(|p| self.run.pids.iter().position(|x| *x == p)) {
            Some(i) if i + 1 == self.run.pids.len() => "itself".to_owned(),
            Some(i) => format!("instance #{i} (pid {}, killed earlier)", self.run.pids[i]),
            None => "an unknown process".to_owned(),
        };
        let text = self.run.proc.log_text();
        let line = text
            .lines()
            .rev()
            .find(|l| l.starts_with("error:"))
            .unwrap_or("(no error line)");
        let epoch = doc.get_i64("epoch").ok();
        let instance = self.run.pids.len() - 1;
        say!(
            "{}: instance #{instance} (pid {}) exited {:?} {when}: {line}; the offsets document \
             (epoch {epoch:?}) is owned by {who}",
            self.run.name,
            self.run.proc.pid(),
            self.run.proc.exit,
        );
        self.spontaneous.push(format!(
            "instance #{instance} exited {:?} {when} ({line}); epoch {epoch:?} owned by {who}",
            self.run.proc.exit,
        ));
        self.restarts += self.run.proc.restarts();
        self.committed.push(committed_time(&doc));
    }

    /// Waits (up to 180 s) until the consumer read every event of `truth`, restarting an
    /// instance that stops by itself; when the last missing event arrived.
    async fn catch_up(&mut self, consumer: &Consumer, truth: &Truth) -> Instant {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let (v, done) = consumer.wait_complete(truth, Duration::from_secs(5)).await;
            if v.missing == 0 || Instant::now() > deadline {
                return done;
            }
            if !self.run.proc.running() {
                self.exited_by_itself("after the last kill").await;
                self.respawn();
            }
        }
    }

    /// The data checks of the block, and no instance stopped by itself.
    fn check(&self, row: &mut Row, v: &Verdict, bound: usize) {
        row.check_sound(v);
        let bad = replayed_too_often(v, &self.committed, self.restarts);
        row.check(bad.is_empty(), || {
            format!(
                "duplicates of events committed before a kill: {}",
                bad.join("; ")
            )
        });
        // The coarse bound: each replay re-sends at most the in-flight window plus what was
        // delivered since the last commit (commit interval 200 ms at RATE writes/s, with slack).
        row.check(v.duplicates <= bound, || {
            format!("{} duplicates > bound {bound}", v.duplicates)
        });
        row.check(self.spontaneous.is_empty(), || {
            format!(
                "{} instance(s) stopped without being killed: {}",
                self.spontaneous.len(),
                self.spontaneous.join("; ")
            )
        });
    }
}

/// Duplicates only of events after the position committed before some kill: an event read c
/// times must have a cluster time after the committed one of at least c - 1 kills (plus
/// pipeline restarts inside a process, which also replay from the committed position). The
/// first 10 violations.
fn replayed_too_often(v: &Verdict, committed: &[(u32, u32)], restarts: usize) -> Vec<String> {
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
                "{event:?} at {}.{}: {copies} copies, but only {replays} kills/restarts after a \
                 commit before it",
                t.0, t.1
            ));
        }
    }
    bad.sort();
    bad.truncate(10);
    bad
}
