//! The heartbeat series (`heartbeat_interval_ms`, README "Heartbeats"; `config/heartbeat.rs`
//! lists the feature's pieces): heartbeats written, when the last one was, and the configured
//! interval, so an alert can tell a late heartbeat without knowing each pipeline's setting.
//!
//! Invariants: a heartbeat counts once it is delivered (at least once) or its transaction
//! committed (exactly once), never when merely enqueued; pipelines without heartbeats export
//! none of these series.

use prometheus::{Gauge, GaugeVec, IntCounter, IntCounterVec, Opts, Registry};

use super::families::counter;
use super::names::{HEARTBEAT_INTERVAL, HEARTBEAT_TIMESTAMP, HEARTBEATS};

/// The heartbeat families of a registry.
#[derive(Clone)]
pub(super) struct Families {
    written: IntCounterVec,
    last: GaugeVec,
    interval: GaugeVec,
}

fn gauge(r: &Registry, name: &str, help: &str) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(name, help), &["pipeline"]).expect("metric names are valid");
    r.register(Box::new(g.clone()))
        .expect("each metric is registered once");
    g
}

impl Families {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            written: counter(
                r,
                HEARTBEATS,
                "Heartbeat records delivered (exactly once: committed).",
                &["pipeline"],
            ),
            last: gauge(
                r,
                HEARTBEAT_TIMESTAMP,
                "When the last delivered heartbeat was written (before the first: when the \
                 pipeline first started in this process), Unix seconds.",
            ),
            interval: gauge(
                r,
                HEARTBEAT_INTERVAL,
                "The configured heartbeat_interval_ms, in seconds.",
            ),
        }
    }

    pub(super) fn pipeline(&self, name: &str) -> HeartbeatMetrics {
        HeartbeatMetrics {
            written: self.written.with_label_values(&[name]),
            last: self.last.with_label_values(&[name]),
            interval: self.interval.with_label_values(&[name]),
        }
    }
}

/// One pipeline's heartbeat handles. Cheap to clone.
#[derive(Clone)]
pub struct HeartbeatMetrics {
    /// Heartbeats delivered or committed.
    pub written: IntCounter,
    /// The last one's wall time, Unix seconds.
    pub last: Gauge,
    /// The interval, seconds.
    pub interval: Gauge,
}

impl HeartbeatMetrics {
    /// A heartbeat made at `wall_time_ms` was delivered (or committed).
    pub fn delivered(&self, wall_time_ms: i64) {
        self.written.inc();
        self.last.set(wall_time_ms as f64 / 1000.0);
    }
}
