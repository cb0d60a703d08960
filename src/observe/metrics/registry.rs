//! The registry of every family, and the scrape-time gauges (checkpoint lag, history headroom,
//! oplog window) computed when `/metrics` is read.
//!
//! Invariant: the registry is the process's own (not prometheus' global one), so tests build
//! their own; a pipeline a reload removed exports no series.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus::{Encoder, GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};

use super::exactly_once::{self, TransactionMetrics};
use super::families::{
    CheckpointFamilies, DeliveryFamilies, LifecycleFamilies, SourceFamilies, counter,
};
use super::group::GroupMetrics;
use super::names::{BUILD_INFO, CONFIG_RELOADS, GIT_SHA, HISTORY_WINDOW};
use super::{heartbeat, librdkafka, routing, snapshot};

/// All metric families, registered in one (non-global) registry. Cheap to clone (handles).
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub(super) source: SourceFamilies,
    pub(super) delivery: DeliveryFamilies,
    pub(super) checkpoint: CheckpointFamilies,
    pub(super) lifecycle: LifecycleFamilies,
    history_window: GaugeVec,
    pub(super) rdkafka: librdkafka::Families,
    pub(super) snapshot: snapshot::Families,
    transactions: exactly_once::Families,
    pub(super) heartbeats: heartbeat::Families,
    pub(super) routing: routing::Families,
    /// The group membership's series.
    pub group: GroupMetrics,
    reloads: IntCounterVec,
    /// Committed position time (Unix seconds) per pipeline, for the scrape-time lag and headroom.
    pub(super) committed: Arc<Mutex<HashMap<String, f64>>>,
    /// Oldest and newest oplog entry times (Unix seconds), when the server reports them.
    oplog: Arc<Mutex<Option<(f64, f64)>>>,
    /// Pipelines a reload removed: their series are no longer exported.
    retired: Arc<Mutex<std::collections::HashSet<String>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every family in a fresh registry.
    pub fn new() -> Self {
        let r = Registry::new();
        let build = IntGaugeVec::new(
            Opts::new(BUILD_INFO, "Build information."),
            &["version", "git_sha"],
        )
        .expect("metric names are valid");
        r.register(Box::new(build.clone()))
            .expect("each metric is registered once");
        build
            .with_label_values(&[env!("CARGO_PKG_VERSION"), GIT_SHA])
            .set(1);
        let history_window =
            GaugeVec::new(Opts::new(HISTORY_WINDOW, "Oplog window, seconds."), &[])
                .expect("metric names are valid");
        r.register(Box::new(history_window.clone()))
            .expect("each metric is registered once");
        Self {
            source: SourceFamilies::register(&r),
            delivery: DeliveryFamilies::register(&r),
            checkpoint: CheckpointFamilies::register(&r),
            lifecycle: LifecycleFamilies::register(&r),
            history_window,
            rdkafka: librdkafka::Families::register(&r),
            snapshot: snapshot::Families::register(&r),
            transactions: exactly_once::Families::register(&r),
            heartbeats: heartbeat::Families::register(&r),
            routing: routing::Families::register(&r),
            group: GroupMetrics::register(&r),
            reloads: counter(
                &r,
                CONFIG_RELOADS,
                "Configuration reloads (SIGHUP), by outcome.",
                &["outcome"],
            ),
            committed: Arc::default(),
            oplog: Arc::default(),
            retired: Arc::default(),
            registry: r,
        }
    }

    /// The Kafka transaction handles of pipeline `name` (exactly-once pipelines only, so
    /// at-least-once ones export no transaction series).
    pub(crate) fn transactions(&self, name: &str) -> TransactionMetrics {
        self.transactions.pipeline(name)
    }

    /// Committed position times (Unix seconds) by pipeline, as last reported by the checkpointer.
    fn committed_positions(&self) -> Vec<(String, f64)> {
        let map = self.committed.lock().unwrap_or_else(|e| e.into_inner());
        map.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Stores the oldest and newest oplog entry times (Unix seconds) the server reported, or
    /// `None` when it could not tell: then the history series are absent.
    pub(crate) fn set_history(&self, oplog: Option<(f64, f64)>) {
        *self.oplog.lock().unwrap_or_else(|e| e.into_inner()) = oplog;
    }

    /// Sets the scrape-time gauges: checkpoint lag and history headroom from the committed
    /// positions, the oplog window.
    fn refresh(&self) {
        let now = chrono::Utc::now().timestamp_millis() as f64 / 1000.0;
        let positions = self.committed_positions();
        for (pipeline, at) in &positions {
            self.checkpoint
                .checkpoint_lag
                .with_label_values(&[pipeline])
                .set((now - at).max(0.0));
        }
        let oplog = *self.oplog.lock().unwrap_or_else(|e| e.into_inner());
        match oplog {
            Some((oldest, newest)) => {
                self.history_window
                    .with_label_values(&[] as &[&str])
                    .set((newest - oldest).max(0.0));
                for (pipeline, at) in &positions {
                    self.checkpoint
                        .history_headroom
                        .with_label_values(&[pipeline])
                        .set(at - oldest);
                }
            }
            None => {
                self.history_window.reset();
                self.checkpoint.history_headroom.reset();
            }
        }
    }

    /// The text exposition format of every family; refreshes the scrape-time gauges first.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.gather(), &mut out)
            .unwrap_or_default();
        String::from_utf8(out).unwrap_or_default()
    }

    /// Every family's current samples (for the terminal status), without the series of
    /// retired pipelines.
    pub(crate) fn gather(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.refresh();
        let mut families = self.registry.gather();
        let retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        if retired.is_empty() {
            return families;
        }
        let live = |m: &prometheus::proto::Metric| {
            !m.get_label()
                .iter()
                .any(|l| l.name() == "pipeline" && retired.contains(l.value()))
        };
        for family in &mut families {
            let kept: Vec<_> = family.take_metric().into_iter().filter(live).collect();
            family.set_metric(kept);
        }
        families.retain(|f| !f.get_metric().is_empty());
        families
    }

    /// Counts one configuration reload with `outcome` (`applied`, `unchanged`, `rejected`).
    pub fn reload(&self, outcome: &'static str) {
        self.reloads.with_label_values(&[outcome]).inc();
    }

    /// Stops (`true`) or resumes (`false`) exporting the series of pipeline `name` (a reload
    /// removed or added it).
    pub(crate) fn retire(&self, name: &str, retired: bool) {
        let mut set = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        if retired {
            set.insert(name.to_owned());
        } else {
            set.remove(name);
        }
    }
}
