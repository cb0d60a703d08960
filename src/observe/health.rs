//! Liveness and readiness state shared between the pipelines and the HTTP endpoint.
//!
//! Invariants:
//! - Pipelines only store atomics here on the hot path (the standby's owner note, written once a
//!   second by a standby, is the one short lock); the HTTP handlers only read.
//! - Ready means: not draining, and for every pipeline either it stands by (another instance
//!   owns it: a standby is ready, or it would stall a rolling update), or it is neither refused
//!   nor failed, no topic it writes is missing, its change stream is open, the server answers,
//!   and the oldest undelivered record is younger than `ready_max_delivery_age_ms`. Each reason
//!   names the pipeline (and the topic and namespace for a missing topic).
//! - Healthy means every running pipeline's loop (its relay, or its standby watch) ticked within
//!   `[bridge] liveness_timeout_ms`. A loop that ended resets its heartbeat to 0, so a pipeline
//!   between runs or standing by is never taken for a wedged one.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    // The system clock as milliseconds, without a calendar conversion (called per event).
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// One pipeline's state.
#[derive(Debug, Default)]
pub struct PipelineHealth {
    /// The change stream is open and being read.
    pub stream_open: AtomicBool,
    /// Unix ms when the oldest in-flight record was enqueued; 0 when none is in flight.
    pub oldest_in_flight_ms: AtomicI64,
    /// Unix ms of the pipeline loop's last tick; 0 when no loop runs.
    pub heartbeat_ms: AtomicI64,
    /// The pipeline stopped for good (fatal error or shutdown).
    pub stopped: AtomicBool,
    /// Unix ms when the source started waiting for the server's next answer; 0 when it is not
    /// waiting (it is handing events on).
    pub awaiting_server_since_ms: AtomicI64,
    /// An answer that takes longer than this (ms) makes the pipeline not ready: the server is
    /// unreachable while the driver retries (its server selection waits up to 30 s).
    pub server_answer_bound_ms: AtomicI64,
    /// The last run failed in Kafka (a delivery timed out or was refused): not ready until a
    /// delivery, or the cluster's metadata, answers again. A restarted run has nothing in
    /// flight at first, so the age of the oldest undelivered record cannot tell.
    pub kafka_failing: AtomicBool,
    /// Unix ms when the previous owner's lease ends, while a take-over waits for it before
    /// its first record (`pipeline/standby.rs`); 0 otherwise. Not ready meanwhile, saying so.
    pub lease_wait_until_ms: AtomicI64,
    /// While this instance stands by: the owner and the end of its lease (Unix ms).
    standby: Mutex<Option<(String, i64)>>,
    /// Why the pipeline was refused (it never runs in this process).
    refused: Mutex<Option<String>>,
    /// Why the pipeline stopped on a failure while the others run on (until SIGHUP or a
    /// restart runs it again).
    failed: Mutex<Option<String>>,
    /// A topic it writes that the cluster does not list, with its namespace, until the topic
    /// is listed or a record reaches it.
    topic_missing: Mutex<Option<(String, String)>>,
    /// Whether `topic_missing` holds a topic: the per-delivery check is one atomic load.
    any_topic_missing: AtomicBool,
    /// In a group: the pipeline is not assigned to this member (another one runs it). Such a
    /// pipeline counts for neither readiness nor liveness here.
    pub elsewhere: AtomicBool,
    /// The same failure kept ending its runs and its clients were rebuilt
    /// (`pipeline/recovery.rs`): what happened and the remedy, until a run commits again.
    escalated: Mutex<Option<String>>,
}

impl PipelineHealth {
    /// Records that this instance stands by while `owner` holds the lease until `until_ms`.
    pub(crate) fn set_standby(&self, owner: &str, until_ms: i64) {
        *self.standby.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((owner.to_owned(), until_ms));
    }

    /// Records that this instance no longer stands by (it owns the pipeline, or stopped).
    pub(crate) fn clear_standby(&self) {
        *self.standby.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Records that the pipeline was refused, and why.
    pub(crate) fn set_refused(&self, reason: &str) {
        *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.to_owned());
    }

    /// Records that the pipeline stopped on a failure, and why (what to do included).
    pub(crate) fn set_failed(&self, reason: &str) {
        *self.failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.to_owned());
    }

    /// Records that `topic` does not exist (`what`: the line for `/readyz`, naming it and its
    /// namespace); `true` when this begins an episode (no topic was missing before).
    pub(crate) fn set_topic_missing(&self, topic: &str, what: &str) -> bool {
        let mut missing = self.topic_missing.lock().unwrap_or_else(|e| e.into_inner());
        let began = missing.is_none();
        *missing = Some((topic.to_owned(), what.to_owned()));
        self.any_topic_missing.store(true, Ordering::Relaxed);
        began
    }

    /// Records that the pipeline escalated a failure that kept coming back (`text`: what
    /// happened, the last error and its remedy).
    pub(crate) fn set_escalated(&self, text: &str) {
        *self.escalated.lock().unwrap_or_else(|e| e.into_inner()) = Some(text.to_owned());
    }

    /// A run committed again: the escalation is over.
    pub(crate) fn clear_escalated(&self) {
        *self.escalated.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn escalated(&self) -> Option<String> {
        self.escalated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The topic is there again (or the pipeline no longer waits for one).
    pub(crate) fn clear_topic_missing(&self) {
        *self.topic_missing.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.any_topic_missing.store(false, Ordering::Relaxed);
    }

    /// A record for `topic` was delivered: when that topic was the missing one, the episode is
    /// over. A run may start before the cluster's metadata lists a topic just created (Kafka's
    /// `CreateTopics` says brokers learn of it asynchronously) and then deliver to it, with no
    /// later run to find it listed. Called per delivered event: one atomic load when no topic
    /// is missing.
    pub(crate) fn delivered_to(&self, topic: &str) {
        if !self.any_topic_missing.load(Ordering::Relaxed) {
            return;
        }
        let mut missing = self.topic_missing.lock().unwrap_or_else(|e| e.into_inner());
        if missing.as_ref().is_some_and(|(t, _)| t == topic) {
            *missing = None;
            self.any_topic_missing.store(false, Ordering::Relaxed);
        }
    }

    /// The missing topic and its `/readyz` line, if one is missing.
    pub(crate) fn topic_missing(&self) -> Option<(String, String)> {
        self.topic_missing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A new run begins (a group assigned the pipeline to this member, or a reload runs it
    /// again): forget how the last one ended.
    pub(crate) fn begin_run(&self) {
        *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = None;
        *self.failed.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.stopped.store(false, Ordering::Relaxed);
        self.elsewhere.store(false, Ordering::Relaxed);
    }

    pub(crate) fn refused(&self) -> Option<String> {
        self.refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn failed(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn standby(&self) -> Option<(String, i64)> {
        self.standby
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waiting for MongoDB's answer since `since_ms` (Unix ms); 0: not waiting.
    pub(crate) fn awaiting_server(&self, since_ms: i64) {
        self.awaiting_server_since_ms
            .store(since_ms, Ordering::Relaxed);
    }

    /// The loop ticked now.
    pub(crate) fn beat(&self) {
        self.heartbeat_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// The loop ended: nothing to watch until the next one starts.
    pub(crate) fn loop_ended(&self) {
        self.heartbeat_ms.store(0, Ordering::Relaxed);
    }
}

/// The whole process's state.
#[derive(Debug)]
pub struct Health {
    /// Shutdown began: not ready any more.
    pub draining: AtomicBool,
    /// Per pipeline, in config order (a reload adds and removes entries).
    pipelines: std::sync::RwLock<Vec<(String, Arc<PipelineHealth>)>>,
    /// A running loop that has not ticked for this long is wedged (ms).
    liveness_timeout_ms: i64,
    /// With `[bridge] group_id`: the membership's state.
    group: Mutex<Option<GroupHealth>>,
}

/// A group member's state, for `/readyz`.
#[derive(Debug, Clone, Default)]
struct GroupHealth {
    id: String,
    joined: bool,
    /// Per slot (`slot 3`) or pipeline: why this member cannot run it.
    problems: std::collections::BTreeMap<String, String>,
    /// The last error that keeps this member from joining.
    error: Option<String>,
}

/// What `/readyz` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// Ready for traffic (200) or not (503).
    pub ready: bool,
    /// One line per reason or note, e.g. `pipeline orders: standby, owner … until …`.
    pub lines: Vec<String>,
}

impl Health {
    /// State for the named pipelines, whose loops are wedged after `liveness_timeout_ms`.
    pub fn new(names: impl IntoIterator<Item = String>, liveness_timeout_ms: u64) -> Self {
        Self {
            draining: AtomicBool::new(false),
            pipelines: std::sync::RwLock::new(
                names.into_iter().map(|n| (n, Arc::default())).collect(),
            ),
            liveness_timeout_ms: i64::try_from(liveness_timeout_ms).unwrap_or(i64::MAX),
            group: Mutex::new(None),
        }
    }

    /// This process is a member of group `id` (not yet joined): every pipeline starts as
    /// assigned elsewhere.
    pub(crate) fn set_group(&self, id: &str) {
        *self.group.lock().unwrap_or_else(|e| e.into_inner()) = Some(GroupHealth {
            id: id.to_owned(),
            ..GroupHealth::default()
        });
        for (_, p) in self.list().iter() {
            p.elsewhere.store(true, Ordering::Relaxed);
        }
    }

    /// An assignment arrived (possibly empty; `true`): this member has joined; or its session
    /// was lost (`false`): not a member until the next assignment.
    pub(crate) fn group_joined(&self, joined: bool) {
        self.with_group(|g| g.joined = joined);
    }

    /// Records why this member cannot run `what` (`slot 3`, or a pipeline), `None`: the
    /// problem is gone.
    pub(crate) fn group_problem(&self, what: &str, problem: Option<String>) {
        self.with_group(|g| {
            match problem {
                Some(text) => g.problems.insert(what.to_owned(), text),
                None => g.problems.remove(what),
            };
        });
    }

    /// Records the last error that keeps this member from joining (`None`: it joined).
    pub(crate) fn group_error(&self, error: Option<String>) {
        self.with_group(|g| g.error = error);
    }

    /// Applies `change` to the group state, if this process is a group member.
    fn with_group(&self, change: impl FnOnce(&mut GroupHealth)) {
        if let Some(g) = self
            .group
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            change(g);
        }
    }

    fn group(&self) -> Option<GroupHealth> {
        self.group.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn list(&self) -> std::sync::RwLockReadGuard<'_, Vec<(String, Arc<PipelineHealth>)>> {
        self.pipelines.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether pipeline `name` stopped on a failure or was refused (and no run began since):
    /// a reload runs it again.
    pub(crate) fn stopped(&self, name: &str) -> bool {
        self.list()
            .iter()
            .any(|(n, p)| n == name && (p.failed().is_some() || p.refused().is_some()))
    }

    /// The pipelines' names, in order.
    pub fn names(&self) -> Vec<String> {
        self.list().iter().map(|(n, _)| n.clone()).collect()
    }

    /// The state of pipeline `name`, created when a reload added it (assigned elsewhere until
    /// its run begins, in a group).
    pub(crate) fn pipeline(&self, name: &str) -> Arc<PipelineHealth> {
        if let Some((_, health)) = self.list().iter().find(|(n, _)| n == name) {
            return Arc::clone(health);
        }
        let health = Arc::new(PipelineHealth::default());
        if self.group().is_some() {
            health.elsewhere.store(true, Ordering::Relaxed);
        }
        let mut list = self.pipelines.write().unwrap_or_else(|e| e.into_inner());
        list.push((name.to_owned(), Arc::clone(&health)));
        health
    }

    /// Forgets pipeline `name` (a reload removed it).
    pub(crate) fn remove_pipeline(&self, name: &str) {
        let mut list = self.pipelines.write().unwrap_or_else(|e| e.into_inner());
        list.retain(|(n, _)| n != name);
    }

    /// `Ok(())` when no running pipeline is wedged, else the reasons.
    pub fn liveness(&self) -> Result<(), String> {
        let now = now_ms();
        let limit = self.liveness_timeout_ms;
        let wedged: Vec<String> = self
            .list()
            .iter()
            .filter(|(_, p)| !p.stopped.load(Ordering::Relaxed))
            .filter(|(_, p)| {
                let beat = p.heartbeat_ms.load(Ordering::Relaxed);
                beat > 0 && now - beat > limit
            })
            .map(|(name, _)| format!("pipeline {name}: loop has not ticked for over {limit} ms"))
            .collect();
        if wedged.is_empty() {
            Ok(())
        } else {
            Err(wedged.join("\n"))
        }
    }
}

mod readiness;
#[cfg(test)]
mod tests;
