//! Liveness and readiness state shared between the pipelines and the HTTP endpoint.
//!
//! Invariants: pipelines only store atomics here (no locks on the hot path); the HTTP handlers
//! only read them. Ready means: not draining, and for every pipeline the change stream is open
//! and the oldest undelivered record is younger than `ready_max_delivery_age_ms`. Healthy means
//! every running pipeline's loop ticked within [`WEDGED_AFTER_MS`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// A pipeline loop that has not ticked for this long is reported wedged by `/healthz` (ms).
pub const WEDGED_AFTER_MS: i64 = 120_000;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// One pipeline's state.
#[derive(Debug, Default)]
pub struct PipelineHealth {
    /// The change stream is open and being read.
    pub stream_open: AtomicBool,
    /// Unix ms when the oldest in-flight record was enqueued; 0 when none is in flight.
    pub oldest_in_flight_ms: AtomicI64,
    /// Unix ms of the relay loop's last tick; 0 when the pipeline is not running.
    pub heartbeat_ms: AtomicI64,
    /// The pipeline stopped for good (fatal error or shutdown).
    pub stopped: AtomicBool,
    /// Unix ms when the source started waiting for the server's next answer; 0 when it is not
    /// waiting (it is handing events on).
    pub awaiting_server_since_ms: AtomicI64,
    /// An answer that takes longer than this (ms) makes the pipeline not ready: the server is
    /// unreachable while the driver retries (its server selection waits up to 30 s).
    pub server_answer_bound_ms: AtomicI64,
}

/// The whole process's state.
#[derive(Debug, Default)]
pub struct Health {
    /// Shutdown began: not ready any more.
    pub draining: AtomicBool,
    /// Per pipeline, in config order.
    pub pipelines: Vec<(String, Arc<PipelineHealth>)>,
}

impl Health {
    /// State for the named pipelines.
    pub fn new(names: impl IntoIterator<Item = String>) -> Self {
        Self {
            draining: AtomicBool::new(false),
            pipelines: names.into_iter().map(|n| (n, Arc::default())).collect(),
        }
    }

    /// The state of pipeline `name`; panics only if `name` was not configured (an invariant of
    /// the app, which builds both from the same list).
    pub fn pipeline(&self, name: &str) -> Arc<PipelineHealth> {
        let (_, health) = self
            .pipelines
            .iter()
            .find(|(n, _)| n == name)
            .expect("health state exists for every configured pipeline");
        Arc::clone(health)
    }

    /// `Ok(())` when ready, else the reasons, one per line.
    pub fn readiness(&self, max_delivery_age_ms: i64) -> Result<(), String> {
        let now = now_ms();
        let mut reasons = Vec::new();
        if self.draining.load(Ordering::Relaxed) {
            reasons.push("draining: shutdown in progress".to_owned());
        }
        for (name, p) in &self.pipelines {
            if !p.stream_open.load(Ordering::Relaxed) {
                reasons.push(format!("pipeline {name}: change stream not open"));
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
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons.join("\n"))
        }
    }

    /// `Ok(())` when no running pipeline is wedged, else the reasons.
    pub fn liveness(&self) -> Result<(), String> {
        let now = now_ms();
        let wedged: Vec<String> = self
            .pipelines
            .iter()
            .filter(|(_, p)| !p.stopped.load(Ordering::Relaxed))
            .filter(|(_, p)| {
                let beat = p.heartbeat_ms.load(Ordering::Relaxed);
                beat > 0 && now - beat > WEDGED_AFTER_MS
            })
            .map(|(name, _)| {
                format!("pipeline {name}: loop has not ticked for over {WEDGED_AFTER_MS} ms")
            })
            .collect();
        if wedged.is_empty() {
            Ok(())
        } else {
            Err(wedged.join("\n"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_reports_closed_stream_stale_delivery_and_draining() {
        let health = Health::new(["a".to_owned()]);
        assert_eq!(
            health.readiness(1000),
            Err("pipeline a: change stream not open".to_owned())
        );
        let a = health.pipeline("a");
        a.stream_open.store(true, Ordering::Relaxed);
        assert_eq!(health.readiness(1000), Ok(()));
        a.oldest_in_flight_ms
            .store(now_ms() - 5000, Ordering::Relaxed);
        assert!(
            health
                .readiness(1000)
                .is_err_and(|r| r.contains("oldest undelivered"))
        );
        a.oldest_in_flight_ms.store(0, Ordering::Relaxed);
        health.draining.store(true, Ordering::Relaxed);
        assert_eq!(
            health.readiness(1000),
            Err("draining: shutdown in progress".to_owned())
        );
    }

    #[test]
    fn readiness_reports_a_server_that_does_not_answer() {
        let health = Health::new(["a".to_owned()]);
        let a = health.pipeline("a");
        a.stream_open.store(true, Ordering::Relaxed);
        a.server_answer_bound_ms.store(6000, Ordering::Relaxed);
        a.awaiting_server_since_ms
            .store(now_ms() - 1000, Ordering::Relaxed);
        assert_eq!(health.readiness(60_000), Ok(()));
        a.awaiting_server_since_ms
            .store(now_ms() - 7000, Ordering::Relaxed);
        assert!(
            health
                .readiness(60_000)
                .is_err_and(|r| r.contains("no answer from MongoDB"))
        );
    }

    #[test]
    fn liveness_flags_a_stale_heartbeat() {
        let health = Health::new(["a".to_owned()]);
        assert_eq!(health.liveness(), Ok(()));
        health
            .pipeline("a")
            .heartbeat_ms
            .store(now_ms() - WEDGED_AFTER_MS - 1, Ordering::Relaxed);
        assert!(health.liveness().is_err());
    }
}
