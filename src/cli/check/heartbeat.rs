//! The heartbeat line of `check` (`heartbeat_interval_ms`; `config/heartbeat.rs` lists the
//! feature's pieces): the interval and the heartbeat topic's state (its partitions and
//! `cleanup.policy`, or who would create it), none for a pipeline without heartbeats.

use super::CheckLine;
use super::topics::{AutoCreate, state_line};
use crate::config::{Config, PipelineConfig};
use crate::encode::topics;
use crate::kafka::admin::{ClusterInfo, KafkaAdmin};

/// The heartbeat topic's line of `p`, if it writes heartbeats.
pub(super) async fn line(
    config: &Config,
    p: &PipelineConfig,
    cluster: &ClusterInfo,
    admin: &KafkaAdmin,
    auto: AutoCreate,
) -> Option<CheckLine> {
    let topic = topics::heartbeat(p, &config.kafka.topic_prefix)?;
    let what = format!(
        "heartbeat topic {topic:?} (every {} ms)",
        p.heartbeat_interval_ms
    );
    Some(state_line(config, p, (Some(topic), what), cluster, admin, auto).await)
}
