//! The group membership's series (`[bridge] group_id`): rebalances by kind, how long a
//! revocation's drain took, how many pipelines this member runs, and how many configured
//! pipelines no member can run (their slot has no partition).
//!
//! Invariant: the `kind` label is one of `assigned`, `revoked`, `lost`, `error`.

use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGauge, Opts, Registry};

use super::families::{counter, seconds_buckets};
use super::names::{GROUP_OWNED, GROUP_REBALANCES, GROUP_REVOKE_DURATION, GROUP_UNASSIGNABLE};

/// The group series of a registry (clones share them).
#[derive(Clone)]
pub struct GroupMetrics {
    rebalances: IntCounterVec,
    /// Seconds from a revocation's arrival to the revoked pipelines' stop.
    pub revoke_duration: Histogram,
    /// Pipelines this member runs.
    pub owned: IntGauge,
    /// Configured pipelines whose slot has no partition of the control topic.
    pub unassignable: IntGauge,
}

impl GroupMetrics {
    pub(super) fn register(r: &Registry) -> Self {
        let revoke_duration = Histogram::with_opts(
            HistogramOpts::new(
                GROUP_REVOKE_DURATION,
                "Revocation to the revoked pipelines' stop (drain, commit, release), seconds.",
            )
            .buckets(seconds_buckets(17)),
        )
        .expect("metric names are valid");
        r.register(Box::new(revoke_duration.clone()))
            .expect("each metric is registered once");
        let owned = IntGauge::with_opts(Opts::new(
            GROUP_OWNED,
            "Pipelines the group assigned to this member and that it runs.",
        ))
        .expect("metric names are valid");
        r.register(Box::new(owned.clone()))
            .expect("each metric is registered once");
        let unassignable = IntGauge::with_opts(Opts::new(
            GROUP_UNASSIGNABLE,
            "Configured pipelines whose slot has no partition of the control topic: no member \
             can run them.",
        ))
        .expect("metric names are valid");
        r.register(Box::new(unassignable.clone()))
            .expect("each metric is registered once");
        Self {
            rebalances: counter(
                r,
                GROUP_REBALANCES,
                "Changes of this member's assignment, by kind.",
                &["kind"],
            ),
            revoke_duration,
            owned,
            unassignable,
        }
    }

    /// Counts one rebalance callback of `kind` (`assigned`, `revoked`, `lost`, `error`).
    pub fn rebalance(&self, kind: &'static str) {
        self.rebalances.with_label_values(&[kind]).inc();
    }
}
