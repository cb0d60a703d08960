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

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bson::Document;
use mongodb::Client;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Isolation, aborted, check_exactly_once, epochs_taken, read, wait_committed};
use crate::Ctx;
use crate::harness::*;
use crate::say;

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
    let started = Instant::now();
    let name = format!("eos-kill9-{b}");
    let inst = Instance::up(&ctx.script, &ctx.instance(&name), false);
    let cfg = Cfg::new(&inst.mongo_uri, &inst.kafka, "eoskill");
    create_topic(&inst.kafka, &cfg.topic(), 3).await;
    let client = inst.client().await;
    let coll = client.database(&cfg.db).collection::<Document>(COLL);
    prepare_update_keys(&coll, 20).await;
    let config = super::write_config(&cfg, "", &ctx.dir, &format!("{name}.toml"));
    let follower = inst
        .is_kafka()
        .then(|| super::Follower::start(&inst.kafka, &cfg.topic()));
    let mut run = Run::start(ctx, name, cfg, client, config).await;
    let mut row = Row::new(label);
    let load = start_load(coll.clone(), RATE, 20, 0);
    let mut rng = StdRng::seed_from_u64(ctx.seed.wrapping_add(1000 + b as u64));
    run.kill_loop(&mut row, &load, &mut rng).await;
    let (acked, errors) = load.stop().await;
    let truth = Truth::read(&coll).await;
    let topic = run.cfg.topic();
    let caught_up = Instant::now();
    let recs = wait_committed(&inst.kafka, &topic, &truth, Duration::from_secs(180)).await;
    let recovery = caught_up.elapsed().as_secs_f64();
    row.check(run.proc.running(), || {
        format!(
            "the last instance stopped by itself: {}",
            run.proc.log_tail(5)
        )
    });
    let status = run.proc.stop(Duration::from_secs(30));
    row.check(status.success(), || {
        format!("graceful stop after the kills: {status}")
    });
    // The final reads, after the last producer is gone: nothing is left open.
    let committed = read(&inst.kafka, &topic, Isolation::Committed).await;
    let uncommitted = read(&inst.kafka, &topic, Isolation::Uncommitted).await;
    let v = check_exactly_once(&mut row, &truth, &committed);
    if let Some(f) = &follower {
        super::check_follower(&mut row, f, &committed).await;
    }
    let u = verify(&truth, &uncommitted);
    // Each committed transaction carries the next commit sequence; a repeat means an instance
    // started from an older position than the newest committed one and published it again.
    let offsets_db = run.cfg.offsets_db();
    let progress = super::progress_records(&inst.kafka, &offsets_db, Isolation::Committed).await;
    let repeats = super::sequence_repeats(&progress);
    let repeated: Vec<super::Progress> = progress
        .windows(2)
        .filter(|w| w[1].commit <= w[0].commit)
        .map(|w| w[1])
        .collect();
    if let Some(first) = repeated.first() {
        // Evidence for the report: where the repeating instance's start read began, and
        // whether an aborted progress record lay before it.
        let all = super::progress_records(&inst.kafka, &offsets_db, Isolation::Uncommitted).await;
        let committed_at: std::collections::HashSet<i64> =
            progress.iter().map(|p| p.offset).collect();
        let from = |epoch: i64| run.left.get(&(epoch - 1)).map_or(-1, |l| l.1);
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
            run.name,
            super::progress_layout(&all, &progress, first.offset),
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
    let ahead = (0..run.instances)
        .filter(|i| {
            std::fs::read_to_string(run.dir.join(format!("{}-{i}.log", run.name)))
                .unwrap_or_default()
                .contains("the progress topic is ahead of the offsets document")
        })
        .count();
    let extra = aborted(&uncommitted, &committed).len();
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
    say!(
        "{}: {KILLS} kills ({} after waiting for a commit), {acked} writes ({errors} retried) → \
         {} events; read_committed {} records: {} delivered, {} missing, {} duplicates; \
         read_uncommitted {} records: {} duplicates, {extra} aborted records; {} committed \
         progress records, {} repeating a commitSequence; {ahead} instance(s) found the \
         progress topic ahead of the offsets document; slowest take-over {:.1} s; caught up \
         {recovery:.1} s after the load stopped",
        run.name,
        run.forced,
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
    row.runs = format!("{KILLS} kills, {extra} aborted records");
    row.recovery_s = Some(recovery);
    row.seconds = started.elapsed().as_secs_f64();
    row
}

/// The bridge processes of one block, one after another.
struct Run {
    name: String,
    dir: PathBuf,
    cfg: Cfg,
    client: Client,
    config: PathBuf,
    proc: BridgeProc,
    /// Instances started so far (instance #i logs to `<name>-<i>.log`).
    instances: usize,
    /// The epoch the running instance must take.
    epoch: i64,
    /// `commitSequence` of the offsets document after each kill.
    committed: Vec<i64>,
    /// Epoch → the offsets document's (`commitSequence`, `progressOffset`) after that
    /// instance's kill: where the next instance started (when it was not killed before taking
    /// the pipeline).
    left: std::collections::HashMap<i64, (i64, i64)>,
    /// Kills after the progress guard waited for a commit.
    forced: usize,
    /// When the running instance was started.
    spawned: Instant,
    /// The slowest start → "took the pipeline".
    slowest_take: Duration,
}

impl Run {
    async fn start(ctx: &Ctx, name: String, cfg: Cfg, client: Client, config: PathBuf) -> Self {
        let proc = BridgeProc::spawn(&config, ctx.dir.join(format!("{name}-0.log")));
        cfg.wait_started(&client, Duration::from_secs(60)).await;
        Self {
            name,
            dir: ctx.dir.clone(),
            cfg,
            client,
            config,
            proc,
            instances: 1,
            epoch: 1,
            committed: Vec::new(),
            left: std::collections::HashMap::new(),
            forced: 0,
            spawned: Instant::now(),
            slowest_take: Duration::ZERO,
        }
    }

    fn respawn(&mut self) {
        let log = self
            .dir
            .join(format!("{}-{}.log", self.name, self.instances));
        self.proc = BridgeProc::spawn(&self.config, log);
        self.spawned = Instant::now();
        self.instances += 1;
        self.epoch += 1;
    }

    async fn commit_sequence(&self) -> i64 {
        self.cfg
            .offsets(&self.client)
            .await
            .and_then(|d| d.get_i64("commitSequence").ok())
            .unwrap_or(0)
    }

    /// Waits (up to 30 s) until the running instance logged "took the pipeline" with the epoch
    /// it must hold and the offsets document has that epoch. Whether it did.
    async fn wait_taken(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && self.proc.running() {
            if epochs_taken(&self.proc.log_text()).contains(&self.epoch) {
                let doc = self.cfg.offsets(&self.client).await.unwrap_or_default();
                if doc.get_i64("epoch").ok() == Some(self.epoch) {
                    self.slowest_take = self.slowest_take.max(self.spawned.elapsed());
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
                    self.instances - 1,
                    self.epoch,
                    self.proc.log_tail(3)
                ));
            }
            if self.stalled() {
                self.wait_for_commit().await;
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(200..1500))).await;
            if !self.proc.running() {
                spontaneous.push(format!(
                    "instance #{} exited {:?} before kill {k}: {}",
                    self.instances - 1,
                    self.proc.exit,
                    self.proc.log_tail(3)
                ));
            }
            self.proc.kill9();
            let doc = self.cfg.offsets(&self.client).await.unwrap_or_default();
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
                    self.name,
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
                self.proc.log_tail(5)
            )
        });
    }

    /// The committed position has not moved over the last five kills (every instance died
    /// before its first commit).
    fn stalled(&self) -> bool {
        let n = self.committed.len();
        n >= 5
            && self.committed[n - 5..]
                .iter()
                .all(|c| *c == self.committed[n - 5])
    }

    /// Lets the running instance commit first (up to 30 s).
    async fn wait_for_commit(&mut self) {
        let from = self.committed.last().copied().unwrap_or(0);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && self.proc.running() {
            if self.commit_sequence().await > from {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.forced += 1;
    }
}
