//! The pipelines this process runs right now, as tasks: started, stopped (drain, flush, final
//! commit, lease released) and joined by name. Both supervisors use it: the single-owner one
//! ([`crate::supervisor::app`]) and the group member ([`crate::supervisor::group`]); a reload ([`crate::supervisor::reload`]) adds,
//! removes and restarts entries at runtime.
//!
//! Invariants:
//! - At most one task per pipeline name: [`Roster::start`] first stops a run of the same name
//!   that is still draining.
//! - [`Roster::stop`] cancels every named run at once and waits for all of them within one
//!   bound (`shutdown_timeout_ms`, whatever is down: a run's relay drains for
//!   `BridgeConfig::drain_bound`, leaving the rest for its final commit): they drain
//!   concurrently.
//! - A task that panicked joins as [`BridgeError::TaskPanicked`] naming its pipeline, never as
//!   a clean stop.
//! - An end is "by itself" only while the run was still listed: a run stopped by the roster
//!   (revocation, removal, shutdown) that met an error on its way out is not a failure of the
//!   process.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::error::BridgeError;
use crate::pipeline::{self, Ended, PipelineContext};

/// The share of `shutdown_timeout_ms` kept from a run's drain for its final commit and lease
/// release ([`BridgeConfig::drain_bound`](crate::config::BridgeConfig::drain_bound)); also
/// the margin of a group revocation's bound.
pub(crate) const STOP_GRACE: Duration = crate::config::STOP_RESERVE;

/// A run's outcome with its name.
type Outcome = (String, Result<Ended, BridgeError>);

/// One listed run.
struct Running {
    slot: Option<i32>,
    cancel: CancellationToken,
    done: watch::Receiver<bool>,
}

/// How a run ended.
pub(crate) struct End {
    /// The pipeline.
    pub name: String,
    /// It ended while still listed (not stopped by the roster).
    pub by_itself: bool,
    /// The group slot it was started for, when it ended by itself.
    pub slot: Option<i32>,
    /// Its outcome.
    pub result: Result<Ended, BridgeError>,
}

/// The running pipelines.
pub(crate) struct Roster {
    running: HashMap<String, Running>,
    tasks: JoinSet<Outcome>,
    task_names: HashMap<tokio::task::Id, String>,
    cancel: CancellationToken,
    stop_bound: Duration,
}

impl Roster {
    /// An empty roster whose runs are children of `cancel`; a stop waits up to
    /// `shutdown_timeout_ms`, then aborts what still runs (its epoch fences it).
    pub(crate) fn new(cancel: CancellationToken, shutdown_timeout_ms: u64) -> Self {
        Self {
            running: HashMap::new(),
            tasks: JoinSet::new(),
            task_names: HashMap::new(),
            cancel,
            stop_bound: Duration::from_millis(shutdown_timeout_ms),
        }
    }

    /// Runs `ctx`'s pipeline (tagged with the group `slot`, if any), after stopping a run of
    /// the same name that is still listed.
    pub(crate) async fn start(&mut self, ctx: PipelineContext, slot: Option<i32>) {
        let name = ctx.pipeline.name.clone();
        if self.running.contains_key(&name) {
            self.stop(std::slice::from_ref(&name)).await;
        }
        ctx.health.begin_run();
        self.spawn(name, slot, |cancel| pipeline::run(ctx, cancel));
    }

    /// Lists `work(cancel)` as the run of `name`.
    fn spawn<F, W>(&mut self, name: String, slot: Option<i32>, work: W)
    where
        W: FnOnce(CancellationToken) -> F,
        F: Future<Output = Result<Ended, BridgeError>> + Send + 'static,
    {
        let cancel = self.cancel.child_token();
        let (done_tx, done) = watch::channel(false);
        let owned = name.clone();
        let work = work(cancel.clone());
        let handle = self.tasks.spawn(async move {
            let result = work.await;
            let _ = done_tx.send(true);
            (owned, result)
        });
        self.task_names.insert(handle.id(), name.clone());
        let entry = Running { slot, cancel, done };
        self.running.insert(name, entry);
    }

    /// The listed pipelines (sorted).
    pub(crate) fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.running.keys().cloned().collect();
        names.sort();
        names
    }

    /// The listed pipelines tagged with one of `slots`.
    pub(crate) fn with_slots(&self, slots: &[i32]) -> Vec<String> {
        let mut names: Vec<String> = self
            .running
            .iter()
            .filter(|(_, r)| r.slot.is_some_and(|s| slots.contains(&s)))
            .map(|(n, _)| n.clone())
            .collect();
        names.sort();
        names
    }

    /// How many runs are listed.
    pub(crate) fn len(&self) -> usize {
        self.running.len()
    }

    /// Whether none is listed.
    pub(crate) fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Stops the named runs and waits (one bound for all) until they stopped.
    pub(crate) async fn stop(&mut self, names: &[String]) {
        let mut waits = Vec::new();
        for name in names {
            if let Some(r) = self.running.remove(name) {
                r.cancel.cancel();
                waits.push(r.done);
            }
        }
        let deadline = tokio::time::Instant::now() + self.stop_bound;
        for done in waits {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            wait_stopped(done, left).await;
        }
    }

    /// The next run that ended; pends forever while no task runs (for `select!`).
    pub(crate) async fn next_end(&mut self) -> End {
        let Some(joined) = self.tasks.join_next_with_id().await else {
            return std::future::pending().await;
        };
        let (name, result) = match joined {
            Ok((id, outcome)) => {
                self.task_names.remove(&id);
                outcome
            }
            Err(e) => {
                let name = self
                    .task_names
                    .remove(&e.id())
                    .unwrap_or_else(|| "*".into());
                let error = pipeline::panicked(&name, "pipeline", e);
                tracing::error!(pipeline = %name, error = %error, "pipeline task panicked");
                (name, Err(error))
            }
        };
        // A run restarted under the same name is listed again: only a finished one goes.
        // (A panicked run dropped its sender without setting `done`.)
        let finished = |r: &Running| *r.done.borrow() || r.done.has_changed().is_err();
        let by_itself = self.running.get(&name).is_some_and(finished);
        let slot = if by_itself {
            self.running.remove(&name).and_then(|r| r.slot)
        } else {
            None
        };
        End {
            name,
            by_itself,
            slot,
            result,
        }
    }

    /// Stops every run and joins every task, within the stop bound: a task still running after
    /// it (e.g. waiting on a server that stopped answering) is aborted, like a crash (its lease
    /// lapses; its epoch fences it). The outcomes of those that ended by themselves meanwhile are
    /// dropped (the caller is stopping anyway).
    pub(crate) async fn stop_all(&mut self) {
        self.cancel.cancel();
        let names = self.names();
        self.stop(&names).await;
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Waits until a run's `done` is set (or its sender dropped), at most `bound`.
async fn wait_stopped(mut done: watch::Receiver<bool>, bound: Duration) {
    let stopped = async {
        while !*done.borrow_and_update() {
            if done.changed().await.is_err() {
                return;
            }
        }
    };
    if tokio::time::timeout(bound, stopped).await.is_err() {
        warn!(
            bound_ms = bound.as_millis() as u64,
            "a stopped pipeline did not finish in time; its epoch fences it"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicked_run_ends_by_itself_as_an_error_naming_its_pipeline() {
        // GIVEN two runs, one of which panics
        let parent = CancellationToken::new();
        let mut roster = Roster::new(parent.clone(), 1000);
        roster.spawn("orders".into(), None, |_| async { panic!("bug") });
        let waited = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = std::sync::Arc::clone(&waited);
        roster.spawn("users".into(), Some(3), move |cancel| async move {
            cancel.cancelled().await;
            seen.store(true, std::sync::atomic::Ordering::Relaxed);
            Ok(Ended::Stopped)
        });
        // WHEN the first end is joined
        let end = roster.next_end().await;
        // THEN it is the panic, by itself, naming the pipeline and the task
        assert_eq!(end.name, "orders");
        assert!(end.by_itself);
        assert!(
            matches!(&end.result, Err(BridgeError::TaskPanicked { pipeline, task: "pipeline", message })
                if pipeline == "orders" && message == "bug"),
            "{:?}",
            end.result.err()
        );
        assert_eq!(roster.names(), vec!["users".to_owned()]);
        assert_eq!(roster.with_slots(&[3]), vec!["users".to_owned()]);
        // AND stopping the rest cancels it and waits for it
        roster.stop_all().await;
        assert!(waited.load(std::sync::atomic::Ordering::Relaxed));
        assert!(roster.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_that_ignores_its_stop_is_aborted_after_the_bound() {
        // GIVEN a run that never looks at its cancellation (a server that stopped answering)
        let mut roster = Roster::new(CancellationToken::new(), 1000);
        roster.spawn("stuck".into(), None, |_| async {
            std::future::pending::<()>().await;
            Ok(Ended::Stopped)
        });
        // WHEN every run is stopped
        let started = tokio::time::Instant::now();
        roster.stop_all().await;
        // THEN stop_all returns once the bound (1000 ms) passed, the task aborted
        assert_eq!(started.elapsed(), Duration::from_millis(1000));

        assert!(roster.is_empty());
    }
}
