//! Many replicas, one owner per pipeline: with `[bridge] group_id`, the pipelines of this
//! process run where Kafka's consumer-group protocol assigns them. Every member joins the group
//! on the group's control topic ([`crate::kafka::group`]); partition *n* of that topic stands
//! for the pipeline whose slot is *n* ([`crate::offsets::group`]); this supervisor starts a
//! pipeline when its slot is assigned here and stops it (drain, flush, final commit, lease released) when the
//! slot is revoked.
//!
//! The pieces, one file name in every layer: `config/group.rs` (the rules and the consumer's
//! librdkafka configuration), `offsets/group.rs` (the slots, stored beside the offsets),
//! `kafka/group.rs` (the member's consumer and its thread), this file (the member's
//! supervisor) with `group/setup.rs` (slots and control topic before joining),
//! `observe/metrics/group.rs` (the series) and `cli/check/group.rs` (the preflight). Why one
//! pipeline never runs on two replicas at once is argued in `docs/ARCHITECTURE.md`, "Many
//! replicas".
//!
//! Invariants:
//! - A pipeline is taken only on assignment: its run takes the offsets (epoch + 1, which fences
//!   whoever ran it before, a member the coordinator evicted included), and a `Fenced` error
//!   stops it without a standby take-over ([`crate::pipeline`]): a released lease must not let
//!   a fenced member take a pipeline the group gave to a third.
//! - A revocation is answered only once the revoked pipelines stopped, or after
//!   `shutdown_timeout_ms` plus [`crate::supervisor::roster::STOP_GRACE`], so the coordinator
//!   hands a slot on only after its pipeline here drained and released its lease.
//! - A slot this member's configuration does not know (a newer configuration allocated it) is
//!   not run, and makes the member not ready with the reason until the configurations agree.
//! - What a slot runs is decided on the slots as MongoDB holds them at that moment, never on
//!   this member's copy alone: `offsets reset NAME --delete` frees a number that a newer
//!   configuration may reuse ([`assign`]).
//! - A pipeline whose stream identity differs from its offsets' is refused (not ready; no
//!   epoch bump) and stays stopped until assigned again.
//! - A reload ([`crate::supervisor::reload`]) that adds pipelines allocates their slots and
//!   extends the control topic first; the group leader notices the new partitions at its next metadata
//!   refresh (`topic.metadata.refresh.interval.ms`, 10 s by default here) and rebalances.
//!   Removed pipelines stop here; their slots, still assigned, make the member not ready until
//!   `offsets reset NAME --delete` retires them (noticed within [`assign::RECHECK`]).
//! - On shutdown the pipelines stop first, then the member leaves the group.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::error::BridgeError;
use crate::kafka::group::{Change, Member};
use crate::observe::health::Health;
use crate::observe::metrics::GroupMetrics;
use crate::pipeline::{Ended, PipelineContext};
use crate::supervisor::reload::Reload;
use crate::supervisor::roster::{Roster, STOP_GRACE};

mod assign;
mod setup;

/// After this long without an assignment a member warns (the coordinator never completed a
/// rebalance).
const UNASSIGNED_WARNING: Duration = Duration::from_secs(60);

/// The group supervisor's state.
struct Supervisor {
    group: String,
    /// Per configured pipeline: the context each run is cloned from.
    templates: HashMap<String, PipelineContext>,
    /// Slot → pipeline, as last read ([`assign`]).
    slots: BTreeMap<i32, String>,
    /// Why the last read of the slots failed: assigned slots are held until one works.
    slots_unread: Option<String>,
    /// Slots assigned to this member.
    assigned: Vec<i32>,
    setup: setup::Setup,
    roster: Roster,
    /// The group's session timeout: how long a fenced pipeline waits before it is taken again.
    session: Duration,
    /// Since when this member has had no assignment (joining, or its session was lost).
    unassigned_since: Option<std::time::Instant>,
    /// Asks the member thread to refresh the control topic's metadata.
    refresh: Arc<std::sync::atomic::AtomicBool>,
    health: Arc<Health>,
    metrics: GroupMetrics,
    cancel: CancellationToken,
    /// `[bridge] on_pipeline_failure = "exit"`: a pipeline's failure stops the member.
    exit_on_failure: bool,
}

/// Runs this process's pipelines as a member of `[bridge] group_id` until `cancel` fires or a
/// pipeline fails fatally (whose error it returns, after the others stopped). Reloads arrive on
/// `reloads`.
///
/// Errors: the first fatal pipeline error; [`BridgeError::Group`] when the membership cannot be
/// set up (the slots and the control topic are retried until `cancel`; a consumer librdkafka
/// refuses is not).
pub(crate) async fn run(
    templates: Vec<PipelineContext>,
    health: Arc<Health>,
    metrics: GroupMetrics,
    cancel: CancellationToken,
    mut reloads: mpsc::UnboundedReceiver<Reload>,
) -> Result<(), BridgeError> {
    let first = templates
        .first()
        .expect("a validated configuration has at least one pipeline");
    let config = Arc::clone(&first.config);
    let group = config
        .bridge
        .group_id
        .clone()
        .expect("the group supervisor runs only with a group_id");
    health.set_group(&group);
    let setup = setup::Setup::new(first, &group);
    let names: Vec<String> = templates.iter().map(|c| c.pipeline.name.clone()).collect();
    let Some(prepared) = setup.prepare(&names, &health, &cancel).await else {
        return Ok(());
    };
    let slots = prepared.slots.clone();
    let (tx, mut changes) = mpsc::unbounded_channel();
    let b = &config.bridge;
    let revoke_bound = Duration::from_millis(b.shutdown_timeout_ms) + STOP_GRACE + STOP_GRACE;
    let member = Member::join(
        &config.kafka,
        &prepared.consumer_group,
        &prepared.topic,
        tx,
        revoke_bound,
    )
    .map_err(|e| BridgeError::Group {
        group: group.clone(),
        reason: format!(
            "librdkafka refused the group consumer: {}",
            config.redact(&e.to_string())
        ),
    })?;
    info!(group = %group, consumer_group = %prepared.consumer_group, topic = %prepared.topic, slots = ?slots,
          "joined the group; waiting for an assignment");
    let mut supervisor = Supervisor {
        group,
        templates: templates
            .into_iter()
            .map(|c| (c.pipeline.name.clone(), c))
            .collect(),
        slots,
        slots_unread: None,
        assigned: Vec::new(),
        setup,
        roster: Roster::new(cancel.clone(), b.shutdown_timeout_ms),
        exit_on_failure: b.on_pipeline_failure == crate::config::OnPipelineFailure::Exit,
        session: Duration::from_millis(
            u64::try_from(crate::config::group::session_timeout_ms(&config.kafka)).unwrap_or(0),
        ),
        unassigned_since: Some(std::time::Instant::now()),
        refresh: member.refresher(),
        health,
        metrics,
        cancel: cancel.clone(),
    };
    supervisor.report_uncovered(&prepared);
    let result = supervisor.serve(&mut changes, &mut reloads).await;
    supervisor.roster.stop_all().await;
    supervisor.metrics.owned.set(0);
    // The revocation of the leave finds no listener and returns at once.
    drop(changes);
    let _ = tokio::task::spawn_blocking(move || member.leave()).await;
    info!(group = %supervisor.group, "left the group");
    result
}

impl Supervisor {
    /// Handles changes, reloads and pipeline ends until `cancel` or a fatal error.
    async fn serve(
        &mut self,
        changes: &mut mpsc::UnboundedReceiver<Change>,
        reloads: &mut mpsc::UnboundedReceiver<Reload>,
    ) -> Result<(), BridgeError> {
        let (retake_tx, mut retakes) = mpsc::unbounded_channel::<(i32, String)>();
        let mut watchdog = tokio::time::interval(UNASSIGNED_WARNING);
        watchdog.tick().await;
        let mut recheck = tokio::time::interval(assign::RECHECK);
        recheck.tick().await;
        loop {
            tokio::select! {
                () = self.cancel.cancelled() => return Ok(()),
                _ = watchdog.tick() => {
                    if self.unassigned_since.is_some_and(|t| t.elapsed() >= UNASSIGNED_WARNING) {
                        warn!(group = %self.group, waited_s = UNASSIGNED_WARNING.as_secs(),
                              "no assignment from the group coordinator yet: its rebalance has \
                               not completed (check the group on the broker, e.g. a member that \
                               never left)");
                    }
                }
                _ = recheck.tick() => self.recheck().await,
                Some((slot, name)) = retakes.recv() => self.retake(slot, name).await,
                change = changes.recv() => match change {
                    Some(change) => self.apply(change).await,
                    None => return Ok(()),
                },
                Some(reload) = reloads.recv() => self.reload(reload).await,
                end = self.roster.next_end() => {
                    self.metrics.owned.set(self.roster.len() as i64);
                    match end.result {
                        Ok(Ended::Stopped | Ended::Refused) => {}
                        Ok(Ended::Fenced) if end.by_itself => {
                            // Taken by someone else while assigned here: if the group still
                            // assigns it here after a session timeout, take it again.
                            if let Some(slot) = end.slot {
                                let (tx, wait) = (retake_tx.clone(), self.session);
                                tokio::spawn(async move {
                                    tokio::time::sleep(wait).await;
                                    let _ = tx.send((slot, end.name));
                                });
                            }
                        }
                        Ok(Ended::Fenced) => {}
                        Err(error) if !end.by_itself || self.cancel.is_cancelled() => {
                            warn!(pipeline = %end.name, error = %error,
                                  "pipeline ended with an error while stopping");
                        }
                        Err(error) if self.exit_on_failure => {
                            self.cancel.cancel();
                            return Err(error);
                        }
                        Err(error) => {
                            // Isolated: it stays with this member, failed and named in
                            // /readyz, until a reload (SIGHUP) or a restart runs it again.
                            warn!(pipeline = %end.name, error = %error,
                                  "pipeline failed; the other pipelines run on");
                        }
                    }
                }
            }
        }
    }

    async fn apply(&mut self, change: Change) {
        match change {
            Change::Assigned(slots) => {
                self.metrics.rebalance("assigned");
                self.health.group_joined(true);
                self.unassigned_since = None;
                info!(group = %self.group, slots = ?slots, "assigned");
                self.refresh_slots().await;
                for slot in slots {
                    if !self.assigned.contains(&slot) {
                        self.assigned.push(slot);
                    }
                    self.assigned_one(slot).await;
                }
            }
            Change::Revoked { slots, lost, done } => {
                self.metrics
                    .rebalance(if lost { "lost" } else { "revoked" });
                if lost {
                    // The session is gone: not a member until the next assignment.
                    self.health.group_joined(false);
                    self.unassigned_since = Some(std::time::Instant::now());
                }
                info!(group = %self.group, slots = ?slots, lost, "revoked; stopping their pipelines");
                let started = std::time::Instant::now();
                self.assigned.retain(|s| !slots.contains(s));
                self.stop_slots(&slots).await;
                self.metrics
                    .revoke_duration
                    .observe(started.elapsed().as_secs_f64());
                let _ = done.try_send(());
            }
            Change::Error(reason) => {
                self.metrics.rebalance("error");
                warn!(group = %self.group, error = %reason, "group membership reported an error");
            }
        }
    }

    /// Records the configured pipelines whose slots have no partition of the control topic:
    /// no member can be assigned them (not ready, counted).
    fn report_uncovered(&mut self, prepared: &setup::Prepared) {
        let configured: Vec<&String> = self.templates.keys().collect();
        let uncovered = prepared.report_uncovered(&configured, &self.health);
        self.metrics.unassignable.set(uncovered as i64);
    }

    /// Stops the pipelines of `slots`; their health goes back to "elsewhere", also for one that
    /// already ended by itself (fenced while assigned here, so no longer in the roster), whose
    /// "fenced" state would otherwise keep `/readyz` at 503 on a member that no longer runs it.
    async fn stop_slots(&mut self, slots: &[i32]) {
        let stopped = self.roster.with_slots(slots);
        self.roster.stop(&stopped).await;
        let running = self.roster.names();
        let ended = slots.iter().filter_map(|slot| self.slots.get(slot));
        let ended = ended.filter(|name| !running.contains(name));
        for name in stopped.iter().chain(ended) {
            if let Some(ctx) = self.templates.get(name) {
                ctx.health
                    .elsewhere
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        for slot in slots {
            self.health.group_problem(&format!("slot {slot}"), None);
        }
        self.metrics.owned.set(self.roster.len() as i64);
    }

    /// Applies a reload: removed pipelines stop, changed ones restart with their new
    /// configuration if assigned here, added ones get slots (the rebalance brings them).
    async fn reload(&mut self, reload: Reload) {
        let Reload { removed, contexts } = reload;
        let running = self.roster.names();
        let stopping: Vec<String> = removed
            .iter()
            .chain(contexts.iter().map(|c| &c.pipeline.name))
            .filter(|n| running.contains(n))
            .cloned()
            .collect();
        self.roster.stop(&stopping).await;
        for name in &removed {
            self.templates.remove(name);
            self.health.remove_pipeline(name);
            self.health.group_problem(&format!("pipeline {name}"), None);
        }
        let added: Vec<String> = contexts
            .iter()
            .map(|c| c.pipeline.name.clone())
            .filter(|n| !self.templates.contains_key(n))
            .collect();
        for ctx in contexts {
            self.templates.insert(ctx.pipeline.name.clone(), ctx);
        }
        if !added.is_empty() {
            match self.setup.try_prepare(&added).await {
                Ok(prepared) => {
                    self.slots = prepared.slots.clone();
                    self.slots_unread = None;
                    self.report_uncovered(&prepared);
                    self.refresh
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
                Err(e) => {
                    error!(group = %self.group, error = %e,
                           "reload: the new pipelines' slots could not be prepared");
                    for name in &added {
                        let text = format!(
                            "added by a reload, but its slot could not be prepared ({e}); it \
                             runs nowhere until a member starts with this configuration"
                        );
                        self.health
                            .group_problem(&format!("pipeline {name}"), Some(text));
                    }
                }
            }
        }
        // Re-evaluate every assigned slot on the slots as they are now: a removed pipeline's
        // slot becomes a problem, a changed one restarts, an added one that was assigned
        // already starts.
        self.refresh_slots().await;
        for slot in self.assigned.clone() {
            let name = self.slots.get(&slot).cloned();
            let runs = name
                .as_ref()
                .is_some_and(|n| self.roster.names().contains(n));
            if !runs {
                self.assigned_one(slot).await;
            }
        }
    }
}
