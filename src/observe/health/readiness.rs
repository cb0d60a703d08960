//! `/readyz`'s rule: which state makes the process not ready, and the line that says why.
//!
//! Invariants (the rule of the module doc of `health.rs`): every reason names its pipeline
//! (or the group); a pipeline assigned elsewhere counts for nothing here; a refused or failed
//! pipeline gives that one reason; a standby is a note, never a reason.

use std::sync::atomic::Ordering;

use super::{Health, PipelineHealth, Readiness, now_ms};

impl Health {
    /// Readiness, with the reasons when not ready and the standby notes either way.
    pub fn readiness(&self, max_delivery_age_ms: i64) -> Readiness {
        let now = now_ms();
        let mut reasons = Vec::new();
        let mut notes = Vec::new();
        if self.draining.load(Ordering::Relaxed) {
            reasons.push("draining: shutdown in progress".to_owned());
        }
        self.group_lines(&mut reasons, &mut notes);
        for (name, p) in self.list().iter() {
            if !p.elsewhere.load(Ordering::Relaxed) {
                pipeline_lines(name, p, now, max_delivery_age_ms, &mut reasons, &mut notes);
            }
        }
        let ready = reasons.is_empty();
        reasons.extend(notes);
        Readiness {
            ready,
            lines: reasons,
        }
    }

    /// The group membership's reasons and notes, if this process is a member.
    fn group_lines(&self, reasons: &mut Vec<String>, notes: &mut Vec<String>) {
        let Some(g) = self.group() else { return };
        if g.joined {
            let list = self.list();
            let runs = |p: &PipelineHealth| {
                !p.elsewhere.load(Ordering::Relaxed) && !p.stopped.load(Ordering::Relaxed)
            };
            let owned = list.iter().filter(|(_, p)| runs(p));
            notes.push(format!(
                "group {}: member, runs {} pipeline(s)",
                g.id,
                owned.count()
            ));
        } else {
            let last = g.error.as_ref().map(|e| format!(" (last error: {e})"));
            reasons.push(format!(
                "group {}: joining, no assignment yet{}",
                g.id,
                last.unwrap_or_default()
            ));
        }
        for (what, problem) in &g.problems {
            reasons.push(format!("group {}: {what}: {problem}", g.id));
        }
    }
}

/// Pipeline `name`'s reasons and notes at `now` (Unix ms).
fn pipeline_lines(
    name: &str,
    p: &PipelineHealth,
    now: i64,
    max_delivery_age_ms: i64,
    reasons: &mut Vec<String>,
    notes: &mut Vec<String>,
) {
    if let Some(reason) = p.refused() {
        reasons.push(format!("pipeline {name}: refused: {reason}"));
        return;
    }
    if let Some(reason) = p.failed() {
        reasons.push(format!("pipeline {name}: failed: {reason}"));
        return;
    }
    if let Some((_, missing)) = p.topic_missing() {
        reasons.push(format!("pipeline {name}: {missing}"));
    }
    if let Some((owner, until)) = p.standby() {
        notes.push(format!(
            "pipeline {name}: standby, owner {owner} until {}",
            crate::event::rfc3339_seconds(until / 1000)
        ));
        return;
    }
    if let Some(text) = p.escalated() {
        reasons.push(format!("pipeline {name}: {text}"));
    }
    let lease_wait = p.lease_wait_until_ms.load(Ordering::Relaxed);
    if lease_wait > now {
        reasons.push(format!(
            "pipeline {name}: taken; waiting {} ms more for the previous owner's lease to end \
             before the first record (its queued records expire by then: per-document order)",
            lease_wait - now
        ));
    } else if !p.stream_open.load(Ordering::Relaxed) {
        reasons.push(format!("pipeline {name}: change stream not open"));
    }
    if p.kafka_failing.load(Ordering::Relaxed) {
        reasons.push(format!(
            "pipeline {name}: Kafka deliveries failed; restarted, waiting for Kafka to answer \
             again"
        ));
    }
    let waiting = p.awaiting_server_since_ms.load(Ordering::Relaxed);
    let bound = p.server_answer_bound_ms.load(Ordering::Relaxed);
    if waiting > 0 && bound > 0 && now - waiting > bound {
        reasons.push(format!(
            "pipeline {name}: no answer from MongoDB for {} ms",
            now - waiting
        ));
    }
    let oldest = p.oldest_in_flight_ms.load(Ordering::Relaxed);
    if oldest > 0 && now - oldest > max_delivery_age_ms {
        reasons.push(format!(
            "pipeline {name}: oldest undelivered record is {} ms old",
            now - oldest
        ));
    }
}
