//! What an assigned slot runs: the member reads the group's slot → pipeline map from MongoDB
//! ([`crate::offsets::group`]) whenever it decides, and starts the pipeline the map names there
//! if its configuration defines it.
//!
//! Why it reads rather than trusts its copy: `offsets reset NAME --delete` frees a slot while
//! members run, and the next configuration that adds a pipeline may be allocated that number.
//! A member's copy can then still say "slot N → NAME" for a pipeline whose offsets were
//! deleted, and starting NAME there would run a deleted pipeline from scratch in another
//! pipeline's slot (seen before this module: issue 24).
//!
//! Invariants:
//! - The map is read again before every decision to start a pipeline: once per assignment (a
//!   rebalance), before a fenced pipeline is taken again, on a reload, and every [`RECHECK`]
//!   while an assigned slot runs nothing here (so a retired slot's problem clears and a
//!   reused slot's is reported under its new pipeline's name without waiting for a rebalance).
//! - While the map cannot be read, an assigned slot runs nothing (not ready, with the error);
//!   the next [`RECHECK`] tries again. A copy is never used in its place.
//! - A fenced pipeline that no longer has a slot (`offsets reset NAME --delete --force` while
//!   it ran here) is not taken again: it stays stopped and the member is not ready, naming it,
//!   until its configuration no longer defines it.
//! - The re-check re-evaluates only slots whose pipeline changed (or after a failed read), so
//!   a refused or failed pipeline is not restarted by it.

use std::time::Duration;

use tracing::{error, info, warn};

use super::Supervisor;

/// How often a member with an assigned slot that runs nothing reads the slots again.
pub(super) const RECHECK: Duration = Duration::from_secs(10);

impl Supervisor {
    /// Reads the slots again into `self.slots`; whether that worked (else the error is kept in
    /// `self.slots_unread` and every assigned slot is held until a read works).
    pub(super) async fn refresh_slots(&mut self) -> bool {
        match self.setup.read_slots().await {
            Ok(read) => {
                self.slots = read;
                self.slots_unread = None;
                true
            }
            Err(e) => {
                warn!(group = %self.group, error = %e,
                      "cannot read the group's slots; assigned slots wait for the next read");
                self.slots_unread = Some(e);
                false
            }
        }
    }

    /// The assigned slots that run nothing here.
    fn idle_slots(&self) -> Vec<i32> {
        let assigned = self.assigned.iter().copied();
        assigned
            .filter(|s| self.roster.with_slots(&[*s]).is_empty())
            .collect()
    }

    /// Every [`RECHECK`]: if an assigned slot runs nothing, reads the slots and re-evaluates
    /// the idle slots whose pipeline changed (all of them after a failed read).
    pub(super) async fn recheck(&mut self) {
        let idle = self.idle_slots();
        if idle.is_empty() {
            return;
        }
        let (was_unread, before) = (self.slots_unread.is_some(), self.slots.clone());
        if !self.refresh_slots().await {
            return;
        }
        for slot in idle {
            if was_unread || before.get(&slot) != self.slots.get(&slot) {
                info!(group = %self.group, slot, pipeline = ?self.slots.get(&slot),
                      "an assigned slot's pipeline changed in MongoDB; evaluating it again");
                self.assigned_one(slot).await;
            }
        }
    }

    /// Pipeline `name`, fenced while it ran in `slot`, a session timeout later: taken again if
    /// the group still assigns `slot` here and the slot still belongs to it; reported (and not
    /// taken) if it no longer has a slot.
    pub(super) async fn retake(&mut self, slot: i32, name: String) {
        if !self.refresh_slots().await {
            return; // the re-check evaluates the slot once the slots can be read
        }
        let idle = self.assigned.contains(&slot) && self.roster.with_slots(&[slot]).is_empty();
        if !self.slots.values().any(|n| *n == name) {
            let text = format!(
                "fenced while it ran in slot {slot}, and it has no slot any more (`offsets reset \
                 {name} --delete --force` deleted its offsets and freed its slot): not taken \
                 again. Remove it from every member's configuration (a member that starts with \
                 it still configured allocates it a new slot and runs it from its start_at)"
            );
            error!(group = %self.group, pipeline = %name, slot, problem = %text,
                   "a deleted pipeline stays stopped");
            self.health
                .group_problem(&format!("pipeline {name}"), Some(text));
        } else if idle && self.slots.get(&slot) == Some(&name) {
            info!(group = %self.group, pipeline = %name, slot,
                  "the group still assigns the fenced pipeline here: taking it again");
        }
        if idle {
            self.assigned_one(slot).await;
        }
    }

    /// Starts the pipeline of assigned `slot` as the slots last read name it, or records why
    /// this member cannot. Callers read the slots first ([`Supervisor::refresh_slots`]).
    pub(super) async fn assigned_one(&mut self, slot: i32) {
        let problem = match (&self.slots_unread, self.slots.get(&slot).cloned()) {
            (Some(e), _) => Some(format!(
                "the group's slots could not be read from MongoDB ({e}): nothing runs in this \
                 slot until they can (read again every {} s)",
                RECHECK.as_secs()
            )),
            (None, None) => None, // a retired slot (its pipeline's offsets were deleted)
            (None, Some(name)) => match self.templates.get(&name) {
                Some(ctx) => {
                    info!(group = %self.group, pipeline = %name, slot, "starting the assigned pipeline");
                    self.roster.start(ctx.clone(), Some(slot)).await;
                    None
                }
                None => Some(format!(
                    "assigned pipeline {name:?}, which this member's configuration does not \
                     define: roll the same [[pipelines]] out to every member (or retire a \
                     removed pipeline with `mongo-kafka-bridge offsets reset {name} --delete --config FILE`)"
                )),
            },
        };
        if let Some(text) = &problem {
            error!(group = %self.group, slot, problem = %text, "cannot run an assigned slot");
        }
        self.health.group_problem(&format!("slot {slot}"), problem);
        self.metrics.owned.set(self.roster.len() as i64);
    }
}
