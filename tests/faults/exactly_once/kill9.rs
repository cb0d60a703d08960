//! `eos`: kill -9 of an exactly-once bridge at random moments under a steady write load, the
//! next instance started at once each time. Each instance must have taken the pipeline (its
//! "took the pipeline" line with the next epoch) before it is killed, so every kill lands on an
//! owner, most of them with a Kafka transaction open. At the end, a fresh `read_committed`
//! read has every event exactly once; a fresh `read_uncommitted` read has the aborted records
//! too (the two reads must differ, or the test could not tell them apart).
//!
//! Each committed transaction carries the next `commitSequence` in its progress record, so the
//! committed progress records must rise strictly: a repeat is an instance that started from an
//! older position than the newest committed one and published a committed transaction again.
//!
//! The default lease: a new instance takes the pipeline at once (the take does not wait for the
//! dead owner's lease; the scenario reports the slowest take-over).
//!
//! Blocks of 50 kills, each on fresh servers (as `crash.rs`: the stand-ins slow down over
//! many kills): one block in the short form, 5 in the long form.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bson::Document;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::kafka::Isolation;
use crate::common::load::{Load, Truth, start_load};
use crate::common::records::{Rec, read};
use crate::common::verdict::verify;
use crate::exactly_once::checks::{aborted, check_exactly_once, check_follower, wait_committed};
use crate::exactly_once::evidence::{
    Progress, epochs_taken, progress_layout, progress_records, sequence_repeats,
};
use crate::run::{Run, stalled};
use crate::say;
use crate::stage::Stage;
use crate::suite::{Ctx, Row};

const RATE: u32 = 150;
const KILLS: usize = 50;

pub async fn kill9(ctx: &Ctx) -> Vec<Row> {
    let blocks = if ctx.long { 5 } else { 1 };
    let mut rows = Vec::new();
    for b in 0..blocks {
        let label = if blocks == 1 {
            "exactly once: kill -9 + restart".to_owned()
        } else {
            format!("exactly once: kill -9 + restart (block {}/{blocks})", b + 1)
        };
        rows.push(block(ctx, b, &label).await);
    }
    rows
}

async fn block(ctx: &Ctx, b: usize, label: &str) -> Row {
    let name = format!("eos-kill9-{b}");
    let stage = super::stage(ctx, &name, "eoskill", 20, "", "").await;
    let follower = stage.follower();
    let mut run = EosRun::start(ctx, name, &stage).await;
    let inst = &stage.inst;
    let mut row = Row::new(label);
    let load = start_load(stage.coll.clone(), RATE, 20, 0);
    let mut rng = StdRng::seed_from_u64(ctx.seed.wrapping_add(1000 + b as u64));
    run.kill_loop(&mut row, &load, &mut rng).await;
    let (acked, errors) = load.stop().await;
    let truth = Truth::read(&stage.coll).await;
    let topic = run.run.stage.cfg.topic();
    let caught_up = Instant::now();
    let recs = wait_committed(&inst.kafka, &topic, &truth, Duration::from_secs(180)).await;
    let recovery = caught_up.elapsed().as_secs_f64();
    row.check(run.run.proc.running(), || {
        format!(
            "the last instance stopped by itself: {}",
            run.run.proc.log_tail(5)
        )
    });
    let status = run.run.proc.stop(Duration::from_secs(30));
    row.check(status.success(), || {
        format!("graceful stop after the kills: {status}")
    });
    // The final reads, after the last producer is gone: nothing is left open.
    let committed = read(&inst.kafka, &topic, Isolation::Committed).await;
    let uncommitted = read(&inst.kafka, &topic, Isolation::Uncommitted).await;
    let v = check_exactly_once(&mut row, &truth, &committed);
    if let Some(f) = &follower {
        check_follower(&mut row, f, &committed).await;
    }
    let u = verify(&truth, &uncommitted);
    let progress = run.check_progress(&mut row, &inst.kafka).await;
    let ahead = run.ahead();
    let extra = check_reads(&mut row, &recs, &committed, &uncommitted);
    say!(
        "{}: {KILLS} kills ({} after waiting for a commit), {acked} writes ({errors} retried) → \
         {} events; read_committed {} records: {} delivered, {} missing, {} duplicates; \
         read_uncommitted {} records: {} duplicates, {extra} aborted records; {} committed \
         progress records, {} repeating a commitSequence; {ahead} instance(s) found the \
         progress topic ahead of the offsets document; slowest take-over {:.1} s; caught up \
         {recovery:.1} s after the load stopped",
        run.run.name,
        run.run.forced,
        v.writes,
        committed.len(),
        v.unique,
        v.missing,
        v.duplicates,
        uncommitted.len(),
        u.duplicates,
        progress.len(),
        progress
            .windows(2)
            .filter(|w| w[1].commit <= w[0].commit)
            .count(),
        run.slowest_take.as_secs_f64(),
    );
    let mut row = row.with_verdict(&v);
    row.finish(
        format!("{KILLS} kills, {extra} aborted records"),
        Some(recovery),
        stage.started,
    );
    row
}

/// The kills aborted records (`read_uncommitted` has more than `read_committed`, and exactly
/// the aborted ones more), and `read_committed` did not change after the graceful stop
/// (`recs`: its read before). How many records were aborted.
fn check_reads(row: &mut Row, recs: &[Rec], committed: &[Rec], uncommitted: &[Rec]) -> usize {
    let extra = aborted(uncommitted, committed).len();
    row.check(
        uncommitted.len() > committed.len() && extra == uncommitted.len() - committed.len(),
        || {
            format!(
                "read_uncommitted ({} records) shows no aborted records beyond read_committed \
                 ({}): the kills aborted nothing, or the two reads cannot be told apart",
                uncommitted.len(),
                committed.len()
            )
        },
    );
    row.check(recs.len() == committed.len(), || {
        format!(
            "read_committed changed after the graceful stop: {} → {} records",
            recs.len(),
            committed.len()
        )
    });
    extra
}

/// The bridge processes of one block, and what each kill left behind.
struct EosRun<'a> {
    run: Run<'a>,
    /// The epoch the running instance must take.
    epoch: i64,
    /// `commitSequence` of the offsets document after each kill.
    committed: Vec<i64>,
    /// Epoch → the offsets document's (`commitSequence`, `progressOffset`) after that
    /// instance's kill: where the next instance started (when it was not killed before taking
    /// the pipeline).
    left: std::collections::HashMap<i64, (i64, i64)>,
    /// The slowest start → "took the pipeline".
    slowest_take: Duration,
}

impl<'a> EosRun<'a> {
    /// Each committed transaction carries the next commit sequence; a repeat means an instance
    /// started from an older position than the newest committed one and published it again.
    /// Checks there is none (printing, for a repeat, where its instance's start read began);
    /// the committed progress records.
    async fn check_progress(&self, row: &mut Row, bootstrap: &str) -> Vec<Progress> {
        let offsets_db = self.run.stage.cfg.offsets_db();
        let progress = progress_records(bootstrap, &offsets_db, Isolation::Committed).await;
        let repeats = sequence_repeats(&progress);
        let repeated: Vec<Progress> = progress
            .windows(2)
            .filter(|w| w[1].commit <= w[0].commit)
            .map(|w| w[1])
            .collect();
        if let Some(first) = repeated.first() {
            // Evidence for the report: where the repeating instance's start read began, and
            // whether an aborted progress record lay before it.
            let all = progress_records(bootstrap, &offsets_db, Isolation::Uncommitted).await;
            let committed_at: std::collections::HashSet<i64> =
                progress.iter().map(|p| p.offset).collect();
            let from = |epoch: i64| self.left.get(&(epoch - 1)).map_or(-1, |l| l.1);
            let behind_abort = repeated
                .iter()
                .filter(|r| {
                    all.iter()
                        .any(|p| p.offset < from(r.epoch) && !committed_at.contains(&p.offset))
                })
                .count();
            say!(
                "{}: the progress partition up to the first repeat (offset:C|A:epoch:commitSequence): \
                 {}; epoch {} started from an offsets document at progressOffset {}. {behind_abort} \
                 of {} repeats came from an instance whose start read began after an aborted \
                 progress record",
                self.run.name,
                progress_layout(&all, &progress, first.offset),
                first.epoch,
                from(first.epoch),
                repeated.len()
            );
        }
        row.check(repeats.is_empty(), || {
            format!(
                "committed progress records repeat a commitSequence (a committed transaction \
                 published again): {}",
                repeats.join("; ")
            )
        });
        progress
    }

    /// How many instances found the progress topic ahead of the offsets document.
    fn ahead(&self) -> usize {
        (0..self.run.instances())
            .filter(|i| {
                std::fs::read_to_string(self.run.log(*i))
                    .unwrap_or_default()
                    .contains("the progress topic is ahead of the offsets document")
            })
            .count()
    }

    async fn start(ctx: &Ctx, name: String, stage: &'a Stage) -> Self {
        Self {
            run: Run::start(ctx, name, stage).await,
            epoch: 1,
            committed: Vec::new(),
            left: std::collections::HashMap::new(),
            slowest_take: Duration::ZERO,
        }
    }

    fn respawn(&mut self) {
        self.run.respawn();
        self.epoch += 1;
    }

    /// Waits (up to 30 s) until the running instance logged "took the pipeline" with the epoch
    /// it must hold and the offsets document has that epoch. Whether it did.
    async fn wait_taken(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && self.run.proc.running() {
            if epochs_taken(&self.run.proc.log_text()).contains(&self.epoch) {
                let doc = self.run.offsets().await;
                if doc.get_i64("epoch").ok() == Some(self.epoch) {
                    self.slowest_take = self.slowest_take.max(self.run.spawned.elapsed());
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// Kills `KILLS` owners at random moments after their take-over, starting the next at once.
    async fn kill_loop(&mut self, row: &mut Row, load: &Load, rng: &mut StdRng) {
        let mut not_taken = Vec::new();
        let mut spontaneous = Vec::new();
        for k in 1..=KILLS {
            if !self.wait_taken().await {
                not_taken.push(format!(
                    "instance #{} (epoch {}): {}",
                    self.run.instances() - 1,
                    self.epoch,
                    self.run.proc.log_tail(3)
                ));
            }
            if self.stalled() {
                self.wait_for_commit().await;
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(200..1500))).await;
            if !self.run.proc.running() {
                spontaneous.push(format!(
                    "instance #{} exited {:?} before kill {k}: {}",
                    self.run.instances() - 1,
                    self.run.proc.exit,
                    self.run.proc.log_tail(3)
                ));
            }
            self.run.proc.kill9();
            let doc = self.run.offsets().await;
            let epoch = doc.get_i64("epoch").unwrap_or(-1);
            if epoch != self.epoch {
                not_taken.push(format!(
                    "after kill {k}: the offsets document has epoch {epoch}, the killed \
                     instance should have held {}",
                    self.epoch
                ));
            }
            self.committed
                .push(doc.get_i64("commitSequence").unwrap_or(0));
            self.left.insert(
                self.epoch,
                (
                    doc.get_i64("commitSequence").unwrap_or(-1),
                    doc.get_i64("progressOffset").unwrap_or(-1),
                ),
            );
            if k % 10 == 0 {
                say!(
                    "{}: {k} kills, {} writes so far, commitSequence {}",
                    self.run.name,
                    load.acked.load(Ordering::Relaxed),
                    self.committed.last().copied().unwrap_or(0)
                );
            }
            self.respawn();
        }
        row.check(not_taken.is_empty(), || {
            format!(
                "{} instance(s) did not take the pipeline before their kill: {}",
                not_taken.len(),
                not_taken.join("; ")
            )
        });
        row.check(spontaneous.is_empty(), || {
            format!(
                "{} instance(s) stopped without being killed: {}",
                spontaneous.len(),
                spontaneous.join("; ")
            )
        });
        // The instance started after the last kill delivers the rest.
        row.check(self.wait_taken().await, || {
            format!(
                "the last instance did not take the pipeline: {}",
                self.run.proc.log_tail(5)
            )
        });
    }

    /// The committed position has not moved over the last five kills (every instance died
    /// before its first commit).
    fn stalled(&self) -> bool {
        stalled(&self.committed)
    }

    /// Lets the running instance commit first (up to 30 s).
    async fn wait_for_commit(&mut self) {
        let from = self.committed.last().copied().unwrap_or(0);
        let sequence = |d: &Document| d.get_i64("commitSequence").unwrap_or(0);
        self.run.wait_for_commit(from, sequence).await;
    }
}
