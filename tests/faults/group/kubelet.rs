//! A simulated kubelet (long form only): 2 members (as the deployment's replicas) of one group (`[bridge] group_id`) run 6
//! pipelines under continuous writes, on Apache Kafka beside SecantusDB (see group.rs for why
//! not noida-db).
//!
//! - The probe loop is the deployment's livenessProbe (`deploy/kubernetes/deployment.yaml`):
//!   every 10 s a GET `/healthz` on each member; after 3 consecutive failures the member is
//!   killed and started again (a "probe restart": the scenario fails on any).
//! - The chaos loop: every 30–60 s (seeded) a random member is killed with `kill -9` and a new
//!   process starts in its place. A member that exits by itself is started again too, as a
//!   kubelet would (`restartPolicy: Always`), and fails the scenario.
//! - Every second the pipelines' epochs are read from the offsets documents: they only go up.
//! - At the end: every event delivered, per-document order intact, no unexpected record, one
//!   owner per pipeline, and every member stops cleanly on SIGTERM.
//!
//! 10 minutes; `MKB_FAULTS_KUBELET_S=<seconds>` for another duration.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bson::Document;
use mongodb::Collection;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::bridge::BridgeProc;
use crate::common::load::Truth;
use crate::common::observe::fetch;
use crate::common::records::Consumer;
use crate::common::verdict::verify;
use crate::group::epochs::{EpochWatch, Epochs};
use crate::group::{Member, World, settled};
use crate::say;
use crate::suite::{Ctx, Row, since_start};

/// Members: 2, as the deployment's `replicas: 2` (`deploy/kubernetes/deployment.yaml`);
/// `MKB_FAULTS_KUBELET_MEMBERS=<n>` for another count.
fn members() -> usize {
    std::env::var("MKB_FAULTS_KUBELET_MEMBERS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2)
}
const PIPELINES: usize = 6;
/// The livenessProbe: `periodSeconds: 10`, `failureThreshold: 3`.
const PROBE_PERIOD: Duration = Duration::from_secs(10);
const FAILURE_THRESHOLD: u32 = 3;

/// `MKB_FAULTS_KUBELET_S`, default 600 s.
fn duration() -> Duration {
    let secs = std::env::var("MKB_FAULTS_KUBELET_S")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(600);
    Duration::from_secs(secs)
}

pub async fn kubelet(ctx: &Ctx) -> Vec<Row> {
    let started = Instant::now();
    let run_for = duration();
    let world = World::up(ctx, "kubelet", "kubelet", PIPELINES).await;
    let config = world.write("kubelet.toml");
    let (cfg, client, colls, consumers) = world.parts();
    let mut row = Row::new(&format!(
        "kubelet: probes + chaos kill -9, {} members, {PIPELINES} pipelines",
        members()
    ));
    let epochs = EpochWatch::start(client, &cfg.offsets_db());
    let mut kubelet = Kubelet::start(ctx.dir.clone(), config);
    if kubelet.settled().await.is_none() {
        row.check(false, || "the pipelines never had one owner each".into());
        return vec![row];
    }
    let loads = world.start_loads();
    let mut rng = StdRng::seed_from_u64(ctx.seed);
    kubelet.run(run_for, &mut rng).await;
    let owners = kubelet.settled().await;
    row.check(owners.is_some(), || {
        "after the chaos the pipelines never had one owner each".into()
    });
    for load in loads {
        load.stop().await;
    }
    verify_pipelines(&mut row, colls, consumers).await;
    kubelet.stop_all(&mut row);
    let epochs = epochs.stop().await;
    kubelet.report(&mut row, &epochs);
    row.seconds = started.elapsed().as_secs_f64();
    vec![row]
}

/// Waits for every event of every pipeline and checks it: the totals go into `row`.
async fn verify_pipelines(row: &mut Row, colls: &[Collection<Document>], consumers: &[Consumer]) {
    let (mut writes, mut unique, mut dups) = (0, 0, 0);
    for (i, (coll, consumer)) in colls.iter().zip(consumers).enumerate() {
        let truth = Truth::read(coll).await;
        consumer
            .wait_complete(&truth, Duration::from_secs(120))
            .await;
        // Late duplicates still on their way.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let v = verify(&truth, &consumer.snapshot());
        row.check_sound_of(&format!("p{i}"), &v);
        writes += v.writes;
        unique += v.unique;
        dups += v.duplicates;
    }
    row.writes = Some(writes);
    row.delivered = Some(unique);
    row.missing = Some(writes - unique.min(writes));
    row.duplicates = Some(dups);
}

/// The members and what the simulated kubelet did to them.
struct Kubelet {
    dir: PathBuf,
    config: PathBuf,
    members: Vec<Member>,
    /// Consecutive failed probes per member.
    failures: Vec<u32>,
    /// Log files started so far (`kubelet-<n>.log`).
    logs: usize,
    probes: usize,
    /// Every failed probe: member, when, the answer.
    failed_probes: Vec<String>,
    probe_restarts: Vec<String>,
    kills: usize,
    /// Members that exited without being killed.
    exits: Vec<String>,
}

impl Kubelet {
    fn start(dir: PathBuf, config: PathBuf) -> Self {
        let mut k = Self {
            dir,
            config,
            members: Vec::new(),
            failures: vec![0; members()],
            logs: 0,
            probes: 0,
            failed_probes: Vec::new(),
            probe_restarts: Vec::new(),
            kills: 0,
            exits: Vec::new(),
        };
        for _ in 0..members() {
            let m = k.spawn();
            k.members.push(m);
        }
        k
    }

    /// A new member process with its own log file.
    fn spawn(&mut self) -> Member {
        let log = self.dir.join(format!("kubelet-{}.log", self.logs));
        self.logs += 1;
        Member::start(&self.config, log)
    }

    /// Member `i` replaced by a new process (the old one is dead).
    fn replace(&mut self, i: usize) {
        self.members[i] = self.spawn();
        self.failures[i] = 0;
    }

    async fn settled(&self) -> Option<Vec<usize>> {
        let refs: Vec<&Member> = self.members.iter().collect();
        settled(&refs, PIPELINES, Duration::from_secs(90)).await
    }

    /// The probe and chaos loops for `run_for`.
    async fn run(&mut self, run_for: Duration, rng: &mut StdRng) {
        let start = Instant::now();
        let gap = |rng: &mut StdRng| Duration::from_millis(rng.random_range(30_000..=60_000));
        let mut next_probe = start + PROBE_PERIOD;
        let mut next_chaos = start + gap(rng);
        while start.elapsed() < run_for {
            self.restart_exited();
            if Instant::now() >= next_probe {
                self.probe_all().await;
                next_probe += PROBE_PERIOD;
            }
            if Instant::now() >= next_chaos {
                let victim = rng.random_range(0..members());
                let pid = self.members[victim].proc.pid();
                self.members[victim].proc.kill9();
                self.kills += 1;
                self.replace(victim);
                say!(
                    "kubelet: chaos kill -9 #{} of member {victim} (pid {pid}), started pid {}",
                    self.kills,
                    self.members[victim].proc.pid()
                );
                next_chaos = Instant::now() + gap(rng);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// GET `/healthz` on every member at once; a member restarted after 3 failures in a row.
    async fn probe_all(&mut self) {
        let asks: Vec<_> = self
            .members
            .iter()
            .map(|m| {
                let addr = m.addr.clone();
                tokio::task::spawn_blocking(move || fetch(&addr, "/healthz"))
            })
            .collect();
        for (i, ask) in asks.into_iter().enumerate() {
            let answer = ask.await.expect("probe thread");
            self.probes += 1;
            if matches!(answer, Some((200, _))) {
                self.failures[i] = 0;
                continue;
            }
            self.failures[i] += 1;
            let pid = self.members[i].proc.pid();
            let text = format!(
                "member {i} (pid {pid}) at {:.1} s: {}",
                since_start(),
                answer.map_or_else(
                    || "no answer".to_owned(),
                    |(code, body)| format!("{code} {}", body.trim())
                )
            );
            say!("kubelet: failed probe #{}: {text}", self.failures[i]);
            self.failed_probes.push(text.clone());
            if self.failures[i] >= FAILURE_THRESHOLD {
                self.members[i].proc.kill9();
                self.replace(i);
                self.probe_restarts.push(text);
                say!("kubelet: probe restart of member {i} (pid {pid})");
            }
        }
    }

    /// Starts again a member that exited without being killed, and records it.
    fn restart_exited(&mut self) {
        for i in 0..self.members.len() {
            let m = &mut self.members[i];
            if m.proc.running() {
                continue;
            }
            let text = format!(
                "member {i} (pid {}) exited {:?} at {:.1} s: {}",
                m.proc.pid(),
                m.proc.exit,
                since_start(),
                last_error(&m.proc)
            );
            say!("kubelet: {text}");
            self.exits.push(text);
            self.replace(i);
        }
    }

    /// SIGTERM to each member in turn: each must exit with success.
    fn stop_all(&mut self, row: &mut Row) {
        self.restart_exited();
        for (i, m) in self.members.iter_mut().enumerate() {
            m.proc.sigterm();
            let status = m.proc.wait_exit(Duration::from_secs(30));
            row.check(status.is_some_and(|s| s.success()), || {
                format!(
                    "member {i} (pid {}) on SIGTERM: {status:?}; log tail:\n{}",
                    m.proc.pid(),
                    m.proc.log_tail(10)
                )
            });
        }
    }

    /// The kubelet's checks and the row's summary.
    fn report(&self, row: &mut Row, epochs: &Epochs) {
        let changes: usize = epochs
            .seen
            .values()
            .map(|e| e.len().saturating_sub(1))
            .sum();
        say!(
            "kubelet: {} chaos kills, {} probes ({} failed), {} probe restarts, {} exits; {} epoch \
             samples ({} failed reads), epochs per pipeline {:?}",
            self.kills,
            self.probes,
            self.failed_probes.len(),
            self.probe_restarts.len(),
            self.exits.len(),
            epochs.samples,
            epochs.failed_reads,
            epochs.seen
        );
        row.check(self.probe_restarts.is_empty(), || {
            format!(
                "{} member(s) restarted by the probe: {}; failed probes: {}",
                self.probe_restarts.len(),
                self.probe_restarts.join("; "),
                self.failed_probes.join("; ")
            )
        });
        row.check(self.exits.is_empty(), || {
            format!("members exited by themselves: {}", self.exits.join("; "))
        });
        row.check(epochs.decreases.is_empty(), || {
            format!("epochs went down: {}", epochs.decreases.join("; "))
        });
        row.check(epochs.samples > 0, || "no epoch sample was read".into());
        row.runs = format!(
            "{} kill -9, {} probes ({} failed), {} probe restarts, {changes} epoch changes",
            self.kills,
            self.probes,
            self.failed_probes.len(),
            self.probe_restarts.len()
        );
    }
}

/// The last `error:` line of the log, or its last line.
fn last_error(proc: &BridgeProc) -> String {
    let text = proc.log_text();
    text.lines()
        .rev()
        .find(|l| l.starts_with("error:") || l.contains("\"level\":\"ERROR\""))
        .or_else(|| text.lines().last())
        .unwrap_or("(empty log)")
        .to_owned()
}
