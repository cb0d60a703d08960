//! Constructors that build a metric family and register it once in a registry.

use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
};

/// Registers an integer counter family with `labels`.
pub(super) fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("metric names are valid");
    r.register(Box::new(c.clone()))
        .expect("each metric is registered once");
    c
}

/// Registers an integer gauge family labelled by `pipeline`.
pub(super) fn gauge(r: &Registry, name: &str, help: &str) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), &["pipeline"]).expect("metric names are valid");
    r.register(Box::new(g.clone()))
        .expect("each metric is registered once");
    g
}

/// Registers a float gauge family labelled by `pipeline`.
pub(super) fn float_gauge(r: &Registry, name: &str, help: &str) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(name, help), &["pipeline"]).expect("metric names are valid");
    r.register(Box::new(g.clone()))
        .expect("each metric is registered once");
    g
}

/// Exponential second buckets from 1 ms, doubling, `count` of them (17 → ~65 s, 20 → ~524 s).
pub(super) fn seconds_buckets(count: usize) -> Vec<f64> {
    prometheus::exponential_buckets(0.001, 2.0, count).expect("valid bucket layout")
}

/// Registers a histogram family with `labels` and `buckets` (seconds).
pub(super) fn histogram(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: Vec<f64>,
) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
        .expect("metric names are valid");
    r.register(Box::new(h.clone()))
        .expect("each metric is registered once");
    h
}
