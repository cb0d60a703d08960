//! Reading current values back out of the registry (for the terminal status and tests).

use prometheus::proto::{MetricFamily, MetricType};

use super::names::{
    CHECKPOINT_LAG, CHECKPOINT_TIMESTAMP, IN_FLIGHT_EVENTS, SNAPSHOT_DOCUMENTS, SNAPSHOT_REMAINING,
    SNAPSHOT_RUNNING, SOURCE_EVENTS, SOURCE_LAG, STREAM_OPEN,
};

/// The sum of every sample of family `name` whose labels include all of `labels`
/// (counters, gauges; a histogram's sample count). `None` when no sample matches.
pub(crate) fn sum(families: &[MetricFamily], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let family = families.iter().find(|f| f.name() == name)?;
    let mut total = None;
    for m in family.get_metric() {
        let matches = labels.iter().all(|(k, v)| {
            m.get_label()
                .iter()
                .any(|l| l.name() == *k && l.value() == *v)
        });
        if !matches {
            continue;
        }
        let value = match family.get_field_type() {
            MetricType::COUNTER => m.get_counter().get_value(),
            MetricType::GAUGE => m.get_gauge().get_value(),
            MetricType::HISTOGRAM => m.get_histogram().get_sample_count() as f64,
            _ => continue,
        };
        *total.get_or_insert(0.0) += value;
    }
    total
}

/// What the terminal status shows for one pipeline.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PipelineSnapshot {
    /// Change events read so far.
    pub events: f64,
    /// Events enqueued and not yet delivered.
    pub in_flight: f64,
    /// Seconds between now and the last event read's clusterTime.
    pub source_lag_s: Option<f64>,
    /// Seconds between now and the committed position's cluster time.
    pub checkpoint_lag_s: Option<f64>,
    /// Committed clusterTime (Unix seconds).
    pub committed_at: Option<f64>,
    /// The change stream is open.
    pub stream_open: bool,
    /// Documents a snapshot copied so far (every namespace).
    pub copied: f64,
    /// Estimate of the documents the running copies have left; `None` while none runs.
    pub copy_remaining: Option<f64>,
}

impl PipelineSnapshot {
    /// Reads pipeline `name`'s values from `families`.
    pub(crate) fn read(families: &[MetricFamily], name: &str) -> Self {
        let p = [("pipeline", name)];
        let get = |metric: &str| sum(families, metric, &p);
        Self {
            events: get(SOURCE_EVENTS).unwrap_or(0.0),
            in_flight: get(IN_FLIGHT_EVENTS).unwrap_or(0.0),
            source_lag_s: get(SOURCE_LAG),
            checkpoint_lag_s: get(CHECKPOINT_LAG),
            committed_at: get(CHECKPOINT_TIMESTAMP).filter(|t| *t > 0.0),
            stream_open: get(STREAM_OPEN).unwrap_or(0.0) > 0.0,
            copied: get(SNAPSHOT_DOCUMENTS).unwrap_or(0.0),
            copy_remaining: get(SNAPSHOT_RUNNING)
                .filter(|running| *running > 0.0)
                .map(|_| get(SNAPSHOT_REMAINING).unwrap_or(0.0)),
        }
    }
}
