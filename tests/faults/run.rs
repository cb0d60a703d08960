//! The bridge processes of one kill block, one after another (`kill9`, `eos`): each instance
//! started on the same configuration, instance #i logging to `<name>-<i>.log`, and the progress
//! guard that lets a running instance commit when the kills keep landing before any commit.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bson::Document;

use crate::common::bridge::BridgeProc;
use crate::stage::Stage;
use crate::suite::Ctx;

/// The running instance and those before it.
pub struct Run<'a> {
    /// `kill9-<block>`, `eos-kill9-<block>`: progress lines and log files.
    pub name: String,
    /// The scenario's servers and configuration.
    pub stage: &'a Stage,
    dir: PathBuf,
    pub proc: BridgeProc,
    /// Every instance started, in order (instance #i logs to `<name>-<i>.log`).
    pub pids: Vec<u32>,
    /// When the running instance was started.
    pub spawned: Instant,
    /// Kills after the progress guard waited for a commit.
    pub forced: usize,
}

impl<'a> Run<'a> {
    /// Starts the first instance on the stage's configuration and waits for its first commit.
    pub async fn start(ctx: &Ctx, name: String, stage: &'a Stage) -> Self {
        let proc = stage.spawn(&format!("{name}-0.log"));
        let (cfg, client) = (&stage.cfg, &stage.client);
        cfg.wait_started(client, Duration::from_secs(60)).await;
        Self {
            pids: vec![proc.pid()],
            name,
            stage,
            dir: ctx.dir.clone(),
            proc,
            spawned: Instant::now(),
            forced: 0,
        }
    }

    /// Instances started so far.
    pub fn instances(&self) -> usize {
        self.pids.len()
    }

    /// The log file of instance #`i`.
    pub fn log(&self, i: usize) -> PathBuf {
        self.dir.join(format!("{}-{i}.log", self.name))
    }

    /// Starts the next instance.
    pub fn respawn(&mut self) {
        self.proc = BridgeProc::spawn(&self.stage.config, self.log(self.pids.len()));
        self.spawned = Instant::now();
        self.pids.push(self.proc.pid());
    }

    /// The offsets document of the pipeline (empty when there is none).
    pub async fn offsets(&self) -> Document {
        let (cfg, client) = (&self.stage.cfg, &self.stage.client);
        cfg.offsets(client).await.unwrap_or_default()
    }

    /// Lets the running instance commit first (up to 30 s): until `position` of the offsets
    /// document passes `from`; it then dies at its random moment.
    pub async fn wait_for_commit<T: PartialOrd>(
        &mut self,
        from: T,
        position: impl Fn(&Document) -> T,
    ) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && self.proc.running() {
            if position(&self.offsets().await) > from {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.forced += 1;
    }
}

/// Progress guard: the committed position (as `committed` recorded it after each kill) has not
/// moved over the last five kills: a slow server makes every instance die before its first
/// commit.
pub fn stalled<T: PartialEq>(committed: &[T]) -> bool {
    let n = committed.len();
    n >= 5 && committed[n - 5..].iter().all(|t| *t == committed[n - 5])
}
